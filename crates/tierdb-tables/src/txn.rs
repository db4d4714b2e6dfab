//! Transactions: the writes of the statements between `BEGIN` and `COMMIT`, kept out of the
//! catalog until one atomic commit ([`Tables::commit_writes`]).
//!
//! A session carries a [`TxSlot`] on its DataFusion config. While it holds a
//! [`Transaction`], INSERT, UPDATE and DELETE add their written segments (and the segments
//! they replace) to it instead of committing, and every scan of that session sees the
//! table as the transaction left it: committed segments as of the scan's planning, minus
//! what the transaction removed, plus what it wrote. Other sessions see none of it until
//! the commit, then all of it.

use std::sync::Arc;

use datafusion::prelude::SessionConfig;
use parking_lot::Mutex;

use crate::catalog::{SegmentMeta, TableDef};
use crate::error::Result;
use crate::tables::{PendingWrite, Tables};

/// The uncommitted writes of one transaction, in statement order.
#[derive(Debug, Default)]
pub struct Transaction {
    writes: Mutex<Vec<PendingWrite>>,
    /// Savepoints, oldest first.
    savepoints: Mutex<Vec<Savepoint>>,
    /// Writes as they were before they followed this transaction's DDL (`ownddl.rs`
    /// invariant 3): their place in `writes` and their earlier form, oldest first.
    followed: Mutex<Vec<(usize, PendingWrite)>>,
    /// The writes to row tables (`rows/txn.rs`) and the row locks held.
    pub(crate) rows: Mutex<crate::rows::RowWrites>,
    isolation: Mutex<Isolation>,
    /// REPEATABLE READ: what every statement reads, taken at the first read.
    snapshot: Mutex<Option<Arc<Snapshot>>>,
    /// The undo records of its DDL (`ddlundo.rs`).
    undo: Arc<crate::ddlundo::Recorder>,
}

/// A savepoint: where each kind of change stood when it was set.
#[derive(Debug)]
struct Savepoint {
    name: String,
    /// How many writes there were.
    writes: usize,
    /// The row writes' mark.
    rows: usize,
    /// How many DDL undo records.
    ddl: u64,
    /// How many writes had followed DDL.
    followed: usize,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("at", &self.reading.at)
            .finish_non_exhaustive()
    }
}

/// A transaction's isolation level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Each statement reads the rows committed when it starts (PostgreSQL's default).
    #[default]
    ReadCommitted,
    /// Every statement reads the rows committed when the transaction first read; a row
    /// another transaction changed since cannot be changed (40001).
    RepeatableRead,
}

impl Isolation {
    /// As `SHOW transaction_isolation` says it.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
        }
    }
}

/// A REPEATABLE READ transaction's view: the KV engine as of its first read (the catalog,
/// so columnar tables' segments, and the rows of row tables), and the row commit number
/// then, kept in the record of recent commits while the transaction lives.
pub(crate) struct Snapshot {
    pub(crate) kv: Arc<dyn tierdb_kv::KvRead>,
    pub(crate) reading: crate::rows::locks::Reading,
}

impl Transaction {
    pub fn push(&self, w: PendingWrite) {
        self.writes.lock().push(w);
    }

    pub fn isolation(&self) -> Isolation {
        *self.isolation.lock()
    }

    /// Sets the isolation level: only before the transaction's first read (25001).
    pub fn set_isolation(&self, level: Isolation) -> Result<()> {
        if self.snapshot.lock().is_some() && level != self.isolation() {
            return Err(crate::TableError::Transaction {
                code: "25001",
                message: "SET TRANSACTION ISOLATION LEVEL must be called before any query".into(),
            });
        }
        *self.isolation.lock() = level;
        Ok(())
    }

