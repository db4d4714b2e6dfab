//! Read-ahead for segment scans.
//!
//! DataFusion's Parquet reader reads a segment one row group at a time: the column chunks
//! of row group k (one `get_ranges`), decode, then row group k+1. From object storage each
//! row group is then a round trip the decoder waits for. A scan that has read row groups
//! k-1 and k of a segment is sequential, so the same columns of the next row groups are
//! fetched into the tiers while it decodes row group k: at most [`AHEAD_ROW_GROUPS`] row
//! groups and [`AHEAD_BYTES`] ahead, never past the row groups the segment has (so never
//! past its end). A reader that jumps (a point lookup, a pruned scan) gets none.
//!
//! Segments hold few row groups (two of 2^20 rows for a large table), so most of a scan's
//! waits are at segment starts. A scan registers each partition's segment order
//! ([`ReadAhead::follow`]); a sequential read that reaches a segment's last row group
//! then also fetches the next segment's footer and the same columns of its first row
//! group, and that segment's scan counts as sequential from its first read on.
//!
//! The column chunk offsets come from the segment's Parquet footer, read through the tiers
//! (where the reader's own footer read left it) and parsed once per segment per process.
//! Read-ahead data enters the tiers like any other read (same admission rule); it is
//! verified against the block checksums when the scan reads it, not before.
//!
//! [`ReadAheadMode`] turns it off, or keeps it within a segment, so what each part buys can
//! be measured in one invocation (`--read-ahead` of `tierdb sql`, `serve` and `bench`).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use datafusion::parquet::file::metadata::ParquetMetaDataReader;
use object_store as os14;
use os14::ObjectStoreExt as _;
use os14::path::Path as Path14;
use parking_lot::Mutex;

/// Row groups fetched ahead of the one being read.
pub const AHEAD_ROW_GROUPS: usize = 2;
/// Bytes fetched ahead of the row group being read, at most.
pub const AHEAD_BYTES: u64 = 32 << 20;
/// Segments whose layout and progress are remembered; the tables are cleared when full.
const SEGMENTS_MAX: usize = 4096;

/// How far a sequential segment scan reads ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAheadMode {
    /// No read-ahead: each row group is fetched when the reader asks for it.
    Off,
    /// The next row groups of the segment being read, never another segment.
    Segment,
    /// As `Segment`, and at a segment's last row group the start of the scan's next one.
    #[default]
    Across,
}

impl ReadAheadMode {
    fn code(self) -> u8 {
        match self {
            ReadAheadMode::Off => 0,
            ReadAheadMode::Segment => 1,
            ReadAheadMode::Across => 2,
        }
    }

    fn from_code(c: u8) -> Self {
        match c {
            0 => ReadAheadMode::Off,
            1 => ReadAheadMode::Segment,
            _ => ReadAheadMode::Across,
        }
    }
}

impl std::str::FromStr for ReadAheadMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(ReadAheadMode::Off),
            "segment" => Ok(ReadAheadMode::Segment),
            "across" => Ok(ReadAheadMode::Across),
            other => Err(format!(
                "unknown read-ahead mode {other:?}; use off, segment or across"
            )),
        }
    }
}

impl std::fmt::Display for ReadAheadMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadAheadMode::Off => "off",
            ReadAheadMode::Segment => "segment",
            ReadAheadMode::Across => "across",
        })
    }
}

/// Where every column chunk of a segment is: `chunks[row_group][column]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub chunks: Vec<Vec<Range<u64>>>,
}

