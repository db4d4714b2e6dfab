//! [`TieredStore`]: one `ObjectStore` over the capacity store, with the read tiers and the
//! write-back log in front, so engines need not know about tiers.
//!
//! # Read path
//!
//! 1. A path with a pending write-back version is served from the log (or is NotFound if
//!    the pending version is a delete).
//! 2. Otherwise the object's metadata comes from the metadata cache ([`crate::meta`]) or a
//!    HEAD, the requested range is split into aligned blocks, and each block is looked up in
//!    DRAM, then on the device, then fetched from the capacity store with `If-Match` on the
//!    e_tag (one fetch for concurrent misses) and inserted, unless the admission policy
//!    (sequential cutoff) says the read is part of a long scan.
//! 3. A precondition failure on a block fetch means the object changed since its metadata
//!    was learned: the metadata is dropped and the read starts over once.
//!
//! Reads with preconditions or an explicit version go straight to the capacity store.
//!
//! # Write path
//!
//! - write-through: capacity store, then the blocks are inserted (if small enough to be
//!   admitted) under the new e_tag;
//! - write-around: capacity store only;
//! - write-back: appended to the log and acknowledged once fsync'd. Conditional puts, puts
//!   with attributes or tags, multipart uploads and objects larger than half the dirty-byte
//!   cap are written directly instead.
//!
//! Every write that goes directly to the capacity store while the log holds records not
//! yet covered by a clean mark first runs a barrier (drain + clean mark). That keeps the
//! order of writes to one path, makes a conditional put a barrier for everything written
//! before it (SlateDB writes SSTs before the manifest that names them), and keeps replay
//! from re-uploading a version older than one written directly.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};

use crate::cachedir::CacheDir;
use crate::capacity::{CapacityOptions, StoreUrl, open_capacity};
use crate::error::{Error, Result, STORE_NAME};
use crate::meta::MetaCache;
use crate::options::{TierOptions, WriteMode};
use crate::readcache::admission::{AdmissionPolicy, SequentialCutoff};
use crate::readcache::{BlockCache, BlockKey, CacheOptions, Source};
use crate::stats::{CapacityCounters, CapacityStats, DeviceStats, DramStats, TierStats, bump};
use crate::wblog::format_v1::RecordKind;
use crate::wblog::{self, Entry, LogOptions, WbLog};

mod read;
use read::*;

/// How often a store with a cache directory saves its statistics there.
const STATS_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Capacity-store requests (or tier lookups) of one read that run at once.
const READ_FANOUT: usize = 8;

/// Bytes [`TieredStore::warm`] reads before it waits for the device tier to catch up.
const WARM_BATCH_BYTES: u64 = 128 << 20;

/// The largest ranged GET a read makes when it fetches a run of adjacent missing blocks in
/// one request (a column chunk of a few MiB is one or two requests, not one per block).
const COALESCE_MAX_BYTES: u64 = 4 << 20;

/// The tiered object store. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct TieredStore {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    capacity: Arc<dyn ObjectStore>,
    options: TierOptions,
    cache: Option<Arc<BlockCache>>,
    admission: Box<dyn AdmissionPolicy>,
    meta: Arc<MetaCache>,
    log: Option<Arc<WbLog>>,
    counters: CapacityCounters,
    /// Directories whose `PutMode::Create` puts go through the write-back log
    /// (see [`TieredStore::log_creates_in`]).
    logged_create_dirs: parking_lot::RwLock<Vec<String>>,
    /// Set by close and abandon: the periodic statistics save stops (a clone may outlive
    /// the close, e.g. in a read-ahead task, and the directory may be gone).
    closed: std::sync::atomic::AtomicBool,
    _cache_dir: Option<CacheDir>,
}

impl fmt::Debug for TieredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TieredStore")
            .field("capacity", &self.inner.name)
            .field("write_mode", &self.inner.options.write_mode)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for TieredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TieredStore({}, {})",
            self.inner.name, self.inner.options.write_mode
        )
    }
}

