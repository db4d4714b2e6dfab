//! Settings of a key-value database, with defaults sized for a small machine.

use std::time::Duration;

/// Block compression of SST files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    None,
    Lz4,
    #[default]
    Zstd,
}

impl std::str::FromStr for Compression {
    type Err = tierdb_store::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(tierdb_store::Error::InvalidOption {
                option: "compression",
                reason: format!("unknown compression {other:?}; use none, lz4 or zstd"),
            }),
        }
    }
}

/// How a database is opened and run. See docs/design/kv.md for what each setting trades.
#[derive(Debug, Clone)]
pub struct KvOptions {
    /// Create the database if its prefix is empty. Without it, an empty prefix is an error.
    pub create: bool,
    /// Open even if another writer's lease is live, fencing it (see [`crate::lease`]).
    pub take_over: bool,
    /// Memtable size at which it is frozen and written as an L0 SST.
    pub memtable_bytes: usize,
    /// Unflushed bytes (WAL and memtables) beyond which writers wait.
    pub max_unflushed_bytes: usize,
    /// A background WAL flush for writes nobody waits on. Commits never wait for it: a
    /// commit flushes the WAL itself (group commit), see [`crate::KvDb::commit`].
    pub background_flush: Option<Duration>,
    /// Memtables are written to L0 at the latest after this many WAL flushes, which bounds
    /// recovery work and how stale a replica that skips the WAL can be.
    pub max_wal_flushes_before_l0: u64,
    pub compression: Compression,
    /// Run the compactor inside the writer process.
    pub compaction: bool,
    /// How often a writer polls the manifest (detects fencing without writing) and a
    /// replica polls for new commits: a replica's lag is bounded by this plus one read.
    pub poll_interval: Duration,
    /// Retries of one object store request inside SlateDB before an error surfaces.
    pub store_retries: u32,
    /// SlateDB's cache of decoded SST indexes and filters (small, read on every lookup).
    pub meta_cache_bytes: u64,
    /// SlateDB's cache of decoded data blocks. Off by default: the tiered store's DRAM tier
    /// holds blocks; set it to trade memory for decode work.
    pub block_cache_bytes: u64,
    /// A clean close writes the memtable to L0 when more WAL objects than this wait to be
    /// replayed, so the next open replays at most this many (short-lived processes never
    /// fill a memtable, and would otherwise leave every commit ever made to replay).
    pub max_wal_replay_objects: u64,
    /// Garbage collection: how old a manifest, compaction-state file or replayed WAL object
    /// must be before it is deleted. Conditional overwrites of SlateDB's GC boundary objects
    /// (on every backend, see `tierdb_store::capacity`) keep a stalled writer from recreating
    /// what was deleted, so this only has to outlast a reader between listing and reading.
    pub gc_min_age: Duration,
    /// How old an SST no manifest or checkpoint refers to must be before it is deleted
    /// (a replica may still read one from the manifest it loaded).
    pub gc_sst_min_age: Duration,
    /// How long a clean close waits for compactions still running (ones a short-lived writer
    /// started) before it stops the compactor anyway.
    pub close_compaction_wait: Duration,
}

/// How long a WAL fence object (zero bytes, one per writer open) is kept once it is below
/// the replay boundary. SlateDB warns that deleting a fence lets a writer that stalled
/// mid-flush for longer create the WAL object it fenced; such a writer cannot acknowledge
/// the commit, since a commit ending long after its writer last confirmed its lease reads
/// the leases first (see `heartbeat.rs`, whose recheck interval is far below this).
pub const WAL_FENCE_MIN_AGE: Duration = Duration::from_secs(600);

impl Default for KvOptions {
    fn default() -> Self {
        KvOptions {
            create: false,
            take_over: false,
            memtable_bytes: 16 << 20,
            max_unflushed_bytes: 256 << 20,
            background_flush: Some(Duration::from_millis(100)),
            max_wal_flushes_before_l0: 4096,
            compression: Compression::default(),
            compaction: true,
            poll_interval: Duration::from_millis(500),
            store_retries: 8,
            meta_cache_bytes: 16 << 20,
            block_cache_bytes: 0,
            max_wal_replay_objects: 64,
            gc_min_age: Duration::from_secs(60),
            gc_sst_min_age: Duration::from_secs(300),
            close_compaction_wait: Duration::from_secs(3),
        }
    }
}

