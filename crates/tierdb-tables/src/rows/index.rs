//! Secondary indexes of row tables (`CREATE [UNIQUE] INDEX`).
//!
//! | key | value |
//! |---|---|
//! | `X` + index id (u64 BE) + the indexed columns (`keys.rs`, each with its NULL marker) + the row's primary key (as in its row key) | the row's key |
//!
//! Invariants:
//!
//! 1. Every row has exactly one entry in each index of its table, written, changed and
//!    deleted in the same transaction (the same KV batch) as the row ([`write_row`]).
//! 2. A transaction that wrote a row computed its entries from the table's index list as
//!    its statement saw it; its commit checks that list is still the table's and fails
//!    with 40001 if an index was created or dropped meanwhile (`check_tables`), unless the
//!    transaction did it itself: then its rows followed (`follow.rs`). CREATE
//!    INDEX builds its entries and commits them with the new list while no row commit can
//!    run (the commit gate), so no row commits between its scan and its commit.
//! 3. A UNIQUE index has at most one entry per value without NULLs: the writer locks the
//!    value (its entry prefix) and fails with 23505 if an entry of another row has it.

use std::collections::BTreeMap;

use bytes::Bytes;
use datafusion::common::ScalarValue;
use serde::{Deserialize, Serialize};

use super::{RowWrites, keys};
use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// An index of a row table, kept in its [`TableDef`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDef {
    pub id: u64,
    pub name: String,
    pub columns: Vec<String>,
    #[serde(default)]
    pub unique: bool,
    /// Made by a UNIQUE constraint (CREATE TABLE … UNIQUE, ALTER TABLE … ADD UNIQUE), not
    /// by CREATE UNIQUE INDEX: pg_catalog lists the constraint too, as PostgreSQL does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub constraint: bool,
}

/// How [`Tables::create_index`] makes an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexOptions {
    pub unique: bool,
    /// A UNIQUE constraint's index ([`IndexDef::constraint`]).
    pub constraint: bool,
    pub if_not_exists: bool,
}

const INDEX_PREFIX: u8 = b'X';