    /// The snapshot every statement of a REPEATABLE READ transaction reads (taken at the
    /// first call: the commit number first, so a commit in between is only ever seen as a
    /// change, never missed); `None` under READ COMMITTED, or through a follower.
    pub(crate) fn snapshot(&self, tables: &Tables) -> Result<Option<Arc<Snapshot>>> {
        if self.isolation() != Isolation::RepeatableRead {
            return Ok(None);
        }
        let mut s = self.snapshot.lock();
        if let Some(s) = &*s {
            return Ok(Some(s.clone()));
        }
        let Ok(writer) = tables.kv_writer() else {
            return Ok(None);
        };
        let reading = tables.row_state().reading();
        let kv: Arc<dyn tierdb_kv::KvRead> = Arc::new(writer.snapshot()?);
        let snap = Arc::new(Snapshot { kv, reading });
        *s = Some(snap.clone());
        Ok(Some(snap))
    }

    /// Whether this transaction has written rows of the table `id` (either kind).
    pub(crate) fn wrote(&self, id: u64) -> bool {
        self.writes.lock().iter().any(|w| w.table.id == id) || self.rows.lock().table(id).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.writes.lock().is_empty() && self.rows.lock().is_empty() && !self.undo.recorded()
    }

    /// What records this transaction's catalog commits (`ddlundo::recording`).
    pub fn undo_recorder(&self) -> Arc<crate::ddlundo::Recorder> {
        self.undo.clone()
    }

    /// Whether this transaction reads an older state than the next statement would: a
    /// REPEATABLE READ transaction that has taken its snapshot.
    pub(crate) fn reads_a_snapshot(&self) -> bool {
        self.snapshot.lock().is_some()
    }

    /// Empties this transaction's pending segment writes of table `id`, when it has no
    /// savepoint (a ROLLBACK TO one must find them as they were): ALTER TABLE … ADD
    /// PRIMARY KEY moved what they hold into rows in its own recorded commit. Returns the
    /// segment files they had written (never committed), for deletion; `None` if it
    /// could not (a savepoint), so the COMMIT fails as before.
    pub(crate) fn absorb_writes_of(&self, id: u64) -> Option<Vec<SegmentMeta>> {
        if !self.savepoints.lock().is_empty() {
            return None;
        }
        let mut files = Vec::new();
        for w in self.writes.lock().iter_mut().filter(|w| w.table.id == id) {
            files.append(&mut w.segments);
            w.removed.clear();
            w.replace = false;
        }
        Some(files)
    }

    /// The writes, leaving the transaction empty.
    pub fn take(&self) -> Vec<PendingWrite> {
        std::mem::take(&mut *self.writes.lock())
    }

    /// `SAVEPOINT name`.
    pub fn savepoint(&self, name: &str) {
        let sp = Savepoint {
            name: name.to_string(),
            writes: self.writes.lock().len(),
            rows: self.rows.lock().mark(),
            ddl: self.undo.mark(),
            followed: self.followed.lock().len(),
        };
        self.savepoints.lock().push(sp);
    }

