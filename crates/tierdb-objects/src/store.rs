//! [`VersionedStore`]: every revision of every object, two-phase commit, undo, pack.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tierdb_kv::{Batch, KvDb, KvRead, KvReplica, prefix_end};

use crate::blobs::Blobs;
use crate::error::{ObjError, Result};
use crate::handle::KvHandle;
use crate::ids::{Oid, Tid};
use crate::records::{self, DataRecord, Hash, Meta, Revision, TxnMeta, TxnRecord};

/// Data up to this size is stored inside its data record; larger data is split.
pub const INLINE_MAX: usize = 256 << 10;
/// Size of the chunks a large record's compressed bytes are split into.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Oids reserved per durable reservation.
const OID_BLOCK: u64 = 128;
/// Changes per key-value commit during pack.
const PACK_BATCH: usize = 2000;

fn prefix(p: Bytes) -> (Bound<Bytes>, Bound<Bytes>) {
    let end = prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(p), end)
}

/// The oids an object's data refers to (for ZODB: `ZODB.serialize.referencesf`), or why
/// they cannot be read (pack then stops: collecting garbage with unknown references could
/// delete live objects).
pub type References = dyn Fn(&[u8]) -> std::result::Result<Vec<Oid>, String> + Send + Sync;

/// One revision as history shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub tid: Tid,
    pub size: u64,
    pub txn: TxnRecord,
}

/// One record of a transaction, as iteration shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRecordInfo {
    pub oid: Oid,
    pub tid: Tid,
    /// `None`: no data (an undone creation).
    pub data: Option<Bytes>,
    pub data_txn: Option<Tid>,
}

/// A transaction as iteration shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionInfo {
    pub tid: Tid,
    pub record: TxnRecord,
    pub records: Vec<DataRecordInfo>,
}

/// What a pack did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackStats {
    pub revisions_removed: u64,
    pub objects_removed: u64,
    pub data_removed: u64,
    pub transactions_removed: u64,
    /// Blob objects deleted (no remaining revision names them).
    pub blobs_removed: u64,
    /// The revisions removed that had a blob (so caches of blob files can drop them).
    pub blob_revisions_removed: Vec<(Oid, Tid)>,
}

/// Counts for `tierdb zodb stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub objects: u64,
    pub revisions: u64,
    pub transactions: u64,
    pub data_records: u64,
    /// Sum of the sizes of every revision's data (what a store without dedup would hold).
    pub logical_bytes: u64,
    /// Sum of raw sizes of the distinct data records.
    pub unique_bytes: u64,
    /// Bytes stored for the data records (after compression).
    pub stored_bytes: u64,
    /// Revisions with a blob, and the distinct blobs they name.
    pub blob_revisions: u64,
    pub blobs: u64,
}

/// What a [`VersionedStore::restore_many`] stored: records with data and their bytes, and
/// the data new to the store (not deduplicated) before and after compression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreStats {
    pub records: u64,
    pub logical_bytes: u64,
    pub new_bytes: u64,
    pub new_stored_bytes: u64,
}

impl std::ops::AddAssign for RestoreStats {
    fn add_assign(&mut self, o: Self) {
        self.records += o.records;
        self.logical_bytes += o.logical_bytes;
        self.new_bytes += o.new_bytes;
        self.new_stored_bytes += o.new_stored_bytes;
    }
}

/// What `verify` checked and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub transactions: u64,
    pub revisions: u64,
    pub data_records: u64,
    pub data_bytes: u64,
    pub blobs: u64,
    pub problems: Vec<String>,
}

/// A transaction being built: the first phase of two-phase commit.
#[derive(Debug, Default)]
pub struct Txn {
    meta: TxnMeta,
    stores: BTreeMap<Oid, (Tid, Option<Bytes>)>,
    /// Blob files of stored or restored objects, uploaded at vote.
    blobs: BTreeMap<Oid, PathBuf>,
    read_current: BTreeMap<Oid, Tid>,
    undos: Vec<Tid>,
    /// Restore: copy revisions with given tids and data_txn, no conflict checks.
    restore: Option<Tid>,
    restored: BTreeMap<Oid, (Option<Bytes>, Option<Tid>)>,
    /// The commit time to base the tid on (seconds since the epoch); default: now.
    clock: Option<f64>,
}

impl Txn {
    pub fn new(meta: TxnMeta) -> Self {
        Txn {
            meta,
            ..Txn::default()
        }
    }

    /// A transaction that copies another storage's transaction `tid` (ZODB's restore).
    pub fn restoring(meta: TxnMeta, tid: Tid) -> Self {
        Txn {
            meta,
            restore: Some(tid),
            ..Txn::default()
        }
    }

