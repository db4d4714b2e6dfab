//! Row tables: tables with a PRIMARY KEY keep each row as one entry of the KV engine,
//! ordered by key, as MyRocks keeps MySQL's rows in RocksDB. A point read, insert, update
//! or delete touches one key (and the index entries of the row), not a segment; the rows
//! are as durable as any KV commit (docs/design/rows.md).
//!
//! Keys (next to the catalog's `T…` keys and the object store's):
//!
//! | key | value |
//! |---|---|
//! | `R` + table id (u64 BE) + the primary key's columns (`keys.rs`) | the row (`format.rs`, row format 1) |
//!
//! - [`keys`]: the order-preserving encoding of key values.
//! - [`format`]: the row value.
//! - [`index`]: secondary indexes, maintained with their rows.
//! - [`locks`]: row locks, deadlock detection, the record of recent commits.
//! - [`txn`]: a transaction's uncommitted rows and locks.
//! - [`provider`]: DataFusion's view of a row table: which keys a scan reads, INSERT.
//! - [`scan`]: the scan itself, bound at planning or, in a kept plan, at each execution.
//! - [`dml`]: UPDATE and DELETE of row tables.
//! - [`fast`]: the short path of primary-key lookups (one KV read, no DataFusion plan).
//! - [`fastdml`]: the short path of single-row UPDATE, DELETE and INSERT … VALUES.
//! - [`convert`]: ALTER TABLE … ADD PRIMARY KEY: a columnar table becomes a row table.
//! - [`retype`]: ALTER COLUMN … TYPE: the rows and index entries encoded again.
//! - [`sequence`]: sequences (SERIAL, nextval), reserved in durable blocks.
//! - [`upsert`]: `INSERT … ON CONFLICT`: arbiters, skipped and updated rows.
//! - [`verify`]: `tierdb verify`: rows and index entries agree.
//!
//! Invariants:
//!
//! 1. Every row of a row table is the entry at its key, and nothing else is under the
//!    table's prefix.
//! 2. A statement's reads see the committed rows as of one KV snapshot, with its own
//!    transaction's writes over them (`txn.rs`); a write of a row is made only while the
//!    writer holds the row's lock (`locks.rs`), after reading the row again if another
//!    commit changed it since the statement read it.
//! 3. A transaction's row writes reach the KV engine in one batch, which also holds its
//!    columnar catalog changes: a reader sees all of a transaction or none of it.

pub(crate) mod convert;
pub(crate) mod dml;
pub(crate) mod exact;
pub(crate) mod fast;
pub(crate) mod fastdml;
pub(crate) mod follow;
pub(crate) mod format;
pub mod index;
pub(crate) mod keys;
pub(crate) mod locks;
pub(crate) mod provider;
pub(crate) mod retype;
pub(crate) mod scan;
pub mod sequence;
pub(crate) mod txn;
pub(crate) mod upsert;
pub mod verify;

use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use tierdb_kv::{KvRead, KvWrite};

pub(crate) use tierdb_kv::range_is_empty;
pub use txn::RowWrites;

use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;

const ROW_PREFIX: u8 = b'R';

/// The prefix of every row key of table `id`.
pub(crate) fn table_prefix(id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(ROW_PREFIX);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The range of every row of table `id`.
pub(crate) fn table_range(id: u64) -> (Bound<Bytes>, Bound<Bytes>) {
    let p = table_prefix(id);
    let end = tierdb_kv::prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(Bytes::from(p)), end)
}

/// The positions of the primary key's columns in `def`.
pub(crate) fn key_columns(def: &TableDef) -> Result<Vec<usize>> {
    def.primary_key
        .iter()
        .map(|c| {
            def.column_index(c).ok_or_else(|| {
                TableError::Schema(format!(
                    "table {}: primary key column {c} is not a column",
                    def.name
                ))
            })
        })
        .collect()
}

/// The key of the row whose values are `values` (one per column of `def`).
pub(crate) fn row_key(def: &TableDef, key_cols: &[usize], values: &[ScalarValue]) -> Result<Bytes> {
    let mut k = table_prefix(def.id);
    for &i in key_cols {
        let c = &def.columns[i];
        if values[i].is_null() {
            return Err(not_null(def, &c.name));
        }
        keys::encode(&mut k, c.ty, &values[i], false)?;
    }
    Ok(Bytes::from(k))
}

pub(crate) fn not_null(def: &TableDef, column: &str) -> TableError {
    TableError::Violation(Box::new(crate::violation::not_null(def, column)))
}

