//! Settings of the tiered store.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// How writes reach the capacity store, named as Open CAS names its cache modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Written to the capacity store before the write is acknowledged, and to the read cache.
    #[default]
    WriteThrough,
    /// Written to the capacity store only; the read cache is not filled by writes.
    WriteAround,
    /// Appended to the fsync'd write-back log on the cache device and acknowledged; a
    /// background cleaner uploads it to the capacity store.
    WriteBack,
}

impl FromStr for WriteMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "write-through" => Ok(WriteMode::WriteThrough),
            "write-around" => Ok(WriteMode::WriteAround),
            "write-back" => Ok(WriteMode::WriteBack),
            other => Err(format!(
                "unknown write mode {other:?}; use write-through, write-around or write-back"
            )),
        }
    }
}

impl fmt::Display for WriteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WriteMode::WriteThrough => "write-through",
            WriteMode::WriteAround => "write-around",
            WriteMode::WriteBack => "write-back",
        })
    }
}

/// Eviction policy of the DRAM tier; all are foyer's implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Eviction {
    Lru,
    /// W-TinyLFU: a small LRU window in front of a frequency-filtered main space.
    #[default]
    Lfu,
    Fifo,
    S3Fifo,
    Sieve,
}

impl Eviction {
    pub const ALL: [Eviction; 5] = [
        Eviction::Lru,
        Eviction::Lfu,
        Eviction::Fifo,
        Eviction::S3Fifo,
        Eviction::Sieve,
    ];

    /// foyer's configuration for this policy.
    pub fn foyer_config(self) -> foyer::EvictionConfig {
        match self {
            Eviction::Lru => foyer::LruConfig::default().into(),
            Eviction::Lfu => foyer::LfuConfig::default().into(),
            Eviction::Fifo => foyer::FifoConfig::default().into(),
            Eviction::S3Fifo => foyer::S3FifoConfig::default().into(),
            Eviction::Sieve => foyer::SieveConfig {}.into(),
        }
    }
}

impl FromStr for Eviction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Eviction::ALL
            .into_iter()
            .find(|e| e.to_string() == s)
            .ok_or_else(|| {
                format!("unknown eviction policy {s:?}; use lru, lfu, fifo, s3fifo or sieve")
            })
    }
}

impl fmt::Display for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Eviction::Lru => "lru",
            Eviction::Lfu => "lfu",
            Eviction::Fifo => "fifo",
            Eviction::S3Fifo => "s3fifo",
            Eviction::Sieve => "sieve",
        })
    }
}

/// Settings of a [`crate::TieredStore`].
#[derive(Debug, Clone)]
pub struct TierOptions {
    /// Bytes of DRAM for cached blocks; 0 turns the DRAM tier off.
    pub memory_bytes: u64,
    /// Directory on the fast device for the device tier and the write-back log. Without it
    /// there is no device tier and write-back is refused.
    pub cache_dir: Option<PathBuf>,
    /// Bytes of the device tier inside `cache_dir`; 0 turns the device tier off.
    pub cache_bytes: u64,
    /// Size of a cached block (alignment of cached ranges).
    pub block_bytes: u64,
    pub write_mode: WriteMode,
    pub eviction: Eviction,
    /// Open CAS's sequential cutoff: once one reader has read this many bytes of one object
    /// in sequence, further misses of that run bypass the caches.
    pub sequential_cutoff_bytes: u64,
    /// Cap on write-back data not yet uploaded; writers wait when it is reached.
    pub dirty_bytes_max: u64,
    /// How long a write-back writer waits for room under the dirty cap before its write goes
    /// straight to the capacity store instead (write-through), which fails after the
    /// capacity store's own bounded retries if that store is down. The same fallback is
    /// taken when the cache device is full. Never an unbounded wait.
    pub dirty_wait_max: Duration,
    /// The write-back log starts a new segment file after this many bytes.
    pub log_segment_bytes: u64,
    /// Uploads the write-back cleaner runs at once.
    pub upload_concurrency: usize,
    /// A flush reports failure once one upload has failed this many times in a row.
    pub upload_attempts_max: u32,
    /// How long object metadata (size, e_tag) learned from the capacity store is trusted for
    /// objects not written through this store. See docs/design/tiered-store.md.
    pub meta_ttl: Duration,
    /// Path prefixes whose objects never change once written (SSTs, Parquet segments): their
    /// metadata is trusted without expiry and kept in the device tier, so no read of them
    /// waits for a metadata request after the first one, across restarts too. An object
    /// under such a prefix may be deleted, but never overwritten with other bytes.
    pub immutable_prefixes: Vec<String>,
    /// Block sizes for objects under a prefix (longest prefix wins), instead of
    /// `block_bytes`: large blocks for scanned column segments, small ones for point reads.
    pub block_bytes_by_prefix: Vec<(String, u64)>,
}

