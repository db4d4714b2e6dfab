//! A database that is reopened in place when its engine fails.
//!
//! SlateDB shuts a database handle down when a background task fails, for example when the
//! object store stays away longer than its retries; every later call then returns that stale
//! error, even after the store is back. A long-running process (the SQL server, a worker,
//! a Python application) keeps its database in a [`Supervised`]: when a caller sees the
//! failure it calls [`Supervised::recover`], which gives the old handle up without flushing
//! (acknowledged writes stay in the write-back log, as after a crash) and opens the database
//! again in the background, retrying with backoff for the recovery window; past that
//! [`Supervised::given_up`] returns the reason and the process should exit non-zero so a
//! supervisor can act.
//!
//! Invariants:
//!
//! 1. At most one reopen runs at a time; a `recover` for an engine that was already
//!    replaced does nothing.
//! 2. The lock on the live engine is held only to swap it: callers during a reopen meet the
//!    broken engine and fail at once instead of waiting for the object store.
//! 3. The old handle is abandoned, never closed: closing would try to flush through the
//!    failed engine.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::Database;

/// The error an opener returns (shown in logs and in the final message).
pub type OpenError = Box<dyn std::error::Error + Send + Sync>;

/// What an opener's future yields: the engine built on the database, and the database.
pub type Opened<T> = std::result::Result<(T, Database), OpenError>;

/// Opens the database and builds the engine `T` on it (e.g. the SQL engine).
pub type Opener<T> = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Opened<T>> + Send>> + Send + Sync>;

/// The first pause between reopen attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// An engine `T` over a database, reopened when it fails (see the module documentation).
pub struct Supervised<T> {
    name: String,
    recover_for: Duration,
    open: Opener<T>,
    live: tokio::sync::RwLock<Live<T>>,
    /// A reopen is under way (invariant 1).
    recovering: AtomicBool,
    /// Set when recovery gave up: the reason.
    fatal: tokio::sync::watch::Sender<Option<String>>,
}

struct Live<T> {
    engine: Arc<T>,
    handle: Option<Database>,
}

