//! The writer, snapshots, fencing, clones and replicas, on a local directory, in every write
//! mode; fencing and a round trip also on MinIO (real conditional puts).

#![allow(clippy::unwrap_used)]

mod common;

use std::ops::Bound;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tierdb_kv::{Batch, ErrorKind, KvDb, KvError, KvRead, KvReplica, KvWrite, clone_db};
use tierdb_store::WriteMode;

const MODES: [WriteMode; 3] = [
    WriteMode::WriteThrough,
    WriteMode::WriteBack,
    WriteMode::WriteAround,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_read_back_after_reopen_in_every_mode() {
    for mode in MODES {
        let data = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let store = common::local(data.path(), Some(cache.path()), mode).await;
        let db = KvDb::open(store.clone(), "db", "db", &common::options(true))
            .await
            .unwrap();
        for i in 0..200u32 {
            let mut b = Batch::new();
            b.put(format!("k{i:04}"), format!("v{i}"));
            b.put(format!("x{i:04}"), "y");
            db.commit(b).await.unwrap();
        }
        db.delete(b"k0007").await.unwrap();
        assert_eq!(db.get(b"k0003").await.unwrap(), Some(Bytes::from("v3")));
        assert_eq!(db.get(b"k0007").await.unwrap(), None);
        let newest = db
            .scan_desc(
                (
                    Bound::Included(Bytes::from("k")),
                    Bound::Excluded(Bytes::from("k0005")),
                ),
                Some(2),
            )
            .await
            .unwrap();
        let keys: Vec<_> = newest.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, vec!["k0004", "k0003"], "{mode}: descending scan");
        let got = db.scan_prefix(b"k00", Some(5)).await.unwrap();
        let keys: Vec<_> = got.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, vec!["k0000", "k0001", "k0002", "k0003", "k0004"]);
        let snap = db.snapshot().unwrap();
        db.put(b"k0003", b"changed").await.unwrap();
        assert_eq!(snap.get(b"k0003").await.unwrap(), Some(Bytes::from("v3")));
        db.close().await.unwrap();
        store.close().await.unwrap();

        // Everything is in the capacity store: open without any cache.
        let store = common::local(data.path(), None, WriteMode::WriteThrough).await;
        let db = KvDb::open(store, "db", "db", &common::options(false))
            .await
            .unwrap();
        assert_eq!(
            db.get(b"k0003").await.unwrap(),
            Some(Bytes::from("changed")),
            "{mode}"
        );
        assert_eq!(db.get(b"k0007").await.unwrap(), None);
        let all = db
            .scan(
                (
                    Bound::Included(Bytes::from("k")),
                    Bound::Excluded(Bytes::from("l")),
                ),
                None,
            )
            .await
            .unwrap();
        assert_eq!(all.len(), 199, "{mode}");
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_opens_name_the_database_and_write_nothing() {
    let data = tempfile::tempdir().unwrap();
    let store = common::local(data.path(), None, WriteMode::WriteThrough).await;
    let err = KvDb::open(
        store.clone(),
        "missing",
        "file:///x/missing",
        &common::options(false),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, KvError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("file:///x/missing") && err.to_string().contains("--create"));
    assert!(
        std::fs::read_dir(data.path()).unwrap().next().is_none(),
        "nothing written"
    );

    std::fs::create_dir_all(data.path().join("foreign")).unwrap();
    std::fs::write(data.path().join("foreign/file.txt"), b"hello").unwrap();
    let err = KvDb::open(store.clone(), "foreign", "foreign", &common::options(true))
        .await
        .unwrap_err();
    assert!(matches!(err, KvError::NotTierdb { .. }), "{err}");
    assert_eq!(
        std::fs::read_dir(data.path().join("foreign"))
            .unwrap()
            .count(),
        1
    );

    std::fs::create_dir_all(data.path().join("future")).unwrap();
    std::fs::write(
        data.path().join("future/tierdb.json"),
        br#"{"format":"tierdb-kv","version":99,"engine":"x","created_ms":0}"#,
    )
    .unwrap();
    let err = KvDb::open(store.clone(), "future", "future", &common::options(false))
        .await
        .unwrap_err();
    assert!(
        matches!(err, KvError::VersionMismatch { found: 99, .. }),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::Data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_fences_the_first_which_then_fails_clearly() {
    for mode in [WriteMode::WriteThrough, WriteMode::WriteBack] {
        let data = tempfile::tempdir().unwrap();
        let (c1, c2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let s1 = common::local(data.path(), Some(c1.path()), mode).await;
        let s2 = common::local(data.path(), Some(c2.path()), mode).await;
        let first = KvDb::open(s1.clone(), "db", "db", &common::options(true))
            .await
            .unwrap();
        first.put(b"a", b"1").await.unwrap();
        let second = KvDb::open(s2.clone(), "db", "db", &common::options(false))
            .await
            .unwrap();
        assert_eq!(
            second.get(b"a").await.unwrap(),
            Some(Bytes::from("1")),
            "{mode}"
        );
        // The first writer's next commit is refused (at once, or once its WAL object loses
        // the race in the capacity store) and it never gets another one in.
        let mut fenced = None;
        for i in 0..50 {
            match first.put(b"a", format!("old{i}").as_bytes()).await {
                Err(e) => {
                    fenced = Some(e);
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let err = fenced.expect("the first writer must be fenced");
        assert_eq!(err.kind(), ErrorKind::Reopen, "{mode}: {err}");
        assert!(
            err.to_string().contains("fenced") || err.to_string().contains("closed"),
            "{err}"
        );
        second.put(b"b", b"2").await.unwrap();
        second.close().await.unwrap();
        let _ = first.close().await;
        s1.close().await.ok();
        s2.close().await.unwrap();
        // The database is intact: the second writer's view survives a reopen.
        let s3 = common::local(data.path(), None, WriteMode::WriteThrough).await;
        let db = KvDb::open(s3, "db", "db", &common::options(false))
            .await
            .unwrap();
        assert_eq!(db.get(b"b").await.unwrap(), Some(Bytes::from("2")));
        let a = db.get(b"a").await.unwrap().unwrap();
        assert!(a == "1" || a.starts_with(b"old"), "{mode}: {a:?}");
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_shares_data_but_not_writes() {
    for mode in [WriteMode::WriteThrough, WriteMode::WriteBack] {
        let data = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let store = common::local(data.path(), Some(cache.path()), mode).await;
        let src = KvDb::open(store.clone(), "src", "src", &common::options(true))
            .await
            .unwrap();
        for i in 0..500u32 {
            src.put(format!("k{i:04}").as_bytes(), &[7u8; 512])
                .await
                .unwrap();
        }
        src.flush_memtable().await.unwrap();
        src.put(b"only-in-wal", b"w").await.unwrap();
        src.clone_to("dst", "dst").await.unwrap();
        let dst = KvDb::open(store.clone(), "dst", "dst", &common::options(false))
            .await
            .unwrap();
        assert_eq!(dst.get(b"k0042").await.unwrap().unwrap().len(), 512);
        assert_eq!(
            dst.get(b"only-in-wal").await.unwrap(),
            Some(Bytes::from("w")),
            "{mode}"
        );
        dst.put(b"k0042", b"clone").await.unwrap();
        dst.put(b"new", b"clone").await.unwrap();
        src.put(b"k0043", b"source").await.unwrap();
        assert_eq!(src.get(b"k0042").await.unwrap().unwrap().len(), 512);
        assert_eq!(src.get(b"new").await.unwrap(), None);
        assert_eq!(dst.get(b"k0043").await.unwrap().unwrap().len(), 512);
        // Zero copy: the clone's prefix holds no SST of its own yet.
        let own_ssts = walk(&data.path().join("dst"))
            .iter()
            .filter(|p| p.ends_with(".sst") && p.contains("compacted"))
            .count();
        assert_eq!(own_ssts, 0, "{mode}");
        assert!(!dst.info().external_dbs.is_empty());
        // A clone over an existing database is refused.
        let err = clone_db(&store, "src", "dst", "src", "dst")
            .await
            .unwrap_err();
        assert!(matches!(err, KvError::AlreadyExists { .. }), "{err}");
        dst.close().await.unwrap();
        src.close().await.unwrap();
        store.close().await.unwrap();
    }
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p.to_string_lossy().into_owned());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_follows_the_writer_within_the_poll_interval() {
    for mode in [WriteMode::WriteThrough, WriteMode::WriteBack] {
        let data = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let store = common::local(data.path(), Some(cache.path()), mode).await;
        let db = KvDb::open(store.clone(), "db", "db", &common::options(true))
            .await
            .unwrap();
        db.put(b"seed", b"0").await.unwrap();
        let rstore = common::local(data.path(), None, WriteMode::WriteThrough).await;
        let poll = Duration::from_millis(100);
        let replica = KvReplica::open(rstore, "db", "db", poll).await.unwrap();
        let mut worst = Duration::ZERO;
        for i in 0..5u32 {
            let value = format!("v{i}");
            db.put(b"key", value.as_bytes()).await.unwrap();
            let t = Instant::now();
            loop {
                if replica.get(b"key").await.unwrap().as_deref() == Some(value.as_bytes()) {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{mode}: replica never saw {value}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            worst = worst.max(t.elapsed());
        }
        // The bound: one poll interval plus upload and read time, generously.
        assert!(worst < poll * 20, "{mode}: worst lag {worst:?}");
        let err = replica.close().await;
        assert!(err.is_ok(), "{err:?}");
        db.close().await.unwrap();
        store.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_and_round_trip_on_minio() {
    for mode in [WriteMode::WriteThrough, WriteMode::WriteBack] {
        let Some(url) = common::minio_url("kv-fence") else {
            return;
        };
        let (c1, c2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let s1 = common::at(&url, Some(c1.path()), mode).await;
        let first = KvDb::open(s1.clone(), "db", "db", &common::options(true))
            .await
            .unwrap();
        for i in 0..50u32 {
            first.put(format!("k{i}").as_bytes(), b"1").await.unwrap();
        }
        // A take-over loses the write-back commits not yet uploaded (docs/design/kv.md); this
        // test is about fencing, so it waits for the uploads instead of racing them.
        s1.flush().await.unwrap();
        let s2 = common::at(&url, Some(c2.path()), mode).await;
        let second = KvDb::open(s2.clone(), "db", "db", &common::options(false))
            .await
            .unwrap();
        assert_eq!(
            second.scan_prefix(b"k", None).await.unwrap().len(),
            50,
            "{mode}"
        );
        let mut fenced = false;
        for _ in 0..50 {
            if first.put(b"late", b"x").await.is_err() {
                fenced = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(fenced, "{mode}: the first writer must be fenced");
        second.put(b"after", b"2").await.unwrap();
        second.close().await.unwrap();
        let _ = first.close().await;
        let _ = s1.close().await;
        s2.close().await.unwrap();
        let s3 = common::at(&url, None, WriteMode::WriteThrough).await;
        let db = KvDb::open(s3, "db", "db", &common::options(false))
            .await
            .unwrap();
        assert_eq!(
            db.get(b"after").await.unwrap(),
            Some(Bytes::from("2")),
            "{mode}"
        );
        assert_eq!(
            db.scan_prefix(b"k", None).await.unwrap().len(),
            50,
            "{mode}"
        );
        db.close().await.unwrap();
    }
}
