//! Model-based test of the object store under capacity-store faults: random transactions
//! (several objects each, some large enough to be split into chunks), loads, historical
//! loads and reopens against a model of every object's revisions, with the capacity store
//! failing requests at random, before they run and after they took effect.
//!
//! What must hold: a load never returns data the model does not have for that object at
//! that time (a failed read is an error, never a wrong answer); a transaction whose
//! `finish` returned an error is, after a reopen on a healthy store, either wholly there
//! or wholly absent; a transaction whose `vote` failed is absent; `verify` finds nothing
//! wrong at the end.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use proptest::prelude::*;
use tierdb_kv::{KvDb, KvHandle, KvOptions};
use tierdb_objects::{Oid, Tid, Txn, TxnMeta, VersionedStore};
use tierdb_store::{FaultConfig, FaultStore, TierOptions, TieredStore, WriteMode};

const OBJECTS: u64 = 6;

#[derive(Debug, Clone)]
enum Action {
    /// (object index, content seed, large?)
    Commit(Vec<(u8, u8, bool)>),
    Load(u8),
    LoadBefore(u8, u8),
    Reopen,
}

fn action() -> impl Strategy<Value = Action> {
    let write = (
        0u8..OBJECTS as u8,
        any::<u8>(),
        proptest::bool::weighted(0.15),
    );
    prop_oneof![
        5 => proptest::collection::vec(write, 1..4).prop_map(Action::Commit),
        3 => (0u8..OBJECTS as u8).prop_map(Action::Load),
        2 => (0u8..OBJECTS as u8, any::<u8>()).prop_map(|(o, r)| Action::LoadBefore(o, r)),
        1 => Just(Action::Reopen),
    ]
}

