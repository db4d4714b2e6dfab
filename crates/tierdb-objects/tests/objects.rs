//! The object store's semantics, on a key-value database over an in-memory capacity store:
//! two-phase commit and conflicts, loads at any time, history, dedup and large records,
//! undo, pack with and without reachability, iteration, restore, oid allocation.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use tierdb_kv::{KvDb, KvHandle, KvOptions};
use tierdb_objects::{ObjError, Oid, Tid, Txn, TxnMeta, VersionedStore};
use tierdb_store::{TierOptions, TieredStore};

async fn open_on(capacity: Arc<InMemory>) -> VersionedStore {
    let (_, kv) = kv_on(capacity).await;
    VersionedStore::open(KvHandle::Writer(kv)).await.unwrap()
}

async fn kv_on(capacity: Arc<InMemory>) -> (TieredStore, Arc<KvDb>) {
    let store = TieredStore::with_capacity(capacity, "memory".into(), TierOptions::default())
        .await
        .unwrap();
    let options = KvOptions {
        create: true,
        compaction: false,
        ..KvOptions::default()
    };
    let kv = KvDb::open(store.clone(), "zodb", "zodb", &options)
        .await
        .unwrap();
    (store, Arc::new(kv))
}

async fn open() -> VersionedStore {
    open_on(Arc::new(InMemory::new())).await
}

fn meta(desc: &str) -> TxnMeta {
    TxnMeta {
        user: Bytes::from("tester"),
        description: Bytes::from(desc.to_string()),
        extension: Bytes::new(),
    }
}

