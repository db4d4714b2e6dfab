//! Settings shared by the commands: the cache tiers, the S3 endpoint and the key-value
//! engine. Each is an override: a setting not given keeps the default that
//! `tierdb_engine::OpenOptions::new` chose for the command's workload.

use std::path::PathBuf;

use bytesize::ByteSize;
use clap::Args;
use tierdb_engine::{Compression, OpenOptions, Role, S3Options, StoreOptions, Workload};
use tierdb_store::{CapacityOptions, Eviction, TierOptions, WriteMode};

/// Cache tier settings.
#[derive(Args, Debug, Clone)]
pub struct TierArgs {
    /// Directory on a fast device for the device tier and the write-back log.
    #[arg(long, env = "TIERDB_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Size of the device tier, e.g. 10GiB [default: 0, off].
    #[arg(long)]
    pub cache_bytes: Option<ByteSize>,
    /// Size of the DRAM tier, 0 = off [default: a quarter of the machine's memory, at
    /// least 256MiB; for the SQL commands, at most a third of --memory-limit].
    #[arg(long)]
    pub memory_bytes: Option<ByteSize>,
    /// write-through, write-around or write-back [default: write-through].
    #[arg(long)]
    pub write_mode: Option<WriteMode>,
    /// Eviction policy of the DRAM tier: lru, lfu, fifo, s3fifo, sieve [default: lfu].
    #[arg(long)]
    pub eviction: Option<Eviction>,
    /// Cached block size of every object [default: 64KiB; 256KiB for table segments].
    #[arg(long)]
    pub block_bytes: Option<ByteSize>,
    /// Write-back: cap on data not yet uploaded; writers wait at the cap [default: 256MiB].
    #[arg(long)]
    pub dirty_bytes_max: Option<ByteSize>,
    /// Write-back: longest wait for room under the cap (or on a full cache device) before a
    /// write goes straight to the capacity store instead [default: 10s].
    #[arg(long)]
    pub dirty_wait_max: Option<humantime::Duration>,
    /// A read run longer than this bypasses the caches [default: 1MiB; none for the SQL
    /// commands, whose segment scans are the hot data].
    #[arg(long)]
    pub sequential_cutoff: Option<ByteSize>,
    #[command(flatten)]
    pub s3: S3Args,
}

impl TierArgs {
    /// Sets what was given on the command line.
    pub fn apply(&self, t: &mut TierOptions) {
        if self.cache_dir.is_some() {
            t.cache_dir.clone_from(&self.cache_dir);
        }
        let bytes = |b: Option<ByteSize>, to: &mut u64| {
            if let Some(b) = b {
                *to = b.as_u64();
            }
        };
        bytes(self.cache_bytes, &mut t.cache_bytes);
        bytes(self.memory_bytes, &mut t.memory_bytes);
        if let Some(b) = self.block_bytes {
            t.block_bytes = b.as_u64();
            // Every object: no engine-chosen block size per prefix either.
            t.block_bytes_by_prefix = vec![(String::new(), b.as_u64())];
        }
        bytes(self.dirty_bytes_max, &mut t.dirty_bytes_max);
        bytes(self.sequential_cutoff, &mut t.sequential_cutoff_bytes);
        if let Some(m) = self.write_mode {
            t.write_mode = m;
        }
        if let Some(e) = self.eviction {
            t.eviction = e;
        }
        if let Some(d) = self.dirty_wait_max {
            t.dirty_wait_max = d.into();
        }
    }

    /// The store settings for `workload`, with what was given on the command line.
    pub fn store_options(&self, workload: Workload) -> StoreOptions {
        let mut options = OpenOptions::new(workload, Role::Follower).store;
        self.apply(&mut options.tiers);
        options.s3 = self.s3.options();
        options
    }
}

/// Where the S3 endpoint is (credentials come from the AWS_* variables).
#[derive(Args, Debug, Clone)]
pub struct S3Args {
    /// S3 endpoint (default: AWS_ENDPOINT_URL), e.g. http://127.0.0.1:9000 for MinIO.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, or us-east-1 with a custom endpoint).
    #[arg(long)]
    pub region: Option<String>,
}

impl S3Args {
    pub fn options(&self) -> S3Options {
        S3Options {
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            ..S3Options::default()
        }
    }

    /// For the benchmarks, which open their capacity store themselves.
    pub fn capacity(&self, create: bool) -> CapacityOptions {
        CapacityOptions {
            create,
            s3: self.options(),
            ..CapacityOptions::default()
        }
    }
}

/// Database settings shared by the commands that open a database.
#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// Create the database if it does not exist.
    #[arg(long)]
    pub create: bool,
    /// Become the writer even if another process is writing (it is fenced).
    #[arg(long)]
    pub take_over: bool,
    /// Memtable size before it is written as an L0 SST [default: 16MiB].
    #[arg(long)]
    pub memtable_bytes: Option<ByteSize>,
    /// SST block compression: zstd, lz4 or none [default: lz4 for ZODB and SQL tables, zstd for kv].
    #[arg(long)]
    pub compression: Option<Compression>,
    /// How often the manifest is polled: fencing detection, a follower's lag [default: 500ms].
    #[arg(long)]
    pub poll_interval: Option<humantime::Duration>,
    /// Do not run the compactor in this process.
    #[arg(long)]
    pub no_compaction: bool,
    /// SQL tables: SlateDB's cache of decoded SST blocks, taken out of the DRAM tier
    /// (at most half of it) [default: a quarter of the DRAM tier].
    #[arg(long)]
    pub block_cache_bytes: Option<ByteSize>,
    #[command(flatten)]
    pub tiers: TierArgs,
}

impl KvArgs {
    /// The options to open a database for `workload` in `role`.
    pub fn open_options(&self, workload: Workload, role: Role) -> OpenOptions {
        let mut o = OpenOptions::new(workload, role);
        self.tiers.apply(&mut o.store.tiers);
        o.store.s3 = self.tiers.s3.options();
        o.kv.create = self.create;
        o.kv.take_over = self.take_over;
        if let Some(m) = self.memtable_bytes {
            o.kv.memtable_bytes = m.as_u64() as usize;
            o.kv.max_unflushed_bytes = (m.as_u64() as usize * 8).max(64 << 20);
        }
        if let Some(c) = self.compression {
            o.kv.compression = c;
        }
        if let Some(p) = self.poll_interval {
            o.kv.poll_interval = p.into();
        }
        o.kv.compaction = !self.no_compaction;
        o
    }
}
