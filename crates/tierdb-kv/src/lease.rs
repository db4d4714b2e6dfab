//! `writer.json`: who writes a database, refreshed while it does.
//!
//! SlateDB lets a new writer take a database over at any time (it fences the old one). That
//! is right after a crash and wrong by accident: `tierdb kv put` next to a running service
//! would fence the service. So a writer keeps a heartbeat in `<db>/writer.json`, and opening
//! a database whose writer's heartbeat is fresh fails with a clear error unless the caller
//! asks to take over (`KvOptions::take_over`, `--take-over`). A writer that crashed stops
//! beating and is taken over once the heartbeat is older than [`LEASE_STALE`], or at once
//! from the same host when its process is gone. The lease is advisory: fencing (SlateDB's
//! epochs) is what keeps two writers from corrupting a database.

use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{KvError, Result};
use crate::marker::store_err;

pub const LEASE_NAME: &str = "writer.json";
/// How often a writer refreshes its lease.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A lease older than this is a crashed writer's.
pub const LEASE_STALE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lease {
    pub host: String,
    pub pid: u32,
    pub opened_ms: u64,
    pub heartbeat_ms: u64,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

pub fn lease_path(db: &Path) -> Path {
    db.clone().join(LEASE_NAME)
}

pub async fn read(store: &dyn ObjectStore, db: &Path, name: &str) -> Result<Option<Lease>> {
    match store.get(&lease_path(db)).await {
        Ok(got) => {
            let bytes = got.bytes().await.map_err(|e| store_err(name, e))?;
            // A damaged lease is no reason to refuse a database: treat it as absent.
            Ok(serde_json::from_slice(&bytes).ok())
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(store_err(name, e)),
    }
}

impl Lease {
    pub fn new() -> Self {
        let now = now_ms();
        Lease {
            host: host(),
            pid: std::process::id(),
            opened_ms: now,
            heartbeat_ms: now,
        }
    }

    pub fn age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.heartbeat_ms))
    }

    /// Whether this lease says another writer is running now.
    pub fn is_live(&self) -> bool {
        if self.age() >= LEASE_STALE {
            return false;
        }
        if self.host == host() {
            return self.pid != std::process::id() && pid_alive(self.pid);
        }
        true
    }

    pub async fn write(&self, store: &dyn ObjectStore, db: &Path, name: &str) -> Result<()> {
        let bytes = serde_json::to_vec(self).map_err(|e| KvError::Invalid {
            db: name.to_string(),
            what: format!("cannot encode writer.json: {e}"),
        })?;
        store
            .put(&lease_path(db), PutPayload::from(Bytes::from(bytes)))
            .await
            .map_err(|e| store_err(name, e))?;
        Ok(())
    }
}

impl Default for Lease {
    fn default() -> Self {
        Self::new()
    }
}

/// Fails if another writer holds a live lease and `take_over` is off.
pub async fn check(store: &dyn ObjectStore, db: &Path, name: &str, take_over: bool) -> Result<()> {
    let mut attempt = 0;
    let lease = loop {
        match read(store, db, name).await {
            Ok(lease) => break lease,
            Err(e) if attempt >= 3 || e.kind() != crate::ErrorKind::Retry => return Err(e),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
    };
    match lease {
        Some(lease) if lease.is_live() && !take_over => Err(KvError::WriterActive {
            db: name.to_string(),
            age_ms: lease.age().as_millis() as u64,
            host: lease.host,
            pid: lease.pid,
        }),
        _ => Ok(()),
    }
}
