//! `INSERT … ON CONFLICT` into a row table: each proposed row is inserted, or, when a row
//! with the same key (its *arbiter*: the primary key or a unique index) exists, skipped
//! (`DO NOTHING`) or handed back to be updated (`DO UPDATE`: the new values are computed
//! by the SQL layer, `sql/upsert.rs`, then written by [`update`]).
//!
//! Rules, PostgreSQL's (READ COMMITTED):
//!
//! 1. The rows are taken in order. For each, every arbiter is checked under its lock (the
//!    row key's, or the unique value's entry prefix: `index.rs` invariant 3), so no other
//!    transaction can insert that key between the check and the write, and the row found
//!    is the latest committed one (or this transaction's own).
//! 2. Without a conflict the row is inserted as any INSERT inserts it (23505 still comes
//!    from a unique index that is not an arbiter).
//! 3. `DO NOTHING` skips a conflicting row and keeps no lock for it; a row the same
//!    statement inserted before counts as a conflict too.
//! 4. `DO UPDATE` locks the existing row. A row the same statement inserted fails it with
//!    21000 ("cannot affect row a second time"); so does a row it updated, when a later
//!    proposed row meets it again. A conflict whose `WHERE` did not hold changed nothing,
//!    so a later one may still update the row (PostgreSQL's rule: only a row version this
//!    command made is "affected"). Every conflict sees the row as it was before the
//!    statement, as PostgreSQL's do, since none may run after an applied one.
//! 5. Nothing of a failed statement is committed: the writes go to the transaction's
//!    [`RowWrites`] (a failure aborts it) or to the caller's, committed at its end.

use std::collections::HashSet;

use bytes::Bytes;
use datafusion::arrow::array::{Array, BooleanArray, RecordBatch};
use datafusion::common::ScalarValue;

use super::{RowWrites, format, index, key_columns, row_key, values_of};
use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// What decides that a proposed row conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arbiter {
    /// The primary key.
    Key,
    /// The unique index at this position of [`TableDef::indexes`].
    Index(usize),
}

/// A proposed row that met an existing one (`DO UPDATE`).
#[derive(Debug)]
pub(crate) struct Conflict {
    /// The proposed row's position in the statement's rows (`excluded`).
    pub(crate) proposed: usize,
    /// The existing row: its key and values.
    pub(crate) key: Bytes,
    pub(crate) old: Vec<ScalarValue>,
}

/// What [`insert`] did with the proposed rows.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The rows inserted (positions in the proposed rows).
    pub(crate) inserted: Vec<usize>,
    /// `DO UPDATE`: the rows to update, in order.
    pub(crate) conflicts: Vec<Conflict>,
}

/// Every arbiter of `DO NOTHING` without a conflict target: the key and each unique index.
pub(crate) fn all_arbiters(def: &TableDef) -> Vec<Arbiter> {
    let mut out = vec![Arbiter::Key];
    out.extend(
        def.indexes
            .iter()
            .enumerate()
            .filter(|(_, i)| i.unique)
            .map(|(n, _)| Arbiter::Index(n)),
    );
    out
}

/// The row at `key` as this transaction sees it now: its own write, or the latest commit.
async fn current(
    tables: &Tables,
    writes: &parking_lot::Mutex<RowWrites>,
    key: &Bytes,
) -> Result<Option<Bytes>> {
    let mine = writes.lock().get(key);
    match mine {
        Some(v) => Ok(v),
        None => super::committed_row(tables, key).await,
    }
}

/// The key of the existing row `values` conflict with on `arbiter` (`key`: the proposed
/// row's own key), with the arbiter's lock taken (rule 1).
async fn existing(
    tables: &Tables,
    def: &TableDef,
    writes: &parking_lot::Mutex<RowWrites>,
    arbiter: Arbiter,
    key: &Bytes,
    values: &[ScalarValue],
) -> Result<Option<Bytes>> {
    let state = tables.row_state();
    let tx = writes.lock().id();
    match arbiter {
        Arbiter::Key => {
            state.lock(tx, key, &def.name).await?;
            writes.lock().note_locked(key);
            Ok(current(tables, writes, key).await?.map(|_| key.clone()))
        }
        Arbiter::Index(n) => {
            let index = def
                .indexes
                .get(n)
                .ok_or_else(|| TableError::Schema(format!("{}: no index {n}", def.name)))?;
            index::owner(tables, def, writes, index, values).await
        }
    }
}