async fn commit(s: &VersionedStore, desc: &str, writes: &[(Oid, Tid, &str)]) -> Tid {
    let mut txn = Txn::new(meta(desc));
    for (oid, serial, data) in writes {
        txn.store(*oid, *serial, Some(Bytes::from(data.to_string())));
    }
    let voted = s.vote(txn).await.unwrap();
    s.finish(voted).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_phase_commit_loads_history_and_conflicts() {
    let s = open().await;
    let (a, b) = (s.new_oid().await.unwrap(), s.new_oid().await.unwrap());
    assert_ne!(a, b);
    assert!(a != Oid::ROOT && b != Oid::ROOT, "oid 0 is the root's");
    let t1 = commit(&s, "one", &[(a, Tid::ZERO, "a1"), (b, Tid::ZERO, "b1")]).await;
    let t2 = commit(&s, "two", &[(a, t1, "a2")]).await;
    let t3 = commit(&s, "three", &[(a, t2, "a3")]).await;
    assert!(t1 < t2 && t2 < t3 && s.last_tid() == t3);

    assert_eq!(s.load(a).await.unwrap(), (Bytes::from("a3"), t3));
    assert_eq!(s.load(b).await.unwrap(), (Bytes::from("b1"), t1));
    assert_eq!(s.load_serial(a, t2).await.unwrap(), Bytes::from("a2"));
    assert_eq!(
        s.load_before(a, t3).await.unwrap(),
        Some((Bytes::from("a2"), t2, Some(t3)))
    );
    assert_eq!(
        s.load_before(a, Tid(t3.0 + 1)).await.unwrap(),
        Some((Bytes::from("a3"), t3, None))
    );
    assert_eq!(s.load_before(a, t1).await.unwrap(), None);
    let h = s.history(a, 10).await.unwrap();
    assert_eq!(
        h.iter().map(|e| e.tid).collect::<Vec<_>>(),
        vec![t3, t2, t1]
    );
    assert_eq!(h[1].txn.meta.description, "two");
    assert_eq!(s.history(a, 2).await.unwrap().len(), 2);

    // A write based on an old serial names the object and both serials.
    let mut txn = Txn::new(meta("stale"));
    txn.store(a, t2, Some(Bytes::from("x")));
    match s.vote(txn).await {
        Err(ObjError::Conflict {
            oid,
            committed,
            old,
        }) => {
            assert_eq!((oid, committed, old), (a, t3, t2));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // A new object stored twice as new conflicts too.
    let mut txn = Txn::new(meta("new again"));
    txn.store(b, Tid::ZERO, Some(Bytes::from("x")));
    assert!(matches!(s.vote(txn).await, Err(ObjError::Conflict { .. })));
    // Read-current.
    let mut txn = Txn::new(meta("read current"));
    txn.check_current(a, t2);
    txn.store(b, t1, Some(Bytes::from("b2")));
    assert!(matches!(s.vote(txn).await, Err(ObjError::ReadConflict { oid, .. }) if oid == a));
    // Missing objects.
    assert!(matches!(
        s.load(Oid(999)).await,
        Err(ObjError::NotFound { .. })
    ));
    assert!(matches!(
        s.load_serial(a, Tid(5)).await,
        Err(ObjError::NoRevision { .. })
    ));
    // An aborted vote releases the commit lock.
    let mut txn = Txn::new(meta("aborted"));
    txn.store(b, t1, Some(Bytes::from("never")));
    let voted = s.vote(txn).await.unwrap();
    s.abort(voted);
    commit(&s, "after abort", &[(b, t1, "b2")]).await;
    assert_eq!(s.load(b).await.unwrap().0, Bytes::from("b2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_deduplicated_compressed_and_large_records_split() {
    let s = open().await;
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let same = "the same pickle ".repeat(200);
    let (a, b, c) = (
        s.new_oid().await.unwrap(),
        s.new_oid().await.unwrap(),
        s.new_oid().await.unwrap(),
    );
    let mut txn = Txn::new(meta("dedup"));
    txn.store(a, Tid::ZERO, Some(Bytes::from(same.clone())));
    txn.store(b, Tid::ZERO, Some(Bytes::from(same.clone())));
    txn.store(c, Tid::ZERO, Some(Bytes::from(big.clone())));
    let voted = s.vote(txn).await.unwrap();
    s.finish(voted).await.unwrap();
    assert_eq!(s.load(c).await.unwrap().0, Bytes::from(big.clone()));
    assert_eq!(s.load(b).await.unwrap().0, Bytes::from(same.clone()));
    let stats = s.stats().await.unwrap();
    assert_eq!(
        (stats.objects, stats.revisions, stats.data_records),
        (3, 3, 2)
    );
    assert_eq!(
        stats.logical_bytes,
        2 * same.len() as u64 + big.len() as u64
    );
    assert_eq!(stats.unique_bytes, same.len() as u64 + big.len() as u64);
    assert!(stats.stored_bytes < stats.unique_bytes, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_data_is_stored_as_is_and_written_twice_stays_one_record() {
    let s = open().await;
    let small = "a small pickle ".repeat(20);
    assert!(small.len() < tierdb_objects::COMPRESS_MIN_BYTES);
    let (a, b) = (s.new_oid().await.unwrap(), s.new_oid().await.unwrap());
    let t1 = commit(&s, "first", &[(a, Tid::ZERO, &small)]).await;
    // Another transaction stores the same bytes: the vote writes the record again
    // without looking for it; it is still one record, and both objects load it.
    commit(&s, "second", &[(b, Tid::ZERO, &small), (a, t1, "changed")]).await;
    assert_eq!(s.load(b).await.unwrap().0, Bytes::from(small.clone()));
    assert_eq!(
        s.load_serial(a, t1).await.unwrap(),
        Bytes::from(small.clone())
    );
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.revisions, stats.data_records), (3, 2), "{stats:?}");
    assert_eq!(stats.unique_bytes, (small.len() + "changed".len()) as u64);
    assert_eq!(
        stats.stored_bytes, stats.unique_bytes,
        "stored as is: {stats:?}"
    );
    let report = s.verify().await.unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_restores_the_previous_revision_or_refuses() {
    let s = open().await;
    let (a, b) = (s.new_oid().await.unwrap(), s.new_oid().await.unwrap());
    let t1 = commit(&s, "create", &[(a, Tid::ZERO, "a1"), (b, Tid::ZERO, "b1")]).await;
    let t2 = commit(&s, "change a", &[(a, t1, "a2")]).await;
    let mut txn = Txn::new(meta("undo t2"));
    txn.undo(t2);
    let voted = s.vote(txn).await.unwrap();
    let t3 = s.finish(voted).await.unwrap();
    assert_eq!(s.load(a).await.unwrap(), (Bytes::from("a1"), t3));
    let rec = s.transactions(t3, t3).await.unwrap();
    assert_eq!(
        rec[0].records[0].data_txn,
        Some(t1),
        "undo points back at the data it reused"
    );

    // Undoing the creation leaves b without data.
    let t4 = commit(&s, "change b", &[(b, t1, "b2")]).await;
    let mut txn = Txn::new(meta("undo create"));
    txn.undo(t1);
    assert!(
        matches!(s.vote(txn).await, Err(ObjError::Undo { oid, .. }) if oid == b),
        "b changed after t1"
    );
    let _ = t4;
    let c = s.new_oid().await.unwrap();
    let t5 = commit(&s, "create c", &[(c, Tid::ZERO, "c1")]).await;
    let mut txn = Txn::new(meta("undo create c"));
    txn.undo(t5);
    let voted = s.vote(txn).await.unwrap();
    s.finish(voted).await.unwrap();
    assert!(matches!(s.load(c).await, Err(ObjError::NotFound { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pack_drops_old_revisions_unreachable_objects_and_their_data() {
    let s = open().await;
    let root = Oid::ROOT;
    let (kept, orphan) = (Oid(1), Oid(2));
    // Data "ref:N,M" references those oids.
    let t1 = commit(
        &s,
        "1",
        &[
            (root, Tid::ZERO, "ref:1,2"),
            (kept, Tid::ZERO, "k1"),
            (orphan, Tid::ZERO, "o1"),
        ],
    )
    .await;
    let t2 = commit(&s, "2", &[(root, t1, "ref:1"), (kept, t1, "k2")]).await;
    let t3 = commit(&s, "3", &[(kept, t2, "k3")]).await;
    let refs = |data: &[u8]| -> Result<Vec<Oid>, tierdb_objects::Damage> {
        Ok(std::str::from_utf8(data)
            .ok()
            .and_then(|s| s.strip_prefix("ref:"))
            .map(|l| {
                l.split(',')
                    .filter_map(|n| n.parse().ok())
                    .map(Oid)
                    .collect()
            })
            .unwrap_or_default())
    };
    // References that cannot be read stop the pack, naming the object, before any change.
    let unreadable = |data: &[u8]| -> Result<Vec<Oid>, tierdb_objects::Damage> {
        if data.starts_with(b"k") {
            Err("not a pickle".into())
        } else {
            Ok(Vec::new())
        }
    };
    let before = s.transactions(Tid::ZERO, Tid::MAX).await.unwrap();
    match s.pack(t2, Some(&unreadable)).await {
        Err(ObjError::References { oid, .. }) => assert_eq!(oid, kept),
        other => panic!("expected a references error, got {other:?}"),
    }
    assert_eq!(s.transactions(Tid::ZERO, Tid::MAX).await.unwrap(), before);
    let stats = s.pack(t2, Some(&refs)).await.unwrap();
    // kept: t1 removed, t2 (current at pack time) and t3 stay; root: t1 removed; orphan gone.
    assert_eq!(stats.objects_removed, 1, "{stats:?}");
    assert_eq!(stats.revisions_removed, 3, "{stats:?}");
    assert!(stats.data_removed >= 3, "{stats:?}");
    assert_eq!(s.load(kept).await.unwrap(), (Bytes::from("k3"), t3));
    assert_eq!(s.load_serial(kept, t2).await.unwrap(), Bytes::from("k2"));
    assert!(s.load_serial(kept, t1).await.is_err());
    assert!(matches!(
        s.load(orphan).await,
        Err(ObjError::NotFound { .. })
    ));
    assert_eq!(s.load(root).await.unwrap().0, Bytes::from("ref:1"));
    // Transaction 1 lost every record; 2 and 3 remain.
    let txns = s.transactions(Tid::ZERO, Tid::MAX).await.unwrap();
    assert_eq!(txns.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![t2, t3]);
    // Up to the pack time, transactions are marked packed (no longer undoable).
    assert_eq!((txns[0].record.status, txns[1].record.status), (b'p', b' '));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_copies_transactions_with_their_tids() {
    let src = open().await;
    let a = src.new_oid().await.unwrap();
    let t1 = commit(&src, "one", &[(a, Tid::ZERO, "a1")]).await;
    commit(&src, "two", &[(a, t1, "a2")]).await;
    let dst = open().await;
    for t in src.transactions(Tid::ZERO, Tid::MAX).await.unwrap() {
        let mut txn = Txn::restoring(t.record.meta.clone(), t.tid);
        for r in &t.records {
            txn.restore(r.oid, r.data.clone(), r.data_txn);
        }
        let voted = dst.vote(txn).await.unwrap();
        assert_eq!(dst.finish(voted).await.unwrap(), t.tid);
    }
    assert_eq!(
        dst.transactions(Tid::ZERO, Tid::MAX).await.unwrap(),
        src.transactions(Tid::ZERO, Tid::MAX).await.unwrap()
    );
    // Out of order is refused.
    let txn = Txn::restoring(meta("old"), t1);
    assert!(matches!(dst.vote(txn).await, Err(ObjError::Invalid(_))));
    // Oids the copy brought are not handed out again.
    assert!(dst.new_oid().await.unwrap() > a);
    // An import's way (prepared records, many transactions in one commit) writes heads
    // without a data copy (it doubled an import's time); loads read the data record.
    use tierdb_kv::KvRead;
    let dst = open().await;
    let mut txns = Vec::new();
    for t in src.transactions(Tid::ZERO, Tid::MAX).await.unwrap() {
        let mut txn = Txn::restoring(t.record.meta.clone(), t.tid);
        for r in &t.records {
            txn.restore(r.oid, r.data.clone(), r.data_txn);
        }
        txn.prepare().unwrap();
        txns.push(txn);
    }
    dst.restore_many(txns).await.unwrap();
    let key = tierdb_objects::records::head_key(a);
    let v = dst.kv().get(&key).await.unwrap().unwrap();
    let (_, _, copy) = tierdb_objects::records::decode_head_data(&key, &v).unwrap();
    assert_eq!(copy, None);
    assert_eq!(dst.load(a).await.unwrap().0, Bytes::from("a2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oids_are_never_reused_across_reopen() {
    let capacity = Arc::new(InMemory::new());
    let s = open_on(capacity.clone()).await;
    let first = s.new_oid().await.unwrap();
    s.kv().close().await.unwrap();
    drop(s);
    let s = open_on(capacity).await;
    let second = s.new_oid().await.unwrap();
    assert!(second > first, "{first} then {second}");
}

/// ZEO votes one client's transaction, then serves another client's `new_oids` on the same
/// thread before the first finishes: oid allocation must not wait for the voted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_oid_never_waits_for_a_voted_transaction() {
    let capacity = Arc::new(InMemory::new());
    let s = open_on(capacity.clone()).await;
    let a = s.new_oid().await.unwrap();
    let mut txn = Txn::new(meta("voted, not finished"));
    txn.store(a, Tid::ZERO, Some(Bytes::from("a")));
    let voted = s.vote(txn).await.unwrap();
    // Several reservation blocks' worth, all while the vote holds the commit lock.
    let oids = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        let mut oids = Vec::new();
        for _ in 0..3000 {
            oids.push(s.new_oid().await.unwrap());
        }
        oids
    })
    .await
    .expect("new_oid waited for the voted transaction");
    let t = s.finish(voted).await.unwrap();
    assert_eq!(s.load(a).await.unwrap(), (Bytes::from("a"), t));
    let distinct: std::collections::BTreeSet<_> = oids.iter().copied().collect();
    assert_eq!(distinct.len(), oids.len(), "an oid was handed out twice");
    assert!(oids.iter().all(|o| *o > a));
    // The reservations are durable: after a reopen no oid handed out comes again.
    let last = *oids.iter().max().unwrap();
    s.kv().close().await.unwrap();
    drop(s);
    let s = open_on(capacity).await;
    assert!(s.new_oid().await.unwrap() > last);
}

/// What the old pack left when killed between its chunks: an object's revisions deleted,
/// its head record not yet. A later pack must remove the head and never leave it naming
/// data that pack deleted (the old one did: a load then failed as damaged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_left_by_an_interrupted_pack_is_removed_with_its_data() {
    use tierdb_kv::KvWrite;
    use tierdb_objects::records;
    let s = open().await;
    let x = s.new_oid().await.unwrap();
    let t1 = commit(&s, "x", &[(x, Tid::ZERO, "garbage data")]).await;
    let mut b = tierdb_kv::Batch::new();
    b.delete(records::rev_key(x, t1));
    b.delete(records::wrote_key(t1, x));
    s.kv().writer().unwrap().commit(b).await.unwrap();
    let report = s.verify().await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("head names revision")),
        "{report:?}"
    );
    s.pack(Tid::from_unix(4e9), None).await.unwrap();
    let report = s.verify().await.unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(matches!(s.load(x).await, Err(ObjError::NotFound { .. })));
    assert_eq!(s.object_count().await.unwrap(), 0);
}

fn blob_file(dir: &std::path::Path, name: &str, content: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_are_stored_once_per_content_follow_undo_and_are_packed_away() {
    let capacity = Arc::new(InMemory::new());
    let (_store, kv) = kv_on(capacity.clone()).await;
    let s = VersionedStore::open(KvHandle::Writer(kv)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = s.new_oid().await.unwrap();
    let b = s.new_oid().await.unwrap();
    let big: Vec<u8> = (0..(tierdb_objects::SINGLE_PUT_MAX as usize + 3 * 1024 * 1024))
        .map(|i| (i % 251) as u8)
        .collect();
    let mut txn = Txn::new(meta("blobs"));
    txn.store_blob(
        a,
        Tid::ZERO,
        Bytes::from("A"),
        blob_file(dir.path(), "a1", b"first"),
    );
    txn.store_blob(
        b,
        Tid::ZERO,
        Bytes::from("B"),
        blob_file(dir.path(), "b1", &big),
    );
    let t1 = s.finish(s.vote(txn).await.unwrap()).await.unwrap();
    // The same content again: one blob object serves both revisions.
    let mut txn = Txn::new(meta("same content"));
    txn.store_blob(a, t1, Bytes::from("A2"), blob_file(dir.path(), "a2", &big));
    let t2 = s.finish(s.vote(txn).await.unwrap()).await.unwrap();
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.blob_revisions, stats.blobs), (3, 2), "{stats:?}");
    let out = dir.path().join("out");
    s.load_blob(a, t1, &out).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"first");
    s.load_blob(a, t2, &out).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), big);
    // Undo of t2 gives `a` its first blob back in a new revision.
    let mut txn = Txn::new(meta("undo"));
    txn.undo(t2);
    let t3 = s.finish(s.vote(txn).await.unwrap()).await.unwrap();
    s.load_blob(a, t3, &out).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"first");
    // A revision without a blob, or none at all, is an error naming the object.
    let err = s.load_blob(a, Tid(1), &out).await.unwrap_err();
    assert!(err.to_string().contains(&a.to_string()), "{err}");
    // Pack to now: t1's and t2's revisions of `a` go; the big blob stays (b names it).
    let stats = s.pack(t3, None).await.unwrap();
    assert_eq!(stats.blobs_removed, 0, "{stats:?}");
    assert_eq!(stats.blob_revisions_removed, vec![(a, t1), (a, t2)]);
    s.load_blob(b, t1, &out).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap().len(), big.len());
    // Overwrite b without a blob and pack: the big blob is no longer named and goes.
    commit(&s, "plain", &[(b, t1, "plain")]).await;
    let stats = s.pack(Tid::from_unix(4e9), None).await.unwrap();
    assert_eq!(stats.blobs_removed, 1, "{stats:?}");
    s.load_blob(a, t3, &out).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_open_follows_the_writer_and_refuses_writes() {
    let capacity = Arc::new(InMemory::new());
    let (store, kv) = kv_on(capacity.clone()).await;
    let w = VersionedStore::open(KvHandle::Writer(kv)).await.unwrap();
    let a = w.new_oid().await.unwrap();
    let t1 = commit(&w, "one", &[(a, Tid::ZERO, "a1")]).await;
    let replica = tierdb_kv::KvReplica::open_unpinned(
        store.clone(),
        "zodb",
        "zodb",
        std::time::Duration::from_millis(50),
    )
    .await
    .unwrap();
    let r = VersionedStore::open(KvHandle::Follower(Arc::new(replica)))
        .await
        .unwrap();
    assert_eq!(r.load(a).await.unwrap(), (Bytes::from("a1"), t1));
    assert!(matches!(r.new_oid().await, Err(ObjError::ReadOnly { .. })));
    let mut txn = Txn::new(meta("no"));
    txn.store(a, t1, Some(Bytes::from("x")));
    let err = r.vote(txn).await.unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    assert!(matches!(
        r.pack(t1, None).await,
        Err(ObjError::ReadOnly { .. })
    ));
    // The writer commits; the follower sees it after a refresh.
    let t2 = commit(&w, "two", &[(a, t1, "a2")]).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while r.refresh().await.unwrap() != t2 {
        assert!(
            std::time::Instant::now() < deadline,
            "follower never caught up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(r.load(a).await.unwrap(), (Bytes::from("a2"), t2));
}

/// Prefetch, as ZODB's `Connection.prefetch` calls it after a reopen (caches empty): runs of
/// nearby oids and a far one, an object changed after the snapshot, a missing oid and a
/// duplicate. What it puts in the record cache is exactly what a load answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_fills_the_record_cache_with_what_loads_answer() {
    let capacity = Arc::new(InMemory::new());
    let s = open_on(capacity.clone()).await;
    let mut oids = Vec::new();
    for _ in 0..300 {
        oids.push(s.new_oid().await.unwrap());
    }
    let writes: Vec<(Oid, Tid, String)> = oids
        .iter()
        .map(|o| (*o, Tid::ZERO, format!("state of {o}")))
        .collect();
    let refs: Vec<(Oid, Tid, &str)> = writes
        .iter()
        .map(|(o, t, d)| (*o, *t, d.as_str()))
        .collect();
    let t1 = commit(&s, "many", &refs).await;
    // A changed object: its revision current before the snapshot is the first one.
    let changed = oids[7];
    let t2 = commit(&s, "change", &[(changed, t1, "changed")]).await;
    s.kv().close().await.unwrap();
    drop(s);

    let s = open_on(capacity).await;
    let missing = Oid(oids[299].0 + 1000);
    // Nearby oids (every third of the first 200), far ones, the changed one twice, a miss.
    let mut asked: Vec<Oid> = oids[..200].iter().step_by(3).copied().collect();
    asked.extend([oids[299], oids[250], changed, changed, missing]);
    let snapshot = Tid(t2.0); // before t2: the changed object's first revision
    let found = s.prefetch(&asked, snapshot).await;
    let distinct: std::collections::BTreeSet<Oid> = asked.iter().copied().collect();
    // Every asked oid but the missing one, the duplicate counted once.
    assert_eq!(found, distinct.len() - 1);
    for oid in &distinct {
        if *oid == missing {
            assert!(s.load_cached(*oid).is_none());
            assert!(matches!(
                s.load_before(*oid, snapshot).await,
                Err(ObjError::NotFound { .. })
            ));
            continue;
        }
        let (data, start, _) = s.load_before(*oid, snapshot).await.unwrap().unwrap();
        if *oid == changed {
            assert_eq!(
                (data, start),
                (Bytes::from("state of ".to_string() + &oid.to_string()), t1)
            );
            // Not current: not the cache's to hold.
            assert!(s.load_cached(*oid).is_none_or(|(_, t)| t == t2));
        } else {
            assert_eq!(start, t1);
            assert_eq!(data, Bytes::from(format!("state of {oid}")));
            assert_eq!(s.load_cached(*oid), Some((data, t1)));
        }
    }
    assert_eq!(s.load(changed).await.unwrap(), (Bytes::from("changed"), t2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_data_rides_in_its_head_and_a_changed_byte_there_names_the_object() {
    use tierdb_kv::{KvRead, KvWrite};
    use tierdb_objects::records;
    let capacity = Arc::new(InMemory::new());
    let s = open_on(capacity.clone()).await;
    let (small, large) = (s.new_oid().await.unwrap(), s.new_oid().await.unwrap());
    // Incompressible and over records::HEAD_DATA_MAX: no copy in its head.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect();
    let mut txn = Txn::new(meta("both"));
    txn.store(small, Tid::ZERO, Some(Bytes::from("a small pickle")));
    txn.store(large, Tid::ZERO, Some(Bytes::from(noise.clone())));
    let t1 = s.finish(s.vote(txn).await.unwrap()).await.unwrap();
    let head = |oid| {
        let s = &s;
        async move {
            let key = records::head_key(oid);
            let v = s.kv().get(&key).await.unwrap().unwrap();
            (v.clone(), records::decode_head_data(&key, &v).unwrap())
        }
    };
    let (_, (_, _, copy)) = head(small).await;
    assert_eq!(copy.unwrap().raw_len, 14);
    assert!(head(large).await.1.2.is_none());
    // An undo makes a revision that reuses older data: its head has no copy.
    let t2 = commit(&s, "change", &[(small, t1, "changed")]).await;
    let mut undo = Txn::new(meta("undo"));
    undo.undo(t2);
    let t3 = s.finish(s.vote(undo).await.unwrap()).await.unwrap();
    assert!(head(small).await.1.2.is_none());
    let t4 = commit(&s, "again", &[(small, t3, "a small pickle again")]).await;
    let (stored, (_, _, copy)) = head(small).await;
    assert!(copy.is_some());
    s.kv().close().await.unwrap();
    drop(s);

    // Cold (a new open, an empty record cache): loads through the copy and without one.
    let s = open_on(capacity.clone()).await;
    assert_eq!(
        s.load(small).await.unwrap(),
        (Bytes::from("a small pickle again"), t4)
    );
    assert_eq!(s.load(large).await.unwrap(), (Bytes::from(noise), t1));
    assert_eq!(
        s.load_before(small, t4).await.unwrap().unwrap().0,
        Bytes::from("a small pickle")
    );
    assert!(s.verify().await.unwrap().problems.is_empty());

    // A changed byte of the copy: the load fails naming the object, verify reports it.
    let mut bad = stored.to_vec();
    *bad.last_mut().unwrap() ^= 0x20;
    let mut b = tierdb_kv::Batch::new();
    b.put(records::head_key(small), Bytes::from(bad));
    s.kv().writer().unwrap().commit(b).await.unwrap();
    s.kv().close().await.unwrap();
    drop(s);
    let s = open_on(capacity).await;
    let e = s.load(small).await.unwrap_err();
    assert!(
        matches!(e, ObjError::Damaged { .. }) && e.to_string().contains(&small.to_string()),
        "{e}"
    );
    assert!(s.load_before(small, Tid(u64::MAX)).await.is_err());
    let report = s.verify().await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("the data its head carries")),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_oid_stored_as_new_twice_conflicts_the_second_time() {
    let s = open().await;
    let (a, b) = (s.new_oid().await.unwrap(), s.new_oid().await.unwrap());
    // An aborted vote leaves the oid unwritten: it can still be stored as new.
    let mut txn = Txn::new(meta("aborted"));
    txn.store(a, Tid::ZERO, Some(Bytes::from("never")));
    s.abort(s.vote(txn).await.unwrap());
    let t1 = commit(&s, "first", &[(a, Tid::ZERO, "a1"), (b, Tid::ZERO, "b1")]).await;
    for oid in [a, b] {
        let mut txn = Txn::new(meta("again"));
        txn.store(oid, Tid::ZERO, Some(Bytes::from("a2")));
        match s.vote(txn).await {
            Err(ObjError::Conflict { committed, .. }) => assert_eq!(committed, t1),
            other => panic!("{oid}: {other:?}"),
        }
    }
    // Restored records write oids too: a handed-out oid restored is no longer new.
    let c = s.new_oid().await.unwrap();
    let mut txn = Txn::restoring(meta("restore"), Tid(t1.0 + 1));
    txn.restore(c, Some(Bytes::from("c1")), None);
    s.restore_many(vec![txn]).await.unwrap();
    let mut txn = Txn::new(meta("c again"));
    txn.store(c, Tid::ZERO, Some(Bytes::from("c2")));
    assert!(matches!(s.vote(txn).await, Err(ObjError::Conflict { .. })));
    assert_eq!(s.load(a).await.unwrap(), (Bytes::from("a1"), t1));
}
