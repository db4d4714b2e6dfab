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
}

impl Transaction {
    pub fn push(&self, w: PendingWrite) {
        self.writes.lock().push(w);
    }

    pub fn is_empty(&self) -> bool {
        self.writes.lock().is_empty()
    }

    /// The writes, leaving the transaction empty.
    pub fn take(&self) -> Vec<PendingWrite> {
        std::mem::take(&mut *self.writes.lock())
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

    /// Commits every write at once. On failure nothing is committed.
    pub async fn commit(&self, tables: &Tables) -> Result<()> {
        let writes = self.take();
        if writes.is_empty() {
            return Ok(());
        }
        tables.commit_writes(writes).await.map(|_| ())
    }

    /// Discards every write: deletes the segment files it wrote (never committed).
    pub async fn rollback(&self, tables: &Tables) {
        let written: Vec<SegmentMeta> = self.take().into_iter().flat_map(|w| w.segments).collect();
        tables.discard(&written).await;
    }
}

/// The transaction a session is in, if any (a DataFusion config extension).
#[derive(Debug, Default)]
pub struct TxSlot(Mutex<Option<Arc<Transaction>>>);

impl TxSlot {
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
