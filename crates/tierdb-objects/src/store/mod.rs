//! [`VersionedStore`]: every revision of every object. This module opens the store and
//! loads; its children hold the rest, one concern each.

mod cache;
mod commit;
mod filter;
mod iter;
mod pack;
mod pack_preview;
mod restore;
mod scan;
mod txn;
mod verify;

pub use cache::DEFAULT_RECORD_CACHE_BYTES;
pub use commit::COMPRESS_MIN_BYTES;
pub use iter::{DataRecordInfo, TransactionInfo};
pub use pack::{NoProgress, PackStats, Progress, References};
pub use pack_preview::{ClassTotal, PackPreview};
pub use restore::{ImportState, RestoreStats};
pub use scan::{DataSizes, ObjectCursor, RevisionCursor, RevisionRow, holds_objects};
pub use txn::{Txn, Voted};
pub use verify::{StoreStats, VerifyReport};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tierdb_kv::{Batch, KvHandle, KvRead, prefix_end};

use crate::blobs::Blobs;
use crate::error::{ErrorKind, ObjError, Result};
use crate::handle;
use crate::ids::{Oid, Tid};
use crate::records::{self, DataRecord, Hash, Meta, Revision, TxnMeta, TxnRecord};

/// Data up to this size is stored inside its data record; larger data is split.
pub const INLINE_MAX: usize = 256 << 10;
/// Size of the chunks a large record's compressed bytes are split into.
pub const CHUNK_BYTES: usize = 1 << 20;
fn prefix(p: Bytes) -> (Bound<Bytes>, Bound<Bytes>) {
    let end = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(p), end)
}

/// One revision as history shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub tid: Tid,
    pub size: u64,
    pub txn: TxnRecord,
}

/// The versioned transactional object store on one key-value database.
#[derive(Debug)]
pub struct VersionedStore {
    kv: KvHandle,
    blobs: Blobs,
    meta: parking_lot::Mutex<Meta>,
    oids: parking_lot::Mutex<OidBlock>,
    /// Oids this process handed out that no commit has written yet: such an oid has no
    /// revision, so a vote storing it as new needs no lookup (see `commit.rs`).
    fresh: parking_lot::Mutex<roaring::RoaringTreemap>,
    /// Held while an oid reservation is committed (never while waiting on a transaction).
    oid_reserve: tokio::sync::Mutex<()>,
    commit: Arc<tokio::sync::Mutex<()>>,
    cache: cache::RecordCache,
    /// The number of objects, when known (stores written before it was kept count it on
    /// first use).
    objects: parking_lot::Mutex<Option<u64>>,
}

/// The oids this process may hand out: `next..reserved`.
#[derive(Debug, Clone, Copy)]
struct OidBlock {
    next: u64,
    reserved: u64,
}

impl OidBlock {
    fn take(&mut self) -> Option<Oid> {
        (self.next < self.reserved).then(|| {
            self.next += 1;
            Oid(self.next - 1)
        })
    }

    /// Never hands out an oid below `oid` (a transaction chose it itself).
    fn skip_to(&mut self, oid: u64) {
        self.next = self.next.max(oid);
    }
}

