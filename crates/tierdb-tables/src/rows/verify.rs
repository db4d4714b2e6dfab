//! `tierdb verify`: checks that row tables and their indexes agree (issue 28's "every index
//! entry points at its row and every row has its entries"), as an operator runs after a
//! crash, a restore or a suspected bug, and as the crash tests do after SIGKILL.
//!
//! What is checked, per row table:
//!
//! 1. Every row under the table's prefix decodes (`format.rs`), its key is the encoding of
//!    its own primary-key values, and its NOT NULL columns hold values.
//! 2. Every row has its entry in each index of the table, and that entry names the row.
//! 3. Every index entry names a row that exists, and is the entry that row's values make
//!    (so an entry left behind by an UPDATE of the indexed column is found).
//! 4. A UNIQUE index holds at most one entry per value without NULLs.
//!
//! Memory is bounded: rows and entries are read a page at a time and each is checked
//! with point reads of its counterpart, never by holding a table's keys in memory.
//!
//! A writer may commit while the check runs (a follower beside `tierdb serve`): a problem
//! is reported only if it is still there when its row and entries are read again, so a
//! commit between two pages is not a false alarm. Through the writer itself the check
//! reads one KV snapshot.

use std::ops::Bound;

use bytes::Bytes;
use tierdb_kv::KvRead;

use super::format::{decode_row, hex};
use super::index::{IndexDef, entry_key, index_range, value_prefix};
use super::{key_columns, row_key, table_range};
use crate::catalog::TableDef;
use crate::error::Result;
use crate::tables::Tables;

/// Rows or entries read per page.
const PAGE: usize = 1024;

/// Stop listing a table's problems past this many (the count goes on).
const MAX_LISTED: usize = 100;

/// What the check found in one row table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableCheck {
    pub table: String,
    pub rows: u64,
    /// Each index's name and how many entries it holds.
    pub indexes: Vec<(String, u64)>,
    /// How many problems were found; the first [`MAX_LISTED`] are in `listed`.
    pub problems: u64,
    pub listed: Vec<String>,
}

impl TableCheck {
    fn problem(&mut self, what: String) {
        self.problems += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed.push(what);
        }
    }
}

impl Tables {
    /// Checks every row table (module doc); `progress` is told each row or entry read.
    pub async fn verify_rows(&self, progress: &(dyn Fn(u64) + Sync)) -> Result<Vec<TableCheck>> {
        let kv: std::sync::Arc<dyn KvRead> = match self.kv_writer() {
            Ok(w) => std::sync::Arc::new(w.snapshot()?),
            Err(_) => self.reader.clone(),
        };
        let mut out = Vec::new();
        for def in self.tables().await? {
            if def.is_row_table() {
                out.push(check_table(kv.as_ref(), self.reader.as_ref(), &def, progress).await?);
            }
        }
        Ok(out)
    }
}