impl TieredStore {
    /// Opens the capacity store named by `url` and the tiers configured in `options`.
    pub async fn open(
        url: &StoreUrl,
        capacity: &CapacityOptions,
        options: TierOptions,
    ) -> Result<Self> {
        let store = open_capacity(url, capacity)?;
        Self::with_capacity(store, url.to_string(), options).await
    }

    /// Puts the tiers in front of an already opened capacity store; `name` identifies that
    /// store (it is recorded in the cache directory).
    pub async fn with_capacity(
        capacity: Arc<dyn ObjectStore>,
        name: String,
        options: TierOptions,
    ) -> Result<Self> {
        options.validate()?;
        let cache_dir = options
            .cache_dir
            .as_deref()
            .map(|dir| CacheDir::open(dir, &name))
            .transpose()?;
        let cache = BlockCache::open(&CacheOptions {
            memory_bytes: options.memory_bytes,
            device_dir: cache_dir.as_ref().map(CacheDir::blocks_dir),
            device_bytes: options.cache_bytes,
            block_bytes: options.largest_block(),
            eviction: options.eviction,
        })
        .await?
        .map(Arc::new);
        let meta = Arc::new(MetaCache::new(
            options.meta_ttl,
            options.immutable_prefixes.clone(),
        ));
        let log = match &cache_dir {
            Some(dir) => Some(WbLog::open(
                &dir.wblog_dir(),
                LogOptions {
                    segment_bytes_max: options.log_segment_bytes,
                    dirty_bytes_max: options.dirty_bytes_max,
                    dirty_wait_max: options.dirty_wait_max,
                    upload_concurrency: options.upload_concurrency,
                    upload_attempts_max: options.upload_attempts_max,
                },
                capacity.clone(),
                on_uploaded(meta.clone(), cache.clone(), &options),
            )?),
            None => None,
        };
        let store = Self {
            inner: Arc::new(Inner {
                name,
                capacity,
                admission: Box::new(SequentialCutoff::new(options.sequential_cutoff_bytes)),
                options,
                cache,
                meta,
                log,
                counters: CapacityCounters::default(),
                logged_create_dirs: parking_lot::RwLock::new(Vec::new()),
                closed: std::sync::atomic::AtomicBool::new(false),
                _cache_dir: cache_dir,
            }),
        };
        if store.inner._cache_dir.is_some() {
            // Leave statistics where another process can read them (`tierdb info`).
            let weak = Arc::downgrade(&store.inner);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(STATS_SAVE_INTERVAL);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { break };
                    if inner.closed.load(std::sync::atomic::Ordering::Acquire) {
                        break;
                    }
                    TieredStore { inner }.save_stats();
                }
            });
        }
        Ok(store)
    }

    /// Writes the current statistics to the cache directory's `STATS.json` (advisory: a
    /// failure is logged, not returned).
    pub fn save_stats(&self) {
        let Some(dir) = &self.inner._cache_dir else {
            return;
        };
        let saved = crate::stats::SavedStats {
            taken_ms: crate::wblog::now_ms(),
            capacity: self.inner.name.clone(),
            pid: std::process::id(),
            stats: self.stats(),
        };
        if let Err(e) = saved.write(&dir.root) {
            tracing::warn!(dir = %dir.root.display(), error = %e, "cannot save tier statistics");
        }
    }

    /// The capacity store under the tiers.
    pub fn capacity(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.capacity
    }

    pub fn options(&self) -> &TierOptions {
        &self.inner.options
    }

    /// In write-back mode, lets create-if-absent puts (`PutMode::Create`) of objects directly
    /// in `dir` go through the write-back log, acknowledged at device latency, instead of
    /// draining the log and going to the capacity store.
    ///
    /// The existence check then covers this process's log and what it knows of the capacity
    /// store; a conflict with another process is found when the create is uploaded (in log
    /// order, as a conditional create): the directory is then fenced, its pending creates
    /// are discarded and every later create there fails with `AlreadyExists`. Use it only for
    /// a directory with one writer that treats `AlreadyExists` as being fenced, after that
    /// writer has claimed the directory with a direct create (SlateDB's WAL, after open).
    /// Attributes on such puts are not kept (SlateDB's are retry markers). Without a log it
    /// does nothing.
    pub fn log_creates_in(&self, dir: &Path) {
        if self.inner.log.is_some() && self.inner.options.write_mode == WriteMode::WriteBack {
            let mut dirs = self.inner.logged_create_dirs.write();
            if !dirs.iter().any(|d| d == dir.as_ref()) {
                dirs.push(dir.as_ref().to_string());
            }
        }
    }

    /// Stops logging creates in `dir` (see [`TieredStore::log_creates_in`]).
    pub fn stop_logging_creates_in(&self, dir: &Path) {
        self.inner
            .logged_create_dirs
            .write()
            .retain(|d| d != dir.as_ref());
    }

    /// Why creates in `dir` are refused, if a logged create there lost to another writer.
    pub fn fenced(&self, dir: &Path) -> Option<String> {
        self.inner.log.as_ref().and_then(|l| l.fenced(dir.as_ref()))
    }

    /// Waits until every write acknowledged so far is in the capacity store.
    pub async fn flush(&self) -> Result<()> {
        match &self.inner.log {
            Some(log) => log.barrier().await,
            None => Ok(()),
        }
    }

    /// Reads `objects` (path and size) whole through the tiers, so their blocks are in the
    /// DRAM and device tiers for the next reader (and the next process): pieces of
    /// [`COALESCE_MAX_BYTES`], [`READ_FANOUT`] at once, and after every [`WARM_BATCH_BYTES`]
    /// a wait until the device tier has written what it was given (it drops inserts that
    /// find its write queue full). `progress` gets the bytes of every piece read. Returns the
    /// bytes read. Blocks enter the tiers under the admission policy like any read.
    pub async fn warm(
        &self,
        objects: &[(Path, u64)],
        progress: &(dyn Fn(u64) + Sync),
    ) -> object_store::Result<u64> {
        let pieces: Vec<(Path, Range<u64>)> = objects
            .iter()
            .flat_map(|(path, size)| {
                (0..*size)
                    .step_by(COALESCE_MAX_BYTES as usize)
                    .map(move |at| (path.clone(), at..(at + COALESCE_MAX_BYTES).min(*size)))
            })
            .collect();
        let mut total = 0;
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        let mut pieces = pieces.into_iter().peekable();
        while let Some(piece) = pieces.next() {
            batch_bytes += piece.1.end - piece.1.start;
            batch.push(piece);
            if batch_bytes < WARM_BATCH_BYTES && pieces.peek().is_some() {
                continue;
            }
            total += stream::iter(std::mem::take(&mut batch))
                .map(|(path, range)| async move {
                    let n = self.get_range(&path, range).await?.len() as u64;
                    progress(n);
                    Ok::<_, object_store::Error>(n)
                })
                .buffer_unordered(READ_FANOUT)
                .try_fold(0, |sum, n| async move { Ok(sum + n) })
                .await?;
            batch_bytes = 0;
            self.wait_device_writes().await;
        }
        Ok(total)
    }

    /// Waits until the blocks handed to the device tier so far are written there.
    pub async fn wait_device_writes(&self) {
        if let Some(cache) = &self.inner.cache {
            cache.wait_device_writes().await;
        }
    }

    /// Flushes, stops the cleaner and writes DRAM blocks to the device tier. Unflushed data
    /// stays in the log if the flush fails, and is uploaded at the next open.
    pub async fn close(&self) -> Result<()> {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        let flushed = match &self.inner.log {
            Some(log) => log.close().await,
            None => Ok(()),
        };
        if let Some(cache) = &self.inner.cache {
            cache.close().await?;
        }
        self.save_stats();
        if flushed.is_ok()
            && let Some(dir) = &self.inner._cache_dir
        {
            // Closed: another store may open the directory now (a ZODB storage closed and
            // reopened in one process, for example).
            dir.release();
        }
        flushed
    }

    /// Gives the store up without flushing, as a crash would (for a process that reopens its
    /// database after a failure it cannot repair in place, such as an engine that died in an
    /// object-store outage): the write-back log keeps every acknowledged write for the next
    /// open, which may then take the cache directory.
    pub async fn abandon(&self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(log) = &self.inner.log {
            log.abandon().await;
        }
        if let Some(cache) = &self.inner.cache {
            let _ = cache.close().await;
        }
        if let Some(dir) = &self.inner._cache_dir {
            dir.release();
        }
    }

    /// Fault injection (tests, torture): while `full`, every append to the write-back log
    /// fails as on a full cache device (ENOSPC). No effect without a log.
    #[doc(hidden)]
    pub fn simulate_full_log_device(&self, full: bool) {
        if let Some(log) = &self.inner.log {
            log.simulate_full_device(full);
        }
    }

    pub fn stats(&self) -> TierStats {
        let i = &self.inner;
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let mut stats = TierStats {
            write_back: i.log.as_ref().map(|l| l.stats()),
            ..Default::default()
        };
        let c = &i.counters;
        stats.capacity = CapacityStats {
            gets: load(&c.gets),
            get_bytes: load(&c.get_bytes),
            heads: load(&c.heads),
            puts: load(&c.puts),
            put_bytes: load(&c.put_bytes),
            deletes: load(&c.deletes),
            lists: load(&c.lists),
            ..Default::default()
        };
        if let Some(cache) = &i.cache {
            let k = &cache.counters;
            let (read_bytes, write_bytes) = cache.device_io_bytes();
            stats.dram = DramStats {
                hits: load(&k.dram_hits),
                hit_bytes: load(&k.dram_hit_bytes),
                evictions: load(&k.dram_evictions),
                usage_bytes: cache.memory_usage_bytes(),
                capacity_bytes: cache.memory_bytes,
            };
            stats.device = DeviceStats {
                hits: load(&k.device_hits),
                hit_bytes: load(&k.device_hit_bytes),
                read_bytes,
                write_bytes,
                capacity_bytes: cache.device_bytes,
            };
            stats.capacity.misses = load(&k.misses);
            stats.capacity.miss_bytes = load(&k.miss_bytes);
            stats.bypassed_blocks = load(&k.bypassed);
        }
        stats
    }
}

