//! # tierdb-engine: the one way to open a tierdb database
//!
//! A database is a prefix in a capacity store (a local directory, MinIO or S3) holding a
//! key-value database (SlateDB), and, on top of it, a ZODB object store and columnar tables.
//! Opening one means: parse its URL, open the capacity store with its cache tiers, open the
//! key-value engine as the writer or as a follower, and on close undo all of that in order.
//! The command line, the Python package and the SQL server all do it here, through
//! [`Database::open`] with one [`OpenOptions`], whose defaults ([`OpenOptions::new`]) are
//! chosen in one place for each [`Workload`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), tierdb_engine::Error> {
//! use tierdb_engine::{Database, OpenOptions, Role, Workload};
//! let mut options = OpenOptions::new(Workload::Objects, Role::Writer);
//! options.kv.create = true;
//! let db = Database::open("/tmp/zodb", &options).await?;
//! let objects = db.objects().await?;
//! // ... commit transactions through `objects` ...
//! db.close().await?;
//! # Ok(()) }
//! ```

use tierdb_kv::{KvDb, KvHandle, KvOptions, KvReplica};
use tierdb_store::{CapacityOptions, StoreUrl, TierOptions, TieredStore};

pub use tierdb_kv::Compression;
pub use tierdb_store::{S3Options, WriteMode};

mod error;
mod supervise;
pub use error::{Error, ErrorKind, Result};
pub use supervise::{OpenError, Opened, Opener, Supervised};

/// What a database is opened for. It only picks defaults (see [`OpenOptions::new`]): any
/// database can be opened for any workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Keys and values by hand (`tierdb kv`, `info`, `clone`).
    Kv,
    /// The ZODB object store: small records loaded by key, read again and again.
    Objects,
    /// Columnar tables and SQL: large scans of immutable segment files.
    Tables,
}

/// Whether this process writes the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The one writer. Opening fences a previous writer whose lease went stale; a running
    /// writer is fenced only with `kv.take_over`, and otherwise the open is refused.
    Writer,
    /// A read-only follower: it writes nothing to the database, fences nobody, and sees the
    /// writer's commits within `kv.poll_interval`.
    Follower,
}

/// The capacity store and its cache tiers.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    pub tiers: TierOptions,
    pub s3: S3Options,
}

/// Everything [`Database::open`] needs besides the URL.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub role: Role,
    pub store: StoreOptions,
    /// The key-value engine; `kv.create` creates a missing database (and, on a local
    /// filesystem, its directory), `kv.take_over` fences a running writer.
    pub kv: KvOptions,
    /// A follower that lives long (a server, a ZODB storage) keeps a checkpoint of the state
    /// it reads, refreshed as it follows, so the writer's garbage collector cannot delete
    /// files under it. Without it a follower writes nothing at all: right for a short read.
    pub pin_checkpoint: bool,
    /// The tiers' block size for the database's table segments (`<db>/tables/`), when the
    /// caller set no block sizes itself: 1 MiB for the Tables workload, none (the default
    /// block size) otherwise.
    pub segment_block_bytes: Option<u64>,
}

impl OpenOptions {
    /// The defaults for `workload`, the only place they are chosen:
    ///
    /// | setting | Kv | Objects | Tables |
    /// |---|---|---|---|
    /// | SST compression | zstd | lz4 (records are zstd-compressed already) | lz4 (row tables' point reads decode a block each: zstd made a decoder context per block, a sixth of the CPU of a point select) |
    /// | SlateDB block cache | off (the DRAM tier holds blocks) | 32 MiB (a load is two gets: keep decoded blocks) | off here; `tierdb sql`/`serve` give it a quarter of the DRAM tier (`--block-cache-bytes`) |
    /// | sequential cutoff | 1 MiB (a compaction's reads do not flush the cache) | 1 MiB | none (segment scans are the hot data) |
    /// | block size of table segments | default (64 KiB) | default | 256 KiB (`SEGMENT_BLOCK_BYTES`) |
    ///
    /// Everything else is [`TierOptions::default`] and [`KvOptions::default`].
    pub fn new(workload: Workload, role: Role) -> Self {
        let mut store = StoreOptions::default();
        store.tiers.memory_bytes = default_memory_bytes();
        let mut kv = KvOptions::default();
        let mut segment_block_bytes = None;
        match workload {
            Workload::Kv => {}
            Workload::Objects => {
                kv.compression = Compression::Lz4;
                kv.block_cache_bytes = 32 << 20;
            }
            Workload::Tables => {
                kv.compression = Compression::Lz4;
                store.tiers.sequential_cutoff_bytes = u64::MAX;
                segment_block_bytes = Some(SEGMENT_BLOCK_BYTES);
            }
        }
        OpenOptions {
            role,
            store,
            kv,
            pin_checkpoint: false,
            segment_block_bytes,
        }
    }
}

