//! A full write-back log never stalls a writer: past `dirty_wait_max` (or on a full cache
//! device) a write goes straight to the capacity store after a barrier, so it is never
//! overtaken by an older logged version of the same path. With the capacity store down, the
//! write fails after bounded retries instead of waiting forever; nothing acknowledged is lost.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tierdb_store::{FaultConfig, FaultStore, TierOptions, TieredStore, WriteMode};

fn options(cache: &std::path::Path) -> TierOptions {
    TierOptions {
        cache_dir: Some(cache.to_path_buf()),
        write_mode: WriteMode::WriteBack,
        dirty_bytes_max: 2000,
        dirty_wait_max: Duration::from_millis(50),
        upload_concurrency: 1,
        upload_attempts_max: 3,
        ..TierOptions::default()
    }
}

fn bytes(v: u8) -> PutPayload {
    PutPayload::from(Bytes::from(vec![v; 1000]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_writes_through_in_order() {
    let cache = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Slow uploads: the log fills faster than it drains (2 s per request, 40 times the
    // 50 ms wait, so a loaded machine cannot free room before the wait ends).
    let slow = Arc::new(FaultStore::new(
        inner.clone(),
        FaultConfig {
            latency: Duration::from_secs(2),
            ..Default::default()
        },
        7,
    ));
    let store = TieredStore::with_capacity(slow, "memory://full".into(), options(cache.path()))
        .await
        .unwrap();
    store.put(&Path::from("a"), bytes(1)).await.unwrap();
    store.put(&Path::from("b"), bytes(2)).await.unwrap();
    // The cap is full: this one waits 50 ms, then writes through (after the barrier that
    // uploads "a" v1 first).
    store.put(&Path::from("a"), bytes(3)).await.unwrap();
    let direct = inner
        .get(&Path::from("a"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(direct, Bytes::from(vec![3u8; 1000]), "written through");
    store.flush().await.unwrap();
    for (p, v) in [("a", 3u8), ("b", 2)] {
        let got = inner
            .get(&Path::from(p))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            got,
            Bytes::from(vec![v; 1000]),
            "{p}: the newest version wins"
        );
    }
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_with_the_store_down_fails_in_bounded_time() {
    let cache = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let down = Arc::new(FaultStore::new(
        inner.clone(),
        FaultConfig {
            error_before: 1.0,
            ..Default::default()
        },
        7,
    ));
    let store =
        TieredStore::with_capacity(down.clone(), "memory://full".into(), options(cache.path()))
            .await
            .unwrap();
    store.put(&Path::from("a"), bytes(1)).await.unwrap();
    store.put(&Path::from("b"), bytes(2)).await.unwrap();
    let third = tokio::time::timeout(
        Duration::from_secs(120),
        store.put(&Path::from("c"), bytes(3)),
    )
    .await
    .expect("a full log must not stall a writer");
    assert!(third.is_err(), "the store is down: the write-through fails");
    // The acknowledged writes are safe and land once the store is back.
    down.set_config(FaultConfig::default());
    store.flush().await.unwrap();
    for (p, v) in [("a", 1u8), ("b", 2)] {
        let got = inner
            .get(&Path::from(p))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(got, Bytes::from(vec![v; 1000]));
    }
    assert!(
        inner.head(&Path::from("c")).await.is_err(),
        "c was never acknowledged"
    );
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_cache_device_puts_and_deletes_go_direct_after_a_barrier() {
    let cache = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store =
        TieredStore::with_capacity(inner.clone(), "memory://dev".into(), options(cache.path()))
            .await
            .unwrap();
    store.put(&Path::from("a"), bytes(1)).await.unwrap();
    store.put(&Path::from("gone"), bytes(2)).await.unwrap();
    store.simulate_full_log_device(true);
    // Neither fails: each runs a barrier (which cannot append its clean mark, and deletes
    // the uploaded segments instead), then writes to the capacity store directly.
    store.put(&Path::from("a"), bytes(3)).await.unwrap();
    store.delete(&Path::from("gone")).await.unwrap();
    let direct = inner
        .get(&Path::from("a"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(direct[0], 3);
    assert!(matches!(
        inner.head(&Path::from("gone")).await,
        Err(object_store::Error::NotFound { .. })
    ));
    // A crash now: nothing in the log may bring back the old versions.
    store.abandon().await;
    drop(store);
    let store =
        TieredStore::with_capacity(inner.clone(), "memory://dev".into(), options(cache.path()))
            .await
            .unwrap();
    store.flush().await.unwrap();
    assert_eq!(
        store
            .get(&Path::from("a"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()[0],
        3
    );
    assert!(store.head(&Path::from("gone")).await.is_err());
    assert_eq!(
        inner
            .get(&Path::from("a"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()[0],
        3
    );
    store.close().await.unwrap();
}