/// After an upload, the read tiers learn the new version (and its blocks, if admitted).
fn on_uploaded(
    meta: Arc<MetaCache>,
    cache: Option<Arc<BlockCache>>,
    options: &TierOptions,
) -> wblog::OnUploaded {
    let options = options.clone();
    Arc::new(move |up: wblog::cleaner::Uploaded| match up.put {
        None => {
            meta.forget(up.path.as_ref());
            if let Some(cache) = &cache {
                forget_immutable(cache, &options, &up.path);
            }
        }
        Some((result, payload)) => {
            let object = written_meta(&up.path, payload.len() as u64, &result);
            if let (Some(cache), Some(version)) = (&cache, &result.e_tag)
                && payload.len() as u64 <= options.sequential_cutoff_bytes
            {
                let b = options.block_bytes_of(up.path.as_ref());
                insert_blocks(cache, &up.path, version, &payload, b);
            }
            meta.wrote(object);
        }
    })
}

fn written_meta(path: &Path, size: u64, result: &PutResult) -> ObjectMeta {
    ObjectMeta {
        location: path.clone(),
        last_modified: Utc::now(),
        size,
        e_tag: result.e_tag.clone(),
        version: result.version.clone(),
    }
}

impl Inner {
    fn logs_creates_in(&self, dir: &str) -> bool {
        self.logged_create_dirs.read().iter().any(|d| d == dir)
    }

