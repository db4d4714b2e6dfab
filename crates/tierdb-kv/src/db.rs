//! [`KvDb`]: one writer of a database; [`KvReplica`]: a read-only follower.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use slatedb::config::{DurabilityLevel, ReadOptions, ScanOptions, WriteOptions};
use slatedb::{Db, DbIterator, DbReadOps, DbReader, DbReaderMode, DbSnapshot};
use tierdb_store::{TierStats, TieredStore};

use crate::error::{KvError, Result};
use crate::heartbeat::{Heartbeat, Ownership, release, spawn_heartbeat};
use crate::marker::{self, Marker};
use crate::options::KvOptions;
use crate::{Batch, KvRead, KvWrite, Op};

/// Reads see only commits that are durable: what a commit acknowledged, never a write
/// still waiting for its flush (which a crash could lose).
fn read_options() -> ReadOptions {
    ReadOptions::new().with_durability_filter(DurabilityLevel::Remote)
}

fn scan_options() -> ScanOptions {
    ScanOptions::new().with_durability_filter(DurabilityLevel::Remote)
}

fn scan_desc_options() -> ScanOptions {
    scan_options().with_order(slatedb::IterationOrder::Descending)
}

async fn drain(
    db: &str,
    mut iter: DbIterator,
    limit: Option<usize>,
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut out = Vec::new();
    while limit.is_none_or(|l| out.len() < l) {
        match iter.next().await {
            Ok(Some(kv)) => out.push((kv.key, kv.value)),
            Ok(None) => break,
            Err(e) => return Err(KvError::engine(db, "scan", e)),
        }
    }
    Ok(out)
}

/// `get` on any SlateDB read view (writer, snapshot, reader), durable data only.
async fn view_get(view: &impl DbReadOps, name: &str, key: &[u8]) -> Result<Option<Bytes>> {
    view.get_with_options(key, &read_options())
        .await
        .map_err(|e| KvError::engine(name, "get", e))
}

/// A scan on any SlateDB read view, collected; an empty range never reaches SlateDB.
async fn view_scan(
    view: &impl DbReadOps,
    name: &str,
    range: (Bound<Bytes>, Bound<Bytes>),
    limit: Option<usize>,
    options: ScanOptions,
) -> Result<Vec<(Bytes, Bytes)>> {
    if crate::range_is_empty(&range) {
        return Ok(Vec::new());
    }
    let iter = view
        .scan_with_options(range, &options)
        .await
        .map_err(|e| KvError::engine(name, "scan", e))?;
    drain(name, iter, limit).await
}

/// `KvRead` for a type with a `name` field, reading through the SlateDB view `$view`.
macro_rules! kv_read_via {
    ($ty:ty, |$s:ident| $view:expr) => {
        #[async_trait]
        impl KvRead for $ty {
            async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
                let $s = self;
                view_get($view, &self.name, key).await
            }

            async fn scan(
                &self,
                range: (Bound<Bytes>, Bound<Bytes>),
                limit: Option<usize>,
            ) -> Result<Vec<(Bytes, Bytes)>> {
                let $s = self;
                view_scan($view, &self.name, range, limit, scan_options()).await
            }

            async fn scan_desc(
                &self,
                range: (Bound<Bytes>, Bound<Bytes>),
                limit: Option<usize>,
            ) -> Result<Vec<(Bytes, Bytes)>> {
                let $s = self;
                view_scan($view, &self.name, range, limit, scan_desc_options()).await
            }
        }
    };
}

/// The longest a close spends on what only tidies up (the memtable flush, one garbage
/// collection pass): a close must not hang on a store that stopped answering.
const CLOSE_EXTRA_LIMIT: Duration = Duration::from_secs(10);

/// Group commit: writers append to SlateDB's WAL buffer, then one of them flushes the WAL
/// for everyone whose write was in the buffer when the flush began.
#[derive(Debug, Default)]
struct GroupCommit {
    /// Highest sequence number whose write has returned (so it is in the WAL buffer).
    written: AtomicU64,
    /// Highest sequence number known durable.
    durable: AtomicU64,
    flush: tokio::sync::Mutex<()>,
    commits: AtomicU64,
    flushes: AtomicU64,
}