    /// Stores `data` as the new revision of `oid`, based on revision `serial`
    /// (`Tid::ZERO` for a new object). `None` data marks the object as having no data.
    pub fn store(&mut self, oid: Oid, serial: Tid, data: Option<Bytes>) {
        self.stores.insert(oid, (serial, data));
    }

    /// Stores `data` with the blob in `file` (ZODB's storeBlob). The file is read at vote;
    /// the caller keeps it until then and removes it afterwards.
    pub fn store_blob(&mut self, oid: Oid, serial: Tid, data: Bytes, file: PathBuf) {
        self.stores.insert(oid, (serial, Some(data)));
        self.blobs.insert(oid, file);
    }

    /// Restore of a revision with a blob (ZODB's restoreBlob).
    pub fn restore_blob(&mut self, oid: Oid, data: Bytes, file: PathBuf) {
        self.restored.insert(oid, (Some(data), None));
        self.blobs.insert(oid, file);
    }

    /// Restore: `oid`'s revision in this transaction holds `data` (or the data of
    /// `data_txn`'s revision when `data` is `None` and `data_txn` is set).
    pub fn restore(&mut self, oid: Oid, data: Option<Bytes>, data_txn: Option<Tid>) {
        self.restored.insert(oid, (data, data_txn));
    }

    /// Fails the vote unless `oid`'s current revision is still `serial`.
    pub fn check_current(&mut self, oid: Oid, serial: Tid) {
        self.read_current.insert(oid, serial);
    }

    /// Bases the tid on this time (seconds since the Unix epoch) instead of the system
    /// clock, as ZODB clients whose tests control time expect. The tid still exceeds the
    /// last one.
    pub fn at_time(&mut self, secs: f64) {
        self.clock = Some(secs);
    }

    /// Undoes transaction `tid` as part of this transaction. Objects this transaction also
    /// stores explicitly are left to that store (how a resolved undo conflict is committed).
    pub fn undo(&mut self, tid: Tid) {
        self.undos.push(tid);
    }
}

/// A transaction that passed its vote: conflicts checked, data durable, tid assigned,
/// the commit lock held until finish or abort.
#[derive(Debug)]
pub struct Voted {
    pub tid: Tid,
    /// Objects written, with their new revision.
    pub revisions: BTreeMap<Oid, Revision>,
    meta: TxnMeta,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

/// The versioned transactional object store on one key-value database.
#[derive(Debug)]
pub struct VersionedStore {
    kv: KvHandle,
    blobs: Blobs,
    meta: parking_lot::Mutex<Meta>,
    next_oid: parking_lot::Mutex<u64>,
    commit: Arc<tokio::sync::Mutex<()>>,
}

impl VersionedStore {
    /// Opens the object store kept in `kv` (an empty database becomes an empty store).
    pub async fn open(kv: Arc<KvDb>) -> Result<Self> {
        let root = kv.path().to_string();
        Self::open_handle(KvHandle::Writer(kv), &root).await
    }

    /// Opens the object store of the database at `path` read-only, through a follower of
    /// its writer: nothing is written and no writer is fenced. [`Self::refresh`] catches up.
    pub async fn open_read_only(replica: Arc<KvReplica>, path: &str) -> Result<Self> {
        Self::open_handle(KvHandle::Reader(replica), path).await
    }

