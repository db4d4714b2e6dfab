//! How many requests a read through the tiers makes: missing blocks are fetched as few
//! ranged GETs as possible (runs of adjacent blocks, at most 4 MiB each), cached blocks as
//! none, and concurrent readers of one cold run share one fetch. Counted, not timed.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tierdb_store::{TierOptions, TieredStore};

const BLOCK: u64 = 64 << 10;

async fn tiered(capacity: Arc<InMemory>) -> TieredStore {
    let options = TierOptions {
        memory_bytes: 64 << 20,
        block_bytes: BLOCK,
        // Admit every read (no sequential cutoff): the case of table scans.
        sequential_cutoff_bytes: u64::MAX,
        ..TierOptions::default()
    };
    TieredStore::with_capacity(capacity, "memory://".into(), options)
        .await
        .unwrap()
}

async fn with_object(bytes: usize) -> (TieredStore, Path, Vec<u8>) {
    let capacity = Arc::new(InMemory::new());
    let data: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    let path = Path::from("segment.parquet");
    capacity
        .put(&path, PutPayload::from(data.clone()))
        .await
        .unwrap();
    (tiered(capacity).await, path, data)
}

#[tokio::test]
async fn a_cold_read_is_one_get_per_4_mib_and_a_warm_read_none() {
    let (s, path, data) = with_object(10 << 20).await;
    let got = s.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, data);
    assert_eq!(
        s.stats().capacity.gets,
        3,
        "10 MiB in runs of at most 4 MiB"
    );
    assert_eq!(s.stats().capacity.get_bytes, 10 << 20);

    let got = s.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, data);
    let part = s.get_range(&path, 100_000..3_000_000).await.unwrap();
    assert_eq!(&part[..], &data[100_000..3_000_000]);
    assert_eq!(s.stats().capacity.gets, 3, "warm reads make no request");
    s.close().await.unwrap();
}

#[tokio::test]
async fn only_the_missing_runs_between_cached_blocks_are_fetched() {
    let (s, path, data) = with_object(1 << 20).await;
    // Blocks 0 and 4 first: two requests.
    s.get_range(&path, 0..BLOCK).await.unwrap();
    s.get_range(&path, 4 * BLOCK..5 * BLOCK).await.unwrap();
    assert_eq!(s.stats().capacity.gets, 2);
    // Blocks 0..8: 1..4 and 5..8 are missing, one request each.
    let got = s.get_range(&path, 0..8 * BLOCK).await.unwrap();
    assert_eq!(&got[..], &data[..8 * BLOCK as usize]);
    assert_eq!(s.stats().capacity.gets, 4);
    assert_eq!(s.stats().capacity.get_bytes, 8 * BLOCK);
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_of_one_cold_run_share_one_get() {
    let (s, path, data) = with_object(2 << 20).await;
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (s, path) = (s.clone(), path.clone());
            tokio::spawn(async move { s.get(&path).await.unwrap().bytes().await.unwrap() })
        })
        .collect();
    for r in readers {
        assert_eq!(r.await.unwrap(), data);
    }
    assert_eq!(s.stats().capacity.gets, 1);
    s.close().await.unwrap();
}