impl GroupCommit {
    async fn make_durable(&self, db: &Db, name: &str, seq: u64) -> Result<()> {
        self.written.fetch_max(seq, Ordering::AcqRel);
        self.commits.fetch_add(1, Ordering::Relaxed);
        if self.durable.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let _leader = self.flush.lock().await;
        if self.durable.load(Ordering::Acquire) >= seq {
            return Ok(()); // a flush that began after our write covered it
        }
        // Writes are appended in sequence order, so every write up to `target` is in the
        // buffer this flush writes out.
        let target = self.written.load(Ordering::Acquire);
        db.flush()
            .await
            .map_err(|e| KvError::engine(name, "commit (WAL flush)", e))?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.durable.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }
}

/// The writer of one database: SlateDB on a [`TieredStore`].
///
/// Every WAL, SST and manifest read or write goes through the store's DRAM and device tiers;
/// in write-back mode the WAL objects are appended to the store's device log (see
/// [`TieredStore::log_creates_in`] and docs/design/kv.md), so a commit is durable at device
/// latency.
pub struct KvDb {
    name: String,
    path: Path,
    store: TieredStore,
    db: Db,
    group: GroupCommit,
    marker: Marker,
    options: KvOptions,
    /// Whether this writer still owns the database (see [`crate::heartbeat`]).
    ownership: Arc<Ownership>,
    /// Stops the lease heartbeat, which answers with the lease so close can release it.
    heartbeat: parking_lot::Mutex<Option<Heartbeat>>,
}

impl std::fmt::Debug for KvDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvDb")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Checks the marker, creating the database if asked. Returns the marker.
async fn claim(store: &TieredStore, path: &Path, name: &str, create: bool) -> Result<Marker> {
    match marker::read(store, path, name).await? {
        Some(m) if m.incomplete => Err(KvError::Invalid {
            db: name.to_string(),
            what: format!(
                "a clone of {} into it did not finish; delete the prefix and clone again",
                m.clone_of.as_deref().unwrap_or("another database")
            ),
        }),
        Some(m) => Ok(m),
        None if create => {
            let m = Marker::new(None, false);
            match marker::write(store, path, name, &m, true).await {
                Ok(()) => Ok(m),
                // Created by someone else just now: open what they made.
                Err(KvError::AlreadyExists { .. }) => marker::read(store, path, name)
                    .await?
                    .ok_or_else(|| KvError::NotFound {
                        db: name.to_string(),
                    }),
                Err(e) => Err(e),
            }
        }
        None => Err(KvError::NotFound {
            db: name.to_string(),
        }),
    }
}

