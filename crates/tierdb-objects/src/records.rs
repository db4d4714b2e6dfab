//! Keys and values of the object store in the key-value engine. Every value starts with a
//! format version byte; decoding checks every length and never panics on stored bytes.
//!
//! ```text
//! key                            value
//! m "state"                      Meta: last tid, highest oid a transaction chose + 1
//! m "oids"                       oids reserved up to (written by oid reservations only)
//! m "objects"                    the number of objects (absent in older stores: counted)
//! h <oid:8>                      head: version, current tid, that Revision, then (when
//!                                its compressed data is small) a copy of its DataRecord
//! o <oid:8> <tid:8>              Revision: data hash (or "no data"), data_txn, prev tid
//! t <tid:8>                      TxnRecord: status, user, description, extension
//! r <tid:8> <oid:8>              version only: the objects a transaction wrote
//! d <hash:32>                    DataRecord: codec, raw length, inline bytes or chunk count
//! c <hash:32> <n:4>              version, then a chunk of a large record's compressed bytes
//! ```
//!
//! Format version 2 put the version byte first in head records and chunks too (version 1
//! had none there); a database of another version is refused, naming both versions.
//!
//! Revisions of one object are adjacent and ordered by tid, so the current revision and
//! `loadBefore` are one descending seek and history is a prefix scan.
//!
//! A head record carries a copy of its revision's data record when the stored (compressed)
//! bytes are at most [`HEAD_DATA_MAX`]: loading a current revision, the common case, is
//! then one key-value read instead of two. The `d` record stays the data's home (history,
//! undo, pack and dedup use it alone); the copy costs the current small objects' bytes
//! once more and is checked against the revision's hash like the original. Heads written
//! before copies existed, by imports and restores, or for data copied from another
//! revision (undo), have none and load through the `d` record.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{ObjError, Result};
use crate::ids::{Oid, Tid};

pub const VERSION: u8 = 2;
pub type Hash = [u8; 32];

pub fn meta_key() -> Bytes {
    Bytes::from_static(b"mstate")
}

/// Oids handed out (or reserved) are below the value of this key. Written by oid
/// reservations alone, so reserving never waits for a commit (see `new_oid`).
pub fn oids_key() -> Bytes {
    Bytes::from_static(b"moids")
}

pub fn encode_oids(reserved: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(9);
    out.put_u8(VERSION);
    out.put_u64(reserved);
    out.freeze()
}

pub fn decode_oids(key: &[u8], v: &[u8]) -> Result<u64> {
    let mut r = Reader::new(key, v)?;
    let n = r.u64()?;
    r.end()?;
    Ok(n)
}

/// The number of objects (those with a head record), kept by every commit and pack.
pub fn count_key() -> Bytes {
    Bytes::from_static(b"mobjects")
}

pub fn rev_key(oid: Oid, tid: Tid) -> Bytes {
    let mut k = BytesMut::with_capacity(17);
    k.put_u8(b'o');
    k.put_slice(&oid.to_bytes());
    k.put_slice(&tid.to_bytes());
    k.freeze()
}

pub fn rev_prefix(oid: Oid) -> Bytes {
    let mut k = BytesMut::with_capacity(9);
    k.put_u8(b'o');
    k.put_slice(&oid.to_bytes());
    k.freeze()
}

/// The head record of an object: its current revision's tid and the revision itself.
pub fn head_key(oid: Oid) -> Bytes {
    let mut k = BytesMut::with_capacity(9);
    k.put_u8(b'h');
    k.put_slice(&oid.to_bytes());
    k.freeze()
}

/// Stored (compressed) data up to this many bytes is copied into its object's head record.
pub const HEAD_DATA_MAX: usize = 4096;

/// A head record: the current revision's tid, the revision, and a copy of its data record
/// when given (only small inline records are copied; see [`HEAD_DATA_MAX`]).
pub fn encode_head(tid: Tid, rev: &Revision, data: Option<&DataRecord>) -> Bytes {
    let enc = rev.encode();
    let data = data
        .filter(|d| rev.data.is_some() && d.chunks == 0)
        .map(|d| d.encode());
    let mut out = BytesMut::with_capacity(9 + enc.len() + data.as_ref().map_or(0, |d| d.len()));
    out.put_u8(VERSION);
    out.put_u64(tid.0);
    out.put_slice(&enc);
    if let Some(d) = data {
        out.put_slice(&d);
    }
    out.freeze()
}

