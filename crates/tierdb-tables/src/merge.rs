//! Merging small segments: one-row INSERTs each commit a segment of their own, and a table
//! written that way would be read as thousands of tiny Parquet files (issue 26 item 7).
//!
//! After a commit adds segments to a columnar table (`Tables::commit_writes`), a background
//! task (in the session the SQL engine registered, [`attach`]) checks it: if the table
//! holds at least [`MergePolicy::min_small`] segments of fewer than
//! [`MergePolicy::small_rows`] rows in one size tier, it reads up to
//! [`MergePolicy::max_rows`] rows of them, writes them in the table's ingest order as new
//! segments, and commits the new segments in place of the old ones.
//!
//! Invariants:
//! 1. A merge changes no row: the new segments hold exactly the rows of the ones they
//!    replace, in one atomic catalog commit (`Tables::commit_writes`), which fails, and
//!    the merge with it, if any of them left the table meanwhile.
//! 2. A merge never makes a user's statement fail: it does not commit while an UPDATE,
//!    DELETE or ADD PRIMARY KEY of the table is being planned or run in this process
//!    ([`DmlGuard`], which first waits out a merge already past that check) or while a transaction
//!    holds a write that replaces one of its segments ([`MergeState::claim`]); it gives up
//!    and the next commit tries again. (A REPEATABLE READ transaction that read the table
//!    before a merge and rewrites it after can still get 40001, as after any other commit.)
//! 3. The replaced files are retired like an UPDATE's, and deleted once no reader can still
//!    use them: after each merge, every file retired more than [`MergePolicy::retain`] ago
//!    (VACUUM's default) is deleted (`Tables::vacuum_retired`, no store listing).
//! 4. `tierdb sql -c` waits for merges before it exits ([`Tables::settle`]); a merge cut
//!    off by a crash committed nothing and its files are VACUUM's.
//! 5. Only segments of one size tier (rows in [8^t, 8^(t+1))) are merged together, the
//!    lowest tier with enough of them: a row is rewritten about once per tier (five below
//!    64 Ki rows), not at every merge, and a table holds at most a few small segments per
//!    tier.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::execution::SessionState;
use parking_lot::Mutex;

use crate::catalog::SegmentMeta;
use crate::error::Result;
use crate::provider::{ScanCounters, ScanOptions, TierTable};
use crate::tables::{PendingWrite, Tables};
use crate::write::{sorted_plan, write_plan};

/// When segments are merged.
#[derive(Debug, Clone, Copy)]
pub struct MergePolicy {
    /// Segments with fewer rows are small (and with fewer than half the table's segment
    /// size, `SegmentOptions::segment_rows`).
    pub small_rows: u64,
    /// A table is merged once it has this many small segments.
    pub min_small: usize,
    /// Rows one merge reads at most (also at most the table's segment size).
    pub max_rows: u64,
    /// Retired segment files older than this are deleted after a merge.
    pub retain: std::time::Duration,
}

impl Default for MergePolicy {
    fn default() -> Self {
        MergePolicy {
            small_rows: 64 << 10,
            min_small: 8,
            max_rows: 1 << 20,
            retain: std::time::Duration::from_secs(600),
        }
    }
}

/// What merges must stay clear of, and the merges running.
#[derive(Debug, Default)]
pub(crate) struct MergeState {
    /// Tables (by name) a commit added segments to since they were last considered.
    dirty: Mutex<HashSet<String>>,
    /// UPDATEs and DELETEs being planned or run, by table name.
    active_dml: Mutex<HashMap<String, usize>>,
    /// Segment files an open transaction's pending writes replace.
    claimed: Mutex<HashMap<String, usize>>,
    /// Tables (by name) being merged now.
    running: Mutex<HashSet<String>>,
    /// Signalled whenever a merge ends.
    finished: tokio::sync::Notify,
    tasks: Mutex<tokio::task::JoinSet<()>>,
    /// The tables and the session merges run in (none: merges are off).
    runner: Mutex<Option<(std::sync::Weak<Tables>, SessionState)>>,
    pub(crate) merged: std::sync::atomic::AtomicU64,
}

impl MergeState {
    pub(crate) fn committed(&self, writes: &[PendingWrite]) {
        let mut dirty = self.dirty.lock();
        for w in writes
            .iter()
            .filter(|w| !w.segments.is_empty() && w.table.primary_key.is_empty())
        {
            dirty.insert(w.table.name.clone());
        }
        drop(dirty);
        self.spawn_due();
    }

