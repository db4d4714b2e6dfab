//! # tierdb-store: object storage made fast by cache tiers
//!
//! tierdb keeps the whole database in object storage (a local directory, MinIO or S3) and
//! puts a DRAM tier, a fast-device tier and a durable write-back log in front of it. This
//! crate is that stack, behind one type, [`TieredStore`], which implements
//! `object_store::ObjectStore`, so the engines above (SlateDB for key-value data, Parquet
//! segments for SQL tables) read and write through it without knowing about tiers.
//!
//! ```text
//!   get ──> pending write-back? ──> DRAM ──> device ──> capacity store (If-Match e_tag)
//!   put ──> write-through: capacity, then cache │ write-around: capacity │
//!           write-back: fsync'd log on the device, acknowledged; cleaner uploads later
//! ```
//!
//! What it is not: a cache coherence protocol between writers. One process writes a given
//! database (SlateDB fences the others); readers in other processes see new objects at
//! once and overwritten objects within `meta_ttl` (see `docs/design/tiered-store.md`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use object_store::{ObjectStore, ObjectStoreExt, path::Path};
//! use tierdb_store::{CapacityOptions, StoreUrl, TierOptions, TieredStore, WriteMode};
//!
//! let url = StoreUrl::parse("/tmp/tierdb-demo")?;
//! let options = TierOptions {
//!     cache_dir: Some("/tmp/tierdb-cache".into()),
//!     cache_bytes: 64 << 20,
//!     write_mode: WriteMode::WriteBack,
//!     ..TierOptions::default()
//! };
//! let capacity = CapacityOptions { create: true, ..Default::default() };
//! let store = TieredStore::open(&url, &capacity, options).await?;
//! store.put(&Path::from("hello"), "world".into()).await?; // durable in the device log
//! let bytes = store.get(&Path::from("hello")).await?.bytes().await?;
//! assert_eq!(&bytes[..], b"world");
//! store.close().await?; // uploaded to the capacity store
//! # Ok(()) }
//! ```

pub use capacity::{
    CapacityOptions, S3Options, StoreUrl, check_reachable, describe_store_error, open_capacity,
};
pub use error::{Damage, Error, ErrorKind, Result, STORE_NAME, store_error_kind};
pub use fault::{FaultConfig, FaultStore};
pub use options::{Eviction, TierOptions, WriteMode};
pub use readcache::admission::{AdmissionPolicy, AdmitAll, SequentialCutoff};
pub use stats::{
    CapacityStats, DeviceStats, DramStats, STATS_FILE, SavedStats, TierStats, WriteBackStats,
};
pub use tiered::TieredStore;
pub use wblog::recovery::{DroppedRange, SalvageReport};

/// Salvages the damaged write-back log of the cache directory `cache_dir` (which no process
/// may be using: its lock is taken): keeps every readable record, drops and reports the
/// unreadable byte ranges, and moves the damaged segment files aside unchanged. Run it only
/// after opening failed with [`Error::LogCorrupt`] and the device cannot be restored: writes
/// in the dropped ranges that were not yet uploaded are lost. See `wblog::recovery`.
pub fn salvage_write_back_log(cache_dir: &std::path::Path) -> Result<SalvageReport> {
    let dir = cachedir::CacheDir::lock(cache_dir)?;
    let report = wblog::recovery::salvage(&dir.wblog_dir());
    dir.release();
    report
}

mod cachedir;
pub mod capacity;
mod error;
pub mod fault;
#[doc(hidden)]
pub mod fuzzing;
mod localdir;
mod meta;
pub mod options;
pub mod readcache;
pub mod stats;
pub mod testpoint;
mod tiered;
mod wblog;
