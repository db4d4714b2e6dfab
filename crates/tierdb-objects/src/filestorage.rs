//! Reads ZODB FileStorage files (`Data.fs`) transaction by transaction, for
//! `tierdb zodb import`. The format is ZODB's (ZODB/FileStorage/format.py): a 4-byte magic,
//! then transactions, each a 23-byte header (tid, length, status, user, description and
//! extension lengths), the metadata, data records (42-byte header: oid, tid, previous
//! record, transaction position, version length, data length; then the data, or an 8-byte
//! back pointer to the record holding it), and the length again.
//!
//! Every length and pointer is checked against the file; damage is an error naming the
//! offset and the transaction, never a panic or a silently short import.

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::error::{ErrorKind, ObjError, Result};
use crate::ids::{Oid, Tid};
use crate::records::TxnMeta;

const TXN_HDR: usize = 23;
const DATA_HDR: usize = 42;

/// One data record of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRecord {
    pub oid: Oid,
    /// `None`: no data (an undone creation).
    pub data: Option<Bytes>,
    /// The transaction whose record holds the data (undo, copies).
    pub data_txn: Option<Tid>,
}

/// One transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsTxn {
    pub tid: Tid,
    pub status: u8,
    pub meta: TxnMeta,
    pub records: Vec<FsRecord>,
    /// Bytes of the file this transaction took (for progress and throughput).
    pub bytes: u64,
}

/// Sequential reader of a FileStorage file.
#[derive(Debug)]
pub struct FsReader {
    path: PathBuf,
    file: BufReader<File>,
    /// For back pointers.
    random: File,
    pos: u64,
    len: u64,
    last: Tid,
}

