//! The write-back log: durable, acknowledged writes on the fast device, uploaded later.
//!
//! # Overview
//!
//! A write-back put is appended to the active log segment, `fdatasync`'d together with the
//! other writes queued at the same moment (group commit, see [`writer`]), published in the
//! pending index, and acknowledged. The [`cleaner`] uploads pending objects to the capacity
//! store, newest version per path only, and releases their dirty bytes; a segment file is
//! deleted once every record in it is uploaded or superseded, oldest segment first.
//!
//! # Invariants
//!
//! 1. A record is visible in the pending index only after it is durable, and is acknowledged
//!    only after it is visible (read-your-writes at acknowledgement).
//! 2. Per path, at most one upload is in flight, and a newer version is uploaded only after
//!    the older upload finished, so the capacity store ends with the newest version.
//! 3. Dirty bytes (pending payload) never exceed `dirty_bytes_max` except right after a
//!    replay of a log written with a larger cap; writers wait for permits, at most
//!    `dirty_wait_max` (then [`Error::WriteBackFull`]: the tiered store writes through).
//! 4. Segments are deleted in order, so the log on disk is always a suffix of what was
//!    written: replaying it yields the newest version of every path it holds.
//! 5. A clean mark (`upto`) is written only when every record with `seq <= upto` is uploaded.
//!    Replay skips those records, so a barrier followed by a direct write to the capacity
//!    store (a conditional put) cannot be undone by replaying an older logged version.
//!
//! # Crash recovery
//!
//! See [`recovery`]: the unacknowledged tail is cut; damage elsewhere refuses to open.
//! Replayed records go back into the pending index and uploads resume.

pub(crate) mod cleaner;
pub(crate) mod format_v1;
pub(crate) mod recovery;
mod writer;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot, watch};

use crate::error::{Error, Result};
use format_v1::RecordKind;
use writer::{AppendReq, Writer};

/// A log segment file, kept open for reads of pending payloads. An unlinked segment stays
/// readable through this handle until the last reader drops it.
#[derive(Debug)]
pub(crate) struct Segment {
    pub id: u64,
    pub path: PathBuf,
    pub file: std::fs::File,
}

/// The newest logged version of one path.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub kind: RecordKind,
    pub seq: u64,
    pub stamp_ms: u64,
    pub segment: Arc<Segment>,
    pub payload_offset: u64,
    pub payload_len: u64,
}

#[derive(Debug)]
struct PathState {
    latest: Entry,
    in_flight: Option<u64>,
}

#[derive(Debug)]
struct RecInfo {
    segment: u64,
    permits: u64,
    stamp_ms: u64,
}

#[derive(Debug)]
struct SegState {
    segment: Arc<Segment>,
    outstanding: u64,
    /// The seq of the first data record in it that was not already clean at replay.
    first_seq: Option<u64>,
}

/// Progress visible to waiters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Status {
    /// Every data record with `seq <= watermark` is uploaded or superseded.
    pub watermark: u64,
    /// An upload that failed `upload_attempts_max` times in a row: (path, attempts, error).
    pub failing: Option<(String, u32, String)>,
    /// How many times `failing` has been set since open: a barrier reports only failures
    /// that happened after it started (older ones may since have healed).
    pub failures: u64,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    segments: BTreeMap<u64, SegState>,
    active: u64,
    index: BTreeMap<String, PathState>,
    /// Data records not yet uploaded or superseded, by seq.
    records: BTreeMap<u64, RecInfo>,
    ready: VecDeque<String>,
    retry: Vec<(Instant, String)>,
    attempts: HashMap<String, u32>,
    last_seq: u64,
    last_data_seq: u64,
    clean_mark: u64,
    dirty_bytes: u64,
    /// Permits owed after replaying more dirty bytes than the current cap allows.
    debt: u64,
    failing: Option<(String, u32, String)>,
    failures: u64,
    /// Pending create records in log order (seq -> path); uploaded one at a time, in order.
    creates: BTreeMap<u64, String>,
    create_in_flight: bool,
    /// No create upload starts before this instant (backoff after a failed one).
    create_not_before: Option<Instant>,
    /// Directories where a logged create lost to another writer's object: further creates
    /// there are refused, and their pending creates were discarded. Value: the reason.
    fenced: BTreeMap<String, String>,
}

