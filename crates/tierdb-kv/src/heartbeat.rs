//! A writer's hold on its database while it runs: the lease heartbeat, and the check that
//! a commit which took long still belongs to the database's owner before it is acknowledged.
//!
//! SlateDB fences a writer by creating the WAL object that writer would write next (a zero-
//! byte *fence*); the old writer's create then fails. Fences are garbage-collected once they
//! are below the replay boundary and older than [`crate::options::WAL_FENCE_MIN_AGE`], or
//! short-lived processes would leave one per open forever. A writer stalled (suspended,
//! paused VM) between choosing its WAL object's number and creating it for longer than that
//! would then create it successfully, below the new writer's replay boundary, where no one
//! reads it. So:
//!
//! 1. The heartbeat records when it last saw no newer lease generation (wall-clock time, so
//!    a suspended machine's sleep counts) and whether it saw one ([`Ownership`]).
//! 2. A commit is acknowledged only if ownership was confirmed within
//!    [`OWNERSHIP_RECHECK`] of its end, or a fresh read of the leases confirms it then. A
//!    stall long enough for a fence to be collected is far longer than that, so the stalled
//!    writer reads the newer generation and reports itself fenced instead of acknowledging.
//! 3. Every WAL object holding a commit was numbered after the commit began, so checking at
//!    the commit's end covers the whole window.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use object_store::path::Path;
use tierdb_store::TieredStore;

use crate::db::wal_dir;
use crate::error::{KvError, Result};
use crate::lease::{Lease, now_ms};

/// A commit ending longer than this after ownership was last confirmed reads the leases
/// before it is acknowledged (far below [`crate::options::WAL_FENCE_MIN_AGE`]).
pub const OWNERSHIP_RECHECK: Duration = Duration::from_secs(60);
const _: () =
    assert!(OWNERSHIP_RECHECK.as_secs() * 5 <= crate::options::WAL_FENCE_MIN_AGE.as_secs());

/// What the heartbeat last learned about who owns the database.
#[derive(Debug)]
pub(crate) struct Ownership {
    generation: u64,
    confirmed_ms: AtomicU64,
    lost: AtomicBool,
}

impl Ownership {
    fn new(generation: u64) -> Self {
        Ownership {
            generation,
            confirmed_ms: AtomicU64::new(now_ms()),
            lost: AtomicBool::new(false),
        }
    }

    /// Records a read of the newest lease generation; false if this writer was taken over.
    fn observe(&self, newest: u64, read_started_ms: u64) -> bool {
        if newest > self.generation {
            self.lost.store(true, Ordering::Release);
            return false;
        }
        self.confirmed_ms
            .fetch_max(read_started_ms, Ordering::AcqRel);
        true
    }

    /// Invariant 2: fails with [`KvError::Fenced`] unless this writer still owns `path`.
    pub(crate) async fn confirm(&self, store: &TieredStore, path: &Path, name: &str) -> Result<()> {
        let fenced = || KvError::Fenced {
            db: name.to_string(),
        };
        if self.lost.load(Ordering::Acquire) {
            return Err(fenced());
        }
        let age = now_ms().saturating_sub(self.confirmed_ms.load(Ordering::Acquire));
        if age <= OWNERSHIP_RECHECK.as_millis() as u64 {
            return Ok(());
        }
        let started = now_ms();
        let (newest, _) = crate::lease::read_newest(store, path, name).await?;
        if self.observe(newest, started) {
            Ok(())
        } else {
            tracing::warn!(
                db = name,
                "another writer took the database over during a commit"
            );
            Err(fenced())
        }
    }
}

/// Marks `lease` released, so the next writer need not wait for it to go stale (best
/// effort: a lease that is not released goes stale after `LEASE_STALE`).
pub(crate) async fn release(store: &TieredStore, path: &Path, name: &str, mut lease: Lease) {
    lease.released = true;
    if let Err(e) = lease.write(store, path, name).await {
        tracing::warn!(db = name, error = %e, "cannot release the writer lease");
    }
}

/// The running lease heartbeat of a writer.
pub(crate) struct Heartbeat {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Option<Lease>>,
    pub(crate) ownership: Arc<Ownership>,
}

impl Heartbeat {
    /// Stops the heartbeat; returns the lease if this writer still holds it.
    pub(crate) async fn stop(self) -> Option<Lease> {
        let _ = self.stop.send(());
        self.task.await.ok().flatten()
    }
}

/// Refreshes the writer lease every [`crate::lease::HEARTBEAT`] until stopped, taken over
/// (a newer generation exists) or fenced.
pub(crate) fn spawn_heartbeat(
    store: TieredStore,
    path: Path,
    name: String,
    mut lease: Lease,
) -> Heartbeat {
    let ownership = Arc::new(Ownership::new(lease.generation));
    let owned = ownership.clone();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(crate::lease::HEARTBEAT);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut stopped => return Some(lease),
                _ = tick.tick() => {}
            }
            if store.fenced(&wal_dir(&path)).is_some() {
                return None;
            }
            let started = now_ms();
            if let Ok((newest, _)) = crate::lease::read_newest(&store, &path, &name).await
                && !owned.observe(newest, started)
            {
                tracing::warn!(db = name, "another writer took the database over");
                return None;
            }
            lease.heartbeat_ms = now_ms();
            if let Err(e) = lease.write(&store, &path, &name).await {
                tracing::warn!(db = name, error = %e, "cannot refresh the writer lease");
            }
        }
    });
    Heartbeat {
        stop,
        task,
        ownership,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_commit_after_a_long_stall_reads_the_leases_and_a_taken_over_writer_is_fenced() {
        let capacity = Arc::new(object_store::memory::InMemory::new());
        let store = TieredStore::with_capacity(
            capacity,
            "test".into(),
            tierdb_store::TierOptions::default(),
        )
        .await
        .unwrap();
        let db = Path::from("db");
        let mine = crate::lease::claim(&store, &db, "db", false).await.unwrap();
        let own = Ownership::new(mine.generation);
        // Confirmed recently: no read needed.
        own.confirm(&store, &db, "db").await.unwrap();
        // After a "stall" (the last confirmation long ago) a fresh read confirms it again.
        own.confirmed_ms.store(0, Ordering::Release);
        own.confirm(&store, &db, "db").await.unwrap();
        assert!(now_ms() - own.confirmed_ms.load(Ordering::Acquire) < 60_000);
        // Another writer takes over; a commit ending after a stall must not be acknowledged.
        let theirs = crate::lease::claim(&store, &db, "db", true).await.unwrap();
        assert!(theirs.generation > mine.generation);
        own.confirmed_ms.store(0, Ordering::Release);
        let err = own.confirm(&store, &db, "db").await.unwrap_err();
        assert!(matches!(err, KvError::Fenced { .. }), "{err}");
        // Once lost, always lost, without another read.
        own.confirmed_ms.store(now_ms(), Ordering::Release);
        assert!(own.confirm(&store, &db, "db").await.is_err());
    }
}