    fn log_needs_barrier(&self) -> Option<&WbLog> {
        self.log.as_deref().filter(|l| l.needs_barrier())
    }

    /// Before a write goes directly to the capacity store; see the module docs.
    async fn barrier_if_needed(&self) -> object_store::Result<()> {
        if let Some(log) = self.log_needs_barrier() {
            log.barrier().await?;
        }
        Ok(())
    }

    async fn put_direct(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.barrier_if_needed().await?;
        let len = payload.content_length() as u64;
        bump(&self.counters.puts, 1);
        bump(&self.counters.put_bytes, len);
        let result = match self
            .capacity
            .put_opts(location, payload.clone(), opts)
            .await
        {
            Ok(result) => result,
            Err(e) => {
                // A failed put may or may not have landed; relearn the object next time.
                self.forget(location);
                return Err(e);
            }
        };
        let fill = self.options.write_mode != WriteMode::WriteAround
            && len <= self.options.sequential_cutoff_bytes;
        if let (true, Some(cache), Some(version)) = (fill, &self.cache, &result.e_tag) {
            let data = if payload.iter().count() == 1 {
                payload.iter().next().cloned().unwrap_or_default()
            } else {
                Bytes::from(
                    payload
                        .iter()
                        .flat_map(|c| c.iter().copied())
                        .collect::<Vec<u8>>(),
                )
            };
            let b = self.options.block_bytes_of(location.as_ref());
            insert_blocks(cache, location, version, &data, b);
        }
        self.meta.wrote(written_meta(location, len, &result));
        Ok(result)
    }

