//! The tid a query reads (invariant 1 of the crate).
//!
//! DataFusion plans each table scan separately; what ties the scans of one query together
//! is the session and the query's start time, which planning stamps once per statement.
//! The first scan of a query refreshes the store (a follower catches up with the writer)
//! and keeps its last tid under that key; the query's other scans find it there.

use std::collections::VecDeque;

use datafusion::catalog::Session;
use datafusion::error::{DataFusionError, Result};
use parking_lot::Mutex;
use tierdb_objects::{Tid, VersionedStore};

/// Queries remembered: more than run planning at one time.
const KEPT: usize = 256;

type Key = (String, i64);

#[derive(Debug, Default)]
pub struct Snapshots {
    recent: Mutex<VecDeque<(Key, Tid)>>,
}

impl Snapshots {
    /// The tid the query being planned in `session` reads.
    pub async fn tid(&self, store: &VersionedStore, session: &dyn Session) -> Result<Tid> {
        let key = session
            .execution_props()
            .query_execution_start_time
            .and_then(|t| t.timestamp_nanos_opt())
            .map(|t| (session.session_id().to_string(), t));
        if let Some(k) = &key
            && let Some((_, tid)) = self.recent.lock().iter().find(|(q, _)| q == k)
        {
            return Ok(*tid);
        }
        let tid = store
            .refresh()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        if let Some(k) = key {
            let mut recent = self.recent.lock();
            // Two scans of one query may both have missed: the first one kept wins.
            if let Some((_, kept)) = recent.iter().find(|(q, _)| *q == k) {
                return Ok(*kept);
            }
            if recent.len() == KEPT {
                recent.pop_front();
            }
            recent.push_back((k, tid));
        }
        Ok(tid)
    }
}
