//! The cleaner: uploads pending objects to the capacity store and trims the log.
//!
//! Uploads run `concurrency` at a time, newest version per path, one in flight per path.
//! A failed upload is retried with exponential backoff (capped at [`BACKOFF_MAX`]) for as
//! long as the store runs; after `attempts_max` failures in a row the failure is published
//! so that flushes report it instead of waiting forever. The data stays in the log.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::format_v1::RecordKind;
use super::writer::{AppendReq, sync_dir};
use super::{Entry, OnUploaded, Shared};

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A finished upload of the newest version of a path, for the read tiers to learn from.
#[derive(Debug)]
pub(crate) struct Uploaded {
    pub path: Path,
    /// `None` for a delete.
    pub put: Option<(PutResult, Bytes)>,
}

pub(crate) struct CleanerCtx {
    pub dir: PathBuf,
    pub shared: Arc<Shared>,
    pub capacity: Arc<dyn ObjectStore>,
    pub tx: mpsc::Sender<AppendReq>,
    pub concurrency: usize,
    pub attempts_max: u32,
    pub on_uploaded: OnUploaded,
    pub shutdown: watch::Receiver<bool>,
}

struct Job {
    path: String,
    entry: Entry,
}

type JobResult = (Job, object_store::Result<Option<(PutResult, Bytes)>>);

pub(crate) async fn run(mut ctx: CleanerCtx) {
    let mut running: JoinSet<JobResult> = JoinSet::new();
    loop {
        while running.len() < ctx.concurrency {
            let Some(job) = next_job(&ctx.shared) else {
                break;
            };
            let capacity = ctx.capacity.clone();
            running.spawn(async move {
                let result = upload(capacity.as_ref(), &job).await;
                (job, result)
            });
        }
        trim(&ctx).await;
        if running.is_empty() {
            write_clean_mark_if_idle(&ctx).await;
        }
        let next_retry = {
            let state = ctx.shared.state.lock();
            let create_retry = state
                .create_not_before
                .filter(|_| !state.creates.is_empty());
            state
                .retry
                .iter()
                .map(|(t, _)| *t)
                .chain(create_retry)
                .min()
        };
        let retry_sleep = next_retry.map_or(Duration::from_secs(3600), |t| {
            t.saturating_duration_since(Instant::now())
        });
        tokio::select! {
            Some(joined) = running.join_next(), if !running.is_empty() => {
                match joined {
                    Ok((job, result)) => finish(&ctx, job, result),
                    Err(e) => tracing::error!(error = %e, "write-back upload task failed"),
                }
            }
            () = ctx.shared.work.notified() => {}
            () = tokio::time::sleep(retry_sleep) => {}
            _ = ctx.shutdown.changed() => {
                while let Some(joined) = running.join_next().await {
                    if let Ok((job, result)) = joined {
                        finish(&ctx, job, result);
                    }
                }
                return;
            }
        }
    }
}

fn next_job(shared: &Shared) -> Option<Job> {
    let mut state = shared.state.lock();
    let now = Instant::now();
    let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.retry)
        .into_iter()
        .partition(|(t, _)| *t <= now);
    state.retry = waiting;
    for (_, path) in due {
        state.ready.push_back(path);
    }
    if let Some(job) = next_create(&mut state, now) {
        return Some(job);
    }
    while let Some(path) = state.ready.pop_front() {
        let Some(ps) = state.index.get_mut(&path) else {
            continue;
        };
        if ps.in_flight.is_some() || ps.latest.kind == RecordKind::Create {
            // A create is uploaded from `creates`, in log order (see `next_create`).
            continue;
        }
        ps.in_flight = Some(ps.latest.seq);
        let entry = ps.latest.clone();
        return Some(Job { path, entry });
    }
    None
}

/// The oldest pending create, if no create is in flight: creates reach the capacity store
/// one at a time and in log order, so a writer that lost a race for one path never gets a
/// later create of its own in after the winner's.
fn next_create(state: &mut super::State, now: Instant) -> Option<Job> {
    if state.create_in_flight || state.create_not_before.is_some_and(|t| t > now) {
        return None;
    }
    while let Some((&seq, path)) = state.creates.first_key_value() {
        let path = path.clone();
        let current = state
            .index
            .get(&path)
            .filter(|ps| ps.latest.seq == seq && ps.latest.kind == RecordKind::Create);
        let Some(ps) = current else {
            // Superseded by a later put or delete of the path: that one is uploaded instead.
            state.creates.remove(&seq);
            continue;
        };
        if ps.in_flight.is_some() {
            return None;
        }
        let entry = ps.latest.clone();
        if let Some(ps) = state.index.get_mut(&path) {
            ps.in_flight = Some(seq);
        }
        state.create_in_flight = true;
        return Some(Job { path, entry });
    }
    None
}