/// The directory part of an object path (`a/b/c` -> `a/b`).
pub(crate) fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

impl State {
    fn add_segment(&mut self, segment: Arc<Segment>) {
        self.active = segment.id;
        self.segments.insert(
            segment.id,
            SegState {
                segment,
                outstanding: 0,
                first_seq: None,
            },
        );
    }

    fn roll_to(&mut self, segment: Arc<Segment>) {
        self.add_segment(segment);
    }

    fn publish(
        &mut self,
        shared: &Shared,
        req: &AppendReq,
        seq: u64,
        segment: &Arc<Segment>,
        payload_offset: u64,
        payload_len: u64,
    ) {
        self.last_seq = seq;
        if req.kind == RecordKind::Clean {
            self.clean_mark = self.clean_mark.max(req.stamp);
            return;
        }
        self.insert_record(
            shared,
            &req.path,
            Entry {
                kind: req.kind,
                seq,
                stamp_ms: req.stamp,
                segment: segment.clone(),
                payload_offset,
                payload_len,
            },
            req.permits,
        );
    }

    fn insert_record(&mut self, shared: &Shared, path: &str, entry: Entry, permits: u64) {
        self.last_data_seq = entry.seq;
        self.dirty_bytes += permits;
        self.records.insert(
            entry.seq,
            RecInfo {
                segment: entry.segment.id,
                permits,
                stamp_ms: entry.stamp_ms,
            },
        );
        if let Some(seg) = self.segments.get_mut(&entry.segment.id) {
            seg.outstanding += 1;
            seg.first_seq.get_or_insert(entry.seq);
        }
        if entry.kind == RecordKind::Create {
            // Creates are not in `ready`: the cleaner takes them from `creates`, in order.
            self.creates.insert(entry.seq, path.to_string());
        }
        match self.index.get_mut(path) {
            None => {
                let create = entry.kind == RecordKind::Create;
                self.index.insert(
                    path.to_string(),
                    PathState {
                        latest: entry,
                        in_flight: None,
                    },
                );
                if !create {
                    self.ready.push_back(path.to_string());
                }
            }
            Some(state) => {
                let old = std::mem::replace(&mut state.latest, entry);
                if state.in_flight != Some(old.seq) {
                    self.done(shared, old.seq);
                }
            }
        }
    }

    /// The record `seq` no longer needs uploading.
    fn done(&mut self, shared: &Shared, seq: u64) {
        let Some(info) = self.records.remove(&seq) else {
            return;
        };
        if let Some(seg) = self.segments.get_mut(&info.segment) {
            seg.outstanding = seg.outstanding.saturating_sub(1);
        }
        self.dirty_bytes = self.dirty_bytes.saturating_sub(info.permits);
        let paid = self.debt.min(info.permits);
        self.debt -= paid;
        shared.dirty.add_permits((info.permits - paid) as usize);
        self.publish_status(shared);
    }

    fn watermark(&self) -> u64 {
        self.records
            .first_key_value()
            .map_or(self.last_seq, |(seq, _)| seq - 1)
    }

    fn publish_status(&self, shared: &Shared) {
        shared.status.send_replace(Status {
            watermark: self.watermark(),
            failing: self.failing.clone(),
            failures: self.failures,
        });
    }

    /// Removes and returns the segments that may be deleted now, oldest first.
    fn take_trimmable(&mut self) -> Vec<Arc<Segment>> {
        let mut out = Vec::new();
        while let Some(entry) = self.segments.first_entry() {
            if *entry.key() == self.active || entry.get().outstanding > 0 {
                break;
            }
            out.push(entry.remove().segment);
        }
        out
    }
}

#[derive(Debug, Default)]
pub(crate) struct LogCounters {
    appends: AtomicU64,
    groups: AtomicU64,
    log_bytes: AtomicU64,
    uploaded_objects: AtomicU64,
    uploaded_bytes: AtomicU64,
    upload_errors: AtomicU64,
    discarded_creates: AtomicU64,
}

