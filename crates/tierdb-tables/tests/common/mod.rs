//! What the SQL test suites share: an engine over a KV database on an in-memory capacity
//! store.

#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;

use object_store::memory::InMemory;
use tierdb_kv::{KvDb, KvOptions};
use tierdb_store::{TierOptions, TieredStore};
use tierdb_tables::{EngineOptions, SqlEngine, Tables};

/// An engine on `capacity`, cutting segments of `segment_rows` rows.
pub async fn engine_on(capacity: Arc<InMemory>, segment_rows: usize) -> SqlEngine {
    let store = TieredStore::with_capacity(capacity, "memory".into(), TierOptions::default())
        .await
        .unwrap();
    let options = KvOptions {
        create: true,
        compaction: false,
        ..KvOptions::default()
    };
    let kv = Arc::new(KvDb::open(store, "db", "db", &options).await.unwrap());
    let mut tables = Tables::open(tierdb_kv::KvHandle::Writer(kv));
    tables.segment_options.segment_rows = segment_rows;
    tables.segment_options.row_group_rows = segment_rows.min(1 << 17);
    let opts = EngineOptions {
        threads: 2,
        memory_limit: 256 << 20,
        ..EngineOptions::default()
    };
    SqlEngine::new(Arc::new(tables), &opts).unwrap()
}

/// An engine on a new in-memory store, and that store.
pub async fn engine(segment_rows: usize) -> (SqlEngine, Arc<InMemory>) {
    let capacity = Arc::new(InMemory::new());
    (engine_on(capacity.clone(), segment_rows).await, capacity)
}