async fn upload(
    capacity: &dyn ObjectStore,
    job: &Job,
) -> object_store::Result<Option<(PutResult, Bytes)>> {
    let location =
        Path::parse(&job.path).map_err(|e| object_store::Error::InvalidPath { source: e })?;
    match job.entry.kind {
        RecordKind::Delete => match capacity.delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        },
        _ => {
            let segment = job.entry.segment.clone();
            let (offset, len) = (job.entry.payload_offset, job.entry.payload_len as usize);
            let payload = tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0u8; len];
                segment
                    .file
                    .read_exact_at(&mut buf, offset)
                    .map(|()| Bytes::from(buf))
            })
            .await
            .map_err(|e| object_store::Error::Generic {
                store: "tierdb",
                source: Box::new(e),
            })?
            .map_err(|e| object_store::Error::Generic {
                store: "tierdb",
                source: Box::new(e),
            })?;
            let create = job.entry.kind == RecordKind::Create;
            let opts = if create {
                PutOptions::from(PutMode::Create)
            } else {
                PutOptions::default()
            };
            match capacity
                .put_opts(&location, PutPayload::from(payload.clone()), opts)
                .await
            {
                Ok(result) => Ok(Some((result, payload))),
                Err(object_store::Error::AlreadyExists { path, source }) if create => {
                    // Our own earlier attempt may have landed before its reply was lost.
                    let existing = capacity.get(&location).await?;
                    let meta = existing.meta.clone();
                    if existing.bytes().await? == payload {
                        let result = PutResult {
                            e_tag: meta.e_tag,
                            version: meta.version,
                            extensions: Default::default(),
                        };
                        Ok(Some((result, payload)))
                    } else {
                        Err(object_store::Error::AlreadyExists { path, source })
                    }
                }
                Err(e) => Err(e),
            }
        }
    }
}

fn finish(ctx: &CleanerCtx, job: Job, result: object_store::Result<Option<(PutResult, Bytes)>>) {
    let shared = &ctx.shared;
    let seq = job.entry.seq;
    let mut state = shared.state.lock();
    let create = job.entry.kind == RecordKind::Create;
    if create {
        state.create_in_flight = false;
        match &result {
            Ok(_) => {
                state.creates.remove(&seq);
                state.create_not_before = None;
            }
            Err(object_store::Error::AlreadyExists { .. }) => {
                lose_create_race(shared, &mut state, &job);
                return;
            }
            Err(_) => {}
        }
    }
    match result {
        Ok(put) => {
            state.attempts.remove(&job.path);
            if state
                .failing
                .as_ref()
                .is_some_and(|(p, _, _)| *p == job.path)
            {
                state.failing = None;
            }
            shared
                .stats
                .uploaded_objects
                .fetch_add(1, Ordering::Relaxed);
            shared
                .stats
                .uploaded_bytes
                .fetch_add(job.entry.payload_len, Ordering::Relaxed);
            let newest = match state.index.get_mut(&job.path) {
                Some(ps) => {
                    ps.in_flight = None;
                    ps.latest.seq == seq
                }
                None => false,
            };
            if newest {
                state.index.remove(&job.path);
            } else {
                state.ready.push_back(job.path.clone());
            }
            // The read tiers learn the uploaded version before the lock is released: once
            // the pending entry is gone a reader goes to them, and a later version of the
            // path can be logged, uploaded and announced only after this. Announced after
            // the lock, a delayed announcement of an older version overwrote a newer one's
            // and reads were served the older bytes (found by `store_model` under load).
            if newest && let Ok(path) = Path::parse(&job.path) {
                (ctx.on_uploaded)(Uploaded { path, put });
            }
            state.done(shared, seq);
            drop(state);
        }
        Err(e) => {
            shared.stats.upload_errors.fetch_add(1, Ordering::Relaxed);
            let attempts = {
                let n = state.attempts.entry(job.path.clone()).or_insert(0);
                *n += 1;
                *n
            };
            tracing::warn!(path = %job.path, attempts, error = %e, "write-back upload failed; will retry");
            if attempts >= ctx.attempts_max {
                state.failing = Some((job.path.clone(), attempts, e.to_string()));
                state.failures += 1;
                state.publish_status(shared);
            }
            if let Some(ps) = state.index.get_mut(&job.path) {
                ps.in_flight = None;
            }
            // The newer version (if any) replaced this one while it was in flight.
            let superseded = state
                .index
                .get(&job.path)
                .is_some_and(|ps| ps.latest.seq != seq);
            if superseded {
                state.done(shared, seq);
            }
            let backoff = BACKOFF_MIN
                .saturating_mul(1 << attempts.min(16))
                .min(BACKOFF_MAX);
            if !create {
                state.retry.push((Instant::now() + backoff, job.path));
            } else if superseded {
                // A later put or delete of the path replaced the create while it was in
                // flight: that version is uploaded as an ordinary one.
                state.ready.push_back(job.path);
            } else {
                state.create_not_before = Some(Instant::now() + backoff);
            }
        }
    }
}

