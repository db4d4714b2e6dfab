//! Replaying the write-back log when a store opens, and salvaging a damaged one.
//!
//! Segments are read oldest first and every record's length, CRC and sequence number are
//! checked. Records are appended in groups that are acknowledged only after `fdatasync`, and
//! a segment is closed (a newer one created) only after its last group was synced. So a bad
//! record is one of two things:
//!
//! - a **torn tail**: the end of the group that was being written when the process or machine
//!   died. It is in the newest segment, and no valid record follows it (a later group would
//!   have been appended only after this one was synced). None of it was acknowledged: it is
//!   cut off.
//! - **damage**: anything else, that is a bad record in an older segment, or a bad record with
//!   at least one valid record after it. Acknowledged writes may be in the damaged bytes, so
//!   opening fails with [`Error::LogCorrupt`] naming the segment and offset, and nothing is
//!   changed on disk. [`salvage`] is the explicit, operator-run way out: it keeps every
//!   readable record and reports the byte ranges it dropped.
//!
//! "Valid record after it" is searched byte by byte: at every offset past the bad record
//! where the magic appears, a header that decodes, fits in the file, carries a matching CRC
//! and a sequence number above the last good one counts. A CRC-32 match by chance on garbage
//! has odds of 2^-32 per candidate, and a candidate must first match the 4-byte magic.

use std::fs::File;
use std::path::{Path as FsPath, PathBuf};

use super::format_v1::{self, HEADER_BYTES, Header, RecordKind};
use crate::error::{Damage, Error, Result};

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
        let bytes = read_segment(&path)?;
        let Some(bad) = scan_segment(&bytes, id, &mut all, &mut out.clean_upto, &mut out.last_seq)
        else {
            continue;
        };
        let corrupt = |reason: String| Error::LogCorrupt {
            segment: path.clone(),
            offset: bad.offset,
            reason,
        };
        if !newest {
            return Err(corrupt(bad.reason));
        }
        if let Some(next) = next_valid_record(&bytes, bad.offset + 1, out.last_seq) {
            return Err(corrupt(format!(
                "{}, and a valid record (seq {}) follows at byte {}, so this is not a torn tail",
                bad.reason, next.seq, next.offset
            )));
        }
        if !cut_tail {
            continue;
        }
        out.torn_bytes = bytes.len() as u64 - bad.offset;
        tracing::warn!(segment = %path.display(), offset = bad.offset, bytes = out.torn_bytes,
            reason = %bad.reason, "cutting the unacknowledged tail of the write-back log (no valid record follows it)");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("cannot open", &path, e))?;
        file.set_len(bad.offset)
            .map_err(|e| Error::io("cannot truncate", &path, e))?;
        file.sync_all()
            .map_err(|e| Error::io("cannot fsync", &path, e))?;
    }
    let clean_upto = out.clean_upto;
    out.records = all.into_iter().filter(|r| r.seq > clean_upto).collect();
    Ok(out)
}

fn read_segment(path: &FsPath) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io("cannot read", path, e))
}

/// The first bad record of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BadRecord {
    offset: u64,
    reason: String,
}

/// A record that decoded and whose CRC matched.
#[derive(Debug, Clone)]
struct GoodRecord {
    header: Header,
    offset: u64,
    path: String,
}

impl GoodRecord {
    fn end(&self) -> u64 {
        self.offset + self.header.record_bytes()
    }
}

/// Decodes the record at `offset` of `bytes`: every length is checked against the buffer
/// before it is used, so no input can make this panic or read out of bounds.
fn decode_at(bytes: &[u8], offset: u64) -> std::result::Result<GoodRecord, Damage> {
    let len = bytes.len() as u64;
    let rest = len.saturating_sub(offset);
    if rest < HEADER_BYTES as u64 {
        return Err("truncated record header".into());
    }
    let at = offset as usize;
    let mut head = [0u8; HEADER_BYTES];
    head.copy_from_slice(&bytes[at..at + HEADER_BYTES]);
    let header = format_v1::decode_header(&head).map_err(|e| e.to_string())?;
    let record_bytes = (HEADER_BYTES as u64)
        .checked_add(u64::from(header.path_len))
        .and_then(|n| n.checked_add(header.payload_len));
    match record_bytes {
        Some(n) if n <= rest => {}
        _ => return Err("record runs past the end of the segment".into()),
    }
    let path_start = at + HEADER_BYTES;
    let payload_start = path_start + header.path_len as usize;
    let end = payload_start + header.payload_len as usize;
    let path_bytes = &bytes[path_start..payload_start];
    if format_v1::record_crc(&head, path_bytes, &bytes[payload_start..end]) != header.crc {
        return Err("CRC mismatch".into());
    }
    let Ok(path) = String::from_utf8(path_bytes.to_vec()) else {
        return Err("object path is not UTF-8".into());
    };
    Ok(GoodRecord {
        header,
        offset,
        path,
    })
}