/// Checks `def` as `kv` holds it; `fresh` reads the latest state, to tell a commit made
/// during the check from a lasting problem.
pub(crate) async fn check_table(
    kv: &dyn KvRead,
    fresh: &dyn KvRead,
    def: &TableDef,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<TableCheck> {
    let mut report = TableCheck {
        table: def.name.clone(),
        ..TableCheck::default()
    };
    let (mut start, end) = table_range(def.id);
    loop {
        let page = kv.scan((start, end.clone()), Some(PAGE)).await?;
        for (k, v) in &page {
            report.rows += 1;
            if let Some(problem) = check_row(kv, def, k, v).await?
                && lasting_row(fresh, def, k).await?
            {
                report.problem(problem);
            }
        }
        progress(page.len() as u64);
        match page.last() {
            Some((k, _)) if page.len() == PAGE => start = Bound::Excluded(k.clone()),
            _ => break,
        }
    }
    for index in &def.indexes {
        let entries = check_index(kv, fresh, def, index, &mut report, progress).await?;
        report.indexes.push((index.name.clone(), entries));
    }
    Ok(report)
}

/// Rules 1 and 2 for the row at `key`: the problem, if any.
async fn check_row(
    kv: &dyn KvRead,
    def: &TableDef,
    key: &Bytes,
    value: &[u8],
) -> Result<Option<String>> {
    let values = match decode_row(def, key, value) {
        Ok(v) => v,
        Err(e) => return Ok(Some(format!("row {}: {e}", hex(key)))),
    };
    match row_key(def, &key_columns(def)?, &values) {
        Ok(k) if k == *key => {}
        Ok(k) => {
            return Ok(Some(format!(
                "row {} holds the key values of row {}",
                hex(key),
                hex(&k)
            )));
        }
        Err(e) => return Ok(Some(format!("row {}: {e}", hex(key)))),
    }
    for (c, v) in def.columns.iter().zip(&values) {
        if !c.nullable && v.is_null() {
            return Ok(Some(format!(
                "row {}: NOT NULL column {} is NULL",
                hex(key),
                c.name
            )));
        }
    }
    for index in &def.indexes {
        let entry = entry_key(def, index, &values, key)?;
        match kv.get(&entry).await? {
            Some(named) if named == *key => {}
            Some(named) => {
                return Ok(Some(format!(
                    "row {}: its entry in index {} names row {}",
                    hex(key),
                    index.name,
                    hex(&named)
                )));
            }
            None => {
                return Ok(Some(format!(
                    "row {} has no entry in index {}",
                    hex(key),
                    index.name
                )));
            }
        }
    }
    Ok(None)
}

/// Whether the row at `key` still has a problem as read now.
async fn lasting_row(fresh: &dyn KvRead, def: &TableDef, key: &Bytes) -> Result<bool> {
    Ok(match fresh.get(key).await? {
        Some(v) => check_row(fresh, def, key, &v).await?.is_some(),
        None => false, // deleted since: nothing to check
    })
}

/// Rules 3 and 4 for `index`; returns how many entries it holds.
async fn check_index(
    kv: &dyn KvRead,
    fresh: &dyn KvRead,
    def: &TableDef,
    index: &IndexDef,
    report: &mut TableCheck,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64> {
    let (mut start, end) = index_range(index.id);
    let mut entries = 0u64;
    // The value prefix of the previous entry without NULLs (rule 4).
    let mut previous: Option<Vec<u8>> = None;
    loop {
        let page = kv.scan((start, end.clone()), Some(PAGE)).await?;
        for (entry, row) in &page {
            entries += 1;
            match check_entry(kv, def, index, entry, row).await? {
                Err(problem) => {
                    if check_entry(fresh, def, index, entry, row).await?.is_err()
                        && fresh.get(entry).await?.is_some()
                    {
                        report.problem(problem);
                    }
                    previous = None;
                }
                Ok(prefix) => {
                    if index.unique
                        && let Some(p) = &prefix
                        && previous.as_ref() == Some(p)
                    {
                        report.problem(format!(
                            "unique index {} holds two entries of one value (the second names \
                             row {})",
                            index.name,
                            hex(row)
                        ));
                    }
                    previous = prefix;
                }
            }
        }
        progress(page.len() as u64);
        match page.last() {
            Some((k, _)) if page.len() == PAGE => start = Bound::Excluded(k.clone()),
            _ => break,
        }
    }
    Ok(entries)
}

/// Rule 3 for one entry: its row's value prefix (`None` when a value is NULL), or the
/// problem.
async fn check_entry(
    kv: &dyn KvRead,
    def: &TableDef,
    index: &IndexDef,
    entry: &Bytes,
    row: &Bytes,
) -> Result<std::result::Result<Option<Vec<u8>>, String>> {
    let Some(value) = kv.get(row).await? else {
        return Ok(Err(format!(
            "index {}: entry {} names row {}, which does not exist",
            index.name,
            hex(entry),
            hex(row)
        )));
    };
    let values = match decode_row(def, row, &value) {
        Ok(v) => v,
        Err(e) => {
            return Ok(Err(format!(
                "index {}: its row {}: {e}",
                index.name,
                hex(row)
            )));
        }
    };
    if row.len() < 9 || entry_key(def, index, &values, row)? != *entry {
        return Ok(Err(format!(
            "index {}: entry {} does not match the values of row {} it names",
            index.name,
            hex(entry),
            hex(row)
        )));
    }
    let (prefix, has_null) = value_prefix(def, index, &values)?;
    Ok(Ok((!has_null).then_some(prefix)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use async_trait::async_trait;
    use object_store::memory::InMemory;
    use tierdb_kv::{KvDb, KvOptions};
    use tierdb_store::{TierOptions, TieredStore};

    use super::*;
    use crate::sql::{EngineOptions, SqlEngine};

    /// A copy of a database's keys that a test can damage.
    struct MapKv(BTreeMap<Bytes, Bytes>);

    #[async_trait]
    impl KvRead for MapKv {
        async fn get(&self, key: &[u8]) -> tierdb_kv::Result<Option<Bytes>> {
            Ok(self.0.get(key).cloned())
        }
        async fn scan(
            &self,
            range: (Bound<Bytes>, Bound<Bytes>),
            limit: Option<usize>,
        ) -> tierdb_kv::Result<Vec<(Bytes, Bytes)>> {
            Ok(self
                .0
                .range(range)
                .take(limit.unwrap_or(usize::MAX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        }
        async fn scan_desc(
            &self,
            range: (Bound<Bytes>, Bound<Bytes>),
            limit: Option<usize>,
        ) -> tierdb_kv::Result<Vec<(Bytes, Bytes)>> {
            Ok(self
                .0
                .range(range)
                .rev()
                .take(limit.unwrap_or(usize::MAX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        }
    }

    async fn engine() -> SqlEngine {
        let store = TieredStore::with_capacity(
            Arc::new(InMemory::new()),
            "memory".into(),
            TierOptions::default(),
        )
        .await
        .unwrap();
        let options = KvOptions {
            create: true,
            compaction: false,
            ..KvOptions::default()
        };
        let kv = Arc::new(KvDb::open(store, "db", "db", &options).await.unwrap());
        let tables = Tables::open(tierdb_kv::KvHandle::Writer(kv));
        let opts = EngineOptions {
            threads: 2,
            ..EngineOptions::default()
        };
        SqlEngine::new(Arc::new(tables), &opts).unwrap()
    }

    /// The database's keys, the table `t` and the problems `check_table` finds in `keys`.
    async fn problems(keys: &MapKv, def: &TableDef) -> TableCheck {
        check_table(keys, keys, def, &|_| {}).await.unwrap()
    }

    #[tokio::test]
    async fn damage_between_rows_and_indexes_is_found_and_named() {
        let e = engine().await;
        e.sql(
            "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL, c TEXT);
             CREATE INDEX t_k ON t (k);
             CREATE UNIQUE INDEX t_c ON t (c);
             INSERT INTO t SELECT v, v % 7, 'c' || v FROM generate_series(1, 2500) g(v);
             INSERT INTO t VALUES (9000, 1, NULL), (9001, 1, NULL)",
        )
        .await
        .unwrap();
        let tables = e.tables();
        let healthy = tables.verify_rows(&|_| {}).await.unwrap();
        assert_eq!(healthy.len(), 1);
        assert_eq!(healthy[0].rows, 2502);
        assert_eq!(
            healthy[0].indexes,
            vec![("t_k".to_string(), 2502), ("t_c".to_string(), 2502)]
        );
        assert_eq!(healthy[0].problems, 0, "{:?}", healthy[0].listed);

        let def = tables.require("t").await.unwrap();
        let all = tables
            .reader
            .scan((Bound::Unbounded, Bound::Unbounded), None)
            .await
            .unwrap();
        let copy = || MapKv(all.iter().cloned().collect());
        let row = |id: i32| -> Bytes {
            let mut k = super::super::table_prefix(def.id);
            super::super::keys::encode(
                &mut k,
                crate::catalog::ColumnType::Int32,
                &datafusion::common::ScalarValue::Int32(Some(id)),
                false,
            )
            .unwrap();
            Bytes::from(k)
        };
        let entries_of = |keys: &MapKv, index: usize, id: i32| -> Vec<Bytes> {
            let (s, e) = index_range(def.indexes[index].id);
            let r = row(id);
            keys.0
                .range((s, e))
                .filter(|(_, v)| **v == r)
                .map(|(k, _)| k.clone())
                .collect()
        };
        assert_eq!(problems(&copy(), &def).await.problems, 0);

        // A row without its entry in t_k (rule 2) and, the same, an entry naming no row.
        let mut keys = copy();
        let entry = entries_of(&keys, 0, 42).pop().unwrap();
        keys.0.remove(&entry);
        keys.0.remove(&row(43));
        let found = problems(&keys, &def).await;
        assert_eq!(found.problems, 3, "{:?}", found.listed);
        assert!(
            found
                .listed
                .iter()
                .any(|p| p.contains("has no entry in index t_k"))
        );
        assert!(
            found
                .listed
                .iter()
                .any(|p| p.contains("which does not exist"))
        );

        // An entry left behind by a change of the indexed value (rule 3).
        let mut keys = copy();
        let stale = entries_of(&keys, 0, 50).pop().unwrap();
        let mut other = stale.to_vec();
        other[12] ^= 0x01; // the value 50 % 7 = 1 becomes another one
        keys.0.insert(Bytes::from(other), row(50));
        let found = problems(&keys, &def).await;
        assert_eq!(found.problems, 1, "{:?}", found.listed);
        assert!(found.listed[0].contains("does not match the values of row"));

        // A row that does not decode (rule 1), and two rows under one unique value (rule 4).
        let mut keys = copy();
        keys.0.insert(row(7), Bytes::from_static(b"\x01\x03"));
        let found = problems(&keys, &def).await;
        assert!(
            found.listed.iter().any(|p| p.starts_with("row ")),
            "{:?}",
            found.listed
        );
        // t_k holds each value of k many times: checked as if it were UNIQUE, rule 4 holds.
        let mut unique = def.clone();
        unique.indexes[0].unique = true;
        let found = problems(&copy(), &unique).await;
        assert!(
            found
                .listed
                .iter()
                .any(|p| p.contains("holds two entries of one value")),
            "{:?}",
            found.listed
        );
    }
}
