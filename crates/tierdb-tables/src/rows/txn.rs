//! A transaction's writes to row tables: the rows it wrote (what its own statements read
//! over the committed rows) and the locks it holds, until one KV batch commits them.
//!
//! Invariants:
//!
//! 1. `writes` maps a row's key to its new value, or to `None` for a deleted row; it is
//!    the only place an uncommitted row exists. Committing turns it into puts and deletes
//!    of one KV batch (with the transaction's columnar writes, if any: `txn.rs`).
//! 2. `undo` records, for every change, what `writes` held for the key before (and what
//!    `tables` held for a table its own DDL changed, `follow.rs`), so ROLLBACK TO
//!    SAVEPOINT restores `writes` and `tables` exactly as they were at the savepoint.
//!    Locks taken since the savepoint stay held, as in PostgreSQL.
//! 3. Every key in `writes` is locked by this transaction (`locks.rs`, invariant 1), and
//!    dropping a `RowWrites` releases its locks: committed, rolled back or abandoned.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;

use super::locks::RowState;

/// A table a transaction wrote rows of, as its writes saw it: what its commit checks is
/// still so (`index::check_tables`).
#[derive(Debug, Clone)]
pub(crate) struct WrittenTable {
    pub name: String,
    pub id: u64,
    /// Its indexes' ids (index.rs invariant 2).
    pub indexes: Vec<u64>,
    /// Whether each column took NULL (alter.rs rule 5: SET NOT NULL on a row table).
    pub nullable: Vec<bool>,
    /// Each column's type: the rows were encoded by them (alter.rs rule 4).
    pub types: Vec<crate::catalog::ColumnType>,
    /// The positions of the primary key's columns: the rows' keys were encoded by them.
    pub key: Vec<usize>,
}

impl WrittenTable {
    fn of(def: &crate::catalog::TableDef) -> Self {
        WrittenTable {
            name: def.name.clone(),
            id: def.id,
            indexes: def.indexes.iter().map(|i| i.id).collect(),
            nullable: def.columns.iter().map(|c| c.nullable).collect(),
            types: def.columns.iter().map(|c| c.ty).collect(),
            key: def
                .primary_key
                .iter()
                .filter_map(|c| def.column_index(c))
                .collect(),
        }
    }
}

/// One change of a [`RowWrites`], as ROLLBACK TO SAVEPOINT takes it back (invariant 2).
#[derive(Debug)]
enum Undo {
    /// `writes` held this for the key before (`None`: nothing).
    Key(Bytes, Option<Option<Bytes>>),
    /// `tables` held this for the table id before.
    Table(u64, Option<WrittenTable>),
}

#[derive(Debug, Default)]
pub struct RowWrites {
    id: u64,
    state: Option<Arc<RowState>>,
    writes: BTreeMap<Bytes, Option<Bytes>>,
    undo: Vec<Undo>,
    locked: Vec<Bytes>,
    /// The tables written, by id, as the writes saw them.
    tables: BTreeMap<u64, WrittenTable>,
}

impl RowWrites {
    /// The writes of a transaction of `state`'s process.
    pub(crate) fn new(state: &Arc<RowState>) -> Self {
        RowWrites {
            id: state.new_tx(),
            state: Some(state.clone()),
            writes: BTreeMap::new(),
            undo: Vec::new(),
            locked: Vec::new(),
            tables: BTreeMap::new(),
        }
    }

    /// This transaction's id for locks (0 until it first writes a row table).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Joins `state` if not yet (a transaction's first row write).
    pub(crate) fn attach(&mut self, state: &Arc<RowState>) {
        if self.state.is_none() {
            self.id = state.new_tx();
            self.state = Some(state.clone());
        }
    }

    pub(crate) fn note_locked(&mut self, key: &Bytes) {
        if !self.locked.contains(key) {
            self.locked.push(key.clone());
        }
    }

