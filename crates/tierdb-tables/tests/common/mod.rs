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
    open_engine(capacity, segment_rows, false).await
}

/// An engine on `capacity` that fences the writer still running there, as a process
/// started after another was killed does.
pub async fn engine_taking_over(capacity: Arc<InMemory>, segment_rows: usize) -> SqlEngine {
    open_engine(capacity, segment_rows, true).await
}

/// An engine on a new in-memory store with `opts` (threads and memory as [`engine`]'s).
pub async fn engine_with(segment_rows: usize, opts: EngineOptions) -> SqlEngine {
    let capacity = Arc::new(InMemory::new());
    open_engine_with(capacity, segment_rows, false, opts).await
}

async fn open_engine(capacity: Arc<InMemory>, segment_rows: usize, take_over: bool) -> SqlEngine {
    let opts = EngineOptions {
        threads: 2,
        memory_limit: 256 << 20,
        ..EngineOptions::default()
    };
    open_engine_with(capacity, segment_rows, take_over, opts).await
}

async fn open_engine_with(
    capacity: Arc<InMemory>,
    segment_rows: usize,
    take_over: bool,
    opts: EngineOptions,
) -> SqlEngine {
    let store = TieredStore::with_capacity(capacity, "memory".into(), TierOptions::default())
        .await
        .unwrap();
    let options = KvOptions {
        create: true,
        compaction: false,
        take_over,
        ..KvOptions::default()
    };
    let kv = KvDb::open(store, "db", "db", &options).await.unwrap();
    // As `tierdb_engine::Database::open` does for a writer.
    tierdb_tables::ddlundo::recover(&kv).await.unwrap();
    let kv = Arc::new(kv);
    let mut tables = Tables::open(tierdb_kv::KvHandle::Writer(kv));
    tables.segment_options.segment_rows = segment_rows;
    tables.segment_options.row_group_rows = segment_rows.min(1 << 17);
    SqlEngine::new(Arc::new(tables), &opts).unwrap()
}

/// An engine on a new in-memory store, and that store.
pub async fn engine(segment_rows: usize) -> (SqlEngine, Arc<InMemory>) {
    let capacity = Arc::new(InMemory::new());
    (engine_on(capacity.clone(), segment_rows).await, capacity)
}

/// Every result row as text, sorted: the queries' order is not what is compared.
pub async fn sorted_rows(e: &SqlEngine, sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    for r in e
        .sql(sql)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"))
    {
        out.extend(to_text(&r.batches).into_iter().map(|cells| cells.join("|")));
    }
    out.sort();
    out
}

/// The plan EXPLAIN prints for `sql`, its lines sorted.
pub async fn explain(e: &SqlEngine, sql: &str) -> String {
    let rows = sorted_rows(e, &format!("EXPLAIN {sql}")).await;
    rows.join("\n")
}

/// A deterministic generator (SplitMix64), so a failure names a seed that replays.
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every result as text, rows in order.
pub async fn rows(e: &SqlEngine, sql: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for r in e.sql(sql).await.unwrap() {
        out.extend(to_text(&r.batches));
    }
    out
}

pub fn to_text(batches: &[datafusion::arrow::array::RecordBatch]) -> Vec<Vec<String>> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for row in 0..b.num_rows() {
            out.push(fmts.iter().map(|f| f.value(row).to_string()).collect());
        }
    }
    out
}