    /// Starts a merge of every table a commit added segments to.
    fn spawn_due(&self) {
        let Some((tables, state)) = self.runner.lock().clone() else {
            return;
        };
        let Some(tables) = tables.upgrade() else {
            return;
        };
        if tables.is_read_only() {
            return;
        }
        let dirty: Vec<String> = self.dirty.lock().drain().collect();
        for name in dirty {
            let (tables, state) = (tables.clone(), state.clone());
            self.tasks.lock().spawn(async move {
                if let Err(e) = merge_table(&tables, &state, &name).await {
                    tracing::debug!(table = name, error = %e, "segment merge skipped");
                }
            });
        }
    }

    /// Marks the segments `write` replaces as in use by a transaction until [`Self::release`].
    pub(crate) fn claim(&self, write: &PendingWrite) {
        let mut claimed = self.claimed.lock();
        for s in &write.removed {
            *claimed.entry(s.path.clone()).or_default() += 1;
        }
    }

    pub(crate) fn release(&self, writes: &[PendingWrite]) {
        let mut claimed = self.claimed.lock();
        for s in writes.iter().flat_map(|w| &w.removed) {
            if let Some(n) = claimed.get_mut(&s.path) {
                *n -= 1;
                if *n == 0 {
                    claimed.remove(&s.path);
                }
            }
        }
    }

    fn clear_of(&self, table: &str, segments: &[SegmentMeta]) -> bool {
        if self.active_dml.lock().get(table).copied().unwrap_or(0) > 0 {
            return false;
        }
        let claimed = self.claimed.lock();
        !segments.iter().any(|s| claimed.contains_key(&s.path))
    }
}

/// Held while an UPDATE or DELETE of a table is planned and run (invariant 2).
pub(crate) struct DmlGuard {
    state: Arc<MergeState>,
    table: String,
}

impl DmlGuard {
    /// Keeps merges of `table` from committing until dropped. Returns once no merge of it
    /// is running: one that passed its last check before the guard existed has committed
    /// or given up by then, and one that starts later sees the guard and gives up. (The
    /// guard is counted before `running` is read, and a merge enters `running` before it
    /// reads the guard: under these two locks one of the two always sees the other.)
    pub(crate) async fn acquire(state: &Arc<MergeState>, table: &str) -> Self {
        *state
            .active_dml
            .lock()
            .entry(table.to_string())
            .or_default() += 1;
        let guard = DmlGuard {
            state: state.clone(),
            table: table.to_string(),
        };
        loop {
            let ended = state.finished.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !state.running.lock().contains(table) {
                return guard;
            }
            ended.await;
        }
    }

    /// The guard of the table an UPDATE or DELETE statement names (none for others).
    pub(crate) async fn of_statement(
        tables: &Tables,
        stmt: &datafusion::sql::parser::Statement,
    ) -> Option<Self> {
        let table = crate::dml::target_table(stmt)?;
        Some(Self::acquire(tables.merge_state(), &table).await)
    }
}

impl Drop for DmlGuard {
    fn drop(&mut self) {
        let mut active = self.state.active_dml.lock();
        if let Some(n) = active.get_mut(&self.table) {
            *n -= 1;
            if *n == 0 {
                active.remove(&self.table);
            }
        }
    }
}

/// Runs merges of `tables`' columnar tables in `state` (the SQL engine's session: its
/// object store, memory pool and spill directory) from now on.
pub fn attach(tables: &Arc<Tables>, state: &SessionState) {
    // Only the runtime (object stores, memory pool, spill directory) and settings: the
    // engine's catalog refers to `tables`, which would then never be dropped.
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(state.config().clone())
        .with_runtime_env(state.runtime_env().clone())
        .build();
    *tables.merge_state().runner.lock() = Some((Arc::downgrade(tables), state));
}

