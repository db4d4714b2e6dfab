//! Byte format of write-back log records, version 1. See docs/design/tiered-store.md.
//!
//! Every integer is little-endian.
//!
//! ```text
//! offset size  field
//!      0    4  magic "TWB1"
//!      4    1  kind: 1 = put, 2 = delete, 3 = clean mark, 4 = create (put if absent)
//!      5    3  zero
//!      8    8  seq: position in the log, strictly increasing
//!     16    8  put time, milliseconds since the Unix epoch; for a clean mark: `clean_upto`
//!     24    4  path length P (bytes of UTF-8)
//!     28    8  payload length N
//!     36    4  CRC-32 (IEEE) of bytes 0..36, the path and the payload
//!     40    P  path
//!   40+P    N  payload
//! ```

use bytes::Bytes;

pub const MAGIC: [u8; 4] = *b"TWB1";
pub const HEADER_BYTES: usize = 40;
/// Paths longer than this are not valid object paths anywhere we write.
pub const PATH_BYTES_MAX: u32 = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Put = 1,
    Delete = 2,
    /// Every record with `seq <= clean_upto` is in the capacity store: replay skips it.
    Clean = 3,
    /// A put that must not replace an existing object (`PutMode::Create`). It is uploaded
    /// as a conditional create, in log order after every earlier create; if the capacity
    /// store already holds different bytes under the path, another writer got there first.
    Create = 4,
}

/// The fixed part of a record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub kind: RecordKind,
    pub seq: u64,
    /// Put time in ms since the epoch, or `clean_upto` for a clean mark.
    pub stamp: u64,
    pub path_len: u32,
    pub payload_len: u64,
    pub crc: u32,
}

impl Header {
    pub fn record_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + u64::from(self.path_len) + self.payload_len
    }
}

/// Encodes the header and path of a record; the payload follows it unchanged.
pub fn encode_head(
    kind: RecordKind,
    seq: u64,
    stamp: u64,
    path: &str,
    payload: &[Bytes],
) -> Vec<u8> {
    let payload_len: u64 = payload.iter().map(|b| b.len() as u64).sum();
    let mut head = Vec::with_capacity(HEADER_BYTES + path.len());
    head.extend_from_slice(&MAGIC);
    head.push(kind as u8);
    head.extend_from_slice(&[0, 0, 0]);
    head.extend_from_slice(&seq.to_le_bytes());
    head.extend_from_slice(&stamp.to_le_bytes());
    let path_len = u32::try_from(path.len()).expect("paths are checked against PATH_BYTES_MAX");
    head.extend_from_slice(&path_len.to_le_bytes());
    head.extend_from_slice(&payload_len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head[..36]);
    crc.update(path.as_bytes());
    for chunk in payload {
        crc.update(chunk);
    }
    head.extend_from_slice(&crc.finalize().to_le_bytes());
    head.extend_from_slice(path.as_bytes());
    head
}

/// Why a header could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    BadMagic,
    BadKind(u8),
    PathTooLong(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::BadMagic => write!(f, "bad record magic"),
            HeaderError::BadKind(k) => write!(f, "unknown record kind {k}"),
            HeaderError::PathTooLong(n) => write!(f, "path length {n} exceeds {PATH_BYTES_MAX}"),
        }
    }
}

pub fn decode_header(buf: &[u8; HEADER_BYTES]) -> Result<Header, HeaderError> {
    if buf[0..4] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let kind = match buf[4] {
        1 => RecordKind::Put,
        2 => RecordKind::Delete,
        3 => RecordKind::Clean,
        4 => RecordKind::Create,
        k => return Err(HeaderError::BadKind(k)),
    };
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let u32_at = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&buf[at..at + 4]);
        u32::from_le_bytes(b)
    };
    let path_len = u32_at(24);
    if path_len > PATH_BYTES_MAX {
        return Err(HeaderError::PathTooLong(path_len));
    }
    Ok(Header {
        kind,
        seq: u64_at(8),
        stamp: u64_at(16),
        path_len,
        payload_len: u64_at(28),
        crc: u32_at(36),
    })
}

/// The CRC a record with this header, path and payload must carry.
pub fn record_crc(header_bytes: &[u8; HEADER_BYTES], path: &[u8], payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header_bytes[..36]);
    crc.update(path);
    crc.update(payload);
    crc.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_crc_covers_everything() {
        let payload = [Bytes::from_static(b"hello "), Bytes::from_static(b"world")];
        let head = encode_head(RecordKind::Put, 7, 1234, "a/b", &payload);
        let mut fixed = [0u8; HEADER_BYTES];
        fixed.copy_from_slice(&head[..HEADER_BYTES]);
        let h = decode_header(&fixed).unwrap();
        assert_eq!(h.kind, RecordKind::Put);
        assert_eq!(
            (h.seq, h.stamp, h.path_len, h.payload_len),
            (7, 1234, 3, 11)
        );
        assert_eq!(h.crc, record_crc(&fixed, b"a/b", b"hello world"));
        assert_ne!(h.crc, record_crc(&fixed, b"a/b", b"hello worle"));
        assert_ne!(h.crc, record_crc(&fixed, b"a/c", b"hello world"));
    }

    #[test]
    fn garbage_headers_are_rejected_without_panicking() {
        let mut fixed = [0u8; HEADER_BYTES];
        assert_eq!(decode_header(&fixed), Err(HeaderError::BadMagic));
        fixed[..4].copy_from_slice(&MAGIC);
        fixed[4] = 9;
        assert_eq!(decode_header(&fixed), Err(HeaderError::BadKind(9)));
        fixed[4] = 1;
        fixed[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_header(&fixed),
            Err(HeaderError::PathTooLong(_))
        ));
    }
}