impl VersionedStore {
    /// Opens the object store kept in the database `kv` (an empty database becomes an
    /// empty store). Through a follower it is read-only: nothing is written, no writer is
    /// fenced, and [`Self::refresh`] catches up with the writer's commits.
    pub async fn open(kv: KvHandle) -> Result<Self> {
        let root = kv.path().to_string();
        let key = records::meta_key();
        let stored = kv.get(&key).await?;
        let fresh = stored.is_none();
        let meta = match stored {
            Some(v) => Meta::decode(&key, &v)?,
            None => Meta {
                heads: true,
                ..Meta::default()
            },
        };
        // Oids are reserved in `moids`; `mstate` holds the highest oid a transaction chose
        // itself (and, in stores written before `moids` existed, the reservations too).
        let key = records::oids_key();
        let reserved = match kv.get(&key).await? {
            Some(v) => records::decode_oids(&key, &v)?,
            None => 0,
        }
        .max(meta.oid_reserved);
        let objects = match Self::read_count(&kv).await? {
            None if fresh => Some(0),
            n => n,
        };
        Ok(VersionedStore {
            objects: parking_lot::Mutex::new(objects),
            // Oid 0 is the root, which the database creates itself: never hand it out.
            oids: parking_lot::Mutex::new(OidBlock {
                next: reserved.max(1),
                reserved: reserved.max(1),
            }),
            oid_reserve: tokio::sync::Mutex::new(()),
            fresh: parking_lot::Mutex::new(roaring::RoaringTreemap::new()),
            meta: parking_lot::Mutex::new(meta),
            blobs: Blobs::new(kv.store().clone(), &root),
            kv,
            commit: Arc::new(tokio::sync::Mutex::new(())),
            cache: cache::RecordCache::new(DEFAULT_RECORD_CACHE_BYTES),
        })
    }

    /// Sets the size of the current-record cache (bytes of object data; 0: no cache).
    pub fn with_record_cache(mut self, bytes: usize) -> Self {
        self.cache = cache::RecordCache::new(bytes);
        self
    }

    pub fn kv(&self) -> &KvHandle {
        &self.kv
    }

    pub fn is_read_only(&self) -> bool {
        self.kv.is_read_only()
    }

    /// A read-only open: re-reads the store's state (the last transaction) as the follower
    /// now sees it. Returns the last tid. The writer's own state is always current.
    pub async fn refresh(&self) -> Result<Tid> {
        if self.kv.is_read_only() {
            let key = records::meta_key();
            if let Some(v) = self.kv.get(&key).await? {
                let now = Meta::decode(&key, &v)?;
                let before = self.meta.lock().last_tid;
                self.invalidate_between(before, now.last_tid).await?;
                *self.meta.lock() = now;
                if let Some(n) = Self::read_count(&self.kv).await? {
                    *self.objects.lock() = Some(n);
                }
            }
        }
        Ok(self.last_tid())
    }

    async fn read_count(kv: &KvHandle) -> Result<Option<u64>> {
        let key = records::count_key();
        match kv.get(&key).await? {
            Some(v) => Ok(Some(records::decode_oids(&key, &v)?)),
            None => Ok(None),
        }
    }

