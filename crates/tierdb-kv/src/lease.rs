//! `writer/<generation>.json`: who writes a database, claimed atomically, refreshed while
//! it does.
//!
//! SlateDB lets a new writer take a database over at any time (it fences the old one). That
//! is right after a crash and wrong by accident: `tierdb kv put` next to a running service
//! would fence the service, and two writers started together would fence each other after
//! one of them had already acknowledged commits from its write-back log. So a writer must
//! *claim* the database before it opens SlateDB, and the claim is settled by the capacity
//! store, atomically:
//!
//! - Leases are numbered objects `<db>/writer/<generation:020>.json`. To claim, a writer
//!   reads the newest lease; if it is live (fresh heartbeat, not released) it refuses with
//!   [`KvError::WriterActive`] unless asked to take over; otherwise it **creates** the next
//!   generation with a create-if-absent put. Of two writers racing for the same generation
//!   exactly one create succeeds; the other reads the winner's fresh lease and refuses,
//!   before it has opened anything or acknowledged any commit.
//! - The holder refreshes its own generation's heartbeat every [`HEARTBEAT`] and stops when
//!   a newer generation appears (it was taken over; SlateDB's fencing then stops its writes).
//! - Closing cleanly marks the lease released, so the next writer need not wait; a crashed
//!   writer's lease goes stale after [`LEASE_STALE`], or at once from the same host when its
//!   process is gone.
//! - A claimant deletes generations older than its own (best effort).
//!
//! Fencing (SlateDB's writer epochs, WAL creates) is still what keeps two writers from
//! corrupting a database if a lease is ignored (`--take-over`); the lease is what keeps a
//! start race from acknowledging commits that fencing would later discard.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{KvError, Result};
use crate::marker::store_err;

/// The folder of a database that holds its leases.
pub const LEASE_DIR: &str = "writer";
/// How often a writer refreshes its lease.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A lease older than this is a crashed writer's.
pub const LEASE_STALE: Duration = Duration::from_secs(5);
/// Claims lost to a racing writer that took over too (only with `take_over`) before giving up.
const CLAIM_ATTEMPTS_MAX: u32 = 8;
/// Transient store errors a claim retries before giving up.
const TRANSIENT_ATTEMPTS_MAX: u32 = 3;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lease {
    /// Position in the claim order: a claim creates `generation + 1` of the newest.
    #[serde(default)]
    pub generation: u64,
    pub host: String,
    pub pid: u32,
    pub opened_ms: u64,
    pub heartbeat_ms: u64,
    /// Set when the writer closed cleanly.
    #[serde(default)]
    pub released: bool,
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

pub fn lease_dir(db: &Path) -> Path {
    db.clone().join(LEASE_DIR)
}

pub fn lease_path(db: &Path, generation: u64) -> Path {
    lease_dir(db).join(format!("{generation:020}.json"))
}

fn parse_generation(location: &Path) -> Option<u64> {
    let name = location.filename()?;
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20).then(|| digits.parse().ok())?
}

/// Generations present under `db`, ascending.
async fn generations(store: &dyn ObjectStore, db: &Path, name: &str) -> Result<Vec<u64>> {
    let listed: Vec<_> = store
        .list(Some(&lease_dir(db)))
        .try_collect()
        .await
        .map_err(|e| store_err(name, e))?;
    let mut out: Vec<u64> = listed
        .iter()
        .filter_map(|m| parse_generation(&m.location))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The newest lease: its generation (0 if none) and its content (`None` if there is none or
/// it cannot be decoded: a damaged lease is no reason to refuse a database).
pub async fn read_newest(
    store: &dyn ObjectStore,
    db: &Path,
    name: &str,
) -> Result<(u64, Option<Lease>)> {
    let Some(&generation) = generations(store, db, name).await?.last() else {
        return Ok((0, None));
    };
    match store.get(&lease_path(db, generation)).await {
        Ok(got) => {
            let bytes = got.bytes().await.map_err(|e| store_err(name, e))?;
            let lease = serde_json::from_slice::<Lease>(&bytes)
                .ok()
                .map(|l| Lease { generation, ..l });
            Ok((generation, lease))
        }
        // Deleted by a newer claimant between the listing and the read.
        Err(object_store::Error::NotFound { .. }) => Ok((generation, None)),
        Err(e) => Err(store_err(name, e)),
    }
}

/// The newest lease, if any.
pub async fn read(store: &dyn ObjectStore, db: &Path, name: &str) -> Result<Option<Lease>> {
    Ok(read_newest(store, db, name).await?.1)
}

impl Lease {
    fn new(generation: u64) -> Self {
        let now = now_ms();
        Lease {
            generation,
            host: host(),
            pid: std::process::id(),
            opened_ms: now,
            heartbeat_ms: now,
            released: false,
        }
    }

    pub fn age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.heartbeat_ms))
    }

    /// Whether this lease says another writer is running now.
    pub fn is_live(&self) -> bool {
        if self.released || self.age() >= LEASE_STALE {
            return false;
        }
        if self.host == host() {
            return self.pid != std::process::id() && pid_alive(self.pid);
        }
        true
    }

    fn encode(&self, name: &str) -> Result<PutPayload> {
        let bytes = serde_json::to_vec(self).map_err(|e| KvError::Invalid {
            db: name.to_string(),
            what: format!("cannot encode the writer lease: {e}"),
        })?;
        Ok(PutPayload::from(Bytes::from(bytes)))
    }

    /// Rewrites this (held) lease, for a heartbeat or the release.
    pub async fn write(&self, store: &dyn ObjectStore, db: &Path, name: &str) -> Result<()> {
        store
            .put(&lease_path(db, self.generation), self.encode(name)?)
            .await
            .map_err(|e| store_err(name, e))?;
        Ok(())
    }
}

