//! UPDATE and DELETE of a row table. The rows to change are named by the same query as for
//! columnar tables (`dml/target.rs`: the whole WHERE, subqueries, USING/FROM), over the
//! table's key view, whose id column is each row's key. Then, READ COMMITTED as
//! PostgreSQL means it:
//!
//! 1. every named row is locked (waiting for a transaction that holds it; 40P01 on a
//!    deadlock);
//! 2. if another transaction committed one of them after the query read it, the query runs
//!    again (the rows it locked cannot change any more), up to [`MAX_RUNS`] times, then
//!    40001;
//! 3. the changes go into the session's transaction, or, outside one, are committed at
//!    once in one KV batch. An UPDATE that changes a primary key deletes every old key
//!    before it writes the new ones, and fails with 23505 (nothing written) on a key that
//!    exists.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{Array, BinaryArray, RecordBatch};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::{RowWrites, format, index, key_columns, row_key, values_of};
use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// How often a statement runs its query again because rows it read were changed meanwhile.
const MAX_RUNS: usize = 10;

/// A row the statement changes: its key, and (UPDATE) its new values or (DELETE …
/// RETURNING) its values as read.
struct Named {
    key: Bytes,
    new: Option<(RecordBatch, usize)>,
}

/// Runs an UPDATE (`update`) or DELETE whose query is `plan` (the key, then for UPDATE,
/// or with `returning`, every column's value: new for UPDATE, as read for DELETE).
/// Returns how many rows it changed, and with `returning` those values of the rows changed
/// (stored form), in the order the query named them.
pub(crate) async fn execute(
    ctx: &SessionContext,
    tables: &Arc<Tables>,
    def: &TableDef,
    update: bool,
    returning: bool,
    plan: LogicalPlan,
) -> Result<(u64, Option<RecordBatch>)> {
    let state = tables.row_state().clone();
    // Read in place: `ctx.state()` clones the whole state (all its function maps).
    let tx = crate::txn::current(ctx.state_ref().read().config());
    let local = parking_lot::Mutex::new(RowWrites::new(&state));
    let writes = tx.as_ref().map_or(&local, |t| &t.rows);
    let id = {
        let mut w = writes.lock();
        w.attach(&state);
        w.id()
    };
    // REPEATABLE READ: a row changed since the transaction's snapshot cannot be changed.
    let repeatable = match &tx {
        Some(t) => t.snapshot(tables)?.map(|s| s.reading.at),
        None => None,
    };
    let mut runs = 0;
    let named = loop {
        runs += 1;
        let reading = state.reading();
        let stream: SendableRecordBatchStream =
            match Box::pin(super::fastdml::run(ctx, tables, &plan, tx.as_ref())).await? {
                Some(batches) => Box::pin(RecordBatchStreamAdapter::new(
                    Arc::new(plan.schema().as_arrow().clone()),
                    futures::stream::iter(batches.into_iter().map(Ok)),
                )),
                None => {
                    ctx.execute_logical_plan(plan.clone())
                        .await?
                        .execute_stream()
                        .await?
                }
            };
        let named = collect(stream, def, update || returning).await?;
        for n in &named {
            state.lock(id, &n.key, &def.name).await?;
            writes.lock().note_locked(&n.key);
        }
        if let Some(at) = repeatable {
            if named.iter().any(|n| state.changed_since(&n.key, at)) {
                return Err(TableError::Conflict(format!(
                    "due to concurrent update: a row of {} was changed by a transaction that \
                     committed after this REPEATABLE READ transaction took its snapshot; \
                     nothing was changed, roll back and retry",
                    def.name
                )));
            }
            break named;
        }
        if !named
            .iter()
            .any(|n| state.changed_since(&n.key, reading.at))
        {
            break named;
        }
        if runs >= MAX_RUNS {
            return Err(TableError::Conflict(format!(
                "rows of {} kept changing under this statement; nothing was changed, retry",
                def.name
            )));
        }
    };
    let count = named.len() as u64;
    let rows = if returning {
        Some(returned_rows(def, &named)?)
    } else {
        None
    };
    apply(tables, def, named, update, writes).await?;
    if tx.is_none() {
        let mut w = local.into_inner();
        super::commit(tables, &mut w).await?;
    }
    Ok((count, rows))
}

