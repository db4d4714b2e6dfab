//! The read tiers: DRAM and a fast local device, one foyer hybrid cache of object blocks.
//!
//! A cached block is `block_bytes` of one version of one object, keyed by
//! ([`BlockKey`]) path, version (the e_tag) and block index. Keying by version means an
//! overwritten object can never be served from blocks of its previous version: the old
//! blocks simply become unreachable and age out.
//!
//! Misses go through foyer's `get_or_fetch`, so concurrent misses on one block issue one
//! request to the capacity store and every waiter gets its result. A DRAM hit is a hit in
//! foyer's memory cache; a device hit is found by foyer on disk without calling the fetch.
//!
//! Blocks are written to the device as they are inserted (`WriteOnInsertion`), so the
//! device tier holds what was read even after a crash and is warm for the next process
//! (foyer recovers its index at open). Either tier may be off: a device at 0 bytes uses
//! foyer's no-op storage engine.

pub mod admission;

use std::hash::Hash;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use foyer::{
    BlockEngineConfig, Code, DeviceBuilder, Event, EventListener, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder, HybridCachePolicy, PsyncIoEngineConfig,
};

use crate::error::{Error, Result};
use crate::options::Eviction;

/// The identity of a cached block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub path: String,
    pub version: String,
    pub block: u64,
}

fn foyer_io(e: std::io::Error) -> foyer::Error {
    foyer::Error::io_error(e)
}

impl Code for BlockKey {
    fn encode(&self, writer: &mut impl std::io::Write) -> foyer::Result<()> {
        for s in [&self.path, &self.version] {
            let len = u32::try_from(s.len())
                .map_err(|_| foyer_io(std::io::Error::other("key too long")))?;
            writer.write_all(&len.to_le_bytes()).map_err(foyer_io)?;
            writer.write_all(s.as_bytes()).map_err(foyer_io)?;
        }
        writer
            .write_all(&self.block.to_le_bytes())
            .map_err(foyer_io)
    }

    fn decode(reader: &mut impl std::io::Read) -> foyer::Result<Self> {
        let mut read_string = || -> foyer::Result<String> {
            let mut len = [0u8; 4];
            reader.read_exact(&mut len).map_err(foyer_io)?;
            let len = u32::from_le_bytes(len) as usize;
            if len > 1 << 16 {
                return Err(foyer_io(std::io::Error::other("cached key too long")));
            }
            let mut buf = vec![0u8; len];
            reader.read_exact(&mut buf).map_err(foyer_io)?;
            String::from_utf8(buf).map_err(|e| foyer_io(std::io::Error::other(e)))
        };
        let path = read_string()?;
        let version = read_string()?;
        let mut block = [0u8; 8];
        reader.read_exact(&mut block).map_err(foyer_io)?;
        Ok(Self {
            path,
            version,
            block: u64::from_le_bytes(block),
        })
    }

    fn estimated_size(&self) -> usize {
        16 + self.path.len() + self.version.len()
    }
}

/// Where a block read was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Dram,
    Device,
    Capacity,
}

#[derive(Debug, Default)]
pub(crate) struct CacheCounters {
    pub dram_hits: AtomicU64,
    pub dram_hit_bytes: AtomicU64,
    pub device_hits: AtomicU64,
    pub device_hit_bytes: AtomicU64,
    pub misses: AtomicU64,
    pub miss_bytes: AtomicU64,
    pub bypassed: AtomicU64,
    pub dram_evictions: AtomicU64,
    /// Device-tier lookups that failed (an unreadable or damaged cache file): the block was
    /// fetched from the capacity store instead. Entries whose checksum fails are dropped by
    /// foyer and count as misses.
    pub device_errors: AtomicU64,
}