/// The tid and revision of a head record (its data copy, if any, is checked for shape and
/// dropped).
pub fn decode_head(key: &[u8], v: &[u8]) -> Result<(Tid, Revision)> {
    decode_head_data(key, v).map(|(tid, rev, _)| (tid, rev))
}

/// The tid, revision and data copy (if the head carries one) of a head record.
pub fn decode_head_data(key: &[u8], v: &[u8]) -> Result<(Tid, Revision, Option<DataRecord>)> {
    let mut r = Reader::new(key, v)?;
    let tid = Tid(r.u64()?);
    let len = match r.buf.get(1) {
        Some(&kind) => Revision::encoded_len(kind)
            .ok_or_else(|| r.damaged(format!("unknown revision kind {kind}")))?,
        None => return Err(r.damaged("truncated: no revision".into())),
    };
    let rev = Revision::decode(key, r.take(len)?)?;
    if r.buf.is_empty() {
        return Ok((tid, rev, None));
    }
    let data = DataRecord::decode(key, r.buf)?;
    if rev.data.is_none() || data.chunks != 0 {
        return Err(r.damaged("a head carries data its revision does not name".into()));
    }
    Ok((tid, rev, Some(data)))
}

/// A chunk of a large record's compressed bytes, as stored.
pub fn encode_chunk(bytes: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(1 + bytes.len());
    out.put_u8(VERSION);
    out.put_slice(bytes);
    out.freeze()
}

/// The bytes of a stored chunk.
pub fn decode_chunk<'a>(key: &[u8], v: &'a [u8]) -> Result<&'a [u8]> {
    Reader::new(key, v)?;
    Ok(&v[1..])
}

/// The value of a `r` key (which objects a transaction wrote): only the version.
pub fn wrote_value() -> Bytes {
    Bytes::from_static(&[VERSION])
}

pub fn txn_key(tid: Tid) -> Bytes {
    let mut k = BytesMut::with_capacity(9);
    k.put_u8(b't');
    k.put_slice(&tid.to_bytes());
    k.freeze()
}

pub fn wrote_key(tid: Tid, oid: Oid) -> Bytes {
    let mut k = BytesMut::with_capacity(17);
    k.put_u8(b'r');
    k.put_slice(&tid.to_bytes());
    k.put_slice(&oid.to_bytes());
    k.freeze()
}

pub fn wrote_prefix(tid: Tid) -> Bytes {
    let mut k = BytesMut::with_capacity(9);
    k.put_u8(b'r');
    k.put_slice(&tid.to_bytes());
    k.freeze()
}

pub fn data_key(hash: &Hash) -> Bytes {
    let mut k = BytesMut::with_capacity(33);
    k.put_u8(b'd');
    k.put_slice(hash);
    k.freeze()
}

pub fn chunk_key(hash: &Hash, n: u32) -> Bytes {
    let mut k = BytesMut::with_capacity(37);
    k.put_u8(b'c');
    k.put_slice(hash);
    k.put_u32(n);
    k.freeze()
}

/// The prefix of every revision key (`o`), for whole-store scans.
pub fn revisions_prefix() -> Bytes {
    Bytes::from_static(b"o")
}

/// The prefix of every transaction record key (`t`).
pub fn transactions_prefix() -> Bytes {
    Bytes::from_static(b"t")
}

/// The prefix of every data record key (`d`); chunks (`c`) are apart.
pub fn data_prefix() -> Bytes {
    Bytes::from_static(b"d")
}

/// The content hash in a `d` key.
pub fn parse_data_key(key: &[u8]) -> Option<Hash> {
    if key.len() != 33 || key[0] != b'd' {
        return None;
    }
    key[1..].try_into().ok()
}

/// The oid of an `h` (current revision) key.
pub fn parse_head_key(key: &[u8]) -> Option<Oid> {
    if key.len() != 9 || key[0] != b'h' {
        return None;
    }
    Oid::from_bytes(&key[1..9])
}

/// Splits an `o` key into (oid, tid).
pub fn parse_rev_key(key: &[u8]) -> Option<(Oid, Tid)> {
    if key.len() != 17 || key[0] != b'o' {
        return None;
    }
    Some((Oid::from_bytes(&key[1..9])?, Tid::from_bytes(&key[9..17])?))
}

/// Splits an `r` key into (tid, oid).
pub fn parse_wrote_key(key: &[u8]) -> Option<(Tid, Oid)> {
    if key.len() != 17 || key[0] != b'r' {
        return None;
    }
    Some((Tid::from_bytes(&key[1..9])?, Oid::from_bytes(&key[9..17])?))
}