/// The tiers' block size for table segments (key-value SST blocks and ZODB records keep the
/// default, 64 KiB). Measured at SSB SF 1 cold from MinIO (docs/benchmarks.md, 2026-12-07):
/// 1 MiB blocks fetched 1.43x the bytes the queries read, 256 KiB 1.11x, in as many GETs
/// (a read's adjacent missing blocks are one GET) and the same warm time; 64 KiB fetched
/// 1.02x but served warm reads ~7% slower (more pieces to join per column chunk).
pub const SEGMENT_BLOCK_BYTES: u64 = 256 << 10;

/// The store options for the database at `path`: what the engines write there that never
/// changes once written (compacted SSTs, named by ULID, and Parquet segments, named by
/// UUID: immutable, so their metadata is kept without expiry and across restarts), and the
/// block size of table segments. WAL SSTs are not declared: their names are sequence
/// numbers that start again at 1 when a database is dropped and created again at the same
/// path, so a name can come back with other bytes.
fn store_options_for(path: &str, options: &OpenOptions) -> StoreOptions {
    let mut store = options.store.clone();
    let tiers = &mut store.tiers;
    for dir in ["compacted", "tables"] {
        tiers.immutable_prefixes.push(format!("{path}/{dir}/"));
    }
    // Unless the caller chose block sizes itself.
    if let Some(b) = options.segment_block_bytes
        && tiers.block_bytes_by_prefix.is_empty()
    {
        tiers
            .block_bytes_by_prefix
            .push((format!("{path}/tables/"), b));
    }
    store
}

/// The DRAM tier's default: a quarter of the machine's memory, at least 256 MiB (one
/// database process per machine is the common case; set `--memory` when several share it).
pub fn default_memory_bytes() -> u64 {
    (physical_memory_bytes() / 4).max(256 << 20)
}

/// The machine's memory (MemTotal), 0 if it cannot be read.
pub fn physical_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Splits a database URL into the store to open and the database's path in it.
///
/// A database URL names its own prefix: `s3://bucket/a/b` is the database at `a/b` in the
/// bucket, `/data/db` the one at `data/db` under `/`. The store is opened at the bucket (or
/// the filesystem root) so that a clone and its source, which refer to each other by path,
/// resolve the same way from either.
pub fn locate(url: &str) -> Result<(StoreUrl, String)> {
    let invalid = |reason: &str| {
        Error::from(tierdb_store::Error::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        })
    };
    match StoreUrl::parse(url)? {
        StoreUrl::Local(dir) => {
            let rel = dir
                .strip_prefix("/")
                .map_err(|_| invalid("not an absolute path"))?
                .to_str()
                .ok_or_else(|| invalid("the path is not UTF-8"))?
                .to_string();
            if rel.is_empty() {
                return Err(invalid("a database needs its own directory, not /"));
            }
            Ok((StoreUrl::Local("/".into()), rel))
        }
        StoreUrl::S3 { bucket, prefix } => {
            if prefix.is_empty() {
                return Err(invalid(&format!(
                    "name a prefix in the bucket, e.g. s3://{bucket}/mydb"
                )));
            }
            Ok((
                StoreUrl::S3 {
                    bucket,
                    prefix: String::new(),
                },
                prefix,
            ))
        }
        StoreUrl::Memory => Ok((StoreUrl::Memory, "db".into())),
    }
}

/// Opens the tiered store at `url` (a store, not a database: `tierdb store …`). With
/// `create`, a missing local directory is created.
pub async fn open_store(url: &str, options: &StoreOptions, create: bool) -> Result<TieredStore> {
    let url = StoreUrl::parse(url)?;
    open_root(&url, options, create, true).await
}

/// Opens the store at `root`. `probe` makes one cheap request first, so that a wrong
/// endpoint, a missing bucket or refused credentials are reported with advice at open.
async fn open_root(
    root: &StoreUrl,
    options: &StoreOptions,
    create: bool,
    probe: bool,
) -> Result<TieredStore> {
    options.tiers.validate()?;
    let capacity_options = CapacityOptions {
        create,
        s3: options.s3.clone(),
        ..CapacityOptions::default()
    };
    let capacity = tierdb_store::open_capacity(root, &capacity_options)?;
    if probe {
        tierdb_store::check_reachable(root, capacity.as_ref()).await?;
    }
    Ok(TieredStore::with_capacity(capacity, root.to_string(), options.tiers.clone()).await?)
}

/// Opens the store holding the database `url`, and says where in it the database is: for
/// tools that read a database's files without opening its engine (`tierdb info`).
pub async fn open_store_of(url: &str, options: &StoreOptions) -> Result<(TieredStore, String)> {
    let (root, path) = locate(url)?;
    // A local root is "/": listing it to probe would walk the filesystem.
    let probe = matches!(root, StoreUrl::S3 { .. });
    Ok((open_root(&root, options, false, probe).await?, path))
}