    /// Notes that a row of `def` is written (index.rs invariant 2).
    pub(crate) fn note_table(&mut self, def: &crate::catalog::TableDef) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.tables.entry(def.id) {
            e.insert(WrittenTable::of(def));
            self.undo.push(Undo::Table(def.id, None));
        }
    }

    /// The table `id` as this transaction's writes of it saw it, if it wrote rows of it.
    pub(crate) fn table(&self, id: u64) -> Option<&WrittenTable> {
        self.tables.get(&id)
    }

    /// Notes that the writes of `def`'s rows are now those of `def` as it is (its own DDL
    /// changed it: `follow.rs`).
    pub(crate) fn retable(&mut self, def: &crate::catalog::TableDef) {
        let before = self.tables.insert(def.id, WrittenTable::of(def));
        self.undo.push(Undo::Table(def.id, before));
    }

    /// The tables written.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &WrittenTable> {
        self.tables.values()
    }

    /// Gives up the lock on `key` if this transaction never wrote it (a statement that
    /// locked a key, then failed on it: an INSERT of a duplicate key), as PostgreSQL holds
    /// no lock for a row it did not change.
    pub(crate) fn unlock_unwritten(&mut self, key: &Bytes) {
        if self.writes.contains_key(key) {
            return;
        }
        if let Some(i) = self.locked.iter().position(|k| k == key) {
            self.locked.swap_remove(i);
            if let Some(s) = &self.state {
                s.release(self.id, std::slice::from_ref(key));
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// The row this transaction wrote at `key`: `Some(None)` deleted, `None` not written.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<Bytes>> {
        self.writes.get(key).cloned()
    }

    pub(crate) fn put(&mut self, key: Bytes, value: Bytes) {
        let before = self.writes.insert(key.clone(), Some(value));
        self.undo.push(Undo::Key(key, before));
    }

    pub(crate) fn delete(&mut self, key: Bytes) {
        let before = self.writes.insert(key.clone(), None);
        self.undo.push(Undo::Key(key, before));
    }

    /// Forgets the write of `key`, as if this transaction had never written it (an entry
    /// of an index its own DDL dropped). Its lock stays held.
    pub(crate) fn forget(&mut self, key: Bytes) {
        if let Some(before) = self.writes.remove(&key) {
            self.undo.push(Undo::Key(key, Some(before)));
        }
    }

    /// The writes in `range`, ascending.
    pub(crate) fn range(&self, range: (Bound<Bytes>, Bound<Bytes>)) -> Vec<(Bytes, Option<Bytes>)> {
        if crate::rows::range_is_empty(&range) {
            return Vec::new();
        }
        self.writes
            .range(range)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A savepoint: how many changes there are now.
    pub(crate) fn mark(&self) -> usize {
        self.undo.len()
    }

    /// Undoes every change made since `mark` (invariant 2).
    pub(crate) fn undo_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let Some(undo) = self.undo.pop() else {
                break;
            };
            match undo {
                Undo::Key(key, Some(v)) => {
                    self.writes.insert(key, v);
                }
                Undo::Key(key, None) => {
                    self.writes.remove(&key);
                }
                Undo::Table(id, Some(t)) => {
                    self.tables.insert(id, t);
                }
                Undo::Table(id, None) => {
                    self.tables.remove(&id);
                }
            }
        }
    }

    /// The writes, as the puts and deletes of one batch; the keys they write.
    pub(crate) fn to_batch(&self, batch: &mut tierdb_kv::Batch) -> Vec<Bytes> {
        for (k, v) in &self.writes {
            match v {
                Some(v) => batch.put(k.clone(), v.clone()),
                None => batch.delete(k.clone()),
            };
        }
        self.writes.keys().cloned().collect()
    }

    /// Records the durable commit of `keys` (locks.rs invariant 2); the locks go when this
    /// is dropped.
    pub(crate) fn committed(&mut self, keys: Vec<Bytes>) {
        if let Some(s) = &self.state {
            s.committed(keys.into_iter());
        }
        self.writes.clear();
        self.undo.clear();
    }
}

impl Drop for RowWrites {
    fn drop(&mut self) {
        if let Some(s) = &self.state {
            s.release(self.id, &self.locked);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn undo_restores_the_writes_of_a_savepoint() {
        let state = Arc::new(RowState::default());
        let mut w = RowWrites::new(&state);
        let k = |s: &'static str| Bytes::from_static(s.as_bytes());
        w.put(k("a"), k("1"));
        let mark = w.mark();
        w.put(k("a"), k("2"));
        w.delete(k("b"));
        w.put(k("c"), k("3"));
        w.undo_to(mark);
        assert_eq!(w.get(b"a"), Some(Some(k("1"))));
        assert_eq!(w.get(b"b"), None);
        assert_eq!(w.get(b"c"), None);
    }
}