impl Layout {
    /// Parses the footer of a Parquet file of `file_bytes` bytes, given its last `tail`
    /// bytes (which must hold the whole footer).
    pub fn from_footer(tail: &[u8], file_bytes: u64) -> Option<Self> {
        let n = tail.len();
        if n < 8 || &tail[n - 4..] != b"PAR1" {
            return None;
        }
        let len = u32::from_le_bytes(tail[n - 8..n - 4].try_into().ok()?) as usize;
        let meta = ParquetMetaDataReader::decode_metadata(tail.get(n - 8 - len..n - 8)?).ok()?;
        let chunks = meta
            .row_groups()
            .iter()
            .map(|rg| {
                rg.columns()
                    .iter()
                    .map(|c| {
                        let (start, len) = c.byte_range();
                        start..(start + len).min(file_bytes)
                    })
                    .collect()
            })
            .collect();
        Some(Layout { chunks })
    }

    /// The row group a read of `ranges` belongs to, and which of its columns it reads.
    fn locate(&self, ranges: &[Range<u64>]) -> Option<(usize, Vec<usize>)> {
        let first = ranges.iter().map(|r| r.start).min()?;
        let rg = self
            .chunks
            .iter()
            .position(|cols| cols.iter().any(|c| c.start <= first && first < c.end))?;
        let cols: Vec<usize> = self.chunks[rg]
            .iter()
            .enumerate()
            .filter(|(_, c)| ranges.iter().any(|r| r.start < c.end && c.start < r.end))
            .map(|(i, _)| i)
            .collect();
        Some((rg, cols))
    }
}

/// Per segment: the last row group read and the first one not yet fetched ahead.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    last: Option<usize>,
    ahead_to: usize,
    /// The scan of the previous segment fetched this one's first row group: a read of it
    /// continues that scan.
    continued: bool,
}

/// What a scan reads after a segment: the next segment of its partition and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextSegment {
    pub path: String,
    pub bytes: u64,
}

/// The next segment to fetch the start of, and the columns (by index) to fetch there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Across {
    pub next: NextSegment,
    pub columns: Vec<usize>,
}

/// Read-ahead state of one process's segment reads.
#[derive(Debug)]
pub struct ReadAhead {
    layouts: Mutex<HashMap<String, Arc<Layout>>>,
    progress: Mutex<HashMap<String, Progress>>,
    /// The segment a scan reads after each one (the latest scan's order wins: a hint).
    next: Mutex<HashMap<String, NextSegment>>,
    /// The [`ReadAheadMode`], as its code (read on every segment read: no lock).
    mode: AtomicU8,
}

impl Default for ReadAhead {
    fn default() -> Self {
        ReadAhead {
            layouts: Mutex::default(),
            progress: Mutex::default(),
            next: Mutex::default(),
            mode: AtomicU8::new(ReadAheadMode::default().code()),
        }
    }
}

impl ReadAhead {
    /// Sets how far scans read ahead from now on.
    pub fn set_mode(&self, mode: ReadAheadMode) {
        self.mode.store(mode.code(), Ordering::Relaxed);
    }

    pub fn mode(&self) -> ReadAheadMode {
        ReadAheadMode::from_code(self.mode.load(Ordering::Relaxed))
    }

    /// Records the order in which one scan partition reads `segments` (path, bytes).
    pub fn follow(&self, segments: &[(String, u64)]) {
        let mut next = self.next.lock();
        if next.len() + segments.len() > SEGMENTS_MAX {
            next.clear();
        }
        for pair in segments.windows(2) {
            let follower = NextSegment {
                path: pair[1].0.clone(),
                bytes: pair[1].1,
            };
            next.insert(pair[0].0.clone(), follower);
        }
    }

    /// The ranges of `columns` of the first row group of the segment `path` (laid out as
    /// `layout`) to fetch ahead of its scan, marking that scan as continued; empty when it
    /// was already read or fetched, or the row group is over the byte cap. (For the
    /// [`Across`] that [`Self::plan_next`] returned.)
    pub fn plan_across(&self, path: &str, layout: &Layout, columns: &[usize]) -> Vec<Range<u64>> {
        let mut progress = self.progress.lock();
        if progress.len() >= SEGMENTS_MAX && !progress.contains_key(path) {
            progress.clear();
        }
        let p = progress.entry(path.to_string()).or_default();
        if p.last.is_some() || p.ahead_to > 0 {
            return Vec::new();
        }
        let Some(first) = layout.chunks.first() else {
            return Vec::new();
        };
        let out: Vec<Range<u64>> = columns
            .iter()
            .filter_map(|&c| first.get(c).cloned())
            .collect();
        if out.iter().map(|r| r.end - r.start).sum::<u64>() > AHEAD_BYTES {
            return Vec::new();
        }
        p.ahead_to = 1;
        p.continued = true;
        out
    }