    async fn open_handle(kv: KvHandle, root: &str) -> Result<Self> {
        let key = records::meta_key();
        let meta = match kv.get(&key).await? {
            Some(v) => Meta::decode(&key, &v)?,
            None => Meta {
                heads: true,
                ..Meta::default()
            },
        };
        Ok(VersionedStore {
            // Oid 0 is the root, which the database creates itself: never hand it out.
            next_oid: parking_lot::Mutex::new(meta.oid_reserved.max(1)),
            meta: parking_lot::Mutex::new(meta),
            blobs: Blobs::new(kv.store().clone(), root),
            kv,
            commit: Arc::new(tokio::sync::Mutex::new(())),
        })
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
                *self.meta.lock() = Meta::decode(&key, &v)?;
            }
        }
        Ok(self.last_tid())
    }

    /// The tid of the last committed transaction (`Tid::ZERO` when empty).
    pub fn last_tid(&self) -> Tid {
        self.meta.lock().last_tid
    }

    /// A new object id, never handed out before (oids are reserved durably in blocks, so a
    /// crash can leave gaps but never reuse one).
    pub async fn new_oid(&self) -> Result<Oid> {
        if self.kv.is_read_only() {
            return Err(ObjError::ReadOnly {
                db: self.kv.name().to_string(),
            });
        }
        loop {
            {
                let mut next = self.next_oid.lock();
                let reserved = self.meta.lock().oid_reserved;
                if *next < reserved {
                    let oid = Oid(*next);
                    *next += 1;
                    return Ok(oid);
                }
            }
            let _lock = self.commit.lock().await;
            let mut meta = *self.meta.lock();
            if *self.next_oid.lock() < meta.oid_reserved {
                continue;
            }
            meta.oid_reserved += OID_BLOCK;
            let mut b = Batch::new();
            b.put(records::meta_key(), meta.encode());
            self.kv.commit(b).await?;
            *self.meta.lock() = meta;
        }
    }

    /// Makes sure oids up to `oid` are never handed out (after storing a client-chosen oid).
    fn note_oid(meta: &mut Meta, oid: Oid) {
        meta.oid_reserved = meta.oid_reserved.max(oid.0.saturating_add(1));
    }

    async fn current(&self, oid: Oid) -> Result<Option<(Tid, Revision)>> {
        if self.meta.lock().heads {
            let key = records::head_key(oid);
            return match self.kv.get(&key).await? {
                Some(v) => Ok(Some(records::decode_head(&key, &v)?)),
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
                Ok(Some((tid, Revision::decode(k, v)?)))
            }
            None => Ok(None),
        }
    }

    async fn revision(&self, oid: Oid, tid: Tid) -> Result<Option<Revision>> {
        let key = records::rev_key(oid, tid);
        match self.kv.get(&key).await? {
            Some(v) => Ok(Some(Revision::decode(&key, &v)?)),
            None => Ok(None),
        }
    }

    /// The current data and serial of `oid`.
    pub async fn load(&self, oid: Oid) -> Result<(Bytes, Tid)> {
        match self.current(oid).await? {
            Some((tid, Revision { data: Some(h), .. })) => Ok((self.read_data(&h).await?, tid)),
            _ => Err(ObjError::NotFound { oid, at: None }),
        }
    }

    /// The revision of `oid` current just before `tid`: (data, its tid, the tid of the next
    /// revision if any). `None` if the object had no data then.
    pub async fn load_before(
        &self,
        oid: Oid,
        tid: Tid,
    ) -> Result<Option<(Bytes, Tid, Option<Tid>)>> {
        // The common case, a read as of a recent snapshot: the current revision is older.
        if let Some((start, rev)) = self.current(oid).await?
            && start < tid
        {
            return match rev.data {
                Some(h) => Ok(Some((self.read_data(&h).await?, start, None))),
                None => Ok(None),
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
            None => Ok(None),
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
                all.extend_from_slice(&chunk);
            }
            Bytes::from(all)
        };
        let raw = match rec.codec {
            0 => stored,
            _ => Bytes::from(
                with_decompressor(|d| d.decompress(&stored, rec.raw_len as usize)).map_err(
                    |e| ObjError::Damaged {
                        key: format!("d{}", hex(h)),
                        reason: format!("cannot decompress: {e}"),
                    },
                )?,
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

    /// Adds the data records for `data` to `batch` unless already stored; returns its hash.
    async fn stage_data(
        &self,
        data: &[u8],
        batch: &mut Batch,
        staged: &mut BTreeSet<Hash>,
    ) -> Result<Hash> {
        self.stage_data_counted(data, batch, staged, None).await
    }

    /// [`Self::stage_data`], adding to `counts` when given.
    async fn stage_data_counted(
        &self,
        data: &[u8],
        batch: &mut Batch,
        staged: &mut BTreeSet<Hash>,
        counts: Option<&mut RestoreStats>,
    ) -> Result<Hash> {
        let h = *blake3::hash(data).as_bytes();
        let mut counts = counts;
        if let Some(c) = counts.as_deref_mut() {
            c.records += 1;
            c.logical_bytes += data.len() as u64;
        }
        if staged.contains(&h) || self.kv.get(&records::data_key(&h)).await?.is_some() {
            return Ok(h);
        }
        staged.insert(h);
        let compressed = with_compressor(|c| c.compress(data))
            .map_err(|e| ObjError::Invalid(format!("zstd: {e}")))?;
        let (codec, stored) = if compressed.len() < data.len() {
            (1, Bytes::from(compressed))
        } else {
            (0, Bytes::copy_from_slice(data))
        };
        let stored_len = stored.len() as u64;
        let rec = if stored.len() <= INLINE_MAX {
            DataRecord {
                codec,
                raw_len: data.len() as u64,
                inline: stored,
                chunks: 0,
            }
        } else {
            let mut n = 0u32;
            for chunk in stored.chunks(CHUNK_BYTES) {
                batch.put(records::chunk_key(&h, n), Bytes::copy_from_slice(chunk));
                n += 1;
            }
            DataRecord {
                codec,
                raw_len: data.len() as u64,
                inline: Bytes::new(),
                chunks: n,
            }
        };
        if let Some(c) = counts {
            c.new_bytes += data.len() as u64;
            c.new_stored_bytes += stored_len;
        }
        batch.put(records::data_key(&h), rec.encode());
        Ok(h)
    }

    /// The second phase's first half: takes the commit lock, checks conflicts and
    /// read-current serials, resolves undos, writes the data durably and assigns the tid.
    pub async fn vote(&self, txn: Txn) -> Result<Voted> {
        if self.kv.is_read_only() {
            return Err(ObjError::ReadOnly {
                db: self.kv.name().to_string(),
            });
        }
        let lock = self.commit.clone().lock_owned().await;
        let last = self.last_tid();
        let tid = match txn.restore {
            Some(t) if t <= last => {
                return Err(ObjError::Invalid(format!(
                    "restore of transaction {t}: the store's last transaction is {last}; \
                     transactions must be copied in tid order"
                )));
            }
            Some(t) => t,
            None => match txn.clock {
                Some(secs) => Tid::from_unix(secs).max(Tid(last.0 + 1)),
                None => Tid::next_after(last),
            },
        };
        for (&oid, &read) in &txn.read_current {
            let committed = self.current(oid).await?.map_or(Tid::ZERO, |(t, _)| t);
            if committed != read {
                return Err(ObjError::ReadConflict {
                    oid,
                    committed,
                    read,
                });
            }
        }
        let mut data_batch = Batch::new();
        let mut staged = BTreeSet::new();
        let mut revisions = BTreeMap::new();
        for (&oid, (serial, data)) in &txn.stores {
            let current = self.current(oid).await?;
            let committed = current.map_or(Tid::ZERO, |(t, _)| t);
            if committed != *serial {
                return Err(ObjError::Conflict {
                    oid,
                    committed,
                    old: *serial,
                });
            }
            let hash = match data {
                Some(d) => Some(self.stage_data(d, &mut data_batch, &mut staged).await?),
                None => None,
            };
            revisions.insert(
                oid,
                Revision {
                    data: hash,
                    data_txn: None,
                    prev: committed,
                    blob: self.upload_blob(&txn, oid, tid).await?,
                },
            );
        }
        for (&oid, (data, data_txn)) in &txn.restored {
            let prev = self.current(oid).await?.map_or(Tid::ZERO, |(t, _)| t);
            let (hash, blob) = match (data, data_txn) {
                (Some(d), _) => (
                    Some(self.stage_data(d, &mut data_batch, &mut staged).await?),
                    self.upload_blob(&txn, oid, tid).await?,
                ),
                (None, Some(from)) => match self.revision(oid, *from).await? {
                    Some(r) => (r.data, r.blob),
                    None => (None, None),
                },
                (None, None) => (None, None),
            };
            revisions.insert(
                oid,
                Revision {
                    data: hash,
                    data_txn: *data_txn,
                    prev,
                    blob,
                },
            );
        }
        let explicit: BTreeSet<Oid> = txn.stores.keys().copied().collect();
        for &undone in &txn.undos {
            self.stage_undo(undone, &mut revisions, &explicit).await?;
        }
        if !data_batch.is_empty() {
            self.kv.commit(data_batch).await?;
        }
        Ok(Voted {
            tid,
            revisions,
            meta: txn.meta,
            _lock: lock,
        })
    }

    /// Uploads the blob file the transaction gives for `oid`, if any; returns its hash.
    async fn upload_blob(&self, txn: &Txn, oid: Oid, tid: Tid) -> Result<Option<Hash>> {
        let Some(file) = txn.blobs.get(&oid) else {
            return Ok(None);
        };
        self.blobs
            .upload(file)
            .await
            .map(Some)
            .map_err(|reason| ObjError::Blob { oid, tid, reason })
    }

    /// The first object with an oid at or after `from` that has data in its current
    /// revision: (oid, tid, data). For ZODB's record_iternext.
    pub async fn next_object(&self, from: Oid) -> Result<Option<(Oid, Tid, Bytes)>> {
        let mut at = from;
        loop {
            let start = Bound::Included(records::rev_prefix(at));
            let end = prefix_end(b"o").map_or(Bound::Unbounded, Bound::Excluded);
            let Some((k, _)) = self
                .kv
                .scan((start, end), Some(1))
                .await?
                .into_iter()
                .next()
            else {
                return Ok(None);
            };
            let Some((oid, _)) = records::parse_rev_key(&k) else {
                return Err(ObjError::Damaged {
                    key: hex(&k),
                    reason: "not a revision key".into(),
                });
            };
            if let Some((tid, Revision { data: Some(h), .. })) = self.current(oid).await? {
                return Ok(Some((oid, tid, self.read_data(&h).await?)));
            }
            match oid.0.checked_add(1) {
                Some(n) => at = Oid(n),
                None => return Ok(None),
            }
        }
    }

    /// Reads the revisions of `oids` current before `before`, 32 at a time, so they are in
    /// the caches (DRAM tier, block cache) when asked for: ZODB's `prefetch`. Returns how
    /// many were found; missing objects and errors are left for the real load to report.
    pub async fn prefetch(&self, oids: &[Oid], before: Tid) -> usize {
        use futures::StreamExt;
        futures::stream::iter(oids.iter().copied())
            .map(|oid| async move { matches!(self.load_before(oid, before).await, Ok(Some(_))) })
            .buffer_unordered(32)
            .filter(|found| std::future::ready(*found))
            .count()
            .await
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
            .map_err(|reason| ObjError::Blob {
                oid,
                tid: serial,
                reason,
            })
    }

    /// Copies many transactions from another storage in one durable key-value commit (for
    /// imports): each must be a restore ([`Txn::restoring`]) with restored records only,
    /// in tid order after the store's last transaction. All or none are committed. Returns
    /// the last tid.
    pub async fn restore_many(&self, txns: Vec<Txn>) -> Result<(Tid, RestoreStats)> {
        let mut counts = RestoreStats::default();
        if self.kv.is_read_only() {
            return Err(ObjError::ReadOnly {
                db: self.kv.name().to_string(),
            });
        }
        let _lock = self.commit.clone().lock_owned().await;
        let mut meta = *self.meta.lock();
        let mut batch = Batch::new();
        let mut staged = BTreeSet::new();
        // Revisions written by this batch, for `prev` and data_txn lookups within it.
        let mut latest: HashMap<Oid, Tid> = HashMap::new();
        let mut written: HashMap<(Oid, Tid), Revision> = HashMap::new();
        for txn in &txns {
            let Some(tid) = txn.restore else {
                return Err(ObjError::Invalid(
                    "restore_many takes restoring transactions only".into(),
                ));
            };
            if !txn.stores.is_empty() || !txn.undos.is_empty() {
                return Err(ObjError::Invalid(format!(
                    "transaction {tid}: restore_many takes restored records only"
                )));
            }
            if tid <= meta.last_tid {
                return Err(ObjError::Invalid(format!(
                    "restore of transaction {tid}: the store's last transaction is {}; \
                     transactions must be copied in tid order",
                    meta.last_tid
                )));
            }
            for (&oid, (data, data_txn)) in &txn.restored {
                let prev = match latest.get(&oid) {
                    Some(&t) => t,
                    None => self.current(oid).await?.map_or(Tid::ZERO, |(t, _)| t),
                };
                let (hash, blob) = match (data, data_txn) {
                    (Some(d), _) => (
                        Some(
                            self.stage_data_counted(d, &mut batch, &mut staged, Some(&mut counts))
                                .await?,
                        ),
                        self.upload_blob(txn, oid, tid).await?,
                    ),
                    (None, Some(from)) => {
                        let r = match written.get(&(oid, *from)) {
                            Some(r) => Some(*r),
                            None => self.revision(oid, *from).await?,
                        };
                        r.map_or((None, None), |r| (r.data, r.blob))
                    }
                    (None, None) => (None, None),
                };
                let rev = Revision {
                    data: hash,
                    data_txn: *data_txn,
                    prev,
                    blob,
                };
                batch.put(records::rev_key(oid, tid), rev.encode());
                batch.put(records::wrote_key(tid, oid), Bytes::new());
                Self::note_oid(&mut meta, oid);
                latest.insert(oid, tid);
                written.insert((oid, tid), rev);
            }
            let record = TxnRecord {
                status: b' ',
                meta: txn.meta.clone(),
            };
            batch.put(records::txn_key(tid), record.encode());
            meta.last_tid = tid;
        }
        if meta.heads {
            for (&oid, &tid) in &latest {
                if let Some(rev) = written.get(&(oid, tid)) {
                    batch.put(records::head_key(oid), records::encode_head(tid, rev));
                }
            }
        }
        batch.put(records::meta_key(), meta.encode());
        self.kv.commit(batch).await?;
        *self.meta.lock() = meta;
        let mut next = self.next_oid.lock();
        *next = (*next).max(meta.oid_reserved);
        Ok((meta.last_tid, counts))
    }

    /// Undo of `undone`: each object it wrote goes back to its revision before `undone`,
    /// provided no later transaction changed it (or changed it back to the same data).
    async fn stage_undo(
        &self,
        undone: Tid,
        revisions: &mut BTreeMap<Oid, Revision>,
        explicit: &BTreeSet<Oid>,
    ) -> Result<()> {
        self.txn_record(undone).await?;
        let wrote = self
            .kv
            .scan(prefix(records::wrote_prefix(undone)), None)
            .await?;
        for (k, _) in wrote {
            let Some((_, oid)) = records::parse_wrote_key(&k) else {
                continue;
            };
            if explicit.contains(&oid) {
                // The transaction stores this object itself (a resolved undo conflict).
                continue;
            }
            let Some(rev) = self.revision(oid, undone).await? else {
                continue;
            };
            let (cur_tid, cur) = self
                .current(oid)
                .await?
                .ok_or(ObjError::Undo { tid: undone, oid })?;
            let pending = revisions.get(&oid);
            let current_data = pending.map_or(cur.data, |r| r.data);
            if cur_tid != undone && current_data != rev.data {
                return Err(ObjError::Undo { tid: undone, oid });
            }
            let before = match rev.prev {
                Tid::ZERO => None,
                p => Some((p, self.revision(oid, p).await?)),
            };
            let (data, data_txn, blob) = match before {
                Some((p, Some(r))) => (r.data, Some(r.data_txn.unwrap_or(p)), r.blob),
                _ => (None, None, None),
            };
            revisions.insert(
                oid,
                Revision {
                    data,
                    data_txn,
                    prev: cur_tid,
                    blob,
                },
            );
        }
        Ok(())
    }

    /// Commits a voted transaction: one durable key-value commit. Returns its tid.
    pub async fn finish(&self, voted: Voted) -> Result<Tid> {
        let mut meta = *self.meta.lock();
        let mut b = Batch::new();
        for (&oid, rev) in &voted.revisions {
            b.put(records::rev_key(oid, voted.tid), rev.encode());
            if meta.heads {
                b.put(records::head_key(oid), records::encode_head(voted.tid, rev));
            }
            b.put(records::wrote_key(voted.tid, oid), Bytes::new());
            Self::note_oid(&mut meta, oid);
        }
        let record = TxnRecord {
            status: b' ',
            meta: voted.meta.clone(),
        };
        b.put(records::txn_key(voted.tid), record.encode());
        meta.last_tid = voted.tid;
        b.put(records::meta_key(), meta.encode());
        self.kv.commit(b).await?;
        *self.meta.lock() = meta;
        // Oids the transaction chose itself (restore, imports) are never handed out later.
        if let Some(max) = voted.revisions.keys().next_back() {
            let mut next = self.next_oid.lock();
            *next = (*next).max(max.0.saturating_add(1));
        }
        Ok(voted.tid)
    }

    /// Abandons a voted transaction (its staged data is collected by the next pack).
    pub fn abort(&self, voted: Voted) {
        drop(voted);
    }

    /// Transactions with `start <= tid <= stop`, oldest first, with their records.
    pub async fn transactions(&self, start: Tid, stop: Tid) -> Result<Vec<TransactionInfo>> {
        let range = (
            Bound::Included(records::txn_key(start)),
            Bound::Included(records::txn_key(stop)),
        );
        let mut out = Vec::new();
        for (k, v) in self.kv.scan(range, None).await? {
            let Some(tid) = records::parse_txn_key(&k) else {
                continue;
            };
            let record = TxnRecord::decode(&k, &v)?;
            let mut recs = Vec::new();
            for (wk, _) in self
                .kv
                .scan(prefix(records::wrote_prefix(tid)), None)
                .await?
            {
                let Some((_, oid)) = records::parse_wrote_key(&wk) else {
                    continue;
                };
                let Some(rev) = self.revision(oid, tid).await? else {
                    continue;
                };
                let data = match rev.data {
                    Some(h) => Some(self.read_data(&h).await?),
                    None => None,
                };
                recs.push(DataRecordInfo {
                    oid,
                    tid,
                    data,
                    data_txn: rev.data_txn,
                });
            }
            out.push(TransactionInfo {
                tid,
                record,
                records: recs,
            });
        }
        Ok(out)
    }

    /// Removes every revision not needed to read the database as of `pack_tid` or later:
    /// per object, revisions older than its revision current at `pack_tid`, and that one too
    /// if it has no data. With `refs` (the references in an object's data), objects not
    /// reachable from the root at `pack_tid` and not written after it are removed too. Then
    /// data records no revision names are collected. Holds the commit lock throughout.
    pub async fn pack(&self, pack_tid: Tid, refs: Option<&References>) -> Result<PackStats> {
        if self.kv.is_read_only() {
            return Err(ObjError::ReadOnly {
                db: self.kv.name().to_string(),
            });
        }
        let _lock = self.commit.clone().lock_owned().await;
        let mut stats = PackStats::default();
        // Every revision, grouped by object (ascending tid).
        let all = self.kv.scan(prefix(Bytes::from_static(b"o")), None).await?;
        let mut by_oid: BTreeMap<Oid, Vec<(Tid, Revision)>> = BTreeMap::new();
        for (k, v) in &all {
            let Some((oid, tid)) = records::parse_rev_key(k) else {
                continue;
            };
            by_oid
                .entry(oid)
                .or_default()
                .push((tid, Revision::decode(k, v)?));
        }
        let mut remove: Vec<(Oid, Tid)> = Vec::new();
        let mut at_pack: HashMap<Oid, (Tid, Option<Hash>)> = HashMap::new();
        let mut written_after: BTreeSet<Oid> = BTreeSet::new();
        for (&oid, revs) in &by_oid {
            let keep_from = revs.iter().rposition(|(t, _)| *t <= pack_tid);
            if revs.iter().any(|(t, _)| *t > pack_tid) {
                written_after.insert(oid);
            }
            if let Some(i) = keep_from {
                for (t, _) in &revs[..i] {
                    remove.push((oid, *t));
                }
                at_pack.insert(oid, (revs[i].0, revs[i].1.data));
                if revs[i].1.data.is_none() {
                    remove.push((oid, revs[i].0));
                }
            }
        }
        if let Some(refs) = refs {
            let mut reachable: BTreeSet<Oid> = BTreeSet::new();
            let mut todo: Vec<Oid> = vec![Oid::ROOT];
            todo.extend(written_after.iter().copied());
            while let Some(oid) = todo.pop() {
                if !reachable.insert(oid) {
                    continue;
                }
                let mut datas: Vec<(Tid, Hash)> = at_pack
                    .get(&oid)
                    .and_then(|&(t, h)| h.map(|h| (t, h)))
                    .into_iter()
                    .collect();
                if written_after.contains(&oid) {
                    for (t, r) in by_oid.get(&oid).map(|v| v.as_slice()).unwrap_or(&[]) {
                        if *t > pack_tid
                            && let Some(h) = r.data
                        {
                            datas.push((*t, h));
                        }
                    }
                }
                for (tid, h) in datas {
                    let data = self.read_data(&h).await?;
                    let found =
                        refs(&data).map_err(|reason| ObjError::References { oid, tid, reason })?;
                    todo.extend(found.into_iter().filter(|o| !reachable.contains(o)));
                }
            }
            for (&oid, revs) in &by_oid {
                if !reachable.contains(&oid) {
                    for (t, _) in revs.iter().filter(|(t, _)| *t <= pack_tid) {
                        if !remove.contains(&(oid, *t)) {
                            remove.push((oid, *t));
                        }
                    }
                }
            }
        }
        let removed: BTreeSet<(Oid, Tid)> = remove.iter().copied().collect();
        stats.revisions_removed = removed.len() as u64;
        stats.objects_removed = by_oid
            .iter()
            .filter(|(oid, revs)| revs.iter().all(|(t, _)| removed.contains(&(**oid, *t))))
            .count() as u64;
        // Transactions that lose every record go; the others are marked packed.
        let mut per_txn: BTreeMap<Tid, (usize, usize)> = BTreeMap::new();
        for (&oid, revs) in &by_oid {
            for (t, _) in revs {
                let e = per_txn.entry(*t).or_default();
                e.0 += 1;
                if removed.contains(&(oid, *t)) {
                    e.1 += 1;
                }
            }
        }
        let mut batch = Batch::new();
        let mut ops: Vec<(Bytes, Option<Bytes>)> = Vec::new();
        for &(oid, t) in &removed {
            ops.push((records::rev_key(oid, t), None));
            ops.push((records::wrote_key(t, oid), None));
        }
        // An object loses its current revision only when it loses all of them.
        for (&oid, revs) in &by_oid {
            if revs.iter().all(|(t, _)| removed.contains(&(oid, *t))) {
                ops.push((records::head_key(oid), None));
            }
        }
        // Transactions up to the pack time are no longer undoable: those that lost every
        // record go, the others are marked packed (and leave the undo log).
        for (&t, &(total, gone)) in &per_txn {
            if t > pack_tid {
                continue;
            }
            if gone == total {
                ops.push((records::txn_key(t), None));
                stats.transactions_removed += 1;
            } else {
                let mut rec = self.txn_record(t).await?;
                if rec.status != b'p' {
                    rec.status = b'p';
                    ops.push((records::txn_key(t), Some(rec.encode())));
                }
            }
        }
        // Data and blobs no remaining revision names.
        let mut named: BTreeSet<Hash> = BTreeSet::new();
        let mut named_blobs: BTreeSet<Hash> = BTreeSet::new();
        for (&oid, revs) in &by_oid {
            for (t, r) in revs {
                if removed.contains(&(oid, *t)) {
                    if r.blob.is_some() {
                        stats.blob_revisions_removed.push((oid, *t));
                    }
                    continue;
                }
                if let Some(h) = r.data {
                    named.insert(h);
                }
                if let Some(b) = r.blob {
                    named_blobs.insert(b);
                }
            }
        }
        for (k, v) in self.kv.scan(prefix(Bytes::from_static(b"d")), None).await? {
            if k.len() != 33 {
                continue;
            }
            let mut h = [0u8; 32];
            h.copy_from_slice(&k[1..]);
            if named.contains(&h) {
                continue;
            }
            let rec = DataRecord::decode(&k, &v)?;
            for n in 0..rec.chunks {
                ops.push((records::chunk_key(&h, n), None));
            }
            ops.push((k, None));
            stats.data_removed += 1;
        }
        for chunk in ops.chunks(PACK_BATCH) {
            for (k, v) in chunk {
                match v {
                    Some(v) => batch.put(k.clone(), v.clone()),
                    None => batch.delete(k.clone()),
                };
            }
            self.kv.commit(std::mem::take(&mut batch)).await?;
        }
        // Blobs last: the revisions naming them are gone now, and uploads for new
        // revisions happen under the commit lock this pack holds.
        let blob_err = |reason| ObjError::Blob {
            oid: Oid::ROOT,
            tid: pack_tid,
            reason,
        };
        for h in self.blobs.list().await.map_err(blob_err)? {
            if !named_blobs.contains(&h) {
                self.blobs.delete(&h).await.map_err(blob_err)?;
                stats.blobs_removed += 1;
            }
        }
        Ok(stats)
    }

    /// Checks every record: transactions, revisions and data decode; every revision's
    /// transaction exists; every data record is complete and matches its hash; every blob
    /// exists. Returns what was checked and each problem found (empty when sound).
    pub async fn verify(&self) -> Result<VerifyReport> {
        let mut r = VerifyReport::default();
        let mut tids = BTreeSet::new();
        for (k, v) in self.kv.scan(prefix(Bytes::from_static(b"t")), None).await? {
            r.transactions += 1;
            match (records::parse_txn_key(&k), TxnRecord::decode(&k, &v)) {
                (Some(t), Ok(_)) => {
                    tids.insert(t);
                }
                (_, Err(e)) => r.problems.push(e.to_string()),
                (None, _) => r.problems.push(format!("bad transaction key {}", hex(&k))),
            }
        }
        let mut checked: BTreeSet<Hash> = BTreeSet::new();
        let mut blobs: BTreeSet<Hash> = BTreeSet::new();
        for (k, v) in self.kv.scan(prefix(Bytes::from_static(b"o")), None).await? {
            r.revisions += 1;
            let Some((oid, tid)) = records::parse_rev_key(&k) else {
                r.problems.push(format!("bad revision key {}", hex(&k)));
                continue;
            };
            let rev = match Revision::decode(&k, &v) {
                Ok(rev) => rev,
                Err(e) => {
                    r.problems.push(e.to_string());
                    continue;
                }
            };
            if !tids.contains(&tid) {
                r.problems.push(format!(
                    "object {oid} revision {tid}: its transaction record is missing"
                ));
            }
            if let Some(h) = rev.data
                && checked.insert(h)
            {
                r.data_records += 1;
                match self.read_data(&h).await {
                    Ok(d) => r.data_bytes += d.len() as u64,
                    Err(e) => r.problems.push(format!("object {oid} revision {tid}: {e}")),
                }
            }
            if let Some(b) = rev.blob
                && blobs.insert(b)
            {
                r.blobs += 1;
                if let Err(e) = self.blobs.exists(&b).await {
                    r.problems
                        .push(format!("object {oid} revision {tid}: blob {e}"));
                }
            }
        }
        Ok(r)
    }

    /// Object, revision, transaction and data counts with dedup and compression figures.
    pub async fn stats(&self) -> Result<StoreStats> {
        let mut s = StoreStats::default();
        let mut sizes: HashMap<Hash, u64> = HashMap::new();
        for (k, v) in self.kv.scan(prefix(Bytes::from_static(b"d")), None).await? {
            if k.len() != 33 {
                continue;
            }
            let mut h = [0u8; 32];
            h.copy_from_slice(&k[1..]);
            let rec = DataRecord::decode(&k, &v)?;
            s.data_records += 1;
            s.unique_bytes += rec.raw_len;
            s.stored_bytes += if rec.chunks == 0 {
                rec.inline.len() as u64
            } else {
                let mut n = 0;
                for i in 0..rec.chunks {
                    n += self
                        .kv
                        .get(&records::chunk_key(&h, i))
                        .await?
                        .map_or(0, |c| c.len() as u64);
                }
                n
            };
            sizes.insert(h, rec.raw_len);
        }
        let mut last_oid = None;
        let mut blobs = BTreeSet::new();
        for (k, v) in self.kv.scan(prefix(Bytes::from_static(b"o")), None).await? {
            let Some((oid, _)) = records::parse_rev_key(&k) else {
                continue;
            };
            s.revisions += 1;
            if last_oid != Some(oid) {
                s.objects += 1;
                last_oid = Some(oid);
            }
            let rev = Revision::decode(&k, &v)?;
            if let Some(h) = rev.data {
                s.logical_bytes += sizes.get(&h).copied().unwrap_or(0);
            }
            if let Some(b) = rev.blob {
                s.blob_revisions += 1;
                blobs.insert(b);
            }
        }
        s.blobs = blobs.len() as u64;
        s.transactions = self
            .kv
            .scan(prefix(Bytes::from_static(b"t")), None)
            .await?
            .len() as u64;
        Ok(s)
    }
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