impl LogCounters {
    fn record_group(&self, records: u64, bytes: u64) {
        self.appends.fetch_add(records, Ordering::Relaxed);
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.log_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    dirty: Semaphore,
    /// Wakes the cleaner.
    work: Notify,
    status: watch::Sender<Status>,
    stats: LogCounters,
    /// Fault injection: every append fails as on a full device (ENOSPC) while set.
    pub(crate) device_full: std::sync::atomic::AtomicBool,
    /// Held from taking trimmable segments out of the state until their files are gone:
    /// a barrier that trims instead of writing a clean mark waits for a trim the cleaner
    /// started, so it never reports clean while a file it no longer sees is still on disk.
    pub(crate) trimming: tokio::sync::Mutex<()>,
    /// Set for good once a trim failed to delete a file it had taken out of the state.
    pub(crate) untrimmed: std::sync::atomic::AtomicBool,
}

/// Write-back statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteBackStats {
    pub dirty_bytes: u64,
    pub dirty_bytes_max: u64,
    pub pending_objects: u64,
    /// Age of the oldest write not yet in the capacity store.
    pub upload_lag_ms: u64,
    pub uploaded_objects: u64,
    pub uploaded_bytes: u64,
    pub upload_errors: u64,
    /// Logged creates discarded because another writer created the path first (fencing).
    pub discarded_creates: u64,
    pub appends: u64,
    /// fdatasync calls; `appends / group_commits` is the mean group size.
    pub group_commits: u64,
    pub log_bytes: u64,
    pub segments: u64,
}

/// Settings of the log.
#[derive(Debug, Clone)]
pub(crate) struct LogOptions {
    pub segment_bytes_max: u64,
    pub dirty_bytes_max: u64,
    pub dirty_wait_max: std::time::Duration,
    pub upload_concurrency: usize,
    pub upload_attempts_max: u32,
}

/// Called after an upload of the newest version of a path succeeded.
pub(crate) type OnUploaded = Arc<dyn Fn(cleaner::Uploaded) + Send + Sync>;