/// A record's bytes: distinct per (object, seed), large ones past the chunk size.
fn data(oid: u8, seed: u8, large: bool) -> Bytes {
    let len = if large { 300 << 10 } else { 40 + seed as usize };
    let mut v = Vec::with_capacity(len);
    let mut x = (u32::from(oid) << 8 | u32::from(seed)).wrapping_mul(2_654_435_761) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// Every object's committed revisions, oldest first.
type Model = BTreeMap<u8, Vec<(Tid, Bytes)>>;

fn faults() -> FaultConfig {
    FaultConfig {
        error_before: 0.2,
        error_after: 0.1,
        ..FaultConfig::default()
    }
}

struct Open {
    kv: Arc<KvDb>,
    s: VersionedStore,
}

async fn open(store: &TieredStore, create: bool) -> Open {
    let options = KvOptions {
        create,
        compaction: false,
        // Few retries, so injected faults reach the object store's callers.
        store_retries: 1,
        ..KvOptions::default()
    };
    let kv = Arc::new(
        KvDb::open(store.clone(), "zodb", "zodb", &options)
            .await
            .unwrap(),
    );
    let s = VersionedStore::open(KvHandle::Writer(kv.clone()))
        .await
        .unwrap();
    Open { kv, s }
}

/// Gives the open up as a crash would and reopens on a healthy store.
async fn reopen(faulty: &FaultStore, store: &TieredStore, old: Open) -> Open {
    faulty.set_config(FaultConfig::default());
    old.kv.close_without_flush().await;
    drop(old);
    open(store, false).await
}

/// The object's current revision in the store, read with a healthy store.
async fn current(s: &VersionedStore, oids: &[Oid], i: u8) -> Option<(Bytes, Tid)> {
    match s.load(oids[i as usize]).await {
        Ok(r) => Some(r),
        Err(tierdb_objects::ObjError::NotFound { .. }) => None,
        Err(e) => panic!("load of object {i} on a healthy store: {e}"),
    }
}

async fn run(mode: WriteMode, seed: u64, actions: Vec<Action>) {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultStore::new(memory, FaultConfig::default(), seed));
    let cache = tempfile::tempdir().unwrap();
    let tier = TierOptions {
        cache_dir: (mode == WriteMode::WriteBack).then(|| cache.path().to_path_buf()),
        cache_bytes: if mode == WriteMode::WriteBack {
            32 << 20
        } else {
            0
        },
        memory_bytes: 8 << 20,
        write_mode: mode,
        ..TierOptions::default()
    };
    let store = TieredStore::with_capacity(faulty.clone(), "faulty".into(), tier)
        .await
        .unwrap();
    let mut db = open(&store, true).await;
    let mut oids = Vec::new();
    for _ in 0..OBJECTS {
        oids.push(db.s.new_oid().await.unwrap());
    }
    faulty.set_config(faults());
    let mut model = Model::new();

    for action in actions {
        match action {
            Action::Commit(writes) => {
                let mut writes = writes;
                writes.sort_by_key(|w| w.0);
                writes.dedup_by_key(|w| w.0);
                let mut txn = Txn::new(TxnMeta {
                    user: Bytes::from("model"),
                    description: Bytes::from("a transaction"),
                    extension: Bytes::new(),
                });
                for &(o, seed, large) in &writes {
                    let serial = model
                        .get(&o)
                        .and_then(|r| r.last())
                        .map_or(Tid::ZERO, |r| r.0);
                    txn.store(oids[o as usize], serial, Some(data(o, seed, large)));
                }
                let outcome = match db.s.vote(txn).await {
                    Ok(voted) => match db.s.finish(voted).await {
                        Ok(tid) => Ok(tid),
                        Err(_) => Err(true), // unknown outcome
                    },
                    Err(_) => Err(false), // voted nothing: the transaction is absent
                };
                match outcome {
                    Ok(tid) => {
                        for &(o, seed, large) in &writes {
                            model
                                .entry(o)
                                .or_default()
                                .push((tid, data(o, seed, large)));
                        }
                    }
                    Err(maybe) => {
                        db = reopen(&faulty, &store, db).await;
                        let mut seen = Vec::new();
                        for &(o, seed, large) in &writes {
                            let now = current(&db.s, &oids, o).await;
                            let before = model.get(&o).and_then(|r| r.last()).cloned();
                            let new = data(o, seed, large);
                            let is_new = now.as_ref().is_some_and(|(d, t)| {
                                *d == new && before.as_ref().is_none_or(|b| *t > b.0)
                            });
                            let is_old = now.as_ref().map(|(d, t)| (t, d))
                                == before.as_ref().map(|(t, d)| (t, d));
                            assert!(
                                is_new || is_old,
                                "object {o}: neither the old nor the new revision"
                            );
                            seen.push((o, is_new, now.map(|n| n.1), new));
                        }
                        let committed = seen.iter().filter(|s| s.1).count();
                        assert!(
                            committed == 0 || committed == seen.len(),
                            "a transaction is half there after a failed commit: {committed} of {}",
                            seen.len()
                        );
                        assert!(
                            maybe || committed == 0,
                            "a transaction whose vote failed is there"
                        );
                        if committed > 0 {
                            let tids: Vec<_> = seen.iter().map(|s| s.2).collect();
                            assert!(
                                tids.windows(2).all(|w| w[0] == w[1]),
                                "one tid for one transaction"
                            );
                            for (o, _, tid, new) in seen {
                                model.entry(o).or_default().push((tid.unwrap(), new));
                            }
                        }
                        faulty.set_config(faults());
                    }
                }
            }
            Action::Load(o) => {
                if let Ok((d, t)) = db.s.load(oids[o as usize]).await {
                    let last = model.get(&o).and_then(|r| r.last());
                    assert_eq!(
                        Some((&t, &d)),
                        last.map(|(t, d)| (t, d)),
                        "load of object {o}"
                    );
                }
            }
            Action::LoadBefore(o, r) => {
                let Some(revs) = model.get(&o) else { continue };
                let at = revs[r as usize % revs.len()].0;
                // Before `at` the answer is the revision just older than it, if any.
                if let Ok(got) = db.s.load_before(oids[o as usize], at).await {
                    let i = revs.iter().position(|x| x.0 == at).unwrap();
                    let want = i
                        .checked_sub(1)
                        .map(|j| (revs[j].1.clone(), revs[j].0, Some(at)));
                    assert_eq!(got, want, "load_before({o}, {at})");
                }
            }
            Action::Reopen => {
                db = reopen(&faulty, &store, db).await;
                for (o, revs) in &model {
                    let last = revs.last().unwrap();
                    assert_eq!(
                        current(&db.s, &oids, *o).await,
                        Some((last.1.clone(), last.0)),
                        "object {o} after a reopen"
                    );
                }
                faulty.set_config(faults());
            }
        }
    }

    let db = reopen(&faulty, &store, db).await;
    for (o, revs) in &model {
        for (tid, d) in revs {
            assert_eq!(
                db.s.load_serial(oids[*o as usize], *tid).await.unwrap(),
                d,
                "revision {tid} of object {o}"
            );
        }
    }
    let report = db.s.verify().await.unwrap();
    assert!(report.problems.is_empty(), "verify: {:?}", report.problems);
    db.kv.close().await.unwrap();
    store.close().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tierdb_testkit::model_cases(6), max_shrink_iters: 3, ..ProptestConfig::default() })]

    #[test]
    fn objects_match_the_model_under_store_faults(
        write_back in any::<bool>(),
        seed in any::<u64>(),
        actions in proptest::collection::vec(action(), 10..40),
    ) {
        let mode = if write_back { WriteMode::WriteBack } else { WriteMode::WriteThrough };
        let limit = std::time::Duration::from_secs(180);
        let outcome = tierdb_testkit::run_with_deadline(limit, run(mode, seed, actions));
        prop_assert!(outcome.is_ok(), "the model run ({:?}, seed {}) stalled", mode, seed);
    }
}
