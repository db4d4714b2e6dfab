//! The log writer: one thread that appends records and commits them in groups.
//!
//! Writers hand their records to the thread through a bounded channel. The thread takes
//! whatever has queued up (up to [`BATCH_BYTES_MAX`]), writes it, calls `fdatasync` once, and
//! only then publishes the records to the pending index and answers every writer in the
//! group. So N concurrent writers pay for one sync, and nothing is visible or acknowledged
//! before it is durable.
//!
//! A failed write is cut back off the file and reported to the group; if that cut or an
//! fsync fails, the writer is poisoned: every later append fails (fjall's rule: never retry an
//! fsync, whose failure may have dropped dirty pages the kernel will not write again).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::format_v1::{self, RecordKind};
use super::recovery::segment_path;
use super::{Segment, Shared};
use crate::error::{Error, Result};

/// A group stops growing at this many bytes.
const BATCH_BYTES_MAX: u64 = 16 << 20;

pub(crate) struct AppendReq {
    pub kind: RecordKind,
    pub path: String,
    pub payload: Vec<Bytes>,
    /// Put time in ms, or `clean_upto` for a clean mark.
    pub stamp: u64,
    /// Dirty-byte permits this record holds (released when it is uploaded or superseded).
    pub permits: u64,
    pub reply: oneshot::Sender<Result<u64>>,
}

pub(super) struct Writer {
    dir: PathBuf,
    shared: Arc<Shared>,
    segment_bytes_max: u64,
    active: Arc<Segment>,
    out: BufWriter<File>,
    offset: u64,
    next_seq: u64,
    poisoned: Option<String>,
}

impl Writer {
    pub fn new(
        dir: &FsPath,
        shared: Arc<Shared>,
        segment_bytes_max: u64,
        first_segment: u64,
        next_seq: u64,
    ) -> Result<Self> {
        let (active, out) = create_segment(dir, first_segment)?;
        shared.state.lock().add_segment(active.clone());
        Ok(Self {
            dir: dir.to_path_buf(),
            shared,
            segment_bytes_max,
            active,
            out,
            offset: 0,
            next_seq,
            poisoned: None,
        })
    }