/// The values of row `row` of `batch`.
pub(crate) fn values_of(batch: &RecordBatch, row: usize) -> Result<Vec<ScalarValue>> {
    batch
        .columns()
        .iter()
        .map(|a| ScalarValue::try_from_array(a, row).map_err(Into::into))
        .collect()
}

/// The committed row at `key` as the writer sees it now (the latest durable commit).
pub(crate) async fn committed_row(tables: &Tables, key: &[u8]) -> Result<Option<Bytes>> {
    Ok(tables.reader.get(key).await?)
}

/// Inserts the rows of `batch` (the table's columns, conformed) into `writes`: each row's
/// key is locked, and a key that exists (committed or written by this transaction) fails
/// the statement with 23505 (unique_violation).
pub(crate) async fn insert(
    tables: &Tables,
    def: &TableDef,
    batch: &RecordBatch,
    writes: &parking_lot::Mutex<RowWrites>,
) -> Result<u64> {
    let key_cols = key_columns(def)?;
    let state = tables.row_state();
    let tx = {
        let mut w = writes.lock();
        w.attach(state);
        w.id()
    };
    for row in 0..batch.num_rows() {
        let values = values_of(batch, row)?;
        let key = row_key(def, &key_cols, &values)?;
        let value = Bytes::from(format::encode_row(def, batch, row)?);
        state.lock(tx, &key, &def.name).await?;
        writes.lock().note_locked(&key);
        let mine = writes.lock().get(&key);
        let exists = match mine {
            Some(v) => v.is_some(),
            None => committed_row(tables, &key).await?.is_some(),
        };
        if exists {
            writes.lock().unlock_unwritten(&key);
            return Err(duplicate(def, &key_cols, &values));
        }
        index::write_row(tables, def, writes, &key, None, Some((&values, value))).await?;
    }
    Ok(batch.num_rows() as u64)
}

