//! Replaying the write-back log when a store opens.
//!
//! Segments are read oldest first and every record's CRC is checked. Records are appended in
//! batches that are acknowledged only after `fdatasync`, and a segment is closed (a newer one
//! created) only after its last batch was synced. So damage can be of two kinds:
//!
//! - in the newest segment, from the first bad record on: the tail of a batch that was being
//!   written when the process or machine died. None of it was acknowledged. It is cut off.
//! - anywhere else: acknowledged data is damaged. Opening fails with [`Error::LogCorrupt`]
//!   rather than silently dropping writes the application was told were durable.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path as FsPath, PathBuf};

use super::format_v1::{self, HEADER_BYTES, RecordKind};
use crate::error::{Error, Result};

/// One put or delete found in the log.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub kind: RecordKind,
    pub seq: u64,
    pub stamp_ms: u64,
    pub path: String,
    pub segment: u64,
    pub payload_offset: u64,
    pub payload_len: u64,
}

/// What replay found.
#[derive(Debug, Default)]
pub struct Replay {
    /// Segment ids in order.
    pub segments: Vec<u64>,
    /// Puts and deletes newer than the last clean mark, in log order.
    pub records: Vec<Replayed>,
    pub clean_upto: u64,
    pub last_seq: u64,
    /// Bytes cut from the end of the newest segment.
    pub torn_bytes: u64,
}

pub fn segment_path(dir: &FsPath, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.twb"))
}

/// Lists segment ids in `dir`, oldest first. Files that do not look like segments are left
/// alone (and reported) so that nothing a person put there is destroyed.
pub fn list_segments(dir: &FsPath) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("cannot read", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("cannot read", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        match name
            .strip_suffix(".twb")
            .map(|hex| u64::from_str_radix(hex, 16))
        {
            Some(Ok(id)) if name.len() == 20 => ids.push(id),
            _ => {
                tracing::warn!(file = %entry.path().display(), "ignoring unexpected file in write-back log directory")
            }
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Replays the log in `dir`, cutting off an unacknowledged tail.
pub fn replay(dir: &FsPath) -> Result<Replay> {
    replay_inner(dir, true)
}

/// Payload bytes of writes in `dir` not yet known to be uploaded; reads only.
pub fn dirty_bytes(dir: &FsPath) -> Result<u64> {
    if !dir.exists() {
        return Ok(0);
    }
    Ok(replay_inner(dir, false)?
        .records
        .iter()
        .map(|r| r.payload_len.max(1))
        .sum())
}

fn replay_inner(dir: &FsPath, cut_tail: bool) -> Result<Replay> {
    let mut out = Replay {
        segments: list_segments(dir)?,
        ..Default::default()
    };
    let mut all = Vec::new();
    let count = out.segments.len();
    for (i, &id) in out.segments.iter().enumerate() {
        let path = segment_path(dir, id);
        let newest = i + 1 == count;
        let scan = scan_segment(&path, id, &mut all, &mut out.clean_upto, &mut out.last_seq)?;
        if let Some((offset, reason)) = scan {
            if !newest {
                return Err(Error::LogCorrupt {
                    segment: path,
                    offset,
                    reason,
                });
            }
            if !cut_tail {
                continue;
            }
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| Error::io("cannot open", &path, e))?;
            let len = file
                .metadata()
                .map_err(|e| Error::io("cannot stat", &path, e))?
                .len();
            out.torn_bytes = len - offset;
            tracing::warn!(segment = %path.display(), offset, bytes = out.torn_bytes, %reason,
                "cutting the unacknowledged tail of the write-back log");
            file.set_len(offset)
                .map_err(|e| Error::io("cannot truncate", &path, e))?;
            file.sync_all()
                .map_err(|e| Error::io("cannot fsync", &path, e))?;
        }
    }
    let clean_upto = out.clean_upto;
    out.records = all.into_iter().filter(|r| r.seq > clean_upto).collect();
    Ok(out)
}

/// Reads one segment; returns the offset and reason of the first bad record, if any.
fn scan_segment(
    path: &FsPath,
    id: u64,
    records: &mut Vec<Replayed>,
    clean_upto: &mut u64,
    last_seq: &mut u64,
) -> Result<Option<(u64, String)>> {
    let file = File::open(path).map_err(|e| Error::io("cannot open", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, e))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut offset = 0u64;
    let mut payload = Vec::new();
    while offset < len {
        if len - offset < HEADER_BYTES as u64 {
            return Ok(Some((offset, "truncated record header".into())));
        }
        let mut head = [0u8; HEADER_BYTES];
        reader
            .read_exact(&mut head)
            .map_err(|e| Error::io("cannot read", path, e))?;
        let header = match format_v1::decode_header(&head) {
            Ok(h) => h,
            Err(e) => return Ok(Some((offset, e.to_string()))),
        };
        if header.record_bytes() > len - offset {
            return Ok(Some((
                offset,
                "record runs past the end of the segment".into(),
            )));
        }
        let mut path_bytes = vec![0u8; header.path_len as usize];
        reader
            .read_exact(&mut path_bytes)
            .map_err(|e| Error::io("cannot read", path, e))?;
        // The payload length was checked against the file length above.
        payload.resize(header.payload_len as usize, 0);
        reader
            .read_exact(&mut payload)
            .map_err(|e| Error::io("cannot read", path, e))?;
        if format_v1::record_crc(&head, &path_bytes, &payload) != header.crc {
            return Ok(Some((offset, "CRC mismatch".into())));
        }
        if header.seq <= *last_seq {
            return Ok(Some((
                offset,
                format!("sequence {} does not follow {}", header.seq, last_seq),
            )));
        }
        let Ok(object_path) = String::from_utf8(path_bytes) else {
            return Ok(Some((offset, "object path is not UTF-8".into())));
        };
        *last_seq = header.seq;
        match header.kind {
            RecordKind::Clean => *clean_upto = (*clean_upto).max(header.stamp),
            kind => records.push(Replayed {
                kind,
                seq: header.seq,
                stamp_ms: header.stamp,
                path: object_path,
                segment: id,
                payload_offset: offset + HEADER_BYTES as u64 + u64::from(header.path_len),
                payload_len: header.payload_len,
            }),
        }
        offset += header.record_bytes();
    }
    Ok(None)
}