/// The first record at or after `from` that is valid and follows `last_seq`.
fn next_valid_record(bytes: &[u8], from: u64, last_seq: u64) -> Option<NextRecord> {
    let start = usize::try_from(from).ok()?;
    let magic = &format_v1::MAGIC;
    let mut at = start;
    while at + HEADER_BYTES <= bytes.len() {
        let window = &bytes[at..];
        let hit = window.windows(magic.len()).position(|w| w == magic)?;
        at += hit;
        if let Ok(rec) = decode_at(bytes, at as u64)
            && rec.header.seq > last_seq
        {
            return Some(NextRecord {
                offset: at as u64,
                seq: rec.header.seq,
            });
        }
        at += 1;
    }
    None
}

#[derive(Debug, Clone, Copy)]
struct NextRecord {
    offset: u64,
    seq: u64,
}

/// Reads one segment's records into `records`; returns its first bad record, if any.
fn scan_segment(
    bytes: &[u8],
    id: u64,
    records: &mut Vec<Replayed>,
    clean_upto: &mut u64,
    last_seq: &mut u64,
) -> Option<BadRecord> {
    let mut offset = 0u64;
    while offset < bytes.len() as u64 {
        let rec = match decode_at(bytes, offset) {
            Ok(rec) => rec,
            Err(Damage(reason)) => return Some(BadRecord { offset, reason }),
        };
        if rec.header.seq <= *last_seq {
            return Some(BadRecord {
                offset,
                reason: format!("sequence {} does not follow {}", rec.header.seq, last_seq),
            });
        }
        *last_seq = rec.header.seq;
        push_record(&rec, id, records, clean_upto);
        offset = rec.end();
    }
    None
}

fn push_record(rec: &GoodRecord, id: u64, records: &mut Vec<Replayed>, clean_upto: &mut u64) {
    match rec.header.kind {
        RecordKind::Clean => *clean_upto = (*clean_upto).max(rec.header.stamp),
        kind => records.push(Replayed {
            kind,
            seq: rec.header.seq,
            stamp_ms: rec.header.stamp,
            path: rec.path.clone(),
            segment: id,
            payload_offset: rec.offset + HEADER_BYTES as u64 + u64::from(rec.header.path_len),
            payload_len: rec.header.payload_len,
        }),
    }
}

/// Bytes of a segment that [`salvage`] could not read as records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DroppedRange {
    pub segment: PathBuf,
    pub offset: u64,
    pub bytes: u64,
    pub reason: String,
}

/// What [`salvage`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SalvageReport {
    pub segments: u64,
    pub records_kept: u64,
    /// Segments that were rewritten (their originals are in `damaged_dir`).
    pub segments_rewritten: u64,
    pub dropped: Vec<DroppedRange>,
    /// Where the damaged originals were moved, if any segment was damaged.
    pub damaged_dir: Option<PathBuf>,
}