    /// The number of objects (with any revision left; objects whose data was deleted count
    /// until a pack removes them). Kept by every commit and pack; a store written before
    /// the count was kept is counted once, a page at a time, and the writer keeps it from
    /// then on.
    pub async fn object_count(&self) -> Result<u64> {
        if let Some(n) = *self.objects.lock() {
            return Ok(n);
        }
        let _lock = self.commit.clone().lock_owned().await;
        if let Some(n) = *self.objects.lock() {
            return Ok(n);
        }
        let heads = self.meta.lock().heads;
        let (what, mut last, mut n) = (
            if heads {
                Bytes::from_static(b"h")
            } else {
                records::revisions_prefix()
            },
            None,
            0u64,
        );
        let mut pages = iter::Pages::new(prefix(what));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, _) in page {
                let oid = k.get(1..9).map(|b| b.to_vec());
                if heads || oid != last {
                    n += 1;
                    last = oid;
                }
            }
        }
        if !self.kv.is_read_only() {
            let mut b = Batch::new();
            b.put(records::count_key(), records::encode_oids(n));
            handle::commit(&self.kv, b).await?;
        }
        *self.objects.lock() = Some(n);
        Ok(n)
    }

    /// Adds `created` and removes `removed` objects in the count; returns the new count to
    /// write in the same commit (`None` while it is unknown).
    pub(super) fn count_change(&self, created: u64, removed: u64) -> Option<u64> {
        self.objects
            .lock()
            .map(|n| (n + created).saturating_sub(removed))
    }

    pub(super) fn set_count(&self, n: Option<u64>) {
        if n.is_some() {
            *self.objects.lock() = n;
        }
    }

    /// The tid of the last committed transaction (`Tid::ZERO` when empty).
    pub fn last_tid(&self) -> Tid {
        self.meta.lock().last_tid
    }

    async fn current(&self, oid: Oid) -> Result<Option<(Tid, Revision)>> {
        if let Some(c) = self.cache.get(oid) {
            return Ok(Some((c.tid, c.rev)));
        }
        Ok(self.current_stored(oid).await?.map(|(t, r, _)| (t, r)))
    }

    /// The current revision as stored, with the copy of its data record its head carries
    /// (small data only; see `records::HEAD_DATA_MAX`).
    async fn current_stored(
        &self,
        oid: Oid,
    ) -> Result<Option<(Tid, Revision, Option<DataRecord>)>> {
        if self.meta.lock().heads {
            let key = records::head_key(oid);
            return match self.kv.get(&key).await? {
                Some(v) => Ok(Some(records::decode_head_data(&key, &v)?)),
                None => Ok(None),
            };
        }
        let got = self
            .kv
            .scan_desc(prefix(records::rev_prefix(oid)), Some(1))
            .await?;
        match got.first() {
            Some((k, v)) => {
                let (_, tid) = records::parse_rev_key(k).ok_or_else(|| ObjError::Damaged {
                    key: format!("{k:?}"),
                    reason: "not a revision key".into(),
                })?;
                Ok(Some((tid, Revision::decode(k, v)?, None)))
            }
            None => Ok(None),
        }
    }

    /// The current revision and its data when the cache has it or its head carries it.
    async fn current_with_data(&self, oid: Oid) -> Result<Option<(Tid, Revision, Option<Bytes>)>> {
        if let Some(c) = self.cache.get(oid) {
            return Ok(Some((c.tid, c.rev, c.data)));
        }
        Ok(match self.current_stored(oid).await? {
            Some((tid, rev, Some(copy))) => {
                let data = match &rev.data {
                    Some(h) => Some(unpack(h, &copy, copy.inline.clone()).map_err(|e| {
                        ObjError::Damaged {
                            key: hex(&records::head_key(oid)),
                            reason: format!("object {oid}: the data its head carries: {e}"),
                        }
                    })?),
                    None => None,
                };
                Some((tid, rev, data))
            }
            Some((tid, rev, None)) => Some((tid, rev, None)),
            None => None,
        })
    }

    async fn revision(&self, oid: Oid, tid: Tid) -> Result<Option<Revision>> {
        let key = records::rev_key(oid, tid);
        match self.kv.get(&key).await? {
            Some(v) => Ok(Some(Revision::decode(&key, &v)?)),
            None => Ok(None),
        }
    }

    /// The current data and serial of `oid`: one key-value read for small data (its head
    /// carries a copy), two for the rest (the head, then the data record).
    pub async fn load(&self, oid: Oid) -> Result<(Bytes, Tid)> {
        if let Some(hit) = self.load_cached(oid) {
            return Ok(hit);
        }
        let seen = self.cache.epoch();
        let (tid, rev, data) = self
            .current_with_data(oid)
            .await?
            .ok_or(ObjError::NotFound { oid, at: None })?;
        let Some(h) = rev.data else {
            return Err(ObjError::NotFound { oid, at: None });
        };
        let data = match data {
            Some(d) => d,
            None => self.read_data(&h).await?,
        };
        self.cache.fill(
            seen,
            oid,
            cache::Cached {
                tid,
                rev,
                data: Some(data.clone()),
            },
        );
        Ok((data, tid))
    }

    /// The current data and serial of `oid` if the current-record cache has them: no
    /// key-value read, no waiting (callers try this before entering the async runtime).
    pub fn load_cached(&self, oid: Oid) -> Option<(Bytes, Tid)> {
        let c = self.cache.get(oid)?;
        Some((c.data?, c.tid))
    }

    /// The revision of `oid` current just before `tid`: (data, its tid, the tid of the next
    /// revision if any). `None` if the object was created at or after `tid`;
    /// [`ObjError::NotFound`] if it never existed or its revision before `tid` has no data
    /// (an undone creation), as ZODB's `loadBefore` answers. At most three seeks, whatever
    /// the length of the object's history; one when the current revision is older than
    /// `tid` and its head carries its data.
    pub async fn load_before(
        &self,
        oid: Oid,
        tid: Tid,
    ) -> Result<Option<(Bytes, Tid, Option<Tid>)>> {
        if let Some((data, start)) = self.load_cached(oid)
            && start < tid
        {
            return Ok(Some((data, start, None)));
        }
        // Taken before the current revision is read: a commit after it keeps what this
        // read found out of the cache (see cache.rs).
        let seen = self.cache.epoch();
        let current = self.current_with_data(oid).await?;
        if current.is_none() {
            return Err(ObjError::NotFound { oid, at: None });
        }
        // The common case, a read as of a recent snapshot: the current revision is older.
        // Its data came with its head, or is read by the hash just read (two key-value
        // reads in all, not three).
        if let Some((start, rev, known)) = current
            && start < tid
        {
            return match rev.data {
                Some(h) => {
                    let data = match known {
                        Some(d) => d,
                        None => self.read_data(&h).await?,
                    };
                    let cached = cache::Cached {
                        tid: start,
                        rev,
                        data: Some(data.clone()),
                    };
                    self.cache.fill(seen, oid, cached);
                    Ok(Some((data, start, None)))
                }
                None => Err(ObjError::NotFound { oid, at: Some(tid) }),
            };
        }
        let lo = records::rev_prefix(oid);
        let range = (
            Bound::Included(lo.clone()),
            Bound::Excluded(records::rev_key(oid, tid)),
        );
        let got = self.kv.scan_desc(range, Some(1)).await?;
        let Some((k, v)) = got.first() else {
            return Ok(None);
        };
        let (_, start) = records::parse_rev_key(k).ok_or_else(|| ObjError::Damaged {
            key: format!("{k:?}"),
            reason: "not a revision key".into(),
        })?;
        let rev = Revision::decode(k, v)?;
        let next = self
            .kv
            .scan(
                (Bound::Included(records::rev_key(oid, tid)), prefix(lo).1),
                Some(1),
            )
            .await?
            .first()
            .and_then(|(k, _)| records::parse_rev_key(k))
            .map(|(_, t)| t);
        match rev.data {
            Some(h) => Ok(Some((self.read_data(&h).await?, start, next))),
            None => Err(ObjError::NotFound { oid, at: Some(tid) }),
        }
    }

    /// The data of `oid`'s revision `serial`.
    pub async fn load_serial(&self, oid: Oid, serial: Tid) -> Result<Bytes> {
        match self.revision(oid, serial).await? {
            Some(Revision { data: Some(h), .. }) => self.read_data(&h).await,
            Some(_) => Err(ObjError::NotFound {
                oid,
                at: Some(serial),
            }),
            None => Err(ObjError::NoRevision { oid, serial }),
        }
    }

    /// Up to `size` revisions of `oid`, newest first.
    pub async fn history(&self, oid: Oid, size: usize) -> Result<Vec<HistoryEntry>> {
        let revs = self
            .kv
            .scan_desc(prefix(records::rev_prefix(oid)), Some(size.max(1)))
            .await?;
        if revs.is_empty() {
            return Err(ObjError::NotFound { oid, at: None });
        }
        let mut out = Vec::with_capacity(revs.len());
        for (k, v) in revs {
            let Some((_, tid)) = records::parse_rev_key(&k) else {
                continue;
            };
            let rev = Revision::decode(&k, &v)?;
            let size = match rev.data {
                Some(h) => self.data_record(&h).await?.raw_len,
                None => 0,
            };
            out.push(HistoryEntry {
                tid,
                size,
                txn: self.txn_record(tid).await?,
            });
        }
        Ok(out)
    }

    async fn txn_record(&self, tid: Tid) -> Result<TxnRecord> {
        let key = records::txn_key(tid);
        match self.kv.get(&key).await? {
            Some(v) => TxnRecord::decode(&key, &v),
            None => Err(ObjError::NoTransaction { tid }),
        }
    }

    async fn data_record(&self, h: &Hash) -> Result<DataRecord> {
        let key = records::data_key(h);
        match self.kv.get(&key).await? {
            Some(v) => DataRecord::decode(&key, &v),
            None => Err(ObjError::Damaged {
                key: format!("d{}", hex(h)),
                reason: "a revision names data that is missing".into(),
            }),
        }
    }

    /// Reads and decompresses a data record, checking its hash.
    pub async fn read_data(&self, h: &Hash) -> Result<Bytes> {
        let rec = self.data_record(h).await?;
        let stored = if rec.chunks == 0 {
            rec.inline.clone()
        } else {
            let mut all = Vec::new();
            for n in 0..rec.chunks {
                let key = records::chunk_key(h, n);
                let chunk = self.kv.get(&key).await?.ok_or_else(|| ObjError::Damaged {
                    key: format!("c{}/{n}", hex(h)),
                    reason: "missing chunk of a large record".into(),
                })?;
                all.extend_from_slice(records::decode_chunk(&key, &chunk)?);
            }
            Bytes::from(all)
        };
        unpack(h, &rec, stored)
    }

    /// The hash of the blob of `oid`'s revision `serial`.
    pub async fn blob_of(&self, oid: Oid, serial: Tid) -> Result<[u8; 32]> {
        match self.revision(oid, serial).await? {
            Some(Revision {
                blob: Some(h),
                data: Some(_),
                ..
            }) => Ok(h),
            Some(_) => Err(ObjError::Blob {
                oid,
                tid: serial,
                kind: ErrorKind::NotFound,
                reason: "this revision has no blob".into(),
            }),
            None => Err(ObjError::NoRevision { oid, serial }),
        }
    }

    /// Writes the blob of `oid`'s revision `serial` to the file `dest`.
    pub async fn load_blob(&self, oid: Oid, serial: Tid, dest: &Path) -> Result<()> {
        let h = self.blob_of(oid, serial).await?;
        self.blobs
            .download(&h, dest)
            .await
            .map_err(|f| ObjError::Blob {
                oid,
                tid: serial,
                kind: f.kind,
                reason: f.reason,
            })
    }
}