/// Rules 1-4 for the proposed rows `batch` (the table's columns, conformed): inserts the
/// rows that conflict with none, skips (`update: false`) or returns (`update: true`) the
/// others.
pub(crate) async fn insert(
    tables: &Tables,
    def: &TableDef,
    batch: &RecordBatch,
    arbiters: &[Arbiter],
    update: bool,
    writes: &parking_lot::Mutex<RowWrites>,
) -> Result<Outcome> {
    let key_cols = key_columns(def)?;
    {
        let mut w = writes.lock();
        w.attach(tables.row_state());
    }
    let mut out = Outcome::default();
    // Rule 4: the rows this statement inserted.
    let mut touched: HashSet<Bytes> = HashSet::new();
    for row in 0..batch.num_rows() {
        let values = values_of(batch, row)?;
        let key = row_key(def, &key_cols, &values)?;
        let mut found = None;
        for &a in arbiters {
            if let Some(k) = existing(tables, def, writes, a, &key, &values).await? {
                found = Some(k);
                break;
            }
        }
        let Some(owner) = found else {
            super::insert(tables, def, &batch.slice(row, 1), writes).await?;
            touched.insert(key);
            out.inserted.push(row);
            continue;
        };
        if !update {
            writes.lock().unlock_unwritten(&key); // rule 3
            continue;
        }
        if touched.contains(&owner) {
            return Err(affected_twice());
        }
        let state = tables.row_state();
        let tx = writes.lock().id();
        state.lock(tx, &owner, &def.name).await?;
        writes.lock().note_locked(&owner);
        let Some(stored) = current(tables, writes, &owner).await? else {
            // Deleted after its index entry was read: no conflict any more.
            super::insert(tables, def, &batch.slice(row, 1), writes).await?;
            touched.insert(key);
            out.inserted.push(row);
            continue;
        };
        out.conflicts.push(Conflict {
            proposed: row,
            old: format::decode_row(def, &owner, &stored)?,
            key: owner,
        });
    }
    Ok(out)
}

/// Writes the `DO UPDATE` rows: `new` holds each conflict's new row (the table's columns,
/// conformed) and `chosen` whether its `WHERE` held. Returns the positions in `new` of the
/// rows updated.
pub(crate) async fn update(
    tables: &Tables,
    def: &TableDef,
    conflicts: &[Conflict],
    new: &RecordBatch,
    chosen: &BooleanArray,
    writes: &parking_lot::Mutex<RowWrites>,
) -> Result<Vec<usize>> {
    let key_cols = key_columns(def)?;
    let mut updated = Vec::new();
    let mut applied: HashSet<&Bytes> = HashSet::new();
    for (i, c) in conflicts.iter().enumerate() {
        if applied.contains(&c.key) {
            return Err(affected_twice()); // rule 4: this command made the row's version
        }
        if !chosen.is_valid(i) || !chosen.value(i) {
            continue;
        }
        applied.insert(&c.key);
        let values = values_of(new, i)?;
        let value = Bytes::from(format::encode_row(def, new, i)?);
        let key = row_key(def, &key_cols, &values)?;
        if key == c.key {
            index::write_row(
                tables,
                def,
                writes,
                &key,
                Some(&c.old),
                Some((&values, value)),
            )
            .await?;
        } else {
            // A new primary key moves the row, as UPDATE does: the new key must be free.
            index::write_row(tables, def, writes, &c.key, Some(&c.old), None).await?;
            let tx = writes.lock().id();
            tables.row_state().lock(tx, &key, &def.name).await?;
            writes.lock().note_locked(&key);
            if current(tables, writes, &key).await?.is_some() {
                writes.lock().unlock_unwritten(&key);
                return Err(super::duplicate(def, &key_cols, &values));
            }
            index::write_row(tables, def, writes, &key, None, Some((&values, value))).await?;
        }
        updated.push(i);
    }
    Ok(updated)
}

/// 21000, as PostgreSQL words it.
fn affected_twice() -> TableError {
    TableError::Column {
        code: "21000",
        message: "ON CONFLICT DO UPDATE command cannot affect row a second time (HINT: Ensure \
                  that no rows proposed for insertion within the same command have duplicate \
                  constrained values.)"
            .into(),
    }
}