/// Rewrites a damaged write-back log so that it opens: every record that reads back whole
/// (length, CRC, increasing sequence) is kept, in order; every unreadable byte range is
/// dropped and reported. The damaged segment files are moved, unchanged, to a sibling
/// directory `wblog-damaged-<unix seconds>` so that nothing is destroyed.
///
/// The caller must hold the cache directory's lock. Writes in the dropped ranges are lost
/// unless they were already uploaded; a dropped clean mark makes replay upload some objects
/// again (harmless unless they were since overwritten by a direct write to the capacity
/// store, which the report's ranges let a person check).
pub fn salvage(dir: &FsPath) -> Result<SalvageReport> {
    let mut report = SalvageReport::default();
    if !dir.exists() {
        return Ok(report);
    }
    let mut last_seq = 0u64;
    for id in list_segments(dir)? {
        report.segments += 1;
        let path = segment_path(dir, id);
        let bytes = read_segment(&path)?;
        let mut kept: Vec<u8> = Vec::with_capacity(bytes.len());
        let mut dropped_here = Vec::new();
        let mut offset = 0u64;
        let len = bytes.len() as u64;
        while offset < len {
            match decode_at(&bytes, offset) {
                Ok(rec) if rec.header.seq > last_seq => {
                    last_seq = rec.header.seq;
                    kept.extend_from_slice(&bytes[offset as usize..rec.end() as usize]);
                    report.records_kept += 1;
                    offset = rec.end();
                }
                other => {
                    let reason = match other {
                        Ok(rec) => {
                            format!("sequence {} does not follow {last_seq}", rec.header.seq)
                        }
                        Err(Damage(reason)) => reason,
                    };
                    let next =
                        next_valid_record(&bytes, offset + 1, last_seq).map_or(len, |n| n.offset);
                    dropped_here.push(DroppedRange {
                        segment: path.clone(),
                        offset,
                        bytes: next - offset,
                        reason,
                    });
                    offset = next;
                }
            }
        }
        if dropped_here.is_empty() {
            continue;
        }
        let damaged_dir = match &report.damaged_dir {
            Some(d) => d.clone(),
            None => {
                let stamp = super::now_ms() / 1000;
                let name = format!(
                    "{}-damaged-{stamp}",
                    dir.file_name().and_then(|n| n.to_str()).unwrap_or("wblog")
                );
                let d = dir.with_file_name(name);
                std::fs::create_dir_all(&d).map_err(|e| Error::io("cannot create", &d, e))?;
                report.damaged_dir = Some(d.clone());
                d
            }
        };
        let tmp = dir.join(format!("{id:016x}.salvage"));
        write_synced(&tmp, &kept)?;
        let aside = damaged_dir.join(path.file_name().unwrap_or_default());
        // Copy the original aside first, so a crash at any point leaves it in one place or
        // the other, never nowhere.
        std::fs::copy(&path, &aside).map_err(|e| Error::io("cannot copy aside", &path, e))?;
        sync_file(&aside)?;
        sync_file(&damaged_dir)?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("cannot replace", &path, e))?;
        sync_file(dir)?;
        report.segments_rewritten += 1;
        report.dropped.extend(dropped_here);
    }
    Ok(report)
}

fn write_synced(path: &FsPath, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io("cannot write", path, e))?;
    sync_file(path)
}

fn sync_file(path: &FsPath) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io("cannot fsync", path, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bytes::Bytes;

    fn record(seq: u64, path: &str, payload: &[u8]) -> Vec<u8> {
        let payload = [Bytes::copy_from_slice(payload)];
        let mut out = format_v1::encode_head(RecordKind::Put, seq, 0, path, &payload);
        out.extend_from_slice(&payload[0]);
        out
    }

    /// Any bytes at all: decoding never panics, and scanning then searching terminates.
    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        use proptest::prelude::*;
        let good: Vec<u8> = (1..4).flat_map(|s| record(s, "p", b"xyz")).collect();
        proptest!(ProptestConfig::with_cases(512), |(noise in proptest::collection::vec(any::<u8>(), 0..300),
                                                     flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8))| {
            for base in [noise.clone(), [good.clone(), noise.clone()].concat()] {
                let mut bytes = base;
                for &(at, x) in &flips {
                    if !bytes.is_empty() {
                        let i = at % bytes.len();
                        bytes[i] ^= x;
                    }
                }
                let (mut recs, mut clean, mut last) = (Vec::new(), 0, 0);
                let bad = scan_segment(&bytes, 1, &mut recs, &mut clean, &mut last);
                if let Some(bad) = bad {
                    let _ = next_valid_record(&bytes, bad.offset + 1, last);
                }
                for r in &recs {
                    prop_assert!(r.payload_offset + r.payload_len <= bytes.len() as u64);
                }
            }
        });
    }

    #[test]
    fn huge_lengths_do_not_overflow() {
        let mut rec = record(1, "p", b"x");
        rec[28..36].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            decode_at(&rec, 0).unwrap_err(),
            Damage("record runs past the end of the segment".into())
        );
    }

    #[test]
    fn a_valid_record_after_damage_is_found() {
        let a = record(1, "a", b"one");
        let b = record(2, "b", b"two");
        let mut bytes = [a.clone(), b].concat();
        bytes[HEADER_BYTES + 2] ^= 1; // a's payload
        let next = next_valid_record(&bytes, 1, 0).unwrap();
        assert_eq!((next.offset, next.seq), (a.len() as u64, 2));
        assert!(next_valid_record(&bytes, 1, 2).is_none(), "seq must follow");
    }
}
