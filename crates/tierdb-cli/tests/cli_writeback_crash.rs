//! Write-back durability under SIGKILL, with a real process.
//!
//! A `tierdb debug write-stream` process writes objects in write-back mode through four
//! concurrent writers and prints each key as its put is acknowledged. The test kills it
//! with SIGKILL mid-stream, then reopens the same cache directory in a fresh store and
//! proves that (1) every acknowledged object is readable, with the right content, before
//! anything else happens (replayed from the log), and (2) after a flush every one is in
//! the capacity store itself. Run against a local directory and, when the test script
//! started one, MinIO.

#![allow(clippy::unwrap_used)]

mod common;

use object_store::ObjectStoreExt;
use object_store::path::Path;
use tierdb_store::{CapacityOptions, StoreUrl, TierOptions, TieredStore, WriteMode, open_capacity};

fn expected(i: u64) -> Vec<u8> {
    // Same content as `stream_object` in src/main.rs.
    let line = format!("object {i} of the write stream\n");
    line.repeat(1 + (i % 50) as usize * 20).into_bytes()
}

fn kill_mid_stream(url: &str, cache_dir: &std::path::Path, acks_before_kill: usize) -> Vec<u64> {
    let args = [
        "debug",
        "write-stream",
        url,
        "--write-mode",
        "write-back",
        "--cache-bytes",
        "16MiB",
        "--memory-bytes",
        "4MiB",
    ];
    common::kill_after_acks(&args, cache_dir, "acked k", acks_before_kill)
}

async fn check_after_restart(url: &StoreUrl, cache_dir: &std::path::Path, acked: &[u64]) {
    let options = TierOptions {
        cache_dir: Some(cache_dir.to_path_buf()),
        cache_bytes: 16 << 20,
        memory_bytes: 4 << 20,
        write_mode: WriteMode::WriteBack,
        ..TierOptions::default()
    };
    let capacity_options = CapacityOptions {
        create: true,
        ..Default::default()
    };
    let store = TieredStore::open(url, &capacity_options, options)
        .await
        .unwrap();
    for &i in acked {
        let got = store
            .get(&Path::from(format!("k{i}")))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            got.as_ref(),
            expected(i).as_slice(),
            "acknowledged k{i} readable after restart"
        );
    }
    store.close().await.unwrap();
    let raw = open_capacity(url, &capacity_options).unwrap();
    for &i in acked {
        let got = raw
            .get(&Path::from(format!("k{i}")))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            got.as_ref(),
            expected(i).as_slice(),
            "acknowledged k{i} reached the capacity store"
        );
    }
}

async fn crash_and_recover(url: &str) {
    let cache = tempfile::tempdir().unwrap();
    let acked = kill_mid_stream(url, cache.path(), 400);
    assert_eq!(acked.len(), 400);
    let stats_dir = cache.path().join("wblog");
    assert!(stats_dir.is_dir(), "the write-back log exists");
    check_after_restart(&StoreUrl::parse(url).unwrap(), cache.path(), &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_write_back_object_local() {
    let db = tempfile::tempdir().unwrap();
    crash_and_recover(db.path().join("db").to_str().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_write_back_object_minio() {
    let Some(url) = tierdb_testkit::minio_prefix("crash") else {
        return;
    };
    crash_and_recover(&url).await;
}