impl KvDb {
    /// Opens the database at `path` in `store` as its writer, fencing any previous writer.
    /// `name` (usually the URL) is used in messages.
    pub async fn open(
        store: TieredStore,
        path: &str,
        name: &str,
        options: &KvOptions,
    ) -> Result<Self> {
        options.validate(name)?;
        let path = Path::from(path);
        let marker = claim(&store, &path, name, options.create).await?;
        // Own the database before anything can be acknowledged: the lease claim is an atomic
        // create in the capacity store, so a writer that loses a start race stops here.
        let lease = crate::lease::claim(&store, &path, name, options.take_over).await?;
        tierdb_store::testpoint::pause_at("kv-lease-claimed");
        // SlateDB claims the WAL with a direct create, decided by the capacity store (after a
        // barrier that uploads whatever an earlier writer in this process left in the log).
        store.stop_logging_creates_in(&wal_dir(&path));
        let object_store = crate::sealed::for_slatedb(&store);
        let built = Db::builder(path.clone(), object_store)
            .with_settings(options.settings())
            .with_db_cache(options.db_cache(), 0)
            .build()
            .await;
        let db = match built {
            Ok(db) => db,
            Err(e) => {
                release(&store, &path, name, lease).await;
                return Err(KvError::engine(name, "open", e));
            }
        };
        // SlateDB has claimed the WAL (a direct create of its fence object); from now on its
        // WAL objects may be acknowledged from the device log.
        store.log_creates_in(&wal_dir(&path));
        let heartbeat = spawn_heartbeat(store.clone(), path.clone(), name.to_string(), lease);
        Ok(KvDb {
            name: name.to_string(),
            path,
            store,
            db,
            group: GroupCommit::default(),
            marker,
            options: options.clone(),
            ownership: heartbeat.ownership.clone(),
            heartbeat: parking_lot::Mutex::new(Some(heartbeat)),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database's prefix in its store.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn store(&self) -> &TieredStore {
        &self.store
    }

    pub fn marker(&self) -> &Marker {
        &self.marker
    }

    /// A consistent read-only view as of now.
    pub fn snapshot(&self) -> Result<KvSnapshot> {
        let snap = self
            .db
            .snapshot()
            .map_err(|e| KvError::engine(&self.name, "snapshot", e))?;
        Ok(KvSnapshot {
            name: self.name.clone(),
            snap,
        })
    }

    /// Why this handle can no longer be used, if SlateDB shut it down on its own (a
    /// background task failed, for example when the object store stayed away longer than
    /// its retries, or another writer fenced it). Every later call fails with that stale
    /// error: the database must be reopened.
    pub fn failure(&self) -> Option<String> {
        match self.db.status().close_reason? {
            slatedb::CloseReason::Clean => None,
            slatedb::CloseReason::Fenced => Some("fenced by another writer".into()),
            _ => Some("a background task failed (see the previous errors)".into()),
        }
    }

    /// Commits (group commit) and WAL flushes so far.
    pub fn commit_stats(&self) -> (u64, u64) {
        (
            self.group.commits.load(Ordering::Relaxed),
            self.group.flushes.load(Ordering::Relaxed),
        )
    }

    pub fn tier_stats(&self) -> TierStats {
        self.store.stats()
    }

    /// Sizes and LSM shape as this writer sees them.
    pub fn info(&self) -> DbShape {
        DbShape::of(&self.db.manifest())
    }

    /// Writes the memtable to L0 (so replicas that skip the WAL and clones see it).
    pub async fn flush_memtable(&self) -> Result<()> {
        self.db
            .flush_with_options(slatedb::config::FlushOptions {
                flush_type: slatedb::config::FlushType::MemTable,
            })
            .await
            .map_err(|e| KvError::engine(&self.name, "memtable flush", e))
    }

    /// Makes `dst` (a prefix in the same store) a zero-copy clone holding every commit so
    /// far: the memtable is written to L0 first, since a clone starts from the source's
    /// manifest. See [`clone_db`].
    pub async fn clone_to(&self, dst: &str, dst_name: &str) -> Result<()> {
        self.flush_memtable().await?;
        clone_db(&self.store, self.path.as_ref(), dst, &self.name, dst_name).await
    }

    /// Stops this handle's engine without a final flush, as a crash of this writer would:
    /// SlateDB's background tasks end (none is left running to race the next writer), the
    /// lease is not released (it goes stale, and a reopen in this process claims it at
    /// once), and the store is left as it is, so its write-back log keeps every acknowledged
    /// commit for the next open. For a handle whose engine failed (see [`KvDb::failure`]),
    /// or whose last commit had an unknown outcome.
    pub async fn close_without_flush(&self) {
        let heartbeat = self.heartbeat.lock().take();
        if let Some(h) = heartbeat {
            h.stop().await;
        }
        let options = slatedb::config::CloseOptions { flush_type: None };
        if let Err(e) = self.db.close_with_options(options).await {
            tracing::debug!(db = %self.name, error = %e, "closing a failed writer without a flush");
        }
        self.store.stop_logging_creates_in(&wal_dir(&self.path));
    }

    /// Gives this handle and its store up as a crash would: [`KvDb::close_without_flush`],
    /// then the store's uploads stop (see `TieredStore::abandon`).
    pub async fn abandon(&self) {
        self.close_without_flush().await;
        self.store.abandon().await;
    }

    /// Closes the database after flushing its WAL, then drains the store's write-back log.
    ///
    /// Every commit is already in the WAL, and the next open replays it; but a database
    /// written by short-lived processes never fills a memtable, so when more than
    /// [`KvOptions::max_wal_replay_objects`] WAL objects wait to be replayed the memtable is
    /// written to L0 first (on a healthy handle only: SlateDB 0.18's close() with a memtable
    /// flush could wait forever after some store faults, see tests/kv_model.rs). Then the
    /// garbage collector runs once, since a short-lived writer never reaches its interval.
    /// Call [`KvDb::flush_memtable`] first where readers that skip the WAL must see
    /// everything.
    pub async fn close(&self) -> Result<()> {
        if self.failure().is_none() && self.options.compaction {
            self.settle_compactions().await;
        }
        if self.failure().is_none() {
            let shape = self.info();
            let backlog = shape
                .next_wal_id
                .saturating_sub(shape.replay_after_wal_id + 1);
            if backlog > self.options.max_wal_replay_objects {
                match tokio::time::timeout(CLOSE_EXTRA_LIMIT, self.flush_memtable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(db = %self.name, error = %e, "memtable flush at close");
                    }
                    Err(_) => {
                        // A store that stopped answering: SlateDB's close would wait for this
                        // flush too. Every commit is in the WAL, so close as a crash would
                        // and let the next open replay it.
                        tracing::warn!(db = %self.name, "memtable flush at close did not finish; closing without it");
                        self.close_without_flush().await;
                        return self
                            .store
                            .flush()
                            .await
                            .map_err(|e| KvError::store(&self.name, e));
                    }
                }
            }
        }
        let heartbeat = self.heartbeat.lock().take();
        let lease = match heartbeat {
            Some(h) => h.stop().await,
            None => None,
        };
        let closed = self
            .db
            .close_with_options(slatedb::config::CloseOptions {
                flush_type: Some(slatedb::config::FlushType::Wal),
            })
            .await
            .map_err(|e| KvError::engine(&self.name, "close", e));
        if let (Ok(()), Some(lease)) = (&closed, lease) {
            // Released: the next writer need not wait for the lease to go stale.
            release(&self.store, &self.path, &self.name, lease).await;
        }
        self.store.stop_logging_creates_in(&wal_dir(&self.path));
        let flushed = self
            .store
            .flush()
            .await
            .map_err(|e| KvError::store(&self.name, e));
        if closed.is_ok() && flushed.is_ok() {
            self.collect_garbage().await;
        }
        closed.and(flushed)
    }

    /// Waits, at most [`KvOptions::close_compaction_wait`], until no compaction is active:
    /// SlateDB collects no SST newer than the oldest compaction still listed as active, so
    /// one a short-lived writer abandoned would hold back collection until another process
    /// finishes it. (SlateDB exports no status type: the state is read as its JSON form.)
    async fn settle_compactions(&self) {
        let admin = slatedb::admin::Admin::builder(
            self.path.clone(),
            crate::sealed::for_slatedb(&self.store),
        )
        .build();
        let deadline = tokio::time::Instant::now() + self.options.close_compaction_wait;
        loop {
            let read = tokio::time::timeout(
                self.options.close_compaction_wait,
                admin.read_compactions(None),
            )
            .await
            .unwrap_or(Ok(None));
            let active = match read {
                Ok(Some(c)) => c
                    .recent_compactions()
                    .filter(|c| {
                        let status = serde_json::to_value(c)
                            .ok()
                            .and_then(|v| v.get("status").cloned());
                        matches!(
                            status.as_ref().and_then(|s| s.as_str()),
                            Some("Submitted" | "Scheduled" | "Running" | "Compacted")
                        )
                    })
                    .count(),
                Ok(None) => 0,
                Err(e) => {
                    tracing::debug!(db = %self.name, error = %e, "reading compactions at close");
                    0
                }
            };
            if active == 0 || tokio::time::Instant::now() >= deadline {
                if active > 0 {
                    tracing::debug!(db = %self.name, active, "closing with compactions running");
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One pass of SlateDB's garbage collector over this database (errors are logged: what
    /// it leaves, the next pass deletes).
    async fn collect_garbage(&self) {
        let admin = slatedb::admin::Admin::builder(
            self.path.clone(),
            crate::sealed::for_slatedb(&self.store),
        )
        .build();
        match tokio::time::timeout(
            CLOSE_EXTRA_LIMIT,
            admin.run_gc_once(self.options.gc_options()),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(db = %self.name, error = %e, "garbage collection at close")
            }
            Err(_) => {
                tracing::warn!(db = %self.name, "garbage collection at close did not finish; left for the next pass")
            }
        }
    }

    fn fenced_check(&self) -> Result<()> {
        match self.store.fenced(&wal_dir(&self.path)) {
            Some(_) => Err(KvError::Fenced {
                db: self.name.clone(),
            }),
            None => Ok(()),
        }
    }
}

pub(crate) fn wal_dir(db: &Path) -> Path {
    db.clone().join("wal")
}

kv_read_via!(KvDb, |s| &s.db);

#[async_trait]
impl KvWrite for KvDb {
    /// Applies `batch` atomically and returns once it is durable: in the capacity store
    /// (write-through, write-around) or fsync'd in the device log (write-back). Concurrent
    /// commits share one WAL flush.
    async fn commit(&self, batch: Batch) -> Result<u64> {
        if batch.is_empty() {
            return Ok(self.group.durable.load(Ordering::Acquire));
        }
        self.fenced_check()?;
        let seq = self.write(batch).await?;
        self.group.make_durable(&self.db, &self.name, seq).await?;
        self.fenced_check()?;
        self.ownership
            .confirm(&self.store, &self.path, &self.name)
            .await?;
        Ok(seq)
    }
}

impl KvDb {
    /// Applies `batch` atomically without waiting for it to be durable; returns its sequence
    /// number. Reads do not see it until it is durable: the next durable [`KvWrite::commit`]
    /// (or the background flush) makes it so, together with everything written before it,
    /// since the WAL is written in sequence order. A crash before then loses it, and every
    /// later write with it. The object store writes a transaction's data this way at vote
    /// and makes it durable with the transaction's one durable commit at finish.
    pub async fn write_buffered(&self, batch: Batch) -> Result<u64> {
        if batch.is_empty() {
            return Ok(self.group.written.load(Ordering::Acquire));
        }
        self.fenced_check()?;
        let seq = self.write(batch).await?;
        self.group.written.fetch_max(seq, Ordering::AcqRel);
        Ok(seq)
    }

    async fn write(&self, batch: Batch) -> Result<u64> {
        let mut wb = slatedb::WriteBatch::new();
        for op in batch.ops {
            match op {
                Op::Put(k, v) => wb.put(k, v),
                Op::Delete(k) => wb.delete(k),
            }
        }
        let handle = self
            .db
            .write_with_options(wb, &WriteOptions::default())
            .await
            .map_err(|e| KvError::engine(&self.name, "commit", e))?;
        Ok(handle.seqnum())
    }
}

/// A consistent view of a database at one moment.
pub struct KvSnapshot {
    name: String,
    snap: Arc<DbSnapshot>,
}

impl std::fmt::Debug for KvSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvSnapshot")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

kv_read_via!(KvSnapshot, |s| s.snap.as_ref());

/// A read-only follower of a database: sees new commits within the poll interval (plus the
/// time to read the new WAL objects). It never fences the writer.
pub struct KvReplica {
    name: String,
    path: Path,
    reader: DbReader,
    store: TieredStore,
}

impl std::fmt::Debug for KvReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvReplica")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl KvReplica {
    /// Opens a follower polling every `poll_interval`. It keeps a checkpoint of the state it
    /// reads (refreshed as it follows), so the garbage collector cannot delete SSTs under it.
    pub async fn open(
        store: TieredStore,
        path: &str,
        name: &str,
        poll_interval: Duration,
    ) -> Result<Self> {
        Self::open_mode(
            store,
            path,
            name,
            poll_interval,
            DbReaderMode::ManagedCheckpoint,
        )
        .await
    }

    /// A follower that writes nothing at all (no checkpoint): for short reads such as
    /// `tierdb kv get`. A long-lived one may find SSTs it still reads collected.
    pub async fn open_unpinned(
        store: TieredStore,
        path: &str,
        name: &str,
        poll_interval: Duration,
    ) -> Result<Self> {
        Self::open_mode(store, path, name, poll_interval, DbReaderMode::FollowLatest).await
    }

    async fn open_mode(
        store: TieredStore,
        path: &str,
        name: &str,
        poll_interval: Duration,
        mode: DbReaderMode,
    ) -> Result<Self> {
        let db_path = Path::from(path);
        claim(&store, &db_path, name, false).await?;
        let object_store = crate::sealed::for_slatedb(&store);
        let options = slatedb::config::DbReaderOptions {
            manifest_poll_interval: poll_interval,
            checkpoint_lifetime: (poll_interval * 4).max(Duration::from_secs(60)),
            ..Default::default()
        };
        let reader = DbReader::builder(db_path, object_store)
            .with_reader_mode(mode)
            .with_options(options)
            .build()
            .await
            .map_err(|e| KvError::engine(name, "open replica", e))?;
        Ok(KvReplica {
            name: name.to_string(),
            path: Path::from(path),
            reader,
            store,
        })
    }

    pub fn tier_stats(&self) -> TierStats {
        self.store.stats()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database's prefix in its store.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn store(&self) -> &TieredStore {
        &self.store
    }

    pub async fn close(&self) -> Result<()> {
        self.reader
            .close()
            .await
            .map_err(|e| KvError::engine(&self.name, "close replica", e))
    }
}

kv_read_via!(KvReplica, |s| &s.reader);

/// Sizes and LSM levels of a database, from its manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbShape {
    pub manifest_id: u64,
    pub writer_epoch: u64,
    pub compactor_epoch: u64,
    /// Estimated bytes of each L0 SST, newest first.
    pub l0_bytes: Vec<u64>,
    /// (sorted run id, SSTs, estimated bytes), as stored (newest first).
    pub sorted_runs: Vec<(u32, usize, u64)>,
    pub next_wal_id: u64,
    pub replay_after_wal_id: u64,
    pub checkpoints: usize,
    /// Databases whose SSTs this one shares (a clone's sources).
    pub external_dbs: Vec<String>,
}

impl DbShape {
    fn of(m: &slatedb::VersionedManifest) -> Self {
        DbShape {
            manifest_id: m.id(),
            writer_epoch: m.writer_epoch(),
            compactor_epoch: m.compactor_epoch(),
            l0_bytes: m.l0().iter().map(|v| v.estimate_size()).collect(),
            sorted_runs: m
                .compacted()
                .iter()
                .map(|sr| (sr.id, sr.sst_views().len(), sr.estimate_size()))
                .collect(),
            next_wal_id: m.next_wal_sst_id(),
            replay_after_wal_id: m.replay_after_wal_id(),
            checkpoints: m.checkpoints().len(),
            external_dbs: m.external_dbs().iter().map(|e| format!("{e:?}")).collect(),
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.l0_bytes.iter().sum::<u64>() + self.sorted_runs.iter().map(|s| s.2).sum::<u64>()
    }

    /// Reads the shape of the database at `path` without opening it (nothing is written,
    /// no writer is fenced).
    pub async fn read(store: &TieredStore, path: &str, name: &str) -> Result<(Marker, Self)> {
        let db_path = Path::from(path);
        let marker = claim(store, &db_path, name, false).await?;
        let object_store = crate::sealed::for_slatedb(store);
        let admin = slatedb::admin::Admin::builder(db_path, object_store).build();
        let manifest = admin
            .read_manifest(None)
            .await
            .map_err(|e| KvError::engine(name, "read manifest", e))?;
        Ok((
            marker,
            manifest.as_ref().map(DbShape::of).unwrap_or_default(),
        ))
    }
}

/// Makes `dst` a clone of `src`: it shares `src`'s SST files (nothing is copied but the
/// manifest and a few WAL objects), and its writes go to its own prefix.
///
/// The clone starts from `src`'s latest manifest, so it holds the commits up to `src`'s
/// last memtable flush: all of them if `src` was closed cleanly. From a live writer use
/// [`KvDb::clone_to`], which flushes first.
pub async fn clone_db(
    store: &TieredStore,
    src: &str,
    dst: &str,
    src_name: &str,
    dst_name: &str,
) -> Result<()> {
    let src_path = Path::from(src);
    let dst_path = Path::from(dst);
    if src_path == dst_path
        || dst_path.prefix_matches(&src_path)
        || src_path.prefix_matches(&dst_path)
    {
        return Err(KvError::Invalid {
            db: dst_name.to_string(),
            what: format!("a clone cannot be inside its source {src_name} or contain it"),
        });
    }
    claim(store, &src_path, src_name, false).await?;
    match marker::read(store, &dst_path, dst_name).await? {
        None => {
            let m = Marker::new(Some(src_name.to_string()), true);
            marker::write(store, &dst_path, dst_name, &m, true).await?;
        }
        Some(m) if m.incomplete && m.clone_of.as_deref() == Some(src_name) => {} // resume
        Some(_) => {
            return Err(KvError::AlreadyExists {
                db: dst_name.to_string(),
            });
        }
    }
    let object_store = crate::sealed::for_slatedb(store);
    let admin = slatedb::admin::Admin::builder(dst_path.clone(), object_store).build();
    admin
        .create_clone_builder_from_source(slatedb::CloneSourceSpec::new(src_path))
        .build()
        .await
        .map_err(|e| KvError::engine(dst_name, "clone", e))?;
    let done = Marker::new(Some(src_name.to_string()), false);
    marker::write(store, &dst_path, dst_name, &done, false).await?;
    store.flush().await.map_err(|e| KvError::store(dst_name, e))
}