/// The write-back log of one cache directory.
pub(crate) struct WbLog {
    dir: PathBuf,
    shared: Arc<Shared>,
    tx: Mutex<Option<mpsc::Sender<AppendReq>>>,
    record_bytes_max: u64,
    dirty_bytes_max: u64,
    /// Longest wait for room under the dirty cap (then [`Error::WriteBackFull`]).
    dirty_wait_max: std::time::Duration,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    cleaner: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shutdown: watch::Sender<bool>,
    /// Serializes [`WbLog::put_create`]'s check-then-append.
    create_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for WbLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WbLog")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl WbLog {
    /// Opens (replaying) the log in `dir` and starts its writer thread and cleaner task.
    /// Must be called inside a tokio runtime.
    pub fn open(
        dir: &FsPath,
        options: LogOptions,
        capacity: Arc<dyn ObjectStore>,
        on_uploaded: OnUploaded,
    ) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io("cannot create write-back log directory", dir, e))?;
        let replay = recovery::replay(dir)?;
        let (status, _) = watch::channel(Status::default());
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            dirty: Semaphore::new(0),
            work: Notify::new(),
            status,
            stats: LogCounters::default(),
            device_full: Default::default(),
            trimming: Default::default(),
            untrimmed: Default::default(),
        });
        let mut replayed_bytes = 0u64;
        {
            let mut state = shared.state.lock();
            for &id in &replay.segments {
                let path = recovery::segment_path(dir, id);
                let file =
                    std::fs::File::open(&path).map_err(|e| Error::io("cannot open", &path, e))?;
                state.add_segment(Arc::new(Segment { id, path, file }));
            }
            for rec in &replay.records {
                if Path::parse(&rec.path).is_err() {
                    return Err(Error::LogCorrupt {
                        segment: recovery::segment_path(dir, rec.segment),
                        offset: rec.payload_offset,
                        reason: format!("invalid object path {:?}", rec.path),
                    });
                }
                let Some(segment) = state.segments.get(&rec.segment).map(|s| s.segment.clone())
                else {
                    continue;
                };
                let permits = rec.payload_len;
                replayed_bytes += permits;
                let entry = Entry {
                    kind: rec.kind,
                    seq: rec.seq,
                    stamp_ms: rec.stamp_ms,
                    segment,
                    payload_offset: rec.payload_offset,
                    payload_len: rec.payload_len,
                };
                state.insert_record(&shared, &rec.path, entry, permits);
            }
            state.last_seq = replay.last_seq;
            state.clean_mark = replay.clean_upto;
            state.debt = replayed_bytes.saturating_sub(options.dirty_bytes_max);
            state.publish_status(&shared);
        }
        shared
            .dirty
            .add_permits(options.dirty_bytes_max.saturating_sub(replayed_bytes) as usize);
        if !replay.records.is_empty() {
            tracing::info!(dir = %dir.display(), records = replay.records.len(), bytes = replayed_bytes,
                "replayed write-back log; uploads resume");
        }

        let next_segment = replay.segments.last().map_or(1, |id| id + 1);
        let writer = Writer::new(
            dir,
            shared.clone(),
            options.segment_bytes_max,
            next_segment,
            replay.last_seq + 1,
        )?;
        let (tx, rx) = mpsc::channel(1024);
        let writer = std::thread::Builder::new()
            .name("tierdb-wblog".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::io("cannot start the write-back log thread", dir, e))?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let cleaner = tokio::spawn(cleaner::run(cleaner::CleanerCtx {
            dir: dir.to_path_buf(),
            shared: shared.clone(),
            capacity,
            tx: tx.clone(),
            concurrency: options.upload_concurrency.max(1),
            attempts_max: options.upload_attempts_max.max(1),
            on_uploaded,
            shutdown: shutdown_rx,
        }));
        // One record may use at most half the dirty budget, so two writers can always progress.
        let record_bytes_max = (options.dirty_bytes_max / 2).min(u64::from(u32::MAX));
        Ok(Arc::new(Self {
            dir: dir.to_path_buf(),
            shared,
            tx: Mutex::new(Some(tx)),
            record_bytes_max,
            dirty_bytes_max: options.dirty_bytes_max,
            dirty_wait_max: options.dirty_wait_max,
            writer: Mutex::new(Some(writer)),
            cleaner: Mutex::new(Some(cleaner)),
            shutdown,
            create_lock: tokio::sync::Mutex::new(()),
        }))
    }

    /// Whether a payload of `len` bytes may go through the log (larger ones are written
    /// through to the capacity store).
    pub fn accepts(&self, len: u64) -> bool {
        len <= self.record_bytes_max
    }

    pub async fn put(&self, path: &Path, payload: Vec<Bytes>) -> Result<()> {
        let len: u64 = payload.iter().map(|b| b.len() as u64).sum();
        debug_assert!(self.accepts(len));
        self.append(
            RecordKind::Put,
            path.as_ref().to_string(),
            payload,
            now_ms(),
            len,
        )
        .await
        .map(|_| ())
    }

    /// Logs a put that must not replace an existing object (`PutMode::Create`).
    ///
    /// The check is local: the path must have no pending version in this log and its
    /// directory must not be fenced. Whether the capacity store already holds the path is
    /// settled when the record is uploaded (as a conditional create, in log order): if it
    /// holds different bytes, another writer won, the directory is fenced and every pending
    /// create in it is discarded. See docs/design/kv.md for why this keeps SlateDB's fencing.
    pub async fn put_create(&self, path: &Path, payload: Vec<Bytes>) -> Result<()> {
        let len: u64 = payload.iter().map(|b| b.len() as u64).sum();
        debug_assert!(self.accepts(len));
        let _one_at_a_time = self.create_lock.lock().await;
        {
            let state = self.shared.state.lock();
            if let Some(reason) = state.fenced.get(parent_dir(path.as_ref())) {
                return Err(Error::Fenced {
                    path: path.to_string(),
                    reason: reason.clone(),
                });
            }
            if state
                .index
                .get(path.as_ref())
                .is_some_and(|s| s.latest.kind != RecordKind::Delete)
            {
                return Err(Error::AlreadyExists {
                    path: path.to_string(),
                });
            }
        }
        self.append(
            RecordKind::Create,
            path.as_ref().to_string(),
            payload,
            now_ms(),
            len,
        )
        .await
        .map(|_| ())
    }

    /// Whether logged creates in `dir` lost to another writer (see [`WbLog::put_create`]).
    pub fn fenced(&self, dir: &str) -> Option<String> {
        self.shared.state.lock().fenced.get(dir).cloned()
    }

    pub async fn delete(&self, path: &Path) -> Result<()> {
        self.append(
            RecordKind::Delete,
            path.as_ref().to_string(),
            Vec::new(),
            now_ms(),
            0,
        )
        .await
        .map(|_| ())
    }

    async fn append(
        &self,
        kind: RecordKind,
        path: String,
        payload: Vec<Bytes>,
        stamp: u64,
        permits: u64,
    ) -> Result<u64> {
        let tx = self.tx.lock().clone().ok_or(Error::Closed)?;
        if permits > 0 {
            let n = u32::try_from(permits).map_err(|_| Error::InvalidOption {
                option: "dirty_bytes_max",
                reason: "record larger than 4 GiB".into(),
            })?;
            let started = Instant::now();
            match tokio::time::timeout(self.dirty_wait_max, self.shared.dirty.acquire_many(n)).await
            {
                Ok(permit) => permit.map_err(|_| Error::Closed)?.forget(),
                Err(_) => {
                    return Err(Error::WriteBackFull {
                        dirty_bytes: self.shared.state.lock().dirty_bytes,
                        dirty_bytes_max: self.dirty_bytes_max,
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                }
            }
        }
        let (reply, rx) = oneshot::channel();
        let req = AppendReq {
            kind,
            path,
            payload,
            stamp,
            permits,
            reply,
        };
        let result = match tx.send(req).await {
            Ok(()) => rx.await.unwrap_or(Err(Error::Closed)),
            Err(_) => Err(Error::Closed),
        };
        if result.is_err() {
            self.shared.dirty.add_permits(permits as usize);
        }
        result
    }

    /// The newest logged version of `path`, if it is not yet uploaded.
    pub fn lookup(&self, path: &Path) -> Option<Entry> {
        self.shared
            .state
            .lock()
            .index
            .get(path.as_ref())
            .map(|s| s.latest.clone())
    }

    /// Pending versions of every path under `prefix` (a path-segment prefix, as `list` uses).
    pub fn pending_under(&self, prefix: Option<&Path>) -> Vec<(String, Entry)> {
        let state = self.shared.state.lock();
        let start = prefix.map_or(String::new(), |p| p.as_ref().to_string());
        state
            .index
            .range(start.clone()..)
            .take_while(|(k, _)| k.starts_with(&start))
            .filter(|(k, _)| {
                start.is_empty()
                    || k.len() == start.len()
                    || k.as_bytes().get(start.len()) == Some(&b'/')
            })
            .map(|(k, s)| (k.clone(), s.latest.clone()))
            .collect()
    }

    /// Whether the log holds records not covered by a clean mark, so a write that bypasses
    /// the log must run [`WbLog::barrier`] first.
    pub fn needs_barrier(&self) -> bool {
        let state = self.shared.state.lock();
        state.clean_mark < state.last_data_seq
    }

    /// Reads `range` of a pending payload.
    pub async fn read(&self, entry: &Entry, range: Range<u64>) -> Result<Bytes> {
        debug_assert!(range.end <= entry.payload_len);
        let segment = entry.segment.clone();
        let offset = entry.payload_offset + range.start;
        let len = (range.end - range.start) as usize;
        tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; len];
            segment
                .file
                .read_exact_at(&mut buf, offset)
                .map(|()| Bytes::from(buf))
                .map_err(|e| Error::io("cannot read write-back log", &segment.path, e))
        })
        .await
        .map_err(|e| Error::Cache(format!("log read task failed: {e}")))?
    }

    /// Waits until every write acknowledged before the call is in the capacity store, then
    /// records that in the log (a clean mark) so replay cannot re-upload those versions.
    ///
    /// Uploads waiting out a retry backoff are retried at once; the barrier fails only when
    /// an upload fails `upload_attempts_max` times and once more after the barrier began, so
    /// a failure from before the capacity store healed is not reported.
    pub async fn barrier(&self) -> Result<()> {
        let (target, failures_before) = {
            let mut state = self.shared.state.lock();
            let now = Instant::now();
            for (due, _) in &mut state.retry {
                *due = now;
            }
            state.create_not_before = None;
            (state.last_data_seq, state.failures)
        };
        let mut status = self.shared.status.subscribe();
        self.shared.work.notify_one();
        loop {
            {
                let s = status.borrow_and_update();
                if s.watermark >= target {
                    break;
                }
                if s.failures > failures_before
                    && let Some((path, attempts, last_error)) = &s.failing
                {
                    return Err(Error::UploadFailing {
                        path: path.clone(),
                        attempts: *attempts,
                        last_error: last_error.clone(),
                    });
                }
            }
            status.changed().await.map_err(|_| Error::Closed)?;
        }
        if self.shared.state.lock().clean_mark < target {
            match self
                .append(RecordKind::Clean, String::new(), Vec::new(), target, 0)
                .await
            {
                Ok(_) => {}
                Err(e) if e.log_is_full() => self.clean_by_trimming(target, e).await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Invariant 5 on a full device, where no clean mark can be appended: the writer started
    /// a new segment when an append failed there (`writer.rs`), so once every record up to
    /// `target` is uploaded the segments holding them can all be deleted, and a replay then
    /// finds none of them to re-upload. Fails with `full` if a segment holding such a record
    /// must stay (it is still the active one, or also holds a newer record not uploaded).
    async fn clean_by_trimming(&self, target: u64, full: Error) -> Result<()> {
        // Also waits for a trim of the cleaner's in progress (`Shared::trimming`).
        let _trimming = self.shared.trimming.lock().await;
        let segments = self.shared.state.lock().take_trimmable();
        let deleted = cleaner::delete_segments(&self.dir, segments).await;
        let mut state = self.shared.state.lock();
        if deleted
            && !self.shared.untrimmed.load(Ordering::Acquire)
            && state
                .segments
                .values()
                .all(|s| s.first_seq.is_none_or(|first| first > target))
        {
            // As good as a clean mark: no replay can find those records.
            state.clean_mark = state.clean_mark.max(target);
            tracing::info!(
                upto = target,
                "write-back log device full: uploaded segments deleted instead of a clean mark"
            );
            Ok(())
        } else {
            Err(full)
        }
    }

    /// Fault injection: while `full`, every append fails as on a full device (ENOSPC).
    pub fn simulate_full_device(&self, full: bool) {
        self.shared.device_full.store(full, Ordering::Release);
    }

    /// Drains the log and stops its tasks. Pending data stays durable in the log if the
    /// drain fails; it is uploaded at the next open.
    pub async fn close(&self) -> Result<()> {
        let drained = self.barrier().await;
        let _ = self.shutdown.send(true);
        let cleaner = self.cleaner.lock().take();
        if let Some(cleaner) = cleaner {
            let _ = cleaner.await;
        }
        self.tx.lock().take();
        let writer = self.writer.lock().take();
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
        drained
    }

    /// Stops the writer thread and the cleaner without uploading anything, as a crash
    /// would: every acknowledged record stays in the log and is replayed by the next open.
    pub async fn abandon(&self) {
        let _ = self.shutdown.send(true);
        let cleaner = self.cleaner.lock().take();
        if let Some(cleaner) = cleaner {
            cleaner.abort();
            let _ = cleaner.await;
        }
        self.tx.lock().take();
        let writer = self.writer.lock().take();
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
    }

    pub fn stats(&self) -> WriteBackStats {
        let c = &self.shared.stats;
        let state = self.shared.state.lock();
        let oldest = state.records.values().map(|r| r.stamp_ms).min();
        WriteBackStats {
            dirty_bytes: state.dirty_bytes,
            dirty_bytes_max: self.dirty_bytes_max,
            pending_objects: state.index.len() as u64,
            upload_lag_ms: oldest.map_or(0, |t| now_ms().saturating_sub(t)),
            uploaded_objects: c.uploaded_objects.load(Ordering::Relaxed),
            uploaded_bytes: c.uploaded_bytes.load(Ordering::Relaxed),
            upload_errors: c.upload_errors.load(Ordering::Relaxed),
            discarded_creates: c.discarded_creates.load(Ordering::Relaxed),
            appends: c.appends.load(Ordering::Relaxed),
            group_commits: c.groups.load(Ordering::Relaxed),
            log_bytes: c.log_bytes.load(Ordering::Relaxed),
            segments: state.segments.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests;