/// Inserts every row `plan` returns (the table's columns), as one statement: into
/// `transaction`'s writes, or committed at the end in one batch. `progress` hears of each
/// batch inserted. Returns how many rows.
pub(crate) async fn insert_plan(
    tables: &Tables,
    def: &TableDef,
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    ctx: Arc<datafusion::execution::TaskContext>,
    transaction: Option<&Arc<crate::txn::Transaction>>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64> {
    let stream = datafusion::physical_plan::execute_stream(plan, ctx)?;
    insert_stream(tables, def, stream, transaction, progress).await
}

/// [`insert_plan`] of the rows of `stream` (INSERT's sink, COPY and import).
pub(crate) async fn insert_stream(
    tables: &Tables,
    def: &TableDef,
    mut stream: datafusion::execution::SendableRecordBatchStream,
    transaction: Option<&Arc<crate::txn::Transaction>>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64> {
    use futures::StreamExt;
    let local = parking_lot::Mutex::new(RowWrites::default());
    let writes = transaction.map_or(&local, |t| &t.rows);
    let schema = def.schema();
    let mut n = 0;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        dml::check_not_null(def, &batch)?;
        let batch = crate::write::conform(batch, def, &schema)?;
        n += insert(tables, def, &batch, writes).await?;
        progress(batch.num_rows() as u64);
    }
    if transaction.is_none() {
        let mut w = local.into_inner();
        commit(tables, &mut w).await?;
    }
    Ok(n)
}

/// 23505, as PostgreSQL words it.
pub(crate) fn duplicate(def: &TableDef, key_cols: &[usize], values: &[ScalarValue]) -> TableError {
    let names: Vec<&str> = key_cols
        .iter()
        .map(|&i| def.columns[i].name.as_str())
        .collect();
    let vals: Vec<&ScalarValue> = key_cols.iter().map(|&i| &values[i]).collect();
    let name = crate::violation::primary_key_name(def);
    TableError::Violation(Box::new(crate::violation::unique(
        def, &name, &names, &vals,
    )))
}

/// Commits `writes` alone (a statement outside a transaction, or a transaction that wrote
/// only row tables) in one KV batch; durable when this returns.
pub(crate) async fn commit(tables: &Tables, writes: &mut RowWrites) -> Result<()> {
    let mut batch = tierdb_kv::Batch::new();
    let keys = writes.to_batch(&mut batch);
    if keys.is_empty() {
        return Ok(());
    }
    let kv = tables.kv_writer()?;
    let _gate = tables.row_state().gate.read().await;
    index::check_tables(tables, writes, None).await?;
    tierdb_store::testpoint::pause_at("rows-commit");
    kv.commit(batch).await?;
    tierdb_store::testpoint::pause_at("rows-committed");
    writes.committed(keys);
    Ok(())
}

/// Whether a committed row of row table `def` has NULL in column `column` (SET NOT NULL's
/// check, made while no row commit can run: alter.rs rule 5).
/// Whether the row table `def` has a committed row.
pub(crate) async fn any_row(tables: &Tables, def: &TableDef) -> Result<bool> {
    Ok(!tables
        .reader
        .scan(table_range(def.id), Some(1))
        .await?
        .is_empty())
}

pub(crate) async fn any_null(tables: &Tables, def: &TableDef, column: usize) -> Result<bool> {
    const PAGE: usize = 8192;
    let (mut start, end) = table_range(def.id);
    loop {
        let page = tables.reader.scan((start, end.clone()), Some(PAGE)).await?;
        for (k, v) in &page {
            if format::decode_row(def, k, v)?
                .get(column)
                .is_none_or(ScalarValue::is_null)
            {
                return Ok(true);
            }
        }
        match page.last() {
            Some((k, _)) if page.len() == PAGE => start = Bound::Excluded(k.clone()),
            _ => return Ok(false),
        }
    }
}

/// A statement's reader of one row table (invariant 2): a snapshot of the committed rows
/// (the writer's; a follower reads what it follows) with `overlay`, the statement's
/// transaction's writes to the table.
pub(crate) struct RowReader {
    view: Arc<dyn KvRead>,
    overlay: Vec<(Bytes, Option<Bytes>)>,
}

impl RowReader {
    /// `snapshot`: a REPEATABLE READ transaction's; else one is taken for this statement.
    pub(crate) fn new(
        tables: &Tables,
        def: &TableDef,
        writes: Option<&RowWrites>,
        snapshot: Option<Arc<dyn KvRead>>,
    ) -> Result<Self> {
        let view: Arc<dyn KvRead> = match (snapshot, tables.kv_writer()) {
            (Some(s), _) => s,
            (None, Ok(w)) => Arc::new(w.snapshot()?),
            (None, Err(_)) => tables.reader.clone(),
        };
        let mut overlay = Vec::new();
        if let Some(w) = writes {
            overlay.extend(w.range(table_range(def.id)));
            for i in &def.indexes {
                overlay.extend(w.range(index::index_range(i.id)));
            }
            overlay.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Ok(RowReader { view, overlay })
    }

    /// The row at `key`.
    pub(crate) async fn get(&self, key: &Bytes) -> Result<Option<Bytes>> {
        if let Ok(i) = self.overlay.binary_search_by(|(k, _)| k.cmp(key)) {
            return Ok(self.overlay[i].1.clone());
        }
        Ok(self.view.get(key).await?)
    }

    /// One page of `range`, ascending, overlay applied: about `limit` rows, and where the
    /// next page starts (`None`: the range is done).
    pub(crate) async fn scan(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: usize,
    ) -> Result<(Vec<(Bytes, Bytes)>, Option<Bound<Bytes>>)> {
        if range_is_empty(&range) {
            return Ok((Vec::new(), None));
        }
        let committed = self.view.scan(range.clone(), Some(limit)).await?;
        // Where the committed page ends, the overlay is cut too (the next page goes on).
        let (end, resume) = match committed.last() {
            Some((k, _)) if committed.len() == limit => {
                (Bound::Included(k.clone()), Some(Bound::Excluded(k.clone())))
            }
            _ => (range.1.clone(), None),
        };
        let mine: Vec<&(Bytes, Option<Bytes>)> = self
            .overlay
            .iter()
            .filter(|(k, _)| RangeBounds::<Bytes>::contains(&(range.0.clone(), end.clone()), k))
            .collect();
        if mine.is_empty() {
            return Ok((committed, resume));
        }
        let mut out = Vec::with_capacity(committed.len() + mine.len());
        let (mut a, mut b) = (
            committed.into_iter().peekable(),
            mine.into_iter().peekable(),
        );
        loop {
            match (a.peek(), b.peek()) {
                (Some((ka, _)), Some((kb, _))) if ka < kb => out.extend(a.next()),
                (Some((ka, _)), Some((kb, vb))) if ka == kb => {
                    if let Some(v) = vb {
                        out.push((kb.clone(), v.clone()));
                    }
                    a.next();
                    b.next();
                }
                (_, Some((kb, vb))) => {
                    if let Some(v) = vb {
                        out.push((kb.clone(), v.clone()));
                    }
                    b.next();
                }
                (Some(_), None) => out.extend(a.next()),
                (None, None) => break,
            }
        }
        Ok((out, resume))
    }
}

use std::ops::RangeBounds;