impl<T> std::fmt::Debug for Supervised<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervised")
            .field("name", &self.name)
            .field("recover_for", &self.recover_for)
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Supervised<T> {
    /// Supervises `engine` on `handle`, both opened by the caller (an error at start is a
    /// configuration problem, reported as the caller reports it, not retried); `open` opens
    /// them again after a failure. `name` names the database in logs; `recover_for` is how
    /// long a reopen keeps trying.
    pub fn new(
        name: impl Into<String>,
        recover_for: Duration,
        open: Opener<T>,
        engine: T,
        handle: Database,
    ) -> Arc<Self> {
        Arc::new(Supervised {
            name: name.into(),
            recover_for,
            open,
            live: tokio::sync::RwLock::new(Live {
                engine: Arc::new(engine),
                handle: Some(handle),
            }),
            recovering: AtomicBool::new(false),
            fatal: tokio::sync::watch::channel(None).0,
        })
    }

    /// The live engine.
    pub async fn engine(&self) -> Arc<T> {
        self.live.read().await.engine.clone()
    }

    /// Starts replacing `broken` (if it is still the live engine) with a freshly opened
    /// one, in the background; `why` is the failure, for the logs.
    pub fn recover(self: &Arc<Self>, broken: &Arc<T>, why: &str) {
        if self.recovering.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, broken, why) = (self.clone(), broken.clone(), why.to_string());
        tokio::spawn(async move {
            this.reopen(&broken, &why).await;
            this.recovering.store(false, Ordering::Release);
        });
    }

    /// Waits until recovery gives up, and returns why.
    pub async fn given_up(&self) -> String {
        let mut rx = self.fatal.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(m) => m.clone().unwrap_or_default(),
            // The sender lives as long as `self`: not reached while `self` is borrowed.
            Err(_) => std::future::pending().await,
        }
    }

    /// Closes the live database (a writer flushes and releases its lease).
    pub async fn close(&self) -> crate::Result<()> {
        let handle = self.live.write().await.handle.take();
        match handle {
            Some(h) => h.close().await,
            None => Ok(()),
        }
    }

    async fn reopen(&self, broken: &Arc<T>, why: &str) {
        let handle = {
            let mut live = self.live.write().await;
            if !Arc::ptr_eq(&live.engine, broken) {
                return; // already reopened (invariant 1)
            }
            live.handle.take()
        };
        tracing::warn!(db = %self.name, reason = why, "the database engine failed; reopening it");
        if let Some(handle) = handle {
            handle.abandon().await; // invariant 3
        }
        let deadline = tokio::time::Instant::now() + self.recover_for;
        let mut pause = FIRST_PAUSE;
        loop {
            match (self.open)().await {
                Ok((engine, handle)) => {
                    tracing::warn!(db = %self.name, "database reopened; serving again");
                    *self.live.write().await = Live {
                        engine: Arc::new(engine),
                        handle: Some(handle),
                    };
                    return;
                }
                Err(e) if tokio::time::Instant::now() + pause < deadline => {
                    tracing::warn!(db = %self.name, error = %e, "reopening failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(e) => {
                    let message = format!(
                        "the database engine failed ({why}) and could not be reopened within \
                         {} s: {e}; acknowledged writes are safe in the write-back log and \
                         the capacity store, and are there when the database is opened again",
                        self.recover_for.as_secs()
                    );
                    self.fatal.send_replace(Some(message));
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OpenOptions, Role, Workload};
    use std::sync::atomic::AtomicUsize;

    /// An opener over a local directory that counts its calls and fails while `broken`.
    fn opener(
        dir: &std::path::Path,
        calls: Arc<AtomicUsize>,
        broken: Arc<AtomicBool>,
    ) -> Opener<usize> {
        let url = dir.to_string_lossy().to_string();
        Arc::new(move || {
            let (url, calls, broken) = (url.clone(), calls.clone(), broken.clone());
            Box::pin(async move {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if broken.load(Ordering::SeqCst) {
                    return Err("the store is away".into());
                }
                let mut options = OpenOptions::new(Workload::Tables, Role::Writer);
                options.kv.create = true;
                let db = Database::open(&url, &options).await?;
                Ok((n, db))
            })
        })
    }

    async fn supervised(recover_for: Duration, open: Opener<usize>) -> Arc<Supervised<usize>> {
        let (engine, handle) = open().await.expect("open");
        Supervised::new("t", recover_for, open, engine, handle)
    }

    #[tokio::test]
    async fn recover_replaces_the_broken_engine_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let calls = Arc::new(AtomicUsize::new(0));
        let broken = Arc::new(AtomicBool::new(false));
        let s = supervised(
            Duration::from_secs(30),
            opener(dir.path(), calls.clone(), broken),
        )
        .await;
        let first = s.engine().await;
        assert_eq!(*first, 0);
        s.recover(&first, "test");
        s.recover(&first, "test again"); // invariant 1: no second reopen
        let mut replaced = s.engine().await;
        while Arc::ptr_eq(&replaced, &first) {
            tokio::task::yield_now().await;
            replaced = s.engine().await;
        }
        assert_eq!(*replaced, 1);
        // A recover naming the old engine does nothing now.
        s.recover(&first, "stale");
        while s.recovering.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(Arc::ptr_eq(&s.engine().await, &replaced));
        s.close().await.expect("close");
    }

    #[tokio::test]
    async fn recovery_gives_up_after_its_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let calls = Arc::new(AtomicUsize::new(0));
        let broken = Arc::new(AtomicBool::new(false));
        let s = supervised(
            Duration::from_secs(2),
            opener(dir.path(), calls.clone(), broken.clone()),
        )
        .await;
        broken.store(true, Ordering::SeqCst);
        let first = s.engine().await;
        s.recover(&first, "the store went away");
        let why = s.given_up().await;
        assert!(why.contains("the store went away"), "{why}");
        assert!(why.contains("could not be reopened within 2 s"), "{why}");
        // Tried with backoff (250 ms, 500 ms, 1 s, ...) inside the window, more than once.
        assert!(calls.load(Ordering::SeqCst) >= 3, "{calls:?}");
    }
}