/// Merges the small segments of table `name` if it has enough (see the module doc).
/// Returns how many segments were replaced (0: nothing to do, or another commit won).
pub async fn merge_table(tables: &Arc<Tables>, state: &SessionState, name: &str) -> Result<usize> {
    let policy = tables.merge_policy;
    let Some(def) = tables.table(name).await? else {
        return Ok(0);
    };
    if !def.primary_key.is_empty() {
        return Ok(0);
    }
    let merge = tables.merge_state();
    if !merge.running.lock().insert(def.name.clone()) {
        return Ok(0); // one merge per table at a time
    }
    let _running = Running(merge.clone(), def.name.clone());
    let table = TierTable::load(
        tables.clone(),
        def.clone(),
        Arc::new(ScanCounters::default()),
        ScanOptions::default(),
    )
    .await?;
    // Small also next to the table's own segment size (a test's 100-row segments are full).
    let segment_rows = tables.segment_options.segment_rows.max(1) as u64;
    let small_rows = policy.small_rows.min(segment_rows / 2);
    let small: Vec<&SegmentMeta> = table
        .segments()
        .iter()
        .filter(|s| s.rows < small_rows)
        .collect();
    let Some(mut picked) = pick(small, policy.min_small.max(2)) else {
        return Ok(0);
    };
    picked.sort_by_key(|s| (s.rows, s.id));
    let mut rows = 0;
    picked.retain(|s| {
        rows += s.rows;
        rows <= policy.max_rows.min(segment_rows)
    });
    if picked.len() < 2 || !merge.clear_of(&def.name, &owned(&picked)) {
        return Ok(0);
    }
    let all: Vec<usize> = (0..def.columns.len()).collect();
    let exec = table.segments_exec(state, picked.clone(), 1, Some(&all), None, None)?;
    let task = Arc::new(datafusion::execution::TaskContext::from(state));
    let written = write_plan(tables, &def, sorted_plan(&def, exec)?, task, &|_| {}).await?;
    let removed = owned(&picked);
    // Worth a commit only if it at least halves the segments (a partitioned table's small
    // segments of different partition values cannot become one).
    if written.len() * 2 > removed.len() || !merge.clear_of(&def.name, &removed) {
        tables.discard(&written).await;
        return Ok(0);
    }
    let n = removed.len();
    tables
        .commit_writes(vec![PendingWrite {
            table: def,
            segments: written,
            replace: false,
            removed,
        }])
        .await?;
    merge
        .merged
        .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    // Invariant 3: files merges (and UPDATEs) replaced long enough ago go now, so a table
    // written by short-lived processes does not pile up files until someone runs VACUUM.
    if let Err(e) = tables.vacuum_retired(policy.retain).await {
        tracing::debug!(table = name, error = %e, "deleting retired segment files");
    }
    Ok(n)
}

/// Size tier of a segment: rows in [8^t, 8^(t+1)).
fn tier(rows: u64) -> u32 {
    rows.max(1).ilog(8)
}

/// The small segments of the lowest size tier that has at least `min` of them (invariant
/// 5: merging like sizes rewrites each row once per tier, not once per merge).
fn pick(small: Vec<&SegmentMeta>, min: usize) -> Option<Vec<&SegmentMeta>> {
    let mut tiers: std::collections::BTreeMap<u32, Vec<&SegmentMeta>> = Default::default();
    for s in small {
        tiers.entry(tier(s.rows)).or_default().push(s);
    }
    tiers.into_values().find(|t| t.len() >= min)
}

fn owned(segments: &[&SegmentMeta]) -> Vec<SegmentMeta> {
    segments.iter().map(|s| (*s).clone()).collect()
}

/// Forgets the running merge of a table when dropped, and wakes who waits for it.
struct Running(Arc<MergeState>, String);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.lock().remove(&self.1);
        self.0.finished.notify_waiters();
    }
}

impl Tables {
    /// Waits for the segment merges this process started (invariant 4).
    pub async fn settle(&self) {
        loop {
            let mut tasks = std::mem::take(&mut *self.merge_state().tasks.lock());
            if tasks.is_empty() {
                return;
            }
            while tasks.join_next().await.is_some() {}
        }
    }

    /// Segments replaced by merges in this process.
    pub fn segments_merged(&self) -> u64 {
        self.merge_state()
            .merged
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn seg(id: u64, rows: u64) -> SegmentMeta {
        SegmentMeta {
            id,
            path: format!("s{id}"),
            rows,
            bytes: rows * 10,
            columns: Vec::new(),
            checksums: crate::checksum::BlockSums::of(b""),
        }
    }

    #[test]
    fn merges_take_the_lowest_size_tier_with_enough_segments() {
        assert_eq!(
            (tier(0), tier(1), tier(7), tier(8), tier(63), tier(64)),
            (0, 0, 0, 1, 1, 2)
        );
        // Eight 10-row segments and three 1-row ones: the 10-row tier is merged.
        let mut all: Vec<SegmentMeta> = (0..8).map(|i| seg(i, 10)).collect();
        all.extend((8..11).map(|i| seg(i, 1)));
        let picked = pick(all.iter().collect(), 8).unwrap();
        assert!(picked.iter().all(|s| s.rows == 10) && picked.len() == 8);
        // Eight 1-row ones come first, whatever larger tiers hold.
        all.extend((11..16).map(|i| seg(i, 1)));
        let picked = pick(all.iter().collect(), 8).unwrap();
        assert!(picked.iter().all(|s| s.rows == 1) && picked.len() == 8);
        // Seven of each: nothing.
        let few: Vec<SegmentMeta> = (0..7)
            .map(|i| seg(i, 1))
            .chain((7..14).map(|i| seg(i, 9)))
            .collect();
        assert!(pick(few.iter().collect(), 8).is_none());
    }
}