impl KvOptions {
    pub(crate) fn validate(&self, db: &str) -> crate::Result<()> {
        let bad = |what: String| {
            Err(crate::KvError::Invalid {
                db: db.to_string(),
                what,
            })
        };
        if self.memtable_bytes < 64 << 10 {
            return bad(format!(
                "memtable size {} is below the 64 KiB minimum",
                self.memtable_bytes
            ));
        }
        if self.max_unflushed_bytes < self.memtable_bytes {
            return bad("max unflushed bytes must be at least the memtable size".into());
        }
        if self.poll_interval.is_zero() {
            return bad("the poll interval must be positive".into());
        }
        Ok(())
    }

    /// SlateDB's in-process caches as configured.
    pub fn db_cache(&self) -> std::sync::Arc<dyn slatedb::db_cache::DbCache> {
        use slatedb::db_cache::DbCache;
        use slatedb::db_cache::foyer::{FoyerCache, FoyerCacheOptions};
        let cache = |bytes: u64| {
            (bytes > 0).then(|| {
                std::sync::Arc::new(FoyerCache::new_with_opts(FoyerCacheOptions {
                    max_capacity: bytes,
                    shards: 4,
                })) as std::sync::Arc<dyn DbCache>
            })
        };
        std::sync::Arc::new(
            slatedb::db_cache::SplitCache::new()
                .with_meta_cache(cache(self.meta_cache_bytes))
                .with_block_cache(cache(self.block_cache_bytes))
                .build(),
        )
    }

    pub fn settings(&self) -> slatedb::Settings {
        // Polls short enough that a writer living a fraction of a second can finish the
        // compaction it started before it closes (see `KvDb::close`); SlateDB's 5 s would
        // leave it running, and the oldest unfinished compaction holds back SST collection.
        let compactor_options = self.compaction.then(|| {
            let defaults = slatedb::config::CompactorOptions::default();
            slatedb::config::CompactorOptions {
                poll_interval: Duration::from_millis(500),
                worker: defaults
                    .worker
                    .clone()
                    .map(|w| slatedb::config::CompactionWorkerOptions {
                        compactions_poll_interval: Duration::from_millis(200),
                        ..w
                    }),
                ..defaults
            }
        });
        slatedb::Settings {
            flush_interval: self.background_flush,
            manifest_poll_interval: self.poll_interval,
            l0_sst_size_bytes: self.memtable_bytes,
            max_unflushed_bytes: self.max_unflushed_bytes,
            max_wal_flushes_before_l0_flush: self.max_wal_flushes_before_l0,
            compactor_options,
            compression_codec: match self.compression {
                Compression::None => None,
                Compression::Lz4 => Some(slatedb::config::CompressionCodec::Lz4),
                Compression::Zstd => Some(slatedb::config::CompressionCodec::Zstd),
            },
            object_store_max_retries: Some(self.store_retries),
            garbage_collector_options: Some(self.gc_options()),
            ..slatedb::Settings::default()
        }
    }

    /// SlateDB's garbage collector as configured: run in the writer every ten minutes, and
    /// once more when it closes (see [`crate::KvDb::close`]).
    pub fn gc_options(&self) -> slatedb::config::GarbageCollectorOptions {
        use slatedb::config::GarbageCollectorDirectoryOptions as Dir;
        let dir = |min_age| {
            Some(Dir {
                interval: Some(Duration::from_secs(600)),
                min_age,
                dry_run: false,
            })
        };
        slatedb::config::GarbageCollectorOptions {
            manifest_options: dir(self.gc_min_age),
            wal_options: dir(self.gc_min_age),
            wal_fence_options: dir(WAL_FENCE_MIN_AGE),
            compacted_options: dir(self.gc_sst_min_age),
            compactions_options: dir(self.gc_min_age),
            boundary_files_enabled: true,
            object_store_max_retries: Some(self.store_retries),
            ..Default::default()
        }
    }
}