impl Default for TierOptions {
    fn default() -> Self {
        Self {
            memory_bytes: 256 << 20,
            cache_dir: None,
            cache_bytes: 0,
            block_bytes: 64 << 10,
            write_mode: WriteMode::WriteThrough,
            eviction: Eviction::default(),
            sequential_cutoff_bytes: 1 << 20,
            dirty_bytes_max: 256 << 20,
            dirty_wait_max: Duration::from_secs(10),
            log_segment_bytes: 64 << 20,
            upload_concurrency: 8,
            upload_attempts_max: 5,
            meta_ttl: Duration::from_secs(10),
            immutable_prefixes: Vec::new(),
            block_bytes_by_prefix: Vec::new(),
        }
    }
}

impl TierOptions {
    /// Checks the settings before anything is opened or created.
    pub fn validate(&self) -> crate::Result<()> {
        let options = self;
        let bad = |option, reason: &str| {
            Err(crate::Error::InvalidOption {
                option,
                reason: reason.into(),
            })
        };
        if options.block_bytes == 0 || options.block_bytes > 64 << 20 {
            return bad("block_bytes", "must be between 1 byte and 64 MiB");
        }
        if options
            .block_bytes_by_prefix
            .iter()
            .any(|(_, b)| *b == 0 || *b > 64 << 20)
        {
            return bad(
                "block_bytes_by_prefix",
                "a block size must be between 1 byte and 64 MiB",
            );
        }
        if options.cache_dir.is_none() && options.cache_bytes > 0 {
            return bad("cache_bytes", "a device tier needs --cache-dir");
        }
        if options.cache_dir.is_none() && options.write_mode == WriteMode::WriteBack {
            return bad(
                "write_mode",
                "write-back needs --cache-dir on a fast device for its log",
            );
        }
        if options.write_mode == WriteMode::WriteBack && options.dirty_bytes_max < 2 {
            return bad(
                "dirty_bytes_max",
                "write-back needs a dirty-byte cap of at least 2 bytes",
            );
        }
        if options.cache_bytes > 0 && options.cache_bytes < 4 * options.largest_block().max(1 << 20)
        {
            return bad(
                "cache_bytes",
                "the device tier needs at least 4 MiB (and 4 blocks)",
            );
        }
        Ok(())
    }

    /// The block size of objects at `path`.
    pub fn block_bytes_of(&self, path: &str) -> u64 {
        self.block_bytes_by_prefix
            .iter()
            .filter(|(prefix, _)| path.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map_or(self.block_bytes, |(_, b)| *b)
    }

    /// The largest block any object is cut into.
    pub fn largest_block(&self) -> u64 {
        self.block_bytes_by_prefix
            .iter()
            .map(|(_, b)| *b)
            .fold(self.block_bytes, u64::max)
    }

    /// Whether the object at `path` never changes once written.
    pub fn is_immutable(&self, path: &str) -> bool {
        self.immutable_prefixes
            .iter()
            .any(|prefix| path.starts_with(prefix.as_str()))
    }
}
