//! How many requests a read through the tiers makes: missing blocks are fetched as few
//! ranged GETs as possible (runs of adjacent blocks, at most 4 MiB each), cached blocks as
//! none, and concurrent readers of one cold run share one fetch. Counted, not timed.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
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

#[tokio::test]
async fn get_ranges_fetches_the_missing_blocks_of_all_ranges_together() {
    let (s, path, data) = with_object(8 << 20).await;
    // Twenty 100 KiB column chunks 300 KiB apart (gaps of 200 KiB, merged), from 0 to 6 MiB:
    // at most two GETs of up to 4 MiB instead of twenty.
    let ranges: Vec<_> = (0..20u64)
        .map(|i| i * 300 * 1024..i * 300 * 1024 + 100 * 1024)
        .collect();
    let got = s.get_ranges(&path, &ranges).await.unwrap();
    for (r, b) in ranges.iter().zip(&got) {
        assert_eq!(&b[..], &data[r.start as usize..r.end as usize]);
    }
    assert_eq!(s.stats().capacity.gets, 2);
    assert_eq!(
        s.stats().capacity.heads,
        1,
        "one metadata lookup for all ranges"
    );
    // Ranges far apart are fetched separately, and cached ones not at all.
    let far = [0..1000, 7 << 20..(7 << 20) + 1000];
    let got = s.get_ranges(&path, &far).await.unwrap();
    assert_eq!(&got[1][..], &data[7 << 20..(7 << 20) + 1000]);
    assert_eq!(
        s.stats().capacity.gets,
        3,
        "only the block at 7 MiB was missing"
    );
    // A range past the end is refused, not cut short.
    let past_end = 0..(9 << 20);
    assert!(
        s.get_ranges(&path, std::slice::from_ref(&past_end))
            .await
            .is_err()
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn immutable_objects_need_one_metadata_request_and_mutable_ones_one_per_ttl() {
    let capacity = Arc::new(InMemory::new());
    for p in ["seg/a.parquet", "other/b"] {
        capacity
            .put(&Path::from(p), PutPayload::from(vec![1u8; 100_000]))
            .await
            .unwrap();
    }
    let options = TierOptions {
        memory_bytes: 16 << 20,
        // Metadata of other objects is never trusted: every read asks again.
        meta_ttl: std::time::Duration::ZERO,
        immutable_prefixes: vec!["seg/".into()],
        ..TierOptions::default()
    };
    let s = TieredStore::with_capacity(capacity, "memory://".into(), options)
        .await
        .unwrap();
    for _ in 0..3 {
        s.get_range(&Path::from("seg/a.parquet"), 0..10)
            .await
            .unwrap();
    }
    assert_eq!(s.stats().capacity.heads, 1);
    for _ in 0..3 {
        s.get_range(&Path::from("other/b"), 0..10).await.unwrap();
    }
    assert_eq!(s.stats().capacity.heads, 4);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_reopened_device_tier_serves_blocks_and_metadata_of_unchanged_objects() {
    let capacity = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let (seg, other) = (Path::from("seg/a.parquet"), Path::from("other/b"));
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    for p in [&seg, &other] {
        capacity
            .put(p, PutPayload::from(data.clone()))
            .await
            .unwrap();
    }
    let options = TierOptions {
        memory_bytes: 16 << 20,
        cache_dir: Some(dir.path().to_path_buf()),
        cache_bytes: 64 << 20,
        sequential_cutoff_bytes: u64::MAX,
        immutable_prefixes: vec!["seg/".into()],
        ..TierOptions::default()
    };
    let open = || TieredStore::with_capacity(capacity.clone(), "memory://".into(), options.clone());
    let s = open().await.unwrap();
    for p in [&seg, &other] {
        assert_eq!(s.get(p).await.unwrap().bytes().await.unwrap(), data);
    }
    s.close().await.unwrap();

    // The other object is rewritten while no store is open.
    let changed: Vec<u8> = data.iter().map(|b| b ^ 0xff).collect();
    capacity
        .put(&other, PutPayload::from(changed.clone()))
        .await
        .unwrap();

    let s = open().await.unwrap();
    assert_eq!(s.get(&seg).await.unwrap().bytes().await.unwrap(), data);
    let st = s.stats();
    assert_eq!(
        st.capacity.heads, 0,
        "the immutable object's metadata came from the device"
    );
    assert_eq!(st.capacity.gets, 0, "and its blocks");
    assert_eq!(st.device.hit_bytes, data.len() as u64);
    assert_eq!(s.get(&other).await.unwrap().bytes().await.unwrap(), changed);
    let st = s.stats();
    assert_eq!(st.capacity.heads, 1);
    assert_eq!(
        st.capacity.get_bytes,
        data.len() as u64,
        "the rewritten object was read fresh"
    );
    s.close().await.unwrap();
}
