//! Helpers shared by the KV integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use tierdb_kv::KvOptions;
use tierdb_store::{CapacityOptions, StoreUrl, TierOptions, TieredStore, WriteMode};

/// Small settings so tests flush and compact quickly.
pub fn options(create: bool) -> KvOptions {
    KvOptions {
        create,
        memtable_bytes: 256 << 10,
        max_unflushed_bytes: 64 << 20,
        poll_interval: Duration::from_millis(100),
        compaction: false,
        ..KvOptions::default()
    }
}

pub fn tier(cache: Option<&std::path::Path>, mode: WriteMode) -> TierOptions {
    TierOptions {
        cache_dir: cache.map(|p| p.to_path_buf()),
        cache_bytes: if cache.is_some() { 32 << 20 } else { 0 },
        memory_bytes: 8 << 20,
        write_mode: mode,
        ..TierOptions::default()
    }
}

pub async fn local(
    dir: &std::path::Path,
    cache: Option<&std::path::Path>,
    mode: WriteMode,
) -> TieredStore {
    let url = StoreUrl::parse(dir.to_str().unwrap()).unwrap();
    let cap = CapacityOptions {
        create: true,
        ..Default::default()
    };
    TieredStore::open(&url, &cap, tier(cache, mode))
        .await
        .unwrap()
}

pub async fn over(
    capacity: Arc<dyn ObjectStore>,
    cache: Option<&std::path::Path>,
    mode: WriteMode,
) -> TieredStore {
    TieredStore::with_capacity(capacity, "test".into(), tier(cache, mode))
        .await
        .unwrap()
}

/// A fresh prefix on the MinIO that scripts/test.sh started, or `None` (skipped) without it.
pub fn minio_url(name: &str) -> Option<StoreUrl> {
    let url = tierdb_testkit::minio_prefix(name)?;
    Some(StoreUrl::parse(&url).unwrap())
}

pub async fn at(url: &StoreUrl, cache: Option<&std::path::Path>, mode: WriteMode) -> TieredStore {
    TieredStore::open(url, &CapacityOptions::default(), tier(cache, mode))
        .await
        .unwrap()
}