/// An open database: its store with the cache tiers, and its key-value engine as the writer
/// or a follower. The engines above it ([`Database::objects`], [`Database::tables`]) share
/// both. Close it with [`Database::close`] (or [`Database::abandon`] after a failure).
#[derive(Debug)]
pub struct Database {
    url: String,
    kv: KvHandle,
}

impl Database {
    /// Opens the database at `url` (a directory, or `s3://bucket/prefix`).
    pub async fn open(url: &str, options: &OpenOptions) -> Result<Self> {
        let (root, path) = locate(url)?;
        let probe = matches!(root, StoreUrl::S3 { .. });
        let create = options.kv.create && options.role == Role::Writer;
        let store = open_root(&root, &store_options_for(&path, options), create, probe).await?;
        match Self::open_kv(store.clone(), url, &path, options).await {
            Ok(kv) => Ok(Database {
                url: url.to_string(),
                kv,
            }),
            Err(e) => {
                // Nothing was acknowledged through this open: close what it opened so the
                // cache directory is free for the next attempt.
                if let Err(close) = store.close().await {
                    tracing::warn!(db = url, error = %close, "closing the store after a failed open");
                }
                Err(e)
            }
        }
    }

    async fn open_kv(
        store: TieredStore,
        url: &str,
        path: &str,
        options: &OpenOptions,
    ) -> Result<KvHandle> {
        let poll = options.kv.poll_interval;
        Ok(match options.role {
            Role::Writer => {
                let kv = KvDb::open(store, path, url, &options.kv).await?;
                // DDL of transactions a previous process left open is rolled back before
                // anything reads the catalog (tierdb-tables `ddlundo.rs` invariant 5).
                #[cfg(feature = "tables")]
                tierdb_tables::ddlundo::recover(&kv).await?;
                KvHandle::Writer(kv.into())
            }
            Role::Follower if options.pin_checkpoint => {
                KvHandle::Follower(KvReplica::open(store, path, url, poll).await?.into())
            }
            Role::Follower => KvHandle::Follower(
                KvReplica::open_unpinned(store, path, url, poll)
                    .await?
                    .into(),
            ),
        })
    }

    /// The URL the database was opened by (used in messages).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's prefix in its store.
    pub fn path(&self) -> String {
        self.kv.path().to_string()
    }

    pub fn store(&self) -> &TieredStore {
        self.kv.store()
    }

    /// The key-value engine, as the engines above take it.
    pub fn kv(&self) -> &KvHandle {
        &self.kv
    }

    pub fn is_read_only(&self) -> bool {
        self.kv.is_read_only()
    }

    /// The writer, or an error saying that `what` needs one.
    pub fn writer(&self, what: &str) -> Result<&std::sync::Arc<KvDb>> {
        self.kv.writer().ok_or_else(|| Error::ReadOnly {
            db: self.url.clone(),
            what: what.to_string(),
        })
    }

    /// The ZODB object store kept in this database (read-only through a follower).
    #[cfg(feature = "objects")]
    pub async fn objects(&self) -> Result<tierdb_objects::VersionedStore> {
        Ok(tierdb_objects::VersionedStore::open(self.kv.clone()).await?)
    }

    /// The columnar tables of this database (read-only through a follower).
    #[cfg(feature = "tables")]
    pub fn tables(&self) -> tierdb_tables::Tables {
        tierdb_tables::Tables::open(self.kv.clone())
    }

    /// Closes the key-value engine (a writer flushes its WAL and releases its lease), then
    /// the store, whose write-back log uploads what it still holds. Both are attempted; the
    /// first error is returned. A write-back log that cannot drain keeps every acknowledged
    /// write on the cache device for the next open.
    pub async fn close(&self) -> Result<()> {
        let kv = self.kv.close().await.map_err(Error::from);
        let store = self.store().close().await.map_err(Error::drain);
        kv.and(store)
    }

    /// Gives the database up without flushing, as a crash would: for a handle whose engine
    /// failed. The write-back log keeps every acknowledged write for the next open.
    pub async fn abandon(&self) {
        self.kv.abandon().await;
    }
}

/// Makes `dst` a zero-copy clone of `src`: it shares `src`'s SST files (so both must be in
/// the same bucket or local filesystem) and takes its own writes.
pub async fn clone_database(src: &str, dst: &str, options: &StoreOptions) -> Result<()> {
    let (src_root, src_path) = locate(src)?;
    let (dst_root, dst_path) = locate(dst)?;
    if src_root != dst_root {
        return Err(Error::CloneAcrossStores {
            src: src.to_string(),
            dst: dst.to_string(),
        });
    }
    let probe = matches!(src_root, StoreUrl::S3 { .. });
    let store = open_root(&src_root, options, false, probe).await?;
    let cloned = tierdb_kv::clone_db(&store, &src_path, &dst_path, src, dst).await;
    let closed = store.close().await;
    cloned?;
    closed.map_err(Error::drain)
}
