//! Per-block checksums of segment files.
//!
//! Parquet's page CRCs are optional and the writer DataFusion 55 uses never writes them, so a
//! flipped byte in a segment could decode into a wrong value. Every segment therefore gets a
//! CRC-32 per [`CHECKSUM_BLOCK_BYTES`] block of the file, computed from the bytes as they are
//! uploaded and kept in the segment's catalog entry (the catalog lives in the KV engine, whose
//! SSTs SlateDB checksums, so the checksums themselves are protected). The SQL engine's store
//! adapter (`dfstore.rs`) widens every read of a segment to whole blocks, checks each block
//! and returns only the bytes asked for: a changed byte anywhere, in the capacity store or in
//! a cache tier, is an error naming the segment and the byte range, never a wrong answer.
//! The files stay plain Parquet that other engines read.

use std::ops::Range;

use tierdb_store::Damage;

use serde::{Deserialize, Serialize};

/// Bytes covered by one checksum: the tiered store's default block, so widening a read to
/// whole blocks costs no extra capacity traffic.
pub const CHECKSUM_BLOCK_BYTES: u32 = 64 << 10;

/// The checksums of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSums {
    /// Bytes per block (the last block may be shorter).
    pub block_bytes: u32,
    /// The object's length.
    pub object_bytes: u64,
    /// CRC-32 (IEEE) of each block, in order.
    pub crcs: Vec<u32>,
}

impl BlockSums {
    /// Checksums of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        BlockSums {
            block_bytes: CHECKSUM_BLOCK_BYTES,
            object_bytes: bytes.len() as u64,
            crcs: bytes
                .chunks(CHECKSUM_BLOCK_BYTES as usize)
                .map(crc32fast::hash)
                .collect(),
        }
    }

    /// Whether the recorded shape is self-consistent (a catalog entry could be damaged too).
    fn consistent(&self) -> bool {
        self.block_bytes > 0
            && self.object_bytes.div_ceil(u64::from(self.block_bytes)) == self.crcs.len() as u64
    }

    /// `range` widened to whole blocks; an error if it reaches past the object's end.
    pub fn aligned(&self, range: &Range<u64>) -> Result<Range<u64>, Damage> {
        if !self.consistent() {
            return Err("its recorded checksums are inconsistent".into());
        }
        if range.start > range.end || range.end > self.object_bytes {
            return Err(format!(
                "bytes {}..{} were asked of a {}-byte segment",
                range.start, range.end, self.object_bytes
            )
            .into());
        }
        let b = u64::from(self.block_bytes);
        let start = range.start / b * b;
        let end = (range.end.div_ceil(b) * b).min(self.object_bytes);
        Ok(start..end.max(start))
    }

    /// Checks `bytes`, which must be the block-aligned range starting at `start`.
    pub fn verify(&self, start: u64, bytes: &[u8]) -> Result<(), Damage> {
        let b = u64::from(self.block_bytes);
        if !start.is_multiple_of(b) {
            return Err(format!("read at byte {start} is not block-aligned").into());
        }
        let end = start + bytes.len() as u64;
        let expected_end = (end.div_ceil(b) * b).min(self.object_bytes);
        if end != expected_end && !bytes.is_empty() {
            return Err(format!(
                "read {start}..{end} came back short of {expected_end} (the object changed size)"
            )
            .into());
        }
        for (i, chunk) in bytes.chunks(self.block_bytes as usize).enumerate() {
            let block = (start / b) as usize + i;
            let Some(&want) = self.crcs.get(block) else {
                return Err(format!("block {block} is past the recorded checksums").into());
            };
            let got = crc32fast::hash(chunk);
            if got != want {
                let at = block as u64 * b;
                return Err(format!(
                    "bytes {at}..{} fail their checksum (CRC-32 {got:08x}, recorded {want:08x})",
                    at + chunk.len() as u64
                )
                .into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_flipped_byte_is_caught_and_ranges_align() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sums = BlockSums::of(&data);
        assert_eq!(sums.crcs.len(), 4);
        let r = sums.aligned(&(70_000..70_010)).unwrap();
        assert_eq!(r, 65_536..131_072);
        assert_eq!(sums.aligned(&(199_990..200_000)).unwrap(), 196_608..200_000);
        assert!(sums.aligned(&(0..200_001)).is_err());
        sums.verify(r.start, &data[r.start as usize..r.end as usize])
            .unwrap();
        for at in [65_536usize, 100_000, 131_071] {
            let mut bad = data[r.start as usize..r.end as usize].to_vec();
            bad[at - 65_536] ^= 0x10;
            let err = sums.verify(r.start, &bad).unwrap_err();
            assert!(err.0.contains("65536..131072"), "{err}");
        }
        assert!(
            sums.verify(r.start, &data[65_536..100_000]).is_err(),
            "short read"
        );
    }
}
