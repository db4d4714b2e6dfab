//! Copying transactions in with their tids (import, `copyTransactionsFrom`).

use super::*;

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

impl VersionedStore {
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
}