/// The data `rec` stores as `stored` (its inline bytes or its chunks joined), decompressed
/// and checked against its hash `h`: a changed byte is an error naming the record.
fn unpack(h: &Hash, rec: &DataRecord, stored: Bytes) -> Result<Bytes> {
    let raw = match rec.codec {
        0 => stored,
        _ => Bytes::from(
            with_decompressor(|d| d.decompress(&stored, rec.raw_len as usize)).map_err(|e| {
                ObjError::Damaged {
                    key: format!("d{}", hex(h)),
                    reason: format!("cannot decompress: {e}"),
                }
            })?,
        ),
    };
    if raw.len() as u64 != rec.raw_len || *blake3::hash(&raw).as_bytes() != *h {
        return Err(ObjError::Damaged {
            key: format!("d{}", hex(h)),
            reason: "data does not match its hash".into(),
        });
    }
    Ok(raw)
}

thread_local! {
    // One zstd context per thread: creating one per record costs more than compressing it.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn with_compressor<T>(
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(3)?);
        }
        match c.as_mut() {
            Some(c) => f(c),
            None => Err(std::io::Error::other("no zstd compressor")),
        }
    })
}

fn with_decompressor<T>(
    f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        match d.as_mut() {
            Some(d) => f(d),
            None => Err(std::io::Error::other("no zstd decompressor")),
        }
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
