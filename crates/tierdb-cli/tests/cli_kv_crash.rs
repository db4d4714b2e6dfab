//! Key-value commits under SIGKILL, with a real process, in write-through and write-back.
//!
//! `tierdb debug kv-commit-stream` commits batches of 20 rows from four concurrent writers
//! (small memtables, so L0 flushes happen too) and prints each batch number once its commit
//! returned. The test kills it with SIGKILL mid-stream, reopens the database (write-back:
//! with the same cache directory, whose log is replayed) and proves that every acknowledged
//! batch is there in full and that no batch is half visible. It then reopens once more with
//! no cache at all, proving the data reached the capacity store. Local directory and MinIO.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
mod common;

use tierdb_kv::{KvDb, KvOptions, KvRead};
use tierdb_store::{CapacityOptions, StoreUrl, TierOptions, TieredStore, WriteMode, open_capacity};

const ROWS: usize = 20;

fn kill_mid_stream(db: &str, mode: &str, cache: &std::path::Path, acks: usize) -> Vec<u64> {
    let args = [
        "debug",
        "kv-commit-stream",
        db,
        "--create",
        "--memtable-bytes",
        "128KiB",
        "--write-mode",
        mode,
        "--cache-bytes",
        "16MiB",
        "--memory-bytes",
        "4MiB",
    ];
    common::kill_after_acks(&args, cache, "acked ", acks)
}

/// The database's path inside the store the CLI opens (bucket or filesystem root).
fn split(db: &str) -> (StoreUrl, String) {
    match StoreUrl::parse(db).unwrap() {
        StoreUrl::Local(p) => (
            StoreUrl::Local("/".into()),
            p.strip_prefix("/").unwrap().to_str().unwrap().to_string(),
        ),
        StoreUrl::S3 { bucket, prefix } => (
            StoreUrl::S3 {
                bucket,
                prefix: String::new(),
            },
            prefix,
        ),
        StoreUrl::Memory => unreachable!(),
    }
}

async fn check(root: &StoreUrl, path: &str, tiers: TierOptions, acked: &[u64]) {
    let capacity = open_capacity(root, &CapacityOptions::default()).unwrap();
    let store = TieredStore::with_capacity(capacity, root.to_string(), tiers)
        .await
        .unwrap();
    let db = KvDb::open(store.clone(), path, path, &KvOptions::default())
        .await
        .unwrap();
    let rows = db.scan_prefix(b"b", None).await.unwrap();
    let mut batches: BTreeMap<u64, usize> = BTreeMap::new();
    for (k, v) in &rows {
        let k = std::str::from_utf8(k).unwrap();
        let i: u64 = k[1..9].parse().unwrap();
        assert_eq!(v.as_ref(), format!("v{i}").as_bytes(), "{k}");
        *batches.entry(i).or_default() += 1;
    }
    for (i, n) in &batches {
        assert_eq!(*n, ROWS, "batch {i} is half visible: {n} of {ROWS} rows");
    }
    for i in acked {
        assert!(batches.contains_key(i), "acknowledged batch {i} was lost");
    }
    db.close().await.unwrap();
    store.close().await.unwrap();
}

async fn crash_and_recover(db: &str, mode: WriteMode) {
    let cache = tempfile::tempdir().unwrap();
    let acked = kill_mid_stream(db, &mode.to_string(), cache.path(), 1000);
    let (root, path) = split(db);
    let same_cache = TierOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        cache_bytes: 16 << 20,
        memory_bytes: 4 << 20,
        write_mode: mode,
        ..TierOptions::default()
    };
    check(&root, &path, same_cache, &acked).await;
    // Everything is in the capacity store now: a process with no cache sees it all.
    let no_cache = TierOptions {
        memory_bytes: 0,
        ..TierOptions::default()
    };
    check(&root, &path, no_cache, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_commit_write_through_local() {
    let dir = tempfile::tempdir().unwrap();
    crash_and_recover(
        dir.path().join("db").to_str().unwrap(),
        WriteMode::WriteThrough,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_commit_write_back_local() {
    let dir = tempfile::tempdir().unwrap();
    crash_and_recover(
        dir.path().join("db").to_str().unwrap(),
        WriteMode::WriteBack,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_commit_write_through_minio() {
    if let Some(db) = common::minio("kv-crash-wt") {
        crash_and_recover(&db, WriteMode::WriteThrough).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_commit_write_back_minio() {
    if let Some(db) = common::minio("kv-crash-wb") {
        crash_and_recover(&db, WriteMode::WriteBack).await;
    }
}
