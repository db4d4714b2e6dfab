//! Short-lived writers (a `tierdb kv put` each) must not leave a database that grows with
//! every open: WAL replay stays short and garbage is collected, on a local directory (whose
//! conditional overwrites the GC boundary needs, see tierdb-store's localdir.rs) and on
//! MinIO. The 10,000-process version is `scripts/bench-short-writers.sh`.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStore;
use tierdb_kv::{KvDb, KvOptions, KvRead, KvWrite};
use tierdb_store::{StoreUrl, TieredStore, WriteMode};

/// Objects of the database `db` by folder: (objects, zero-byte objects).
async fn census(store: &TieredStore) -> BTreeMap<String, (usize, usize)> {
    let mut out = BTreeMap::new();
    let all: Vec<_> = store.list(Some(&"db".into())).try_collect().await.unwrap();
    for meta in all {
        let parts: Vec<_> = meta.location.parts().collect();
        let folder = parts.get(1).map(|p| p.as_ref().to_string()).unwrap();
        let e = out.entry(folder).or_insert((0, 0));
        e.0 += 1;
        if meta.size == 0 {
            e.1 += 1;
        }
    }
    out
}

fn options(create: bool) -> KvOptions {
    KvOptions {
        create,
        max_wal_replay_objects: 8,
        // Every file is old enough at once: what is left is what GC may not delete.
        gc_min_age: Duration::ZERO,
        gc_sst_min_age: Duration::ZERO,
        // Flushed L0 SSTs are merged, as the compactor in every writer does by default.
        compaction: true,
        ..common::options(create)
    }
}

async fn short_writers(url: &StoreUrl, mode: WriteMode, cache: &std::path::Path) {
    let mut at_half = BTreeMap::new();
    const WRITERS: usize = 60;
    for i in 0..WRITERS {
        let store = common::at(url, Some(cache), mode).await;
        let db = KvDb::open(store.clone(), "db", "db", &options(i == 0))
            .await
            .unwrap();
        db.put(format!("k{i:03}").as_bytes(), b"v").await.unwrap();
        let shape = db.info();
        assert!(
            shape.next_wal_id - shape.replay_after_wal_id <= 8 + 4,
            "writer {i}: {} WAL objects to replay",
            shape.next_wal_id - shape.replay_after_wal_id
        );
        db.close().await.unwrap();
        store.close().await.unwrap();
        if i == WRITERS / 2 {
            at_half = census(&common::at(url, None, WriteMode::WriteThrough).await).await;
        }
    }
    let store = common::at(url, None, WriteMode::WriteThrough).await;
    let at_end = census(&store).await;
    // Garbage collected: metadata stays small and does not grow from the middle of the run
    // to its end. WAL fences (zero bytes, one per open) are kept ten minutes by design.
    for folder in ["manifest", "compactions"] {
        let (end, _) = at_end.get(folder).copied().unwrap_or_default();
        let (half, _) = at_half.get(folder).copied().unwrap_or_default();
        assert!(
            end <= 8,
            "{mode}: {end} objects left in {folder}/: {at_end:?}"
        );
        assert!(
            end <= half + 2,
            "{mode}: {folder}/ grew: {at_half:?} -> {at_end:?}"
        );
    }
    // SSTs: at most SlateDB's L0 limit (8) waiting for the compactor, plus sorted runs.
    let (ssts, _) = at_end.get("compacted").copied().unwrap_or_default();
    assert!(ssts <= 16, "{mode}: {ssts} SSTs: {at_end:?}");
    let (wal, fences) = at_end["wal"];
    assert!(
        wal - fences <= 12,
        "{mode}: {} WAL objects with data left: {at_end:?}",
        wal - fences
    );
    // Everything is still there.
    let db = KvDb::open(store.clone(), "db", "db", &options(false))
        .await
        .unwrap();
    for i in 0..WRITERS {
        assert_eq!(
            db.get(format!("k{i:03}").as_bytes()).await.unwrap(),
            Some(Bytes::from("v")),
            "{mode}: k{i:03}"
        );
    }
    db.close().await.unwrap();
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_writers_leave_bounded_garbage_on_a_local_directory() {
    for mode in [WriteMode::WriteThrough, WriteMode::WriteBack] {
        let data = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(data.path().to_str().unwrap()).unwrap();
        short_writers(&url, mode, cache.path()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_writers_leave_bounded_garbage_on_minio() {
    let Some(url) = common::minio_url("kv-garbage") else {
        eprintln!("skipped: no MinIO (scripts/test.sh starts one)");
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    short_writers(&url, WriteMode::WriteBack, cache.path()).await;
}