impl CacheCounters {
    pub fn record(&self, source: Source, bytes: u64) {
        let (count, total) = match source {
            Source::Dram => (&self.dram_hits, &self.dram_hit_bytes),
            Source::Device => (&self.device_hits, &self.device_hit_bytes),
            Source::Capacity => (&self.misses, &self.miss_bytes),
        };
        count.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// The fetch error kept for the caller (a separate function, so no lock guard is held
/// across an await).
fn take_failure(
    failure: &parking_lot::Mutex<Option<object_store::Error>>,
) -> Option<object_store::Error> {
    failure.lock().take()
}

struct EvictionCounter(Arc<CacheCounters>);

impl EventListener for EvictionCounter {
    type Key = BlockKey;
    type Value = Bytes;
    fn on_leave(&self, reason: Event, _key: &BlockKey, _value: &Bytes) {
        if reason == Event::Evict {
            self.0.dram_evictions.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The most bytes of write buffers (foyer's buffer pool, allocated at open) a device tier
/// gets: a sixteenth of the device, at least foyer's default of 16 MiB. Inserts beyond four
/// times the buffers, queued and not yet written, are dropped (the block is just not
/// cached on the device).
const DEVICE_BUFFER_BYTES: usize = 64 << 20;

/// Settings of the read tiers.
#[derive(Debug, Clone)]
pub(crate) struct CacheOptions {
    pub memory_bytes: u64,
    pub device_dir: Option<std::path::PathBuf>,
    pub device_bytes: u64,
    pub block_bytes: u64,
    pub eviction: Eviction,
}

/// The DRAM + device block cache.
pub(crate) struct BlockCache {
    hybrid: HybridCache<BlockKey, Bytes>,
    pub counters: Arc<CacheCounters>,
    pub memory_bytes: u64,
    pub device_bytes: u64,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("memory_bytes", &self.memory_bytes)
            .field("device_bytes", &self.device_bytes)
            .finish_non_exhaustive()
    }
}

/// Bytes a cached block occupies in DRAM, for foyer's weighter.
fn weight(key: &BlockKey, value: &Bytes) -> usize {
    key.path.len() + key.version.len() + value.len() + 64
}

impl BlockCache {
    /// Builds the read tiers; `None` when both are off.
    pub async fn open(options: &CacheOptions) -> Result<Option<Self>> {
        let device = match (&options.device_dir, options.device_bytes) {
            (Some(dir), bytes) if bytes > 0 => Some((dir.clone(), bytes)),
            _ => None,
        };
        if options.memory_bytes == 0 && device.is_none() {
            return Ok(None);
        }
        let counters = Arc::new(CacheCounters::default());
        // With a device tier, blocks go to the device as they are inserted (not when DRAM
        // evicts them): it then holds what was read even after a SIGKILL, and a restarted
        // process finds it warm. DRAM still serves the hot blocks. Without one, inserts
        // skip foyer's storage queue entirely.
        let policy = if device.is_some() {
            HybridCachePolicy::WriteOnInsertion
        } else {
            HybridCachePolicy::WriteOnEviction
        };
        let memory_bytes =
            usize::try_from(options.memory_bytes).map_err(|_| Error::InvalidOption {
                option: "memory_bytes",
                reason: "larger than the address space".into(),
            })?;
        let builder = HybridCacheBuilder::new()
            .with_name("tierdb")
            .with_policy(policy)
            .with_event_listener(Arc::new(EvictionCounter(counters.clone())))
            .memory(memory_bytes)
            .with_shards(shards_for(options.memory_bytes, options.block_bytes))
            .with_eviction_config(options.eviction.foyer_config())
            .with_weighter(weight)
            .storage();
        let builder = match &device {
            None => builder,
            Some((dir, bytes)) => {
                let fs_device = open_device(dir, *bytes)?;
                // A foyer block (a region of the device) holds many cache entries. An entry (a block, its key and header) must fit in one; foyer wants many
                // of them (its flusher and reclaimer each hold one), so small devices get
                // regions just larger than a block.
                let least = (options.block_bytes + (64 << 10)).next_multiple_of(4096);
                let region = (bytes / 16).clamp(least, least.max(16 << 20));
                let buffer = ((bytes / 16) as usize).clamp(16 << 20, DEVICE_BUFFER_BYTES);
                builder
                    .with_io_engine_config(PsyncIoEngineConfig::new())
                    .with_engine_config(
                        BlockEngineConfig::new(fs_device)
                            .with_block_size(region as usize)
                            // A cold scan inserts blocks at the network's speed; foyer drops
                            // inserts that find its write queue full, so give it room.
                            .with_buffer_pool_size(buffer)
                            .with_submit_queue_size_threshold(4 * buffer),
                    )
            }
        };
        let hybrid = builder
            .build()
            .await
            .map_err(|e| Error::Cache(format!("cannot open the read cache: {e}")))?;
        Ok(Some(Self {
            hybrid,
            counters,
            memory_bytes: options.memory_bytes,
            device_bytes: device.map_or(0, |(_, b)| b),
        }))
    }

    /// Looks a block up without fetching it. A device tier that cannot be read is a miss
    /// (counted in `device_errors`): the cache holds clean copies only, so the block is
    /// fetched again rather than the read failing.
    pub async fn get(&self, key: &BlockKey) -> Option<(Bytes, Source)> {
        if let Some(entry) = self.hybrid.memory().get(key) {
            return Some((entry.value().clone(), Source::Dram));
        }
        match self.hybrid.get(key).await {
            Ok(Some(entry)) => Some((entry.value().clone(), Source::Device)),
            Ok(None) => None,
            Err(e) => {
                self.device_failed(key, &e);
                None
            }
        }
    }

    fn device_failed(&self, key: &BlockKey, e: &foyer::Error) {
        self.counters.device_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(path = %key.path, block = key.block, error = %e,
            "device tier unreadable for a cached block; fetching it from the capacity store");
    }

    /// Returns the block, fetching it with `fetch()` on a miss (one fetch for concurrent
    /// misses) and inserting it. If the device tier fails to read the block, `fetch()` is
    /// called again, outside the single flight, and its result returned uncached.
    pub async fn get_or_fetch<F, Fut>(
        &self,
        key: &BlockKey,
        fetch: F,
    ) -> object_store::Result<(Bytes, Source)>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = object_store::Result<Bytes>> + Send + 'static,
    {
        if let Some(entry) = self.hybrid.memory().get(key) {
            return Ok((entry.value().clone(), Source::Dram));
        }
        let first = fetch();
        // foyer wraps fetch errors; keep the original so NotFound/Precondition survive.
        let failure: Arc<parking_lot::Mutex<Option<object_store::Error>>> = Arc::default();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (failure_in, ran_in) = (failure.clone(), ran.clone());
        let result = self
            .hybrid
            .get_or_fetch(key, move || async move {
                ran_in.store(true, Ordering::Relaxed);
                match first.await {
                    Ok(bytes) => Ok(bytes),
                    Err(e) => {
                        let msg = e.to_string();
                        *failure_in.lock() = Some(e);
                        Err(std::io::Error::other(msg))
                    }
                }
            })
            .await;
        match result {
            Ok(entry) => {
                let source = if ran.load(Ordering::Relaxed) {
                    Source::Capacity
                } else {
                    Source::Device
                };
                Ok((entry.value().clone(), source))
            }
            Err(e) => match take_failure(&failure) {
                Some(failed) => Err(failed),
                None if !ran.load(Ordering::Relaxed) => {
                    // The device tier failed, not the fetch: fetch again, bypassing it.
                    self.device_failed(key, &e);
                    Ok((fetch().await?, Source::Capacity))
                }
                None => Err(object_store::Error::Generic {
                    store: crate::error::STORE_NAME,
                    source: Box::new(Error::Cache(e.to_string())),
                }),
            },
        }
    }

    pub fn insert(&self, key: BlockKey, value: Bytes) {
        self.hybrid.insert(key, value);
    }

    /// Waits for the device tier's in-flight writes.
    pub async fn wait_device_writes(&self) {
        self.hybrid.storage().wait().await;
    }

    /// Drops the block from both tiers.
    pub fn remove(&self, key: &BlockKey) {
        self.hybrid.remove(key);
    }

    pub fn memory_usage_bytes(&self) -> u64 {
        self.hybrid.memory().usage() as u64
    }

    pub fn device_io_bytes(&self) -> (u64, u64) {
        if self.device_bytes == 0 {
            return (0, 0);
        }
        let stats = self.hybrid.storage().statistics();
        (
            stats.disk_read_bytes() as u64,
            stats.disk_write_bytes() as u64,
        )
    }

    pub async fn close(&self) -> Result<()> {
        self.hybrid
            .close()
            .await
            .map_err(|e| Error::Cache(format!("cannot close the read cache: {e}")))
    }
}

/// foyer splits DRAM into shards that evict independently; small caches get one shard so
/// capacity is not fragmented, large ones one per core-ish.
fn shards_for(memory_bytes: u64, block_bytes: u64) -> usize {
    let blocks = memory_bytes / block_bytes.max(1);
    if blocks < 1024 { 1 } else { 8 }
}

fn open_device(dir: &FsPath, bytes: u64) -> Result<Arc<dyn foyer::Device>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io("cannot create device cache directory", dir, e))?;
    let capacity = usize::try_from(bytes).map_err(|_| Error::InvalidOption {
        option: "cache_bytes",
        reason: "larger than the address space".into(),
    })?;
    FsDeviceBuilder::new(dir)
        .with_capacity(capacity)
        .build()
        .map_err(|e| Error::InvalidOption {
            option: "cache_bytes",
            reason: format!(
                "cannot set up a {bytes}-byte device cache in {}: {e}; check free space and permissions, or lower --cache-bytes",
                dir.display()
            ),
        })
}