    async fn delete_one(&self, location: &Path) -> object_store::Result<()> {
        if let (WriteMode::WriteBack, Some(log)) = (self.options.write_mode, &self.log) {
            match log.delete(location).await {
                Ok(()) => {
                    self.forget(location);
                    return Ok(());
                }
                // The same fallback as a put's: delete directly, after a barrier, so that
                // no older logged version can be uploaded over the deletion later.
                Err(e) if e.log_is_full() => {
                    tracing::warn!(path = %location, error = %e, "write-back log full; deleting directly");
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.barrier_if_needed().await?;
        bump(&self.counters.deletes, 1);
        let result = self.capacity.delete(location).await;
        self.forget(location);
        result
    }
}

#[async_trait]
impl ObjectStore for TieredStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let i = &self.inner;
        let plain = matches!(opts.mode, PutMode::Overwrite)
            && opts.attributes.is_empty()
            && opts.tags.encoded().is_empty();
        if let (WriteMode::WriteBack, Some(log), true) = (i.options.write_mode, &i.log, plain)
            && log.accepts(payload.content_length() as u64)
        {
            match log.put(location, payload.iter().cloned().collect()).await {
                Ok(()) => {
                    i.forget(location);
                    return Ok(PutResult {
                        e_tag: None,
                        version: None,
                        extensions: Default::default(),
                    });
                }
                Err(e) if e.log_is_full() => {
                    // Documented fallback: write through (after a barrier, so an older logged
                    // version can never land on top of this one).
                    tracing::warn!(path = %location, error = %e, "write-back log full; writing through");
                    return i.put_direct(location, payload, opts).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if let (PutMode::Create, Some(log)) = (&opts.mode, &i.log)
            && opts.tags.encoded().is_empty()
            && log.accepts(payload.content_length() as u64)
            && i.logs_creates_in(crate::wblog::parent_dir(location.as_ref()))
        {
            if i.meta.get(location.as_ref()).is_some() {
                return Err(Error::AlreadyExists {
                    path: location.to_string(),
                }
                .into());
            }
            match log
                .put_create(location, payload.iter().cloned().collect())
                .await
            {
                Ok(()) => {
                    return Ok(PutResult {
                        e_tag: None,
                        version: None,
                        extensions: Default::default(),
                    });
                }
                Err(e) if e.log_is_full() => {
                    tracing::warn!(path = %location, error = %e, "write-back log full; creating directly");
                }
                Err(e) => return Err(e.into()),
            }
        }
        i.put_direct(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.barrier_if_needed().await?;
        self.inner.forget(location);
        let upload = self
            .inner
            .capacity
            .put_multipart_opts(location, opts)
            .await?;
        Ok(Box::new(ForgetOnComplete {
            upload,
            meta: self.inner.meta.clone(),
            location: location.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let i = &self.inner;
        if let Some(log) = &i.log
            && let Some(entry) = log.lookup(location)
        {
            if !has_preconditions(&options) {
                return i.get_pending(location, &entry, &options).await;
            }
            // Pending versions have no e_tag to compare; settle them first.
            log.barrier().await?;
        }
        if options.head {
            // Metadata requests go to the capacity store: its answer carries the object's
            // attributes (which SlateDB checks to confirm a retried conditional put), and
            // they are rare (no data is read).
            bump(&i.counters.heads, 1);
            return i.capacity.get_opts(location, options).await;
        }
        let cache = match &i.cache {
            Some(cache) if !has_preconditions(&options) => cache,
            _ => return i.get_capacity(location, options).await,
        };
        match i.get_cached(cache, location, &options).await {
            Err(object_store::Error::Precondition { .. }) => {
                i.forget(location);
                i.get_cached(cache, location, &options).await
            }
            Err(e @ object_store::Error::NotFound { .. }) => {
                i.forget(location);
                Err(e)
            }
            other => other,
        }
    }

    /// All `ranges` in one pass through the tiers: one metadata lookup, one probe, and the
    /// missing blocks of every range fetched together (adjacent and nearby ranges in one
    /// GET); see [`Inner::read_ranges`].
    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let i = &self.inner;
        let pending = i.log.as_ref().is_some_and(|l| l.lookup(location).is_some());
        let cache = match &i.cache {
            Some(cache) if !pending => cache,
            _ => {
                return stream::iter(ranges.iter().cloned())
                    .map(|r| self.get_range(location, r))
                    .buffered(READ_FANOUT)
                    .try_collect()
                    .await;
            }
        };
        let read = async {
            let meta = i.head_capacity(location).await?;
            if let Some(r) = ranges.iter().find(|r| r.end > meta.size || r.start > r.end) {
                return Err(object_store::Error::Generic {
                    store: STORE_NAME,
                    source: format!(
                        "range {r:?} is outside the {}-byte object {location}",
                        meta.size
                    )
                    .into(),
                });
            }
            i.read_ranges(cache, location, &meta, ranges).await
        };
        let parts = match read.await {
            Err(object_store::Error::Precondition { .. }) => {
                i.forget(location);
                let meta = i.head_capacity(location).await?;
                i.read_ranges(cache, location, &meta, ranges).await
            }
            Err(e @ object_store::Error::NotFound { .. }) => {
                i.forget(location);
                Err(e)
            }
            other => other,
        }?;
        Ok(parts.into_iter().map(concat).collect())
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = self.inner.clone();
        locations
            .and_then(move |path| {
                let inner = inner.clone();
                async move { inner.delete_one(&path).await.map(|()| path) }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.inner.counters.lists, 1);
        let capacity = self.inner.capacity.clone();
        let owned = prefix.cloned();
        self.merge_pending(move || capacity.list(owned.as_ref()), prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.inner.counters.lists, 1);
        let capacity = self.inner.capacity.clone();
        let (owned, from) = (prefix.cloned(), offset.clone());
        self.merge_pending(
            move || capacity.list_with_offset(owned.as_ref(), &from),
            prefix,
            Some(offset),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let i = &self.inner;
        bump(&i.counters.lists, 1);
        let pending = i
            .log
            .as_ref()
            .map(|l| l.pending_under(prefix))
            .unwrap_or_default();
        if pending.iter().any(|(_, e)| e.kind == RecordKind::Delete) {
            // A pending delete may empty a common prefix; settle it rather than guess.
            if let Some(log) = &i.log {
                log.barrier().await?;
            }
            return i.capacity.list_with_delimiter(prefix).await;
        }
        let mut result = i.capacity.list_with_delimiter(prefix).await?;
        let base = prefix.map_or(String::new(), |p| format!("{}/", p.as_ref()));
        for (path, entry) in pending {
            let Some(rest) = path.strip_prefix(&base) else {
                continue;
            };
            match rest.split_once('/') {
                Some((dir, _)) => {
                    let common = Path::parse(format!("{base}{dir}"))
                        .map_err(|e| object_store::Error::InvalidPath { source: e })?;
                    if !result.common_prefixes.contains(&common) {
                        result.common_prefixes.push(common);
                    }
                }
                None => {
                    let location = Path::parse(&path)
                        .map_err(|e| object_store::Error::InvalidPath { source: e })?;
                    result.objects.retain(|o| o.location != location);
                    result.objects.push(pending_meta(&location, &entry));
                }
            }
        }
        Ok(result)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let i = &self.inner;
        i.barrier_if_needed().await?;
        let result = i.capacity.copy_opts(from, to, options).await;
        i.forget(to);
        result
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let i = &self.inner;
        i.barrier_if_needed().await?;
        let result = i.capacity.rename_opts(from, to, options).await;
        i.forget(from);
        i.forget(to);
        result
    }
}

/// One buffer of `parts` (no copy when there is one part).
fn concat(parts: Vec<Bytes>) -> Bytes {
    match parts.len() {
        0 => Bytes::new(),
        1 => parts.into_iter().next().unwrap_or_default(),
        _ => {
            let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
            for p in &parts {
                out.extend_from_slice(p);
            }
            Bytes::from(out)
        }
    }
}

impl TieredStore {
    /// Hides paths with a pending version from the capacity listing and adds pending puts.
    ///
    /// The pending versions are taken before the capacity listing is started: a version
    /// uploaded in between is then in the listing, or still pending, never in neither (a
    /// listing taken first, as some stores take it at once, missed a key whose upload
    /// finished between the two; found by `store_model`).
    fn merge_pending(
        &self,
        listing: impl FnOnce() -> BoxStream<'static, object_store::Result<ObjectMeta>>,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let Some(log) = &self.inner.log else {
            return listing();
        };
        let pending = log.pending_under(prefix);
        let listing = listing();
        if pending.is_empty() {
            return listing;
        }
        let hidden: HashSet<String> = pending.iter().map(|(p, _)| p.clone()).collect();
        let offset = offset.map(|o| o.as_ref().to_string());
        let added: Vec<object_store::Result<ObjectMeta>> = pending
            .into_iter()
            .filter(|(p, e)| e.kind != RecordKind::Delete && offset.as_ref().is_none_or(|o| p > o))
            .filter_map(|(p, e)| {
                Path::parse(&p)
                    .ok()
                    .map(|location| Ok(pending_meta(&location, &e)))
            })
            .collect();
        listing
            .try_filter(move |m| futures::future::ready(!hidden.contains(m.location.as_ref())))
            .chain(stream::iter(added))
            .boxed()
    }
}

/// A multipart upload that drops the path's cached metadata when it completes.
#[derive(Debug)]
struct ForgetOnComplete {
    upload: Box<dyn MultipartUpload>,
    meta: Arc<MetaCache>,
    location: Path,
}

#[async_trait]
impl MultipartUpload for ForgetOnComplete {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let result = self.upload.complete().await;
        self.meta.forget(self.location.as_ref());
        result
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.upload.abort().await
    }
}