pub fn parse_txn_key(key: &[u8]) -> Option<Tid> {
    if key.len() != 9 || key[0] != b't' {
        return None;
    }
    Tid::from_bytes(&key[1..9])
}

/// Where the blob with content hash `h` of the database at `db` is kept in the object
/// store: `<db>/blobs/<first byte>/<hash>` (content addressed: one object per distinct blob).
pub fn blob_path(db: &str, h: &Hash) -> String {
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}/blobs/{}/{}", db.trim_end_matches('/'), &hex[..2], hex)
}

/// The hash named by a blob object's file name (`None` for anything else).
pub fn parse_blob_name(name: &str) -> Option<Hash> {
    if name.len() != 64 {
        return None;
    }
    let mut h = [0u8; 32];
    for (i, out) in h.iter_mut().enumerate() {
        *out = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(h)
}

/// Reads fields off a stored value, failing (not panicking) on short input.
struct Reader<'a> {
    key: &'a [u8],
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(key: &'a [u8], buf: &'a [u8]) -> Result<Self> {
        let mut r = Reader { key, buf };
        let v = r.u8()?;
        if v != VERSION {
            return Err(r.damaged(format!(
                "record format version {v}, this build reads {VERSION}"
            )));
        }
        Ok(r)
    }

    fn damaged(&self, reason: String) -> ObjError {
        ObjError::Damaged {
            key: self.key.iter().map(|b| format!("{b:02x}")).collect(),
            reason,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(self.damaged(format!(
                "truncated: wanted {n} bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn hash(&mut self) -> Result<Hash> {
        let mut h = [0u8; 32];
        h.copy_from_slice(self.take(32)?);
        Ok(h)
    }

    fn end(&self) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.damaged(format!("{} unexpected trailing bytes", self.buf.len())))
        }
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

/// Store-wide state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    pub last_tid: Tid,
    /// Oids a transaction chose itself (restore, import) are below this. Reservations are
    /// in `moids` ([`oids_key`]); stores written before it existed reserved here too.
    pub oid_reserved: u64,
    /// Every object has a head record (`h` + oid: its current revision). Stores written
    /// before head records existed find the current revision by a descending scan.
    pub heads: bool,
}

impl Meta {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(18);
        out.put_u8(VERSION);
        out.put_u64(self.last_tid.0);
        out.put_u64(self.oid_reserved);
        out.put_u8(u8::from(self.heads));
        out.freeze()
    }

    pub fn decode(key: &[u8], v: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, v)?;
        let last_tid = Tid(r.u64()?);
        let oid_reserved = r.u64()?;
        // The flags byte came later: a record without it has no head records.
        let heads = if r.buf.is_empty() {
            false
        } else {
            r.u8()? & 1 == 1
        };
        let m = Meta {
            last_tid,
            oid_reserved,
            heads,
        };
        r.end()?;
        Ok(m)
    }
}

/// One revision of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revision {
    /// `None`: the object has no data in this revision (its creation was undone).
    pub data: Option<Hash>,
    /// For data copied from another revision (undo, restore): that revision's tid.
    pub data_txn: Option<Tid>,
    /// The previous revision's tid (`Tid::ZERO`: none).
    pub prev: Tid,
    /// The content hash of the revision's blob (ZODB blobs), kept as its own object in
    /// the object store under `<db>/blobs/` (see [`blob_path`]).
    pub blob: Option<Hash>,
}

impl Revision {
    /// The encoded length of a revision of `kind` (its second byte), if a known kind.
    fn encoded_len(kind: u8) -> Option<usize> {
        match kind {
            1 => Some(50),
            2 => Some(18),
            3 => Some(82),
            _ => None,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(83);
        out.put_u8(VERSION);
        match (&self.data, &self.blob) {
            (Some(h), None) => {
                out.put_u8(1);
                out.put_slice(h);
            }
            (None, _) => out.put_u8(2),
            (Some(h), Some(blob)) => {
                out.put_u8(3);
                out.put_slice(h);
                out.put_slice(blob);
            }
        }
        out.put_u64(self.data_txn.map_or(0, |t| t.0));
        out.put_u64(self.prev.0);
        out.freeze()
    }

    pub fn decode(key: &[u8], v: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, v)?;
        let (data, blob) = match r.u8()? {
            1 => (Some(r.hash()?), None),
            2 => (None, None),
            3 => (Some(r.hash()?), Some(r.hash()?)),
            k => return Err(r.damaged(format!("unknown revision kind {k}"))),
        };
        let data_txn = match r.u64()? {
            0 => None,
            t => Some(Tid(t)),
        };
        let prev = Tid(r.u64()?);
        r.end()?;
        Ok(Revision {
            data,
            data_txn,
            prev,
            blob,
        })
    }
}