/// Claims `db` for this process (see the module doc): fails with
/// [`KvError::WriterActive`] if another writer holds a live lease, or wins a start race
/// against it, unless `take_over`.
pub async fn claim(
    store: &dyn ObjectStore,
    db: &Path,
    name: &str,
    take_over: bool,
) -> Result<Lease> {
    let mut transient = 0u32;
    for _ in 0..CLAIM_ATTEMPTS_MAX + TRANSIENT_ATTEMPTS_MAX {
        let (newest, current) = read_newest_retrying(store, db, name).await?;
        if let Some(lease) = current.filter(|l| l.is_live() && !take_over) {
            return Err(KvError::WriterActive {
                db: name.to_string(),
                age_ms: lease.age().as_millis() as u64,
                host: lease.host,
                pid: lease.pid,
            });
        }
        let lease = Lease::new(newest + 1);
        let created = store
            .put_opts(
                &lease_path(db, lease.generation),
                lease.encode(name)?,
                PutOptions::from(PutMode::Create),
            )
            .await;
        match created {
            Ok(_) => {
                for old in generations(store, db, name).await.unwrap_or_default() {
                    if old < lease.generation {
                        let _ = store.delete(&lease_path(db, old)).await;
                    }
                }
                return Ok(lease);
            }
            // Another writer claimed this generation first: look again (its lease is live,
            // so without take_over the next round refuses). After a transient failure the
            // create may have taken effect: then the lease found is this process's own,
            // which is not live to it, and the next generation is claimed.
            Err(object_store::Error::AlreadyExists { .. }) => continue,
            Err(e) => {
                let e = store_err(name, e);
                transient += 1;
                if e.kind() != crate::ErrorKind::Retry || transient > TRANSIENT_ATTEMPTS_MAX {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(50 << transient)).await;
            }
        }
    }
    Err(KvError::Invalid {
        db: name.to_string(),
        what: format!(
            "lost {CLAIM_ATTEMPTS_MAX} claims in a row to other writers taking the database over"
        ),
    })
}

async fn read_newest_retrying(
    store: &dyn ObjectStore,
    db: &Path,
    name: &str,
) -> Result<(u64, Option<Lease>)> {
    let mut attempt = 0;
    loop {
        match read_newest(store, db, name).await {
            Ok(found) => return Ok(found),
            Err(e) if attempt >= 3 || e.kind() != crate::ErrorKind::Retry => return Err(e),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use object_store::memory::InMemory;

    #[test]
    fn generations_parse_only_from_lease_names() {
        let db = Path::from("db");
        assert_eq!(parse_generation(&lease_path(&db, 42)), Some(42));
        assert_eq!(parse_generation(&Path::from("db/writer/x.json")), None);
        assert_eq!(parse_generation(&Path::from("db/writer/42.json")), None);
    }

    #[tokio::test]
    async fn a_live_lease_refuses_a_second_claim_and_a_release_allows_it() {
        let store = InMemory::new();
        let db = Path::from("db");
        let mut first = claim(&store, &db, "db", false).await.unwrap();
        assert_eq!(first.generation, 1);
        // Pretend the holder is another live process on another host.
        first.host = "elsewhere".into();
        first.write(&store, &db, "db").await.unwrap();
        let err = claim(&store, &db, "db", false).await.unwrap_err();
        assert!(matches!(err, KvError::WriterActive { .. }), "{err}");
        first.released = true;
        first.write(&store, &db, "db").await.unwrap();
        let second = claim(&store, &db, "db", false).await.unwrap();
        assert_eq!(second.generation, 2);
        assert_eq!(generations(&store, &db, "db").await.unwrap(), [2]);
    }

    #[tokio::test]
    async fn of_two_racing_claims_of_one_generation_one_wins() {
        let store = InMemory::new();
        let db = Path::from("db");
        // The racer created generation 1 between our read and our create.
        let mut racer = Lease::new(1);
        racer.host = "elsewhere".into();
        store
            .put_opts(
                &lease_path(&db, 1),
                racer.encode("db").unwrap(),
                PutOptions::from(PutMode::Create),
            )
            .await
            .unwrap();
        let err = store
            .put_opts(
                &lease_path(&db, 1),
                Lease::new(1).encode("db").unwrap(),
                PutOptions::from(PutMode::Create),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, object_store::Error::AlreadyExists { .. }));
        let err = claim(&store, &db, "db", false).await.unwrap_err();
        assert!(matches!(err, KvError::WriterActive { .. }), "{err}");
        // Taking over claims the next generation.
        assert_eq!(claim(&store, &db, "db", true).await.unwrap().generation, 2);
    }
}