/// The values the named rows carry (RETURNING's rows), as one batch.
fn returned_rows(def: &TableDef, named: &[Named]) -> Result<RecordBatch> {
    let schema = def.schema();
    let mut batches: Vec<RecordBatch> = Vec::new();
    for n in named {
        if let Some((b, row)) = &n.new {
            batches.push(b.slice(*row, 1));
        }
    }
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// The rows the query names, each once (the first time it is named, as PostgreSQL).
async fn collect(
    mut stream: SendableRecordBatchStream,
    def: &TableDef,
    with_values: bool,
) -> Result<Vec<Named>> {
    let schema = def.schema();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| TableError::Schema("the DML query lost its row keys".into()))?;
        let values = if with_values {
            let v = batch.project(&(1..batch.num_columns()).collect::<Vec<_>>())?;
            let v = crate::dml::conform_nullable(v, def)?;
            check_not_null(def, &v)?;
            Some(crate::write::conform(v, def, &schema)?)
        } else {
            None
        };
        for i in 0..keys.len() {
            let key = Bytes::copy_from_slice(keys.value(i));
            if seen.insert(key.clone()) {
                out.push(Named {
                    key,
                    new: values.as_ref().map(|v| (v.clone(), i)),
                });
            }
        }
    }
    Ok(out)
}

/// 23502 for a NULL in a NOT NULL column of `batch` (the table's columns).
pub(crate) fn check_not_null(def: &TableDef, batch: &RecordBatch) -> Result<()> {
    for (c, a) in def.columns.iter().zip(batch.columns()) {
        if !c.nullable && a.null_count() > 0 {
            return Err(super::not_null(def, &c.name));
        }
    }
    Ok(())
}

async fn apply(
    tables: &Tables,
    def: &TableDef,
    named: Vec<Named>,
    update: bool,
    writes: &parking_lot::Mutex<RowWrites>,
) -> Result<()> {
    let key_cols = key_columns(def)?;
    let state = tables.row_state();
    let id = writes.lock().id();
    // The rows as they are now (locked: they cannot change), for their index entries.
    let old_values = |key: Bytes| async move {
        if def.indexes.is_empty() {
            return Ok::<_, TableError>(None);
        }
        let mine = writes.lock().get(&key);
        let row = match mine {
            Some(v) => v,
            None => super::committed_row(tables, &key).await?,
        };
        row.map(|v| format::decode_row(def, &key, &v)).transpose()
    };
    let mut puts = Vec::new();
    for n in named {
        let old = old_values(n.key.clone()).await?;
        let Some((batch, row)) = n.new.filter(|_| update) else {
            index::write_row(tables, def, writes, &n.key, old.as_deref(), None).await?;
            continue;
        };
        let values = values_of(&batch, row)?;
        let key = row_key(def, &key_cols, &values)?;
        let value = Bytes::from(format::encode_row(def, &batch, row)?);
        if key != n.key {
            index::write_row(tables, def, writes, &n.key, old.as_deref(), None).await?;
            puts.push((key, value, values, None, true));
        } else {
            puts.push((key, value, values, old, false));
        }
    }
    // Every old key of a moved row is deleted by now: a new key that exists is a duplicate.
    for (key, value, values, old, moved) in puts {
        if moved {
            state.lock(id, &key, &def.name).await?;
            writes.lock().note_locked(&key);
            let mine = writes.lock().get(&key);
            let exists = match mine {
                Some(v) => v.is_some(),
                None => super::committed_row(tables, &key).await?.is_some(),
            };
            if exists {
                writes.lock().unlock_unwritten(&key);
                return Err(super::duplicate(def, &key_cols, &values));
            }
        }
        index::write_row(
            tables,
            def,
            writes,
            &key,
            old.as_deref(),
            Some((&values, value)),
        )
        .await?;
    }
    Ok(())
}
