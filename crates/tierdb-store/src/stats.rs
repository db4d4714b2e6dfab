//! Statistics of every tier, readable from code (`TieredStore::stats`).

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::wblog::WriteBackStats;

/// A snapshot of the tiered store's counters. Counters only grow; take two snapshots and
/// subtract ([`TierStats::since`]) to measure an interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TierStats {
    pub dram: DramStats,
    pub device: DeviceStats,
    pub capacity: CapacityStats,
    /// Block misses served without caching them (sequential cutoff).
    pub bypassed_blocks: u64,
    /// `None` unless the store has a cache directory (and so a write-back log).
    pub write_back: Option<WriteBackStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DramStats {
    pub hits: u64,
    pub hit_bytes: u64,
    pub evictions: u64,
    pub usage_bytes: u64,
    pub capacity_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStats {
    pub hits: u64,
    pub hit_bytes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub capacity_bytes: u64,
}

/// Requests the tiered store made to the capacity store (uploads by the write-back cleaner
/// are in [`WriteBackStats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CapacityStats {
    /// Block reads that missed both read tiers.
    pub misses: u64,
    pub miss_bytes: u64,
    pub gets: u64,
    pub get_bytes: u64,
    pub heads: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub deletes: u64,
    pub lists: u64,
}

impl TierStats {
    /// Reads served by DRAM, device and capacity store, as fractions of all block reads.
    pub fn hit_ratios(&self) -> (f64, f64, f64) {
        let total =
            (self.dram.hits + self.device.hits + self.capacity.misses + self.bypassed_blocks)
                as f64;
        if total == 0.0 {
            return (0.0, 0.0, 0.0);
        }
        (
            self.dram.hits as f64 / total,
            self.device.hits as f64 / total,
            (self.capacity.misses + self.bypassed_blocks) as f64 / total,
        )
    }

    /// Counter differences from `earlier` to `self` (gauges keep `self`'s value).
    pub fn since(&self, earlier: &TierStats) -> TierStats {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        TierStats {
            dram: DramStats {
                hits: d(self.dram.hits, earlier.dram.hits),
                hit_bytes: d(self.dram.hit_bytes, earlier.dram.hit_bytes),
                evictions: d(self.dram.evictions, earlier.dram.evictions),
                ..self.dram.clone()
            },
            device: DeviceStats {
                hits: d(self.device.hits, earlier.device.hits),
                hit_bytes: d(self.device.hit_bytes, earlier.device.hit_bytes),
                read_bytes: d(self.device.read_bytes, earlier.device.read_bytes),
                write_bytes: d(self.device.write_bytes, earlier.device.write_bytes),
                capacity_bytes: self.device.capacity_bytes,
            },
            capacity: CapacityStats {
                misses: d(self.capacity.misses, earlier.capacity.misses),
                miss_bytes: d(self.capacity.miss_bytes, earlier.capacity.miss_bytes),
                gets: d(self.capacity.gets, earlier.capacity.gets),
                get_bytes: d(self.capacity.get_bytes, earlier.capacity.get_bytes),
                heads: d(self.capacity.heads, earlier.capacity.heads),
                puts: d(self.capacity.puts, earlier.capacity.puts),
                put_bytes: d(self.capacity.put_bytes, earlier.capacity.put_bytes),
                deletes: d(self.capacity.deletes, earlier.capacity.deletes),
                lists: d(self.capacity.lists, earlier.capacity.lists),
            },
            bypassed_blocks: d(self.bypassed_blocks, earlier.bypassed_blocks),
            write_back: self.write_back.clone(),
        }
    }
}

/// Counters of requests to the capacity store made on the read/write path.
#[derive(Debug, Default)]
pub(crate) struct CapacityCounters {
    pub gets: AtomicU64,
    pub get_bytes: AtomicU64,
    pub heads: AtomicU64,
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub deletes: AtomicU64,
    pub lists: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Where a store with a cache directory leaves its latest statistics, so that another
/// process (`tierdb info --cache-dir`) can show them while the directory is in use.
pub const STATS_FILE: &str = "STATS.json";

/// Statistics saved in a cache directory, with when they were taken.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SavedStats {
    /// Milliseconds since the Unix epoch.
    pub taken_ms: u64,
    /// The capacity store the directory serves.
    pub capacity: String,
    pub pid: u32,
    pub stats: TierStats,
}

impl SavedStats {
    /// Reads `STATS.json` from `cache_dir`; `Ok(None)` if there is none.
    pub fn read(cache_dir: &std::path::Path) -> crate::Result<Option<SavedStats>> {
        let path = cache_dir.join(STATS_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                crate::Error::io(
                    "cannot parse",
                    path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::Error::io("cannot read", path, e)),
        }
    }

    /// Writes atomically (temporary file, rename); no fsync: statistics are advisory.
    pub(crate) fn write(&self, cache_dir: &std::path::Path) -> std::io::Result<()> {
        let tmp = cache_dir.join(format!("{STATS_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, cache_dir.join(STATS_FILE))
    }
}