    /// Runs until every sender is gone.
    pub fn run(mut self, mut rx: mpsc::Receiver<AppendReq>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batch = vec![first];
            let mut bytes: u64 = batch[0].payload.iter().map(|b| b.len() as u64).sum();
            while bytes < BATCH_BYTES_MAX {
                match rx.try_recv() {
                    Ok(req) => {
                        bytes += req.payload.iter().map(|b| b.len() as u64).sum::<u64>();
                        batch.push(req);
                    }
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
        if let Err(e) = self
            .out
            .flush()
            .and_then(|()| self.out.get_ref().sync_data())
        {
            tracing::error!(segment = %self.active.path.display(), error = %e, "final fsync of the write-back log failed");
        }
    }

    fn commit(&mut self, batch: Vec<AppendReq>) {
        if let Some(reason) = &self.poisoned {
            for req in batch {
                let _ = req.reply.send(Err(self.poison_error(reason)));
            }
            return;
        }
        let start_offset = self.offset;
        let first_seq = self.next_seq;
        let mut placed = Vec::with_capacity(batch.len());
        let device_full = self
            .shared
            .device_full
            .load(std::sync::atomic::Ordering::Acquire);
        let mut write = || -> std::io::Result<()> {
            if device_full {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "No space left on device (simulated)",
                ));
            }
            for (i, req) in batch.iter().enumerate() {
                let seq = first_seq + i as u64;
                let head =
                    format_v1::encode_head(req.kind, seq, req.stamp, &req.path, &req.payload);
                self.out.write_all(&head)?;
                for chunk in &req.payload {
                    self.out.write_all(chunk)?;
                }
                let payload_offset = self.offset + head.len() as u64;
                let payload_len: u64 = req.payload.iter().map(|b| b.len() as u64).sum();
                placed.push((seq, payload_offset, payload_len));
                self.offset = payload_offset + payload_len;
            }
            self.out.flush()
        };
        if let Err(e) = write() {
            // Cut the partial group off so later records do not follow garbage. The
            // BufWriter may still hold unwritten bytes of this group (a failed flush keeps
            // them): replace it without flushing, or they would land at the cut later.
            let cut = self.discard_buffer().and_then(|()| {
                self.out.get_ref().set_len(start_offset)?;
                use std::io::Seek;
                self.out
                    .get_mut()
                    .seek(std::io::SeekFrom::Start(start_offset))
                    .map(|_| ())
            });
            self.offset = start_offset;
            if let Err(cut_err) = cut {
                self.poisoned = Some(format!(
                    "write failed ({e}) and could not be cut back ({cut_err})"
                ));
            } else if e.kind() == std::io::ErrorKind::StorageFull && start_offset > 0 {
                // The device is full: start a new (empty) segment, so that once this one's
                // records are uploaded it can be deleted, which frees room and lets a
                // barrier stand in for the clean mark it cannot append (mod.rs invariant 5).
                self.roll();
            }
            let err = self.poisoned.clone().map_or_else(
                || Error::io("cannot append to write-back log", &self.active.path, e),
                |reason| self.poison_error(&reason),
            );
            let msg = err.to_string();
            for req in batch {
                let _ = req.reply.send(Err(Error::Io {
                    what: "cannot append to write-back log",
                    path: self.active.path.clone(),
                    source: std::io::Error::other(msg.clone()),
                }));
            }
            return;
        }
        if let Err(e) = self.out.get_ref().sync_data() {
            let reason = format!("fdatasync failed: {e}");
            tracing::error!(segment = %self.active.path.display(), %reason, "write-back log poisoned");
            self.poisoned = Some(reason.clone());
            for req in batch {
                let _ = req.reply.send(Err(self.poison_error(&reason)));
            }
            return;
        }
        self.next_seq += batch.len() as u64;
        self.shared
            .stats
            .record_group(batch.len() as u64, self.offset - start_offset);
        {
            // Durable: publish, then acknowledge.
            let mut state = self.shared.state.lock();
            for (req, (seq, payload_offset, payload_len)) in batch.iter().zip(&placed) {
                state.publish(
                    &self.shared,
                    req,
                    *seq,
                    &self.active,
                    *payload_offset,
                    *payload_len,
                );
            }
        }
        self.shared.work.notify_one();
        for (req, (seq, _, _)) in batch.into_iter().zip(placed) {
            let _ = req.reply.send(Ok(seq));
        }
        if self.offset >= self.segment_bytes_max {
            self.roll();
        }
    }

    /// Drops whatever the BufWriter still buffers, without writing it.
    fn discard_buffer(&mut self) -> std::io::Result<()> {
        let file = self.out.get_ref().try_clone()?;
        let old = std::mem::replace(&mut self.out, BufWriter::with_capacity(1 << 20, file));
        let (_file, _discarded) = old.into_parts();
        Ok(())
    }

    fn roll(&mut self) {
        match create_segment(&self.dir, self.active.id + 1) {
            Ok((segment, out)) => {
                self.shared.state.lock().roll_to(segment.clone());
                self.active = segment;
                self.out = out;
                self.offset = 0;
            }
            // Keep appending to the current segment; a later roll may succeed.
            Err(e) => tracing::warn!(error = %e, "cannot start a new write-back log segment"),
        }
    }

    fn poison_error(&self, reason: &str) -> Error {
        Error::LogPoisoned {
            segment: self.active.path.clone(),
            reason: reason.to_string(),
        }
    }
}

fn create_segment(dir: &FsPath, id: u64) -> Result<(Arc<Segment>, BufWriter<File>)> {
    let path = segment_path(dir, id);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| Error::io("cannot create write-back log segment", &path, e))?;
    sync_dir(dir)?;
    let reader = File::open(&path).map_err(|e| Error::io("cannot open", &path, e))?;
    Ok((
        Arc::new(Segment {
            id,
            path,
            file: reader,
        }),
        BufWriter::with_capacity(1 << 20, file),
    ))
}

pub(super) fn sync_dir(dir: &FsPath) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("cannot fsync directory", dir, e))
}