/// A logged create found another writer's object at its path: this process no longer
/// writes that directory. Its pending creates there can never be uploaded without mixing
/// two writers' histories, so they are discarded (they are released from the log), and
/// the directory is fenced so that further creates fail at once.
fn lose_create_race(shared: &Shared, state: &mut super::State, job: &Job) {
    let dir = super::parent_dir(&job.path).to_string();
    let reason = format!("{} was created by another writer", job.path);
    tracing::error!(dir = %dir, path = %job.path, "write-back create lost to another writer; fencing the directory");
    let discarded: Vec<(u64, String)> = state
        .creates
        .iter()
        .filter(|(_, p)| super::parent_dir(p) == dir)
        .map(|(s, p)| (*s, p.clone()))
        .collect();
    for (seq, path) in discarded {
        state.creates.remove(&seq);
        let current = state
            .index
            .get(&path)
            .is_some_and(|ps| ps.latest.seq == seq);
        if current {
            state.index.remove(&path);
        }
        state.done(shared, seq);
        shared
            .stats
            .discarded_creates
            .fetch_add(1, Ordering::Relaxed);
    }
    let superseded = state
        .index
        .get_mut(&job.path)
        .filter(|ps| ps.in_flight == Some(job.entry.seq));
    if let Some(ps) = superseded {
        // A later put or delete of the path replaced the create while it was in flight.
        ps.in_flight = None;
        state.ready.push_back(job.path.clone());
    }
    state.attempts.remove(&job.path);
    state.fenced.insert(dir, reason);
    state.publish_status(shared);
}

/// Deletes log segments whose records are all uploaded, oldest first.
async fn trim(ctx: &CleanerCtx) {
    let _trimming = ctx.shared.trimming.lock().await;
    let segments = ctx.shared.state.lock().take_trimmable();
    if !delete_segments(&ctx.dir, segments).await {
        // Files the state no longer lists may still be on disk: no barrier may stand a
        // trim in for a clean mark from now on (`WbLog::clean_by_trimming`).
        ctx.shared.untrimmed.store(true, Ordering::Release);
    }
}

/// Deletes `segments` (taken from the state with `take_trimmable`), oldest first, then
/// syncs the directory; false if a file could not be deleted or the folder not synced.
pub(crate) async fn delete_segments(
    dir: &std::path::Path,
    segments: Vec<Arc<super::Segment>>,
) -> bool {
    if segments.is_empty() {
        return true;
    }
    let dir = dir.to_path_buf();
    let result = tokio::task::spawn_blocking(move || {
        for segment in &segments {
            if let Err(e) = std::fs::remove_file(&segment.path) {
                tracing::warn!(segment = %segment.path.display(), error = %e, "cannot delete write-back log segment");
                return false;
            }
        }
        if let Err(e) = sync_dir(&dir) {
            tracing::warn!(error = %e, "cannot fsync the write-back log directory after trimming");
            return false;
        }
        true
    })
    .await;
    result.unwrap_or_else(|e| {
        tracing::error!(error = %e, "write-back log trim task failed");
        false
    })
}

/// When everything is uploaded, records that fact so a restart does not re-upload it.
async fn write_clean_mark_if_idle(ctx: &CleanerCtx) {
    let upto = {
        let state = ctx.shared.state.lock();
        if !state.records.is_empty() || state.clean_mark >= state.last_data_seq {
            return;
        }
        state.last_data_seq
    };
    let (reply, rx) = oneshot::channel();
    let req = AppendReq {
        kind: RecordKind::Clean,
        path: String::new(),
        payload: Vec::new(),
        stamp: upto,
        permits: 0,
        reply,
    };
    if ctx.tx.send(req).await.is_ok()
        && let Ok(Err(e)) = rx.await
    {
        tracing::warn!(error = %e, "cannot write a clean mark to the write-back log");
    }
}