/// Transaction metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnMeta {
    pub user: Bytes,
    pub description: Bytes,
    /// ZODB's extension mapping, pickled by the client; stored as given.
    pub extension: Bytes,
}

/// A committed transaction's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnRecord {
    /// b' ' normal, b'p' packed (some of its revisions were removed by a pack).
    pub status: u8,
    pub meta: TxnMeta,
}

impl TxnRecord {
    pub fn encode(&self) -> Bytes {
        let m = &self.meta;
        let mut out =
            BytesMut::with_capacity(14 + m.user.len() + m.description.len() + m.extension.len());
        out.put_u8(VERSION);
        out.put_u8(self.status);
        put_bytes(&mut out, &m.user);
        put_bytes(&mut out, &m.description);
        put_bytes(&mut out, &m.extension);
        out.freeze()
    }

    pub fn decode(key: &[u8], v: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, v)?;
        let status = r.u8()?;
        let user = Bytes::copy_from_slice(r.bytes()?);
        let description = Bytes::copy_from_slice(r.bytes()?);
        let extension = Bytes::copy_from_slice(r.bytes()?);
        r.end()?;
        Ok(TxnRecord {
            status,
            meta: TxnMeta {
                user,
                description,
                extension,
            },
        })
    }
}

/// How a data record's bytes are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRecord {
    /// 0: as is, 1: zstd.
    pub codec: u8,
    pub raw_len: u64,
    /// Stored bytes when small; empty when split into `chunks` chunk records.
    pub inline: Bytes,
    pub chunks: u32,
}

