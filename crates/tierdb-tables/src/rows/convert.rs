//! `ALTER TABLE t ADD PRIMARY KEY (…)` on a columnar table: it becomes a row table, its
//! rows moved from segments into the KV engine in one commit (what pgbench -i does after
//! loading its tables with COPY).
//!
//! The rows are read through an ordinary scan of the table; the commit then writes them,
//! the new table definition and the retirement of every segment the scan read, in one KV
//! batch, and fails with 40001 (nothing committed) if the table's segments changed since.
//! A NULL in a key column fails with 23502, a value twice with 23505, before anything is
//! written.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::{format, key_columns, row_key, values_of};
use crate::catalog::{CatalogBatch, TableDef};
use crate::error::{Result, TableError};
use crate::tables::Tables;

pub(crate) async fn add_primary_key(
    ctx: &SessionContext,
    tables: &Arc<Tables>,
    name: &str,
    columns: Vec<String>,
) -> Result<()> {
    // A merge of the table's small segments (pgbench 15 INSERTs its tellers one by one)
    // would make the commit below fail (merge.rs invariant 2).
    let _merges_wait = crate::merge::DmlGuard::acquire(tables.merge_state(), name).await;
    let before = tables.require(name).await?;
    if before.is_row_table() {
        return Err(TableError::Column {
            code: "42P16",
            message: format!("multiple primary keys for table \"{name}\" are not allowed"),
        });
    }
    let mut after = before.clone();
    for c in &columns {
        let Some(i) = after.column_index(c) else {
            return Err(TableError::Column {
                code: "42703",
                message: format!("column \"{c}\" of relation \"{name}\" does not exist"),
            });
        };
        after.columns[i].nullable = false;
    }
    after.primary_key = columns;
    after.sort_key.clear();
    after.partition_key = None;
    let key_cols = key_columns(&after)?;
    let segments = tables.segments(&before).await?;
    let quoted = crate::sql::quoted_relation(name);
    let mut stream = ctx
        .sql(&format!("SELECT * FROM {quoted}"))
        .await?
        .execute_stream()
        .await?;
    let mut b = CatalogBatch::default();
    let mut seen: HashSet<Bytes> = HashSet::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        for row in 0..batch.num_rows() {
            let values = values_of(&batch, row)?;
            for &i in &key_cols {
                if values[i].is_null() {
                    return Err(TableError::Column {
                        code: "23502",
                        message: format!(
                            "column \"{}\" of relation \"{name}\" contains null values",
                            after.columns[i].name
                        ),
                    });
                }
            }
            let key = row_key(&after, &key_cols, &values)?;
            if !seen.insert(key.clone()) {
                return Err(TableError::Column {
                    code: "23505",
                    message: format!(
                        "could not create unique index \"{name}_pkey\": {}; nothing was changed",
                        super::duplicate(&after, &key_cols, &values)
                    ),
                });
            }
            b.batch
                .put(key, Bytes::from(format::encode_row(&after, &batch, row)?));
        }
    }
    tables
        .commit_conversion(&before, &after, &segments, b)
        .await?;
    // The rows this transaction wrote to the table before (pg_dump's CREATE TABLE, COPY,
    // ADD PRIMARY KEY in one transaction) were read above and are rows now: its pending
    // segments of the table are emptied, else its COMMIT would find them written for a
    // table without a key (40001).
    if let Some(tx) = crate::txn::current(ctx.state().config())
        && let Some(files) = tx.absorb_writes_of(before.id)
    {
        tables.discard(&files).await;
    }
    Ok(())
}

impl Tables {
    /// Commits a conversion: `rows` (the row puts), `after` in place of `before`, and
    /// `segments` retired, if they are still the table's segments (else 40001).
    pub(crate) async fn commit_conversion(
        &self,
        before: &TableDef,
        after: &TableDef,
        segments: &[crate::catalog::SegmentMeta],
        mut rows: CatalogBatch,
    ) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let now = self.require(&before.name).await?;
        let current = self.segments(&now).await?;
        let same = now == *before
            && current.len() == segments.len()
            && current.iter().zip(segments).all(|(a, b)| a.path == b.path);
        if !same {
            return Err(TableError::Conflict(format!(
                "table {} changed while its primary key was being added; nothing was \
                 changed, retry",
                before.name
            )));
        }
        let at = tierdb_kv::lease::now_ms();
        for s in segments {
            rows.delete_segment(before.id, s.id);
            rows.retire(s, at);
        }
        rows.put_table(after);
        self.commit_catalog(kv, rows).await?;
        Ok(())
    }
}