    /// Records a read of `ranges` of the segment at `path` and returns the ranges to fetch
    /// ahead (empty unless the read continues a sequential scan).
    pub fn plan(&self, path: &str, layout: &Layout, ranges: &[Range<u64>]) -> Vec<Range<u64>> {
        self.plan_next(path, layout, ranges).0
    }

    /// [`Self::plan`], and when the sequential read reached the segment's last row group,
    /// the next segment of its scan (if one was registered by [`Self::follow`]).
    pub fn plan_next(
        &self,
        path: &str,
        layout: &Layout,
        ranges: &[Range<u64>],
    ) -> (Vec<Range<u64>>, Option<Across>) {
        let mode = self.mode();
        if mode == ReadAheadMode::Off {
            return (Vec::new(), None);
        }
        let Some((rg, cols)) = layout.locate(ranges) else {
            return (Vec::new(), None);
        };
        let mut progress = self.progress.lock();
        if progress.len() >= SEGMENTS_MAX && !progress.contains_key(path) {
            progress.clear();
        }
        let p = progress.entry(path.to_string()).or_default();
        let sequential = (rg > 0 && p.last == Some(rg - 1)) || (rg == 0 && p.continued);
        p.last = Some(rg);
        if !sequential {
            return (Vec::new(), None);
        }
        let across = (rg + 1 == layout.chunks.len() && mode == ReadAheadMode::Across)
            .then(|| self.next.lock().get(path).cloned())
            .flatten()
            .map(|next| Across {
                next,
                columns: cols.clone(),
            });
        let from = p.ahead_to.max(rg + 1);
        let to = (rg + 1 + AHEAD_ROW_GROUPS).min(layout.chunks.len());
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut next = from;
        'groups: for g in from..to {
            for &c in &cols {
                let Some(r) = layout.chunks[g].get(c) else {
                    continue;
                };
                if bytes + (r.end - r.start) > AHEAD_BYTES {
                    break 'groups;
                }
                bytes += r.end - r.start;
                out.push(r.clone());
            }
            next = g + 1;
        }
        if next == from {
            // Not even one row group fits the cap: fetch nothing rather than half of one.
            out.clear();
        }
        p.ahead_to = next.max(p.ahead_to);
        (out, across)
    }

    /// The layout of the segment at `path` (`file_bytes` long), parsed from its footer on
    /// first use.
    pub async fn layout(
        &self,
        store: &Arc<dyn os14::ObjectStore>,
        path: &Path14,
        file_bytes: u64,
    ) -> Option<Arc<Layout>> {
        if let Some(l) = self.layouts.lock().get(path.as_ref()) {
            return Some(l.clone());
        }
        // The footer is read in two steps only when it is larger than the first guess.
        let mut tail_bytes = (64u64 << 10).min(file_bytes);
        loop {
            let tail = store
                .get_range(path, file_bytes - tail_bytes..file_bytes)
                .await
                .ok()?;
            let n = tail.len();
            if n < 8 {
                return None;
            }
            let need = u32::from_le_bytes(tail[n - 8..n - 4].try_into().ok()?) as u64 + 8;
            if need > tail_bytes && need <= file_bytes {
                tail_bytes = need;
                continue;
            }
            let layout = Arc::new(Layout::from_footer(&tail, file_bytes)?);
            let mut layouts = self.layouts.lock();
            if layouts.len() >= SEGMENTS_MAX {
                layouts.clear();
            }
            layouts.insert(path.to_string(), layout.clone());
            return Some(layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 row groups of 3 columns, each chunk 1 MiB, laid out row group after row group.
    fn layout(groups: usize, chunk: u64) -> Layout {
        let cols = 3;
        Layout {
            chunks: (0..groups)
                .map(|g| {
                    (0..cols)
                        .map(|c| {
                            let start = 4 + (g * cols + c) as u64 * chunk;
                            start..start + chunk
                        })
                        .collect()
                })
                .collect(),
        }
    }

    #[test]
    fn a_sequential_scan_gets_the_same_columns_of_the_next_row_groups() {
        let l = layout(4, 1 << 20);
        let ra = ReadAhead::default();
        // Row group 0, columns 0 and 2: nothing yet (one read is not a scan).
        let rg = |g: usize, c: usize| l.chunks[g][c].clone();
        assert!(ra.plan("s", &l, &[rg(0, 0), rg(0, 2)]).is_empty());
        // Row group 1 follows: row groups 2 and 3, the same columns.
        assert_eq!(
            ra.plan("s", &l, &[rg(1, 0), rg(1, 2)]),
            vec![rg(2, 0), rg(2, 2), rg(3, 0), rg(3, 2)]
        );
        // Row group 2: 3 is already fetched, and there is no row group 4.
        assert!(ra.plan("s", &l, &[rg(2, 0), rg(2, 2)]).is_empty());
        assert!(ra.plan("s", &l, &[rg(3, 0), rg(3, 2)]).is_empty());
        let end = l.chunks[3][2].end;
        assert!(ra.plan("t", &l, &[rg(0, 1)]).is_empty());
        for r in ra.plan("t", &l, &[rg(1, 1)]) {
            assert!(r.end <= end, "never past the last row group");
        }
    }

    #[test]
    fn the_mode_keeps_read_ahead_within_a_segment_or_turns_it_off() {
        let l = layout(4, 1 << 20);
        let rg = |g: usize, c: usize| l.chunks[g][c].clone();
        let ra = ReadAhead::default();
        assert_eq!(ra.mode(), ReadAheadMode::Across);
        ra.follow(&[("a".into(), 100), ("b".into(), 200)]);
        ra.set_mode(ReadAheadMode::Off);
        assert_eq!(ra.mode(), ReadAheadMode::Off);
        for g in 0..4 {
            assert_eq!(ra.plan_next("a", &l, &[rg(g, 0)]), (vec![], None));
        }
        ra.set_mode(ReadAheadMode::Segment);
        assert_eq!(ra.plan_next("b", &l, &[rg(0, 0)]), (vec![], None));
        assert_eq!(
            ra.plan_next("b", &l, &[rg(1, 0)]),
            (vec![rg(2, 0), rg(3, 0)], None)
        );
        ra.plan_next("b", &l, &[rg(2, 0)]);
        // The last row group of "a" read in sequence: nothing across in this mode.
        ra.plan_next("a", &l, &[rg(2, 1)]);
        assert_eq!(ra.plan_next("a", &l, &[rg(3, 1)]).1, None);
        ra.set_mode(ReadAheadMode::Across);
        assert_eq!(ra.mode(), ReadAheadMode::Across);
        for m in ["off", "segment", "across"] {
            assert_eq!(m.parse::<ReadAheadMode>().unwrap().to_string(), m);
        }
        assert!("sideways".parse::<ReadAheadMode>().is_err());
    }

    #[test]
    fn a_scan_reaching_a_segments_end_fetches_the_next_segments_start() {
        let l = layout(2, 1 << 20);
        let ra = ReadAhead::default();
        let rg = |g: usize, c: usize| l.chunks[g][c].clone();
        ra.follow(&[("a".into(), 100), ("b".into(), 200), ("c".into(), 300)]);
        // A jump to the last row group is not a scan: nothing across.
        assert_eq!(ra.plan_next("c", &l, &[rg(1, 0)]).1, None);
        // Row group 0 then 1 (the last) of "a": the start of "b", the same columns.
        assert_eq!(ra.plan_next("a", &l, &[rg(0, 0), rg(0, 2)]), (vec![], None));
        let (_, across) = ra.plan_next("a", &l, &[rg(1, 0), rg(1, 2)]);
        let across = across.unwrap();
        assert_eq!(
            across,
            Across {
                next: NextSegment {
                    path: "b".into(),
                    bytes: 200
                },
                columns: vec![0, 2]
            }
        );
        assert_eq!(
            ra.plan_across("b", &l, &across.columns),
            vec![rg(0, 0), rg(0, 2)]
        );
        // Once fetched, not again; and the scan of "b" is sequential from its first read:
        // row group 1 comes ahead at once, then "c" at its end.
        assert!(ra.plan_across("b", &l, &across.columns).is_empty());
        assert_eq!(
            ra.plan_next("b", &l, &[rg(0, 0), rg(0, 2)]),
            (vec![rg(1, 0), rg(1, 2)], None)
        );
        let (ahead, across) = ra.plan_next("b", &l, &[rg(1, 0), rg(1, 2)]);
        assert!(ahead.is_empty());
        assert_eq!(across.unwrap().next.path, "c");
        // The last segment of a scan has no next one; a segment already read gets nothing.
        ra.plan_next("c", &l, &[rg(0, 1)]);
        assert_eq!(ra.plan_next("c", &l, &[rg(1, 1)]).1, None);
        assert!(ra.plan_across("a", &l, &[0]).is_empty());
        // Over the byte cap: nothing rather than part of a row group.
        let big = layout(1, 20 << 20);
        assert!(ra.plan_across("d", &big, &[0, 1]).is_empty());
    }

    #[test]
    fn a_point_reader_gets_no_read_ahead_and_the_byte_cap_holds() {
        let l = layout(8, 20 << 20);
        let ra = ReadAhead::default();
        let rg = |g: usize, c: usize| l.chunks[g][c].clone();
        // Jumps: never sequential.
        for g in [5, 2, 7, 0, 3] {
            assert!(ra.plan("p", &l, &[rg(g, 1)]).is_empty(), "row group {g}");
        }
        // Sequential, with 20 MiB chunks and a 32 MiB cap: one row group of one column.
        assert!(ra.plan("q", &l, &[rg(0, 0)]).is_empty());
        let ahead = ra.plan("q", &l, &[rg(1, 0)]);
        assert_eq!(ahead, vec![rg(2, 0)]);
        assert!(ahead.iter().map(|r| r.end - r.start).sum::<u64>() <= AHEAD_BYTES);
        // Two columns of 20 MiB do not fit: nothing rather than half a row group.
        assert!(ra.plan("r", &l, &[rg(0, 0), rg(0, 1)]).is_empty());
        assert!(ra.plan("r", &l, &[rg(1, 0), rg(1, 1)]).is_empty());
    }

    #[test]
    fn the_layout_comes_from_a_real_footer() {
        use datafusion::arrow::array::Int64Array;
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::arrow::record_batch::RecordBatch;
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::properties::WriterProperties;
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]));
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(1000))
            .build();
        let mut w = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props)).unwrap();
        let col = Arc::new(Int64Array::from_iter_values(0..5000));
        w.write(&RecordBatch::try_new(schema, vec![col.clone(), col]).unwrap())
            .unwrap();
        let bytes = w.into_inner().unwrap();
        let l = Layout::from_footer(&bytes, bytes.len() as u64).unwrap();
        assert_eq!(l.chunks.len(), 5);
        assert!(l.chunks.iter().all(|cols| cols.len() == 2));
        assert!(
            l.chunks.windows(2).all(|w| w[0][1].end <= w[1][0].start),
            "row groups follow each other"
        );
        assert!(Layout::from_footer(b"not parquet", 11).is_none());
    }
}
