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
        self.restore_many_with(txns, None).await
    }

    /// [`Self::restore_many`] for an import: `import` remembers what earlier groups wrote
    /// (see [`ImportState`]), and records may come prepared ([`Txn::prepare`]).
    pub async fn restore_many_with(
        &self,
        txns: Vec<Txn>,
        mut import: Option<&mut ImportState>,
    ) -> Result<(Tid, RestoreStats)> {
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
        let mut created = 0u64;
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
                    // An import into an empty store knows the objects it has not written.
                    None if import
                        .as_deref()
                        .is_some_and(|i| i.fresh && !i.oids.contains(oid.0)) =>
                    {
                        Tid::ZERO
                    }
                    None => self.current(oid).await?.map_or(Tid::ZERO, |(t, _)| t),
                };
                if prev == Tid::ZERO {
                    created += 1;
                }
                let rev = self
                    .restored_revision(
                        Restored {
                            txn,
                            oid,
                            tid,
                            data: data.as_ref(),
                            data_txn: *data_txn,
                            prev,
                        },
                        &mut batch,
                        &mut staged,
                        Some(&mut counts),
                        &written,
                        import
                            .as_deref_mut()
                            .filter(|i| i.fresh)
                            .map(|i| &mut i.seen),
                    )
                    .await?;
                batch.put(records::rev_key(oid, tid), rev.encode());
                batch.put(records::wrote_key(tid, oid), records::wrote_value());
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
                    // No data copy: an import writing one per object took twice as long
                    // (1 GiB Data.fs: 46.9 s against 24.2 s); such heads load through `d`.
                    batch.put(records::head_key(oid), records::encode_head(tid, rev, None));
                }
            }
        }
        batch.put(records::meta_key(), meta.encode());
        let count = self.count_change(created, 0);
        if let Some(n) = count {
            batch.put(records::count_key(), records::encode_oids(n));
        }
        self.written(latest.keys().copied());
        handle::commit(&self.kv, batch).await?;
        *self.meta.lock() = meta;
        self.set_count(count);
        if let Some(i) = import {
            i.oids.extend(latest.keys().map(|o| o.0));
        }
        self.cache.forget(latest.keys().copied());
        self.oids.lock().skip_to(meta.oid_reserved);
        Ok((meta.last_tid, counts))
    }
}

/// What an import remembers between its groups, so it does not ask the store what it
/// wrote itself: the objects written so far (a compressed bitmap of oids) and a filter of
/// the data written so far (64 MiB; a hash it has never seen is new to a store that was
/// empty when the import began, anything else is looked up).
#[derive(Debug)]
pub struct ImportState {
    /// The store had no transaction when the import began.
    fresh: bool,
    oids: roaring::RoaringTreemap,
    seen: super::filter::NamedFilter,
}

impl ImportState {
    /// The state of an import of about `records` records into `store`.
    pub fn new(store: &VersionedStore, records: u64) -> Self {
        let fresh = store.last_tid() == Tid::ZERO;
        ImportState {
            fresh,
            oids: roaring::RoaringTreemap::new(),
            // A store with data already (a resumed import) is always asked.
            seen: super::filter::NamedFilter::new(if fresh { records } else { 0 }, 64 << 20, 0),
        }
    }
}

/// One restored record of a transaction being copied in.
pub(super) struct Restored<'a> {
    pub txn: &'a Txn,
    pub oid: Oid,
    pub tid: Tid,
    pub data: Option<&'a Bytes>,
    /// The transaction whose data this record reuses (ZODB's `data_txn`), when `data` is None.
    pub data_txn: Option<Tid>,
    pub prev: Tid,
}

impl VersionedStore {
    /// The revision a restored record becomes: its data staged in `batch` and its blob
    /// uploaded, or, for a record that only names `data_txn`, that revision's data and blob
    /// (looked up in `written` first: revisions of this same commit). Used by `vote` for a
    /// single restoring transaction and by [`VersionedStore::restore_many`].
    pub(super) async fn restored_revision(
        &self,
        r: Restored<'_>,
        batch: &mut Batch,
        staged: &mut BTreeSet<Hash>,
        counts: Option<&mut RestoreStats>,
        written: &HashMap<(Oid, Tid), Revision>,
        seen: Option<&mut super::filter::NamedFilter>,
    ) -> Result<Revision> {
        let (data, blob) = match (r.data, r.data_txn) {
            (Some(d), _) => {
                let hash = match r.txn.prepared.get(&r.oid) {
                    Some(p) => self.stage_prepared(p, batch, staged, counts, seen).await?,
                    None => self.stage_data_counted(d, batch, staged, counts).await?,
                };
                (Some(hash), self.upload_blob(r.txn, r.oid, r.tid).await?)
            }
            (None, Some(from)) => {
                let rev = match written.get(&(r.oid, from)) {
                    Some(rev) => Some(*rev),
                    None => self.revision(r.oid, from).await?,
                };
                rev.map_or((None, None), |rev| (rev.data, rev.blob))
            }
            (None, None) => (None, None),
        };
        Ok(Revision {
            data,
            data_txn: r.data_txn,
            prev: r.prev,
            blob,
        })
    }
}