pub(crate) fn index_prefix(id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(INDEX_PREFIX);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

pub(crate) fn index_range(id: u64) -> (std::ops::Bound<Bytes>, std::ops::Bound<Bytes>) {
    let p = index_prefix(id);
    let end =
        tierdb_kv::prefix_end(&p).map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
    (std::ops::Bound::Included(Bytes::from(p)), end)
}

/// The entry prefix of `values` in `index`: the key up to the row's primary key; `None`
/// when a value is NULL (`has_null`).
pub(crate) fn value_prefix(
    def: &TableDef,
    index: &IndexDef,
    values: &[ScalarValue],
) -> Result<(Vec<u8>, bool)> {
    let mut k = index_prefix(index.id);
    let mut has_null = false;
    for c in &index.columns {
        let i = def
            .column_index(c)
            .ok_or_else(|| TableError::Schema(format!("index {}: no column {c}", index.name)))?;
        has_null |= values[i].is_null();
        keys::encode(&mut k, def.columns[i].ty, &values[i], true)?;
    }
    Ok((k, has_null))
}

/// The entry of the row `key` with `values` in `index`.
pub(crate) fn entry_key(
    def: &TableDef,
    index: &IndexDef,
    values: &[ScalarValue],
    key: &[u8],
) -> Result<Bytes> {
    let (mut k, _) = value_prefix(def, index, values)?;
    k.extend_from_slice(&key[9..]);
    Ok(Bytes::from(k))
}

/// Writes (or deletes, `new: None`) the row at `key`, with its index entries (invariant
/// 1). `old` is the row's values before, if it existed. Unique indexes are checked
/// (invariant 3); the row's own lock is held by the caller.
pub(crate) async fn write_row(
    tables: &Tables,
    def: &TableDef,
    writes: &parking_lot::Mutex<RowWrites>,
    key: &Bytes,
    old: Option<&[ScalarValue]>,
    new: Option<(&[ScalarValue], Bytes)>,
) -> Result<()> {
    for index in &def.indexes {
        let Some((values, _)) = &new else { continue };
        if let Some(old) = old
            && index.unique
            && value_prefix(def, index, old)?.0 == value_prefix(def, index, values)?.0
        {
            continue;
        }
        check_unique(tables, def, index, writes, key, values).await?;
    }
    let mut w = writes.lock();
    w.note_table(def);
    if let Some(old) = old {
        for index in &def.indexes {
            w.delete(entry_key(def, index, old, key)?);
        }
    }
    match new {
        Some((values, value)) => {
            for index in &def.indexes {
                w.put(entry_key(def, index, values, key)?, key.clone());
            }
            w.put(key.clone(), value);
        }
        None => w.delete(key.clone()),
    }
    Ok(())
}

/// Fails with 23505 if the unique `index` has an entry of another row with `values` (none
/// when one is NULL); the value's lock is taken and stays held (invariant 3). Nothing is
/// checked for an index that is not unique.
pub(crate) async fn check_unique(
    tables: &Tables,
    def: &TableDef,
    index: &IndexDef,
    writes: &parking_lot::Mutex<RowWrites>,
    key: &Bytes,
    values: &[ScalarValue],
) -> Result<()> {
    let (prefix, has_null) = value_prefix(def, index, values)?;
    if !index.unique || has_null {
        return Ok(());
    }
    let prefix = Bytes::from(prefix);
    let id = writes.lock().id();
    tables.row_state().lock(id, &prefix, &def.name).await?;
    writes.lock().note_locked(&prefix);
    if other_entry(tables, writes, &prefix, key).await? {
        let names: Vec<&str> = index.columns.iter().map(String::as_str).collect();
        let vals: Vec<&ScalarValue> = index
            .columns
            .iter()
            .filter_map(|c| def.column_index(c).map(|i| &values[i]))
            .collect();
        return Err(TableError::Violation(Box::new(crate::violation::unique(
            def,
            &index.name,
            &names,
            &vals,
        ))));
    }
    Ok(())
}

/// Whether an entry under `prefix` names a row other than `key` (committed, or written by
/// this transaction).
async fn other_entry(
    tables: &Tables,
    writes: &parking_lot::Mutex<RowWrites>,
    prefix: &Bytes,
    key: &Bytes,
) -> Result<bool> {
    Ok(entries(tables, writes, prefix)
        .await?
        .iter()
        .any(|k| k != key))
}

/// The keys of the rows with an entry under `prefix`, as this transaction sees them: its
/// own entries over the committed ones.
async fn entries(
    tables: &Tables,
    writes: &parking_lot::Mutex<RowWrites>,
    prefix: &Bytes,
) -> Result<Vec<Bytes>> {
    let end =
        tierdb_kv::prefix_end(prefix).map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
    let range = (std::ops::Bound::Included(prefix.clone()), end);
    let mine: BTreeMap<Bytes, Option<Bytes>> =
        writes.lock().range(range.clone()).into_iter().collect();
    let mut out: Vec<Bytes> = mine.values().flatten().cloned().collect();
    for (k, v) in tables.reader.scan(range, None).await? {
        if !mine.contains_key(&k) {
            out.push(v); // not changed by this transaction
        }
    }
    Ok(out)
}

/// The key of the row whose entry in the unique `index` has `values` (none when one is
/// NULL), found under the value's lock (invariant 3), which stays held: what
/// `INSERT … ON CONFLICT` checks before it inserts (`upsert.rs`).
pub(crate) async fn owner(
    tables: &Tables,
    def: &TableDef,
    writes: &parking_lot::Mutex<RowWrites>,
    index: &IndexDef,
    values: &[ScalarValue],
) -> Result<Option<Bytes>> {
    let (prefix, has_null) = value_prefix(def, index, values)?;
    if has_null {
        return Ok(None);
    }
    let prefix = Bytes::from(prefix);
    let id = writes.lock().id();
    tables.row_state().lock(id, &prefix, &def.name).await?;
    writes.lock().note_locked(&prefix);
    Ok(entries(tables, writes, &prefix).await?.into_iter().next())
}

/// Fails with 40001 if an index of a table `writes` wrote was created or dropped since
/// (invariant 2), or one of its columns made NOT NULL (alter.rs rule 5).
/// Also fails with 40001 if another transaction than `own_ddl` has an uncommitted change of
/// one of their definitions (`ddlundo.rs` invariant 7).
pub(crate) async fn check_tables(
    tables: &Tables,
    writes: &RowWrites,
    own_ddl: Option<u64>,
) -> Result<()> {
    tables
        .pending_ddl
        .check(writes.tables().map(|w| w.name.as_str()), own_ddl)?;
    for w in writes.tables() {
        let name = &w.name;
        let now = tables.table(name).await?;
        match now {
            Some(d)
                if d.id == w.id
                    && !d.indexes.iter().map(|i| i.id).eq(w.indexes.iter().copied()) =>
            {
                return Err(TableError::Conflict(format!(
                    "an index of {name} was created or dropped while this transaction wrote \
                     its rows; nothing was committed, retry"
                )));
            }
            Some(d)
                if d.id == w.id
                    && d.columns
                        .iter()
                        .zip(&w.nullable)
                        .any(|(c, was)| *was && !c.nullable) =>
            {
                return Err(TableError::Conflict(format!(
                    "a column of {name} was made NOT NULL while this transaction wrote its \
                     rows; nothing was committed, retry"
                )));
            }
            Some(d)
                if d.id == w.id && !d.columns.iter().map(|c| c.ty).eq(w.types.iter().copied()) =>
            {
                // Its rows were encoded with the columns as they were (alter.rs rule 4).
                return Err(TableError::Conflict(format!(
                    "the columns of {name} were changed (ALTER TABLE) while this transaction \
                     wrote its rows; nothing was committed, retry"
                )));
            }
            Some(d) if d.id == w.id => {}
            _ => {
                return Err(TableError::NoTable(format!(
                    "{name} (it was dropped while this transaction wrote its rows; nothing was \
                     committed)"
                )));
            }
        }
    }
    Ok(())
}

/// Rows read per page while an index is built.
const BUILD_PAGE: usize = 8192;

impl Tables {
    /// `CREATE [UNIQUE] INDEX name ON table (columns)`: builds the entries of every row and
    /// commits them with the table's new index list in one batch (invariant 2).
    pub async fn create_index(
        &self,
        table: &str,
        name: &str,
        columns: Vec<String>,
        options: IndexOptions,
    ) -> Result<()> {
        let IndexOptions {
            unique,
            constraint,
            if_not_exists,
        } = options;
        let kv = self.kv_writer()?;
        // The gate before the commit lock, as a transaction's commit takes them.
        let _gate = self.row_state().gate.write().await;
        let _guard = self.commit_lock.lock().await;
        let all = self.tables().await?;
        // Indexes share the namespace of relations, as in PostgreSQL: a table, a view, a
        // primary key's index (`<table>_pkey`, as pg_catalog lists it) or another index.
        let taken = all.iter().any(|t| {
            t.name == name
                || (t.is_row_table() && format!("{}_pkey", t.name) == name)
                || t.indexes.iter().any(|i| i.name == name)
        }) || self.view(name).await?.is_some();
        if taken {
            if if_not_exists {
                return Ok(());
            }
            return Err(TableError::Column {
                code: "42P07",
                message: format!("relation \"{name}\" already exists"),
            });
        }
        let mut def = self.require(table).await?;
        if !def.is_row_table() {
            return Err(TableError::Unsupported(format!(
                "CREATE INDEX on {table}: indexes are for tables with a PRIMARY KEY (row \
                 tables); a columnar table is read through its ORDER BY key and extent map"
            )));
        }
        for c in &columns {
            if def.column_index(c).is_none() {
                return Err(TableError::Column {
                    code: "42703",
                    message: format!("column \"{c}\" does not exist"),
                });
            }
        }
        let id = crate::catalog::next_id(self.reader.as_ref()).await?;
        let index = IndexDef {
            id,
            name: name.to_string(),
            columns,
            unique,
            constraint,
        };
        let mut b = crate::catalog::CatalogBatch::default();
        let mut seen = std::collections::HashSet::new();
        let mut start = super::table_range(def.id).0;
        let end = super::table_range(def.id).1;
        loop {
            let page = self
                .reader
                .scan((start, end.clone()), Some(BUILD_PAGE))
                .await?;
            for (k, v) in &page {
                let values = super::format::decode_row(&def, k, v)?;
                let (prefix, has_null) = value_prefix(&def, &index, &values)?;
                if unique && !has_null && !seen.insert(prefix) {
                    return Err(TableError::Column {
                        code: "23505",
                        message: format!(
                            "could not create unique index \"{name}\": some rows of {table} \
                             have the same ({}); nothing was created",
                            index.columns.join(", ")
                        ),
                    });
                }
                b.batch.put(entry_key(&def, &index, &values, k)?, k.clone());
            }
            match page.last() {
                Some((k, _)) if page.len() == BUILD_PAGE => {
                    start = std::ops::Bound::Excluded(k.clone());
                }
                _ => break,
            }
        }
        def.indexes.push(index);
        b.put_table(&def);
        b.set_next_id(id + 1);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }

    /// `DROP INDEX name`: the entries and the index go in one commit.
    pub async fn drop_index(&self, name: &str, if_exists: bool) -> Result<()> {
        let kv = self.kv_writer()?;
        // The gate before the commit lock, as a transaction's commit takes them.
        let _gate = self.row_state().gate.write().await;
        let _guard = self.commit_lock.lock().await;
        let Some(mut def) = self
            .tables()
            .await?
            .into_iter()
            .find(|t| t.indexes.iter().any(|i| i.name == name))
        else {
            if if_exists {
                return Ok(());
            }
            return Err(TableError::Column {
                code: "42704",
                message: format!("index \"{name}\" does not exist"),
            });
        };
        let mut b = crate::catalog::CatalogBatch::default();
        for index in def.indexes.iter().filter(|i| i.name == name) {
            for (k, _) in self.reader.scan(index_range(index.id), None).await? {
                b.batch.delete(k);
            }
        }
        def.indexes.retain(|i| i.name != name);
        b.put_table(&def);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }
}
