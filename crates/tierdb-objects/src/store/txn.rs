//! A transaction being built ([`Txn`]) and one that passed its vote ([`Voted`]).

use super::*;

/// A transaction being built: the first phase of two-phase commit.
#[derive(Debug, Default)]
pub struct Txn {
    pub(super) meta: TxnMeta,
    pub(super) stores: BTreeMap<Oid, (Tid, Option<Bytes>)>,
    /// Blob files of stored or restored objects, uploaded at vote.
    pub(super) blobs: BTreeMap<Oid, PathBuf>,
    pub(super) read_current: BTreeMap<Oid, Tid>,
    pub(super) undos: Vec<Tid>,
    /// Restore: copy revisions with given tids and data_txn, no conflict checks.
    pub(super) restore: Option<Tid>,
    pub(super) restored: BTreeMap<Oid, (Option<Bytes>, Option<Tid>)>,
    /// The commit time to base the tid on (seconds since the epoch); default: now.
    pub(super) clock: Option<f64>,
    /// Restored data already hashed and compressed ([`Txn::prepare`]).
    pub(super) prepared: HashMap<Oid, super::commit::Prepared>,
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

    /// Hashes and compresses the restored records' data now (CPU only, no store access),
    /// so an import can do it on other threads than the one that commits.
    pub fn prepare(&mut self) -> Result<()> {
        for (&oid, (data, _)) in &self.restored {
            if let Some(d) = data {
                self.prepared.insert(oid, super::commit::prepare_data(d)?);
            }
        }
        Ok(())
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
    /// The data of the revisions stored with new data, for the current-record cache.
    pub(super) stored: BTreeMap<Oid, Bytes>,
    /// Copies of the small data records of `stored`, for the head records.
    pub(super) head_data: BTreeMap<Oid, DataRecord>,
    pub(super) meta: TxnMeta,
    pub(super) _lock: tokio::sync::OwnedMutexGuard<()>,
}
