//! Row locks and the record of recent row commits: what makes concurrent writers of row
//! tables behave as PostgreSQL's READ COMMITTED does.
//!
//! One process writes a database (the KV engine fences any other), so locks live in its
//! memory. Invariants:
//!
//! 1. A transaction locks a row's key before it writes the row (INSERT, UPDATE, DELETE)
//!    and holds the lock until it commits or rolls back (the lock set is released when
//!    its [`RowWrites`](super::txn::RowWrites) is dropped, so a transaction that vanishes
//!    with its connection releases them too).
//! 2. A commit records every key it wrote with a new commit number ([`RowState::seq`])
//!    after the KV commit is durable and before its locks are released. So a writer that
//!    read a row at commit number `r` and then locked it knows the row changed since it
//!    read it exactly when [`RowState::changed_since`] says so, and reads it again.
//! 3. A transaction waiting for a lock held by a transaction that waits (directly or
//!    through others) for one of its own is a deadlock: the one that would close the
//!    cycle fails with 40P01 and its statement changes nothing.
//! 4. The record of recent commits keeps every key committed after the oldest read still
//!    in progress ([`RowState::reading`]); older entries can no longer matter.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::error::{Result, TableError};

#[derive(Debug, Default)]
pub(crate) struct RowState {
    locks: Mutex<LockTable>,
    released: tokio::sync::Notify,
    seq: AtomicU64,
    next_tx: AtomicU64,
    recent: Mutex<Recent>,
    /// Row commits hold it shared; CREATE/DROP INDEX exclusively (index.rs invariant 2).
    pub(crate) gate: tokio::sync::RwLock<()>,
}

#[derive(Debug, Default)]
struct LockTable {
    held: HashMap<Bytes, u64>,
    /// Transaction → the transaction whose lock it waits for.
    waits: HashMap<u64, u64>,
}

#[derive(Debug, Default)]
struct Recent {
    by_key: HashMap<Bytes, u64>,
    /// Reads in progress: commit number they started at → how many.
    reading: BTreeMap<u64, usize>,
}

/// Keys of the recent record past which it is pruned (invariant 4).
const RECENT_PRUNE_AT: usize = 1 << 16;

impl RowState {
    pub(crate) fn new_tx(&self) -> u64 {
        self.next_tx.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The number of the last row commit.
    pub(crate) fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Locks `key` for transaction `tx`, waiting while another holds it (invariants 1, 3).
    pub(crate) async fn lock(&self, tx: u64, key: &Bytes, table: &str) -> Result<()> {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut l = self.locks.lock();
                let holder = match l.held.get(key) {
                    None => {
                        l.held.insert(key.clone(), tx);
                        l.waits.remove(&tx);
                        return Ok(());
                    }
                    Some(&h) if h == tx => {
                        l.waits.remove(&tx);
                        return Ok(());
                    }
                    Some(&h) => h,
                };
                if closes_cycle(&l.waits, tx, holder) {
                    l.waits.remove(&tx);
                    return Err(TableError::Transaction {
                        code: "40P01",
                        message: format!(
                            "deadlock detected: a row of {table} is locked by a transaction \
                             that waits for this one; this statement changed nothing, \
                             roll back and retry"
                        ),
                    });
                }
                l.waits.insert(tx, holder);
            }
            let _unwait = Unwait { state: self, tx };
            released.await;
        }
    }

    /// Releases every lock of `tx` among `keys`.
    pub(crate) fn release(&self, tx: u64, keys: &[Bytes]) {
        if keys.is_empty() {
            return;
        }
        {
            let mut l = self.locks.lock();
            for k in keys {
                if l.held.get(k) == Some(&tx) {
                    l.held.remove(k);
                }
            }
            l.waits.remove(&tx);
        }
        self.released.notify_waiters();
    }

    /// Records a durable commit of `keys` (invariant 2).
    pub(crate) fn committed(&self, keys: impl Iterator<Item = Bytes>) {
        let mut r = self.recent.lock();
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        for k in keys {
            r.by_key.insert(k, seq);
        }
        if r.by_key.len() > RECENT_PRUNE_AT {
            let oldest = r.reading.keys().next().copied().unwrap_or(seq);
            r.by_key.retain(|_, s| *s > oldest);
        }
    }

    /// Whether `key` was committed after commit number `since`.
    pub(crate) fn changed_since(&self, key: &Bytes, since: u64) -> bool {
        self.recent
            .lock()
            .by_key
            .get(key)
            .is_some_and(|&s| s > since)
    }

    /// Starts a read at the current commit number; the record keeps what it may need until
    /// the returned guard is dropped (invariant 4).
    pub(crate) fn reading(self: &Arc<Self>) -> Reading {
        let mut r = self.recent.lock();
        let at = self.seq();
        *r.reading.entry(at).or_default() += 1;
        Reading {
            state: self.clone(),
            at,
        }
    }
}

/// A read in progress (see [`RowState::reading`]).
#[derive(Debug)]
pub(crate) struct Reading {
    state: Arc<RowState>,
    pub(crate) at: u64,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut r = self.state.recent.lock();
        if let Some(n) = r.reading.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                r.reading.remove(&self.at);
            }
        }
    }
}

/// Forgets a wait when the waiting statement ends or is cancelled.
struct Unwait<'a> {
    state: &'a RowState,
    tx: u64,
}

impl Drop for Unwait<'_> {
    fn drop(&mut self) {
        self.state.locks.lock().waits.remove(&self.tx);
    }
}

fn closes_cycle(waits: &HashMap<u64, u64>, tx: u64, holder: u64) -> bool {
    let mut at = holder;
    for _ in 0..=waits.len() {
        if at == tx {
            return true;
        }
        match waits.get(&at) {
            Some(&next) => at = next,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_second_locker_waits_until_release() {
        let s = Arc::new(RowState::default());
        let k = Bytes::from_static(b"k");
        s.lock(1, &k, "t").await.unwrap();
        s.lock(1, &k, "t").await.unwrap(); // re-entrant
        let s2 = s.clone();
        let k2 = k.clone();
        let waiter = tokio::spawn(async move { s2.lock(2, &k2, "t").await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        s.release(1, std::slice::from_ref(&k));
        waiter.await.unwrap().unwrap();
        assert_eq!(s.locks.lock().held.get(&k), Some(&2));
    }

    #[tokio::test]
    async fn a_cycle_of_waits_fails_the_one_closing_it() {
        let s = Arc::new(RowState::default());
        let (a, b) = (Bytes::from_static(b"a"), Bytes::from_static(b"b"));
        s.lock(1, &a, "t").await.unwrap();
        s.lock(2, &b, "t").await.unwrap();
        let s2 = s.clone();
        let b2 = b.clone();
        let first = tokio::spawn(async move { s2.lock(1, &b2, "t").await });
        while !s.locks.lock().waits.contains_key(&1) {
            tokio::task::yield_now().await;
        }
        let e = s.lock(2, &a, "t").await.unwrap_err();
        assert_eq!(e.sqlstate(), "40P01");
        s.release(2, &[b]);
        first.await.unwrap().unwrap();
    }

    #[test]
    fn commits_are_recorded_for_reads_in_progress() {
        let s = Arc::new(RowState::default());
        let k = Bytes::from_static(b"k");
        let r = s.reading();
        assert!(!s.changed_since(&k, r.at));
        s.committed(std::iter::once(k.clone()));
        assert!(s.changed_since(&k, r.at));
        assert!(!s.changed_since(&k, s.seq()));
    }
}
