//! A transaction's uncommitted rows of a row table whose definition its own DDL changed
//! (`ownddl.rs`): made the rows of the table as it is now, so its COMMIT commits them.
//!
//! Invariants:
//!
//! 1. Followed only when the rows' bytes still mean what they meant: the columns the rows
//!    were encoded with are the table's first columns, of the same types, and the primary
//!    key is on the same positions (ADD COLUMN, SET/DROP NOT NULL, SET/DROP DEFAULT, RENAME
//!    COLUMN, RENAME TO, comments, CREATE/DROP INDEX, UNIQUE constraints). A rewrite (ALTER
//!    COLUMN … TYPE, DROP COLUMN) is not followed: its COMMIT fails with 40001 as before
//!    (`index.rs` `check_tables`).
//! 2. A column now NOT NULL holds a value in every row the transaction wrote, else the
//!    statement fails with 23502 (its DDL is then undone with the transaction).
//! 3. Index entries as `index.rs` invariant 1 has them: each written row gets an entry
//!    in every index created since, unique ones checked (23505); the committed row it
//!    replaces or deletes loses the entry the index's build gave it; the transaction's
//!    entries in an index dropped since are forgotten.
//! 4. Every change goes through the writes' undo log, and the table as the writes see it
//!    too (`txn.rs` invariant 2): ROLLBACK TO SAVEPOINT takes it back with the DDL.

use bytes::Bytes;
use datafusion::common::ScalarValue;
use parking_lot::Mutex;

use super::{RowWrites, format, index, table_range, txn::WrittenTable};
use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// A row the transaction wrote: its key, the committed row it replaces (if any) and its
/// values (`None`: deleted).
type Pair = (Bytes, Option<Vec<ScalarValue>>, Option<Vec<ScalarValue>>);

/// Whether rows written as `seen` are rows of `now` byte for byte (invariant 1).
fn still_valid(seen: &WrittenTable, now: &TableDef) -> bool {
    now.is_row_table()
        && now.id == seen.id
        && now.columns.len() >= seen.types.len()
        && now.columns.iter().zip(&seen.types).all(|(c, t)| c.ty == *t)
        && now
            .primary_key
            .iter()
            .filter_map(|c| now.column_index(c))
            .eq(seen.key.iter().copied())
}

/// Makes the transaction's writes of table `now.id` those of `now` (the invariants);
/// nothing if it wrote no row of it, or if they cannot follow (invariant 1).
pub(crate) async fn follow(
    tables: &Tables,
    writes: &Mutex<RowWrites>,
    now: &TableDef,
) -> Result<()> {
    let Some(seen) = writes.lock().table(now.id).cloned() else {
        return Ok(());
    };
    if !still_valid(&seen, now) {
        return Ok(());
    }
    let rows = writes.lock().range(table_range(now.id));
    // Invariant 2.
    for (i, c) in now.columns.iter().enumerate() {
        if c.nullable || seen.nullable.get(i) == Some(&false) {
            continue;
        }
        for (k, v) in &rows {
            let Some(v) = v else { continue };
            if format::decode_row(now, k, v)?[i].is_null() {
                return Err(TableError::Column {
                    code: "23502",
                    message: format!(
                        "column \"{}\" of relation \"{}\" contains null values",
                        c.name, now.name
                    ),
                });
            }
        }
    }
    // Invariant 3: entries of dropped indexes.
    for gone in seen
        .indexes
        .iter()
        .filter(|id| !now.indexes.iter().any(|i| i.id == **id))
    {
        let mut w = writes.lock();
        for (k, _) in w.range(index::index_range(*gone)) {
            w.forget(k);
        }
    }
    // Invariant 3: entries of created indexes, from the committed rows and the written ones.
    let created: Vec<&index::IndexDef> = now
        .indexes
        .iter()
        .filter(|i| !seen.indexes.contains(&i.id))
        .collect();
    if !created.is_empty() {
        let mut pairs: Vec<Pair> = Vec::with_capacity(rows.len());
        for (k, v) in &rows {
            let committed = match tables.reader.get(k).await? {
                Some(c) => Some(format::decode_row(now, k, &c)?),
                None => None,
            };
            let written = match v {
                Some(v) => Some(format::decode_row(now, k, v)?),
                None => None,
            };
            pairs.push((k.clone(), committed, written));
        }
        for ix in &created {
            // All deletes first: a written row may take a value a committed row it
            // changed gave up.
            for (k, committed, _) in &pairs {
                if let Some(c) = committed {
                    let entry = index::entry_key(now, ix, c, k)?;
                    writes.lock().delete(entry);
                }
            }
            for (k, _, written) in &pairs {
                if let Some(values) = written {
                    index::check_unique(tables, now, ix, writes, k, values).await?;
                    let entry = index::entry_key(now, ix, values, k)?;
                    writes.lock().put(entry, k.clone());
                }
            }
        }
    }
    writes.lock().retable(now);
    Ok(())
}

/// [`follow`] for every row table `writes` wrote whose definition is no longer the one
/// its rows saw.
pub(crate) async fn follow_all(tables: &Tables, writes: &Mutex<RowWrites>) -> Result<()> {
    let seen: Vec<WrittenTable> = writes.lock().tables().cloned().collect();
    for s in seen {
        let Some(now) = tables.table_by_name_or_id(&s.name, s.id).await? else {
            continue;
        };
        let same = now.name == s.name
            && now
                .indexes
                .iter()
                .map(|i| i.id)
                .eq(s.indexes.iter().copied())
            && now
                .columns
                .iter()
                .map(|c| c.nullable)
                .eq(s.nullable.iter().copied())
            && now.columns.iter().map(|c| c.ty).eq(s.types.iter().copied());
        if !same {
            follow(tables, writes, &now).await?;
        }
    }
    Ok(())
}