    /// `RELEASE SAVEPOINT name`: forgets it and every later savepoint; keeps the writes.
    pub fn release(&self, name: &str) -> Result<()> {
        let mut sp = self.savepoints.lock();
        let i = find(&sp, name)?;
        sp.truncate(i);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT name`: undoes the writes made since it (their files are
    /// deleted) and the DDL, forgets later savepoints and keeps this one. Returns what
    /// DDL could not be undone (`ddlundo.rs` invariant 3).
    pub async fn rollback_to(&self, name: &str, tables: &Tables) -> Result<Vec<String>> {
        let (undone, ddl): (Vec<SegmentMeta>, u64) = {
            let mut sp = self.savepoints.lock();
            let i = find(&sp, name)?;
            let at = sp[i].writes;
            let ddl = sp[i].ddl;
            self.rows.lock().undo_to(sp[i].rows);
            let mut writes = self.writes.lock();
            let mut followed = self.followed.lock();
            while followed.len() > sp[i].followed {
                if let Some((j, before)) = followed.pop()
                    && j < writes.len()
                {
                    writes[j] = before;
                }
            }
            sp.truncate(i + 1);
            let at = at.min(writes.len());
            let tail = writes.split_off(at);
            tables.merge_state().release(&tail);
            (tail.into_iter().flat_map(|w| w.segments).collect(), ddl)
        };
        tables.discard(&undone).await;
        if self.undo.mark() > ddl {
            return tables.undo_ddl(self.undo.txn(), ddl).await;
        }
        Ok(Vec::new())
    }

    /// The table's committed segments as this transaction reads them: under REPEATABLE
    /// READ as of its snapshot, else `latest` (as of the statement's planning).
    pub(crate) async fn committed(
        &self,
        tables: &Tables,
        def: &TableDef,
        latest: &[SegmentMeta],
    ) -> Result<Vec<SegmentMeta>> {
        match self.snapshot(tables)? {
            Some(s) => crate::catalog::segments(s.kv.as_ref(), def.id).await,
            None => Ok(latest.to_vec()),
        }
    }

    /// After a DDL statement of this transaction: its writes of the tables it changed
    /// follow the tables' new definitions (`ownddl.rs`).
    pub(crate) async fn follow_ddl(&self, tables: &Tables) -> Result<()> {
        let ids: Vec<(String, u64)> = {
            let writes = self.writes.lock();
            let mut ids: Vec<(String, u64)> = writes
                .iter()
                .map(|w| (w.table.name.clone(), w.table.id))
                .collect();
            ids.dedup_by_key(|(_, id)| *id);
            ids
        };
        for (name, id) in ids {
            let Some(now) = tables.table_by_name_or_id(&name, id).await? else {
                continue;
            };
            let mut writes = self.writes.lock();
            let mut followed = self.followed.lock();
            for (j, w) in writes.iter_mut().enumerate() {
                if let Some(new) = crate::ownddl::follow_segments(w, &now)? {
                    followed.push((j, std::mem::replace(w, new)));
                }
            }
        }
        crate::rows::follow::follow_all(tables, &self.rows).await
    }

    /// After `TRUNCATE def` in this transaction: what it wrote of the table before goes too
    /// (`ownddl.rs` invariant 5); what it writes after stays.
    pub(crate) fn truncated(&self, def: &TableDef) {
        {
            let mut writes = self.writes.lock();
            let mut followed = self.followed.lock();
            for (j, w) in writes.iter_mut().enumerate() {
                if w.table.id == def.id {
                    let emptied = PendingWrite {
                        table: w.table.clone(),
                        segments: Vec::new(),
                        replace: false,
                        removed: Vec::new(),
                    };
                    followed.push((j, std::mem::replace(w, emptied)));
                }
            }
        }
        let mut rows = self.rows.lock();
        let mut ranges = vec![crate::rows::table_range(def.id)];
        ranges.extend(
            def.indexes
                .iter()
                .map(|i| crate::rows::index::index_range(i.id)),
        );
        for range in ranges {
            for (k, _) in rows.range(range) {
                rows.forget(k);
            }
        }
    }

    /// `committed` (the table's segments as of planning) as this transaction sees them.
    pub fn visible(&self, def: &TableDef, committed: &[SegmentMeta]) -> Vec<SegmentMeta> {
        let writes = self.writes.lock();
        let mut out = committed.to_vec();
        for w in writes.iter().filter(|w| w.table.id == def.id) {
            if w.replace {
                out.clear();
            }
            out.retain(|s| !w.removed.iter().any(|r| r.path == s.path));
            out.extend(w.segments.iter().cloned());
        }
        out
    }

    /// Commits every write at once, columnar and row tables in one KV batch (rows/mod.rs
    /// invariant 3), which also makes its DDL permanent (`ddlundo.rs` invariant 2). On
    /// failure nothing is committed and its DDL is undone. The row locks are released
    /// either way.
    pub async fn commit(&self, tables: &Tables) -> Result<()> {
        let writes = self.take();
        let claimed = writes.clone();
        let done = self.commit_writes(tables, writes).await;
        tables.merge_state().release(&claimed);
        if done.is_err() && self.undo.recorded() {
            for w in self.undo_all(tables).await {
                tracing::warn!(what = %w, "a failed COMMIT left DDL it could not undo");
            }
        }
        // Committed (its DDL is permanent) or undone: no longer pending either way.
        tables.pending_ddl.forget(self.undo.txn());
        done
    }

    async fn commit_writes(&self, tables: &Tables, writes: Vec<PendingWrite>) -> Result<()> {
        let mut rows = std::mem::take(&mut *self.rows.lock());
        if writes.is_empty() && !self.undo.recorded() {
            return crate::rows::commit(tables, &mut rows).await;
        }
        let mut batch = tierdb_kv::Batch::new();
        if self.undo.recorded() {
            crate::ddlundo::forget(tables.reader.as_ref(), self.undo.txn(), &mut batch).await?;
        }
        let keys = rows.to_batch(&mut batch);
        let _gate = tables.row_state().gate.read().await;
        let own = Some(self.undo.txn());
        crate::rows::index::check_tables(tables, &rows, own).await?;
        tierdb_store::testpoint::pause_at("txn-commit");
        tables.commit_writes_with(writes, batch, own).await?;
        tierdb_store::testpoint::pause_at("txn-committed");
        rows.committed(keys);
        Ok(())
    }

    /// Discards every write: deletes the segment files it wrote (never committed), forgets
    /// its rows, releases its row locks and undoes its DDL. Returns what DDL could not be
    /// undone (`ddlundo.rs` invariant 3), described for a warning.
    pub async fn rollback(&self, tables: &Tables) -> Vec<String> {
        drop(std::mem::take(&mut *self.rows.lock()));
        let writes = self.take();
        tables.merge_state().release(&writes);
        let written: Vec<SegmentMeta> = writes.into_iter().flat_map(|w| w.segments).collect();
        tables.discard(&written).await;
        let left = self.undo_all(tables).await;
        tables.pending_ddl.forget(self.undo.txn());
        left
    }

    async fn undo_all(&self, tables: &Tables) -> Vec<String> {
        if !self.undo.recorded() {
            return Vec::new();
        }
        match tables.undo_ddl(self.undo.txn(), 0).await {
            Ok(conflicts) => conflicts,
            Err(e) => vec![format!(
                "its DDL ({e}); the database undoes it when it next opens"
            )],
        }
    }
}

fn find(savepoints: &[Savepoint], name: &str) -> Result<usize> {
    savepoints
        .iter()
        .rposition(|s| s.name == name)
        .ok_or_else(|| crate::TableError::Transaction {
            code: "3B001",
            message: format!("savepoint \"{name}\" does not exist"),
        })
}

/// The transaction a session is in, if any (a DataFusion config extension), and the
/// isolation level its transactions start with.
#[derive(Debug, Default)]
pub struct TxSlot(Mutex<Option<Arc<Transaction>>>, Mutex<Isolation>);

impl TxSlot {
    /// A new transaction at the session's default isolation level.
    pub fn new_transaction(&self) -> Arc<Transaction> {
        let tx = Transaction::default();
        *tx.isolation.lock() = *self.1.lock();
        Arc::new(tx)
    }

    pub fn default_isolation(&self) -> Isolation {
        *self.1.lock()
    }

    /// `SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL …`.
    pub fn set_default_isolation(&self, level: Isolation) {
        *self.1.lock() = level;
    }

    pub fn current(&self) -> Option<Arc<Transaction>> {
        self.0.lock().clone()
    }

    pub fn set(&self, tx: Option<Arc<Transaction>>) -> Option<Arc<Transaction>> {
        std::mem::replace(&mut *self.0.lock(), tx)
    }
}

/// The transaction of the session whose config this is.
pub fn current(config: &SessionConfig) -> Option<Arc<Transaction>> {
    config.get_extension::<TxSlot>()?.current()
}