impl FsReader {
    pub fn open(path: &Path) -> Result<Self> {
        let io = |what: &str, e: std::io::Error| ObjError::FileStorage {
            kind: match e.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                _ => ErrorKind::Input,
            },
            reason: format!("cannot {what} {}: {e}", path.display()),
        };
        let f = File::open(path).map_err(|e| io("open", e))?;
        let len = f.metadata().map_err(|e| io("read", e))?.len();
        let random = f.try_clone().map_err(|e| io("read", e))?;
        let mut file = BufReader::with_capacity(1 << 20, f);
        let mut magic = [0u8; 4];
        let not_fs = |why: String| ObjError::FileStorage {
            kind: ErrorKind::Input,
            reason: format!("{} is not a FileStorage file: {why}", path.display()),
        };
        file.read_exact(&mut magic)
            .map_err(|_| not_fs("shorter than its 4-byte header".into()))?;
        if &magic != b"FS21" && &magic != b"FS30" {
            return Err(not_fs(format!(
                "it starts with {:?}, not FS21 or FS30",
                String::from_utf8_lossy(&magic)
            )));
        }
        Ok(FsReader {
            path: path.to_path_buf(),
            file,
            random,
            pos: 4,
            len,
            last: Tid::ZERO,
        })
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len <= 4
    }

    /// Bytes read so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn damaged(&self, at: u64, what: impl std::fmt::Display) -> ObjError {
        ObjError::FileStorage {
            kind: ErrorKind::Data,
            reason: format!(
                "{} is damaged at byte {at} (after transaction {}): {what}; nothing was imported",
                self.path.display(),
                self.last
            ),
        }
    }

    fn read(&mut self, n: usize) -> Result<Vec<u8>> {
        let at = self.pos;
        if at.saturating_add(n as u64) > self.len {
            return Err(self.damaged(
                at,
                format!("truncated: {n} bytes wanted, {} left", self.len - at),
            ));
        }
        let mut buf = vec![0u8; n];
        self.file
            .read_exact(&mut buf)
            .map_err(|e| self.damaged(at, e))?;
        self.pos += n as u64;
        Ok(buf)
    }

    fn read_at(&self, at: u64, n: usize) -> Result<Vec<u8>> {
        if at.saturating_add(n as u64) > self.len {
            return Err(self.damaged(at, "a back pointer points past the end"));
        }
        let mut buf = vec![0u8; n];
        self.random
            .read_exact_at(&mut buf, at)
            .map_err(|e| self.damaged(at, e))?;
        Ok(buf)
    }

    /// Follows back pointers from the record at `at` to the one holding the data: returns
    /// (data, tid of the record holding it); `None` data for an undone creation.
    fn resolve(&self, mut at: u64) -> Result<(Option<Bytes>, Tid)> {
        for _ in 0..1000 {
            let h = self.read_at(at, DATA_HDR)?;
            let tid = Tid(u64::from_be_bytes(arr(&h[8..16])));
            let vlen = u16::from_be_bytes([h[32], h[33]]);
            let plen = u64::from_be_bytes(arr(&h[34..42]));
            if vlen != 0 {
                return Err(self.damaged(at, "a record with a version (ZODB 3.8 and older)"));
            }
            if plen > 0 {
                let n = usize::try_from(plen).map_err(|_| self.damaged(at, "huge record"))?;
                return Ok((
                    Some(Bytes::from(self.read_at(at + DATA_HDR as u64, n)?)),
                    tid,
                ));
            }
            let back = u64::from_be_bytes(arr(&self.read_at(at + DATA_HDR as u64, 8)?));
            if back == 0 {
                return Ok((None, tid));
            }
            if back >= at {
                return Err(self.damaged(at, "a back pointer points forward"));
            }
            at = back;
        }
        Err(self.damaged(at, "a chain of back pointers does not end"))
    }

    /// The next transaction, or `None` at the end of the file (or at an unfinished
    /// transaction, status 'c', which FileStorage leaves when a commit was interrupted).
    pub fn next_txn(&mut self) -> Result<Option<FsTxn>> {
        if self.pos >= self.len {
            return Ok(None);
        }
        let start = self.pos;
        let h = self.read(TXN_HDR)?;
        let tid = Tid(u64::from_be_bytes(arr(&h[0..8])));
        let tlen = u64::from_be_bytes(arr(&h[8..16]));
        let status = h[16];
        let (ulen, dlen, elen) = (
            u16::from_be_bytes([h[17], h[18]]) as usize,
            u16::from_be_bytes([h[19], h[20]]) as usize,
            u16::from_be_bytes([h[21], h[22]]) as usize,
        );
        if status == b'c' {
            // An interrupted commit: FileStorage ignores it too.
            self.pos = self.len;
            return Ok(None);
        }
        if !matches!(status, b' ' | b'p' | b'u') {
            return Err(self.damaged(start, format!("unknown transaction status {status:#04x}")));
        }
        if tid <= self.last {
            return Err(self.damaged(
                start,
                format!("transaction {tid} does not follow {}", self.last),
            ));
        }
        let end = start
            .checked_add(tlen)
            .filter(|&e| {
                e.saturating_add(8) <= self.len && tlen >= (TXN_HDR + ulen + dlen + elen) as u64
            })
            .ok_or_else(|| self.damaged(start, format!("transaction length {tlen} is wrong")))?;
        let user = Bytes::from(self.read(ulen)?);
        let description = Bytes::from(self.read(dlen)?);
        let extension = Bytes::from(self.read(elen)?);
        let mut records = Vec::new();
        while self.pos < end {
            let at = self.pos;
            if at + DATA_HDR as u64 > end {
                return Err(self.damaged(at, "a data record runs past its transaction"));
            }
            let d = self.read(DATA_HDR)?;
            let oid = Oid(u64::from_be_bytes(arr(&d[0..8])));
            let rtid = Tid(u64::from_be_bytes(arr(&d[8..16])));
            let tpos = u64::from_be_bytes(arr(&d[24..32]));
            let vlen = u16::from_be_bytes([d[32], d[33]]);
            let plen = u64::from_be_bytes(arr(&d[34..42]));
            if rtid != tid || tpos != start {
                return Err(self.damaged(
                    at,
                    format!("record of object {oid} does not belong to transaction {tid}"),
                ));
            }
            if vlen != 0 {
                return Err(self.damaged(at, "a record with a version (ZODB 3.8 and older)"));
            }
            let (data, data_txn) = if plen > 0 {
                // Lengths come from the file: checked, never allowed to overflow.
                if (at + DATA_HDR as u64).saturating_add(plen) > end {
                    return Err(self.damaged(
                        at,
                        format!("record of object {oid} runs past its transaction"),
                    ));
                }
                (Some(Bytes::from(self.read(plen as usize)?)), None)
            } else {
                let back = u64::from_be_bytes(arr(&self.read(8)?));
                if back == 0 {
                    (None, None)
                } else if back >= at {
                    return Err(self.damaged(at, "a back pointer points forward"));
                } else {
                    // The data itself comes along (stored once anyway, by its hash).
                    let (data, from) = self.resolve(back)?;
                    (data, Some(from))
                }
            };
            records.push(FsRecord {
                oid,
                data,
                data_txn,
            });
        }
        if self.pos != end {
            return Err(self.damaged(self.pos, "records overrun their transaction"));
        }
        let again = u64::from_be_bytes(arr(&self.read(8)?));
        if again != tlen {
            return Err(self.damaged(
                end,
                format!("transaction {tid}: length {tlen} at its start, {again} at its end"),
            ));
        }
        self.last = tid;
        Ok(Some(FsTxn {
            tid,
            status,
            meta: TxnMeta {
                user,
                description,
                extension,
            },
            records,
            bytes: self.pos - start,
        }))
    }
}