impl DataRecord {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(18 + self.inline.len());
        out.put_u8(VERSION);
        out.put_u8(self.codec);
        out.put_u64(self.raw_len);
        out.put_u32(self.chunks);
        put_bytes(&mut out, &self.inline);
        out.freeze()
    }

    pub fn decode(key: &[u8], v: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, v)?;
        let codec = r.u8()?;
        if codec > 1 {
            return Err(r.damaged(format!("unknown codec {codec}")));
        }
        let raw_len = r.u64()?;
        let chunks = r.u32()?;
        let inline = Bytes::copy_from_slice(r.bytes()?);
        r.end()?;
        Ok(DataRecord {
            codec,
            raw_len,
            inline,
            chunks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzz (proptest, stable Rust): every decoder fed arbitrary bytes, and valid records
    /// with bytes flipped, truncated or appended, returns a value or an error, never panics.
    #[test]
    fn values_of_another_format_version_are_refused_naming_both() {
        let rev = Revision {
            data: None,
            data_txn: None,
            prev: Tid(1),
            blob: None,
        };
        let mut head = encode_head(Tid(2), &rev, None).to_vec();
        assert_eq!(decode_head(b"h", &head).unwrap(), (Tid(2), rev));
        head[0] = 1;
        let e = decode_head(b"h", &head).unwrap_err().to_string();
        assert!(e.contains("format version 1, this build reads 2"), "{e}");
        let chunk = encode_chunk(b"xyz");
        assert_eq!(decode_chunk(b"c", &chunk).unwrap(), b"xyz");
        assert!(decode_chunk(b"c", b"\x07xyz").is_err());
        assert_eq!(wrote_value()[0], VERSION);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_or_mutated_bytes() {
        use proptest::prelude::*;
        let rev = Revision {
            data: Some([7; 32]),
            data_txn: Some(Tid(5)),
            prev: Tid(3),
            blob: Some([9; 32]),
        };
        let txn = TxnRecord {
            status: b' ',
            meta: TxnMeta {
                user: Bytes::from_static(b"user"),
                description: Bytes::from_static(b"desc"),
                extension: Bytes::from_static(b"ext"),
            },
        };
        let seeds: Vec<Vec<u8>> = vec![
            rev.encode().to_vec(),
            txn.encode().to_vec(),
            Meta {
                last_tid: Tid(7),
                oid_reserved: 9,
                heads: true,
            }
            .encode()
            .to_vec(),
            encode_head(Tid(4), &rev, None).to_vec(),
            encode_head(
                Tid(4),
                &rev,
                Some(&DataRecord {
                    codec: 1,
                    raw_len: 9,
                    inline: Bytes::from_static(b"abc"),
                    chunks: 0,
                }),
            )
            .to_vec(),
            encode_chunk(b"some compressed bytes").to_vec(),
        ];
        let decode_all = |v: &[u8]| {
            let k = rev_key(Oid(1), Tid(2));
            let _ = Revision::decode(&k, v);
            let _ = TxnRecord::decode(&k, v);
            let _ = Meta::decode(&k, v);
            let _ = DataRecord::decode(&k, v);
            let _ = decode_head_data(&head_key(Oid(1)), v);
            let _ = decode_chunk(&chunk_key(&[1; 32], 0), v);
            let _ = parse_rev_key(v);
            let _ = parse_wrote_key(v);
            let _ = parse_txn_key(v);
            let _ = parse_blob_name(&String::from_utf8_lossy(v));
        };
        proptest!(ProptestConfig::with_cases(2000), |(
            noise in proptest::collection::vec(any::<u8>(), 0..200),
            seed in 0usize..6,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in any::<usize>(),
        )| {
            decode_all(&noise);
            let mut v = seeds[seed].clone();
            for &(at, x) in &flips {
                let i = at % v.len();
                v[i] ^= x;
            }
            decode_all(&v);
            decode_all(&v[..cut % (v.len() + 1)]);
            v.extend_from_slice(&noise);
            decode_all(&v);
        });
    }

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let rev = Revision {
            data: Some([7; 32]),
            data_txn: Some(Tid(5)),
            prev: Tid(3),
            blob: None,
        };
        let k = rev_key(Oid(1), Tid(9));
        assert_eq!(Revision::decode(&k, &rev.encode()).unwrap(), rev);
        let with_blob = Revision {
            blob: Some([9; 32]),
            ..rev
        };
        assert_eq!(
            Revision::decode(&k, &with_blob.encode()).unwrap(),
            with_blob
        );
        let txn = TxnRecord {
            status: b' ',
            meta: TxnMeta {
                user: Bytes::from("u"),
                description: Bytes::from("d"),
                extension: Bytes::from("x"),
            },
        };
        assert_eq!(TxnRecord::decode(&k, &txn.encode()).unwrap(), txn);
        let enc = rev.encode();
        for cut in 0..enc.len() {
            assert!(Revision::decode(&k, &enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = enc.to_vec();
        bad[0] = 9;
        assert!(Revision::decode(&k, &bad).is_err());
        assert_eq!(parse_rev_key(&k), Some((Oid(1), Tid(9))));
        assert_eq!(
            parse_wrote_key(&wrote_key(Tid(2), Oid(3))),
            Some((Tid(2), Oid(3)))
        );
        assert!(wrote_key(Tid(2), Oid(3)).starts_with(&wrote_prefix(Tid(2))));
        // Meta records written before head records existed decode with `heads` off.
        let m = Meta {
            last_tid: Tid(4),
            oid_reserved: 9,
            heads: true,
        };
        assert_eq!(Meta::decode(b"m", &m.encode()).unwrap(), m);
        let old = &m.encode()[..17];
        assert!(!Meta::decode(b"m", old).unwrap().heads);
        let (t, r) = decode_head(b"h", &encode_head(Tid(7), &rev, None)).unwrap();
        assert_eq!((t, r), (Tid(7), rev));
        assert!(decode_head(b"h", b"123").is_err());
        // A head with a copy of its data record, of each revision kind that has data.
        let copy = DataRecord {
            codec: 0,
            raw_len: 3,
            inline: Bytes::from_static(b"abc"),
            chunks: 0,
        };
        for r in [rev, with_blob] {
            let head = encode_head(Tid(8), &r, Some(&copy));
            assert_eq!(
                decode_head_data(b"h", &head).unwrap(),
                (Tid(8), r, Some(copy.clone()))
            );
            assert_eq!(decode_head(b"h", &head).unwrap(), (Tid(8), r));
            // Cut anywhere but where the copy begins (a head without one), it is damaged.
            let copy_at = 9 + r.encode().len();
            for cut in (0..head.len()).filter(|&c| c != copy_at) {
                assert!(
                    decode_head_data(b"h", &head[..cut]).is_err(),
                    "cut at {cut}"
                );
            }
            assert_eq!(decode_head_data(b"h", &head[..copy_at]).unwrap().2, None);
        }
        // A revision without data carries no copy; one that claims to is damaged.
        let gone = Revision { data: None, ..rev };
        let head = encode_head(Tid(8), &gone, Some(&copy));
        assert_eq!(decode_head_data(b"h", &head).unwrap().2, None);
        let forged = [&head[..], &copy.encode()[..]].concat();
        assert!(decode_head_data(b"h", &forged).is_err());
    }
}