fn arr(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A Data.fs with one transaction of two records, the second a back pointer to the
    /// first (as an undo writes).
    fn sample() -> Vec<u8> {
        let mut f = b"FS30".to_vec();
        let start = f.len() as u64;
        let (user, desc, ext) = (b"u".as_slice(), b"dd".as_slice(), b"".as_slice());
        let data = b"pickle bytes";
        let rec1 = 42 + data.len() as u64;
        let rec2 = 42 + 8;
        let tlen = 23 + (user.len() + desc.len() + ext.len()) as u64 + rec1 + rec2;
        f.extend_from_slice(&5u64.to_be_bytes());
        f.extend_from_slice(&tlen.to_be_bytes());
        f.push(b' ');
        for l in [user.len(), desc.len(), ext.len()] {
            f.extend_from_slice(&(l as u16).to_be_bytes());
        }
        f.extend_from_slice(user);
        f.extend_from_slice(desc);
        let first = f.len() as u64;
        for (oid, back) in [(1u64, None), (2u64, Some(first))] {
            f.extend_from_slice(&oid.to_be_bytes());
            f.extend_from_slice(&5u64.to_be_bytes());
            f.extend_from_slice(&0u64.to_be_bytes());
            f.extend_from_slice(&start.to_be_bytes());
            f.extend_from_slice(&0u16.to_be_bytes());
            match back {
                None => {
                    f.extend_from_slice(&(data.len() as u64).to_be_bytes());
                    f.extend_from_slice(data);
                }
                Some(b) => {
                    f.extend_from_slice(&0u64.to_be_bytes());
                    f.extend_from_slice(&b.to_be_bytes());
                }
            }
        }
        f.extend_from_slice(&tlen.to_be_bytes());
        f
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<FsTxn>> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("Data.fs");
        std::fs::write(&p, bytes).unwrap();
        let mut r = FsReader::open(&p)?;
        let mut out = Vec::new();
        while let Some(t) = r.next_txn()? {
            out.push(t);
        }
        Ok(out)
    }

    #[test]
    fn reads_transactions_and_resolves_back_pointers() {
        let txns = read_all(&sample()).unwrap();
        assert_eq!(txns.len(), 1);
        let t = &txns[0];
        assert_eq!(
            (t.tid, &t.meta.user[..], &t.meta.description[..]),
            (Tid(5), &b"u"[..], &b"dd"[..])
        );
        assert_eq!(t.records[0].data.as_deref(), Some(&b"pickle bytes"[..]));
        assert_eq!(t.records[1].data.as_deref(), Some(&b"pickle bytes"[..]));
        assert_eq!(t.records[1].data_txn, Some(Tid(5)));
    }

    /// Fuzz (proptest): random bytes after the magic, and the sample with random bytes
    /// overwritten or appended, read to transactions or an error, never a panic or a hang.
    #[test]
    fn random_and_mutated_files_never_panic() {
        use proptest::prelude::*;
        let good = sample();
        proptest!(ProptestConfig::with_cases(300), |(
            noise in proptest::collection::vec(any::<u8>(), 0..300),
            at in any::<usize>(),
        )| {
            let _ = read_all(&[&good[..4], &noise[..]].concat());
            let mut v = good.clone();
            let start = 4 + at % (v.len() - 4);
            for (i, b) in noise.iter().enumerate().take(16) {
                if let Some(slot) = v.get_mut(start + i) {
                    *slot = *b;
                }
            }
            let _ = read_all(&v);
            v.extend_from_slice(&noise);
            let _ = read_all(&v);
        });
    }

    #[test]
    fn damage_anywhere_is_an_error_not_a_panic() {
        let good = sample();
        assert!(read_all(&good[..4]).unwrap().is_empty()); // just the header: empty
        for cut in (0..good.len()).filter(|&c| c != 4) {
            assert!(read_all(&good[..cut]).is_err(), "cut at {cut}");
        }
        for i in 4..good.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[i] ^= bit;
                let _ = read_all(&bad); // an error or a different reading, never a panic
            }
        }
    }
}
