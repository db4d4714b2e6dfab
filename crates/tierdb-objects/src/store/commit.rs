//! Two-phase commit: oid allocation, vote (conflicts, data, undo), finish and abort.

use super::*;

/// Oids reserved per durable reservation.
const OID_BLOCK: u64 = 1024;
/// Oids handed out and not yet written that [`VersionedStore::new_oid`] remembers; past
/// this (clients that ask for oids and never use them) it forgets them all, and votes look
/// those objects up as they do any other.
const FRESH_MAX: u64 = 1 << 20;

/// Object data hashed and compressed, ready to be stored: the CPU-bound half of storing
/// it, which an import does on several threads.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub(super) hash: Hash,
    pub(super) codec: u8,
    pub(super) raw_len: u64,
    pub(super) stored: Bytes,
}

impl Prepared {
    /// The data record a head carries as a copy, when the stored bytes are small enough.
    pub(super) fn head_copy(&self) -> Option<DataRecord> {
        (self.stored.len() <= records::HEAD_DATA_MAX).then(|| DataRecord {
            codec: self.codec,
            raw_len: self.raw_len,
            inline: self.stored.clone(),
            chunks: 0,
        })
    }
}

/// Data shorter than this is stored as is: zstd on a record of a few hundred bytes costs
/// ~6 us (a third of a vote's CPU in `zodb_bench.py`'s add) and the key-value engine
/// compresses the SST blocks such records share (lz4, the objects workload's default),
/// which finds what similar small records have in common and a record alone does not.
pub const COMPRESS_MIN_BYTES: usize = 1024;

/// Small stored data whose dedup lookup a vote skips: writing the record again (the same
/// key and bytes, as its hash names them) costs less than looking for it in the key-value
/// engine (a memtable search and iterator set-up, a quarter of a vote's CPU).
const REWRITE_MAX_BYTES: usize = 4096;

/// Hashes `data` and compresses it (zstd, kept only when smaller) unless it is shorter
/// than [`COMPRESS_MIN_BYTES`].
pub fn prepare_data(data: &[u8]) -> Result<Prepared> {
    let hash = *blake3::hash(data).as_bytes();
    let compressed = if data.len() < COMPRESS_MIN_BYTES {
        None
    } else {
        Some(
            with_compressor(|c| c.compress(data))
                .map_err(|e| ObjError::Invalid(format!("zstd: {e}")))?,
        )
    };
    let (codec, stored) = match compressed {
        Some(c) if c.len() < data.len() => (1, Bytes::from(c)),
        _ => (0, Bytes::copy_from_slice(data)),
    };
    Ok(Prepared {
        hash,
        codec,
        raw_len: data.len() as u64,
        stored,
    })
}

impl VersionedStore {
    /// A new object id, never handed out before (oids are reserved durably in blocks, so a
    /// crash can leave gaps but never reuse one).
    ///
    /// Never waits for another transaction: a reservation writes only its own key
    /// (`moids`), under a lock of its own, so a server that votes one client's transaction
    /// and then serves another client's `new_oids` (ZEO does, on one thread) cannot
    /// deadlock. Two reservations wait for each other's key-value commit, nothing else.
    pub async fn new_oid(&self) -> Result<Oid> {
        if self.kv.is_read_only() {
            return Err(ObjError::ReadOnly {
                db: self.kv.name().to_string(),
            });
        }
        loop {
            if let Some(oid) = self.oids.lock().take() {
                let mut fresh = self.fresh.lock();
                if fresh.len() >= FRESH_MAX {
                    fresh.clear();
                }
                fresh.insert(oid.0);
                return Ok(oid);
            }
            let _reserving = self.oid_reserve.lock().await;
            let want = {
                let o = self.oids.lock();
                if o.next < o.reserved {
                    continue; // another caller reserved while we waited
                }
                o.next.max(o.reserved) + OID_BLOCK
            };
            let mut b = Batch::new();
            b.put(records::oids_key(), records::encode_oids(want));
            handle::commit(&self.kv, b).await?;
            let mut o = self.oids.lock();
            o.reserved = o.reserved.max(want);
        }
    }

    /// Makes sure oids up to `oid` are never handed out (after storing a client-chosen oid).
    pub(super) fn note_oid(meta: &mut Meta, oid: Oid) {
        meta.oid_reserved = meta.oid_reserved.max(oid.0.saturating_add(1));
    }

    /// Adds the data records for `data` to `batch` unless already stored, adding to
    /// `counts` when given; returns its hash.
    pub(super) async fn stage_data_counted(
        &self,
        data: &[u8],
        batch: &mut Batch,
        staged: &mut BTreeSet<Hash>,
        counts: Option<&mut RestoreStats>,
    ) -> Result<Hash> {
        let p = prepare_data(data)?;
        self.stage_prepared(&p, batch, staged, counts, None).await
    }

    /// Adds the data records of prepared data to `batch` unless already stored; returns
    /// its hash. With an import's `seen` filter, data the filter has never seen is known to
    /// be new to a store that was empty when the import began: no lookup.
    pub(super) async fn stage_prepared(
        &self,
        p: &Prepared,
        batch: &mut Batch,
        staged: &mut BTreeSet<Hash>,
        counts: Option<&mut RestoreStats>,
        seen: Option<&mut filter::NamedFilter>,
    ) -> Result<Hash> {
        let h = p.hash;
        let mut counts = counts;
        if let Some(c) = counts.as_deref_mut() {
            c.records += 1;
            c.logical_bytes += p.raw_len;
        }
        if staged.contains(&h) {
            return Ok(h);
        }
        let stored_before = match seen {
            Some(f) if !f.contains(&h) => {
                f.insert(&h);
                false
            }
            // Counted copies (imports, restores) report what was new: they look.
            None if counts.is_none() && p.stored.len() <= REWRITE_MAX_BYTES => false,
            _ => self.kv.get(&records::data_key(&h)).await?.is_some(),
        };
        if stored_before {
            return Ok(h);
        }
        staged.insert(h);
        let stored_len = p.stored.len() as u64;
        let rec = if p.stored.len() <= INLINE_MAX {
            DataRecord {
                codec: p.codec,
                raw_len: p.raw_len,
                inline: p.stored.clone(),
                chunks: 0,
            }
        } else {
            let mut n = 0u32;
            for chunk in p.stored.chunks(CHUNK_BYTES) {
                batch.put(records::chunk_key(&h, n), records::encode_chunk(chunk));
                n += 1;
            }
            DataRecord {
                codec: p.codec,
                raw_len: p.raw_len,
                inline: Bytes::new(),
                chunks: n,
            }
        };
        if let Some(c) = counts {
            c.new_bytes += p.raw_len;
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
        let mut stored = BTreeMap::new();
        let mut head_data = BTreeMap::new();
        for (&oid, (serial, data)) in &txn.stores {
            // An oid this process handed out and no commit wrote has no revision: a new
            // object needs no lookup (the commit lock held here orders this check with the
            // finish that would write it).
            let committed = if *serial == Tid::ZERO && self.fresh.lock().contains(oid.0) {
                Tid::ZERO
            } else {
                self.current(oid).await?.map_or(Tid::ZERO, |(t, _)| t)
            };
            if committed != *serial {
                return Err(ObjError::Conflict {
                    oid,
                    committed,
                    old: *serial,
                });
            }
            let hash = match data {
                Some(d) => {
                    stored.insert(oid, d.clone());
                    let p = prepare_data(d)?;
                    let h = self
                        .stage_prepared(&p, &mut data_batch, &mut staged, None, None)
                        .await?;
                    if let Some(copy) = p.head_copy() {
                        head_data.insert(oid, copy);
                    }
                    Some(h)
                }
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
            let rev = self
                .restored_revision(
                    super::restore::Restored {
                        txn: &txn,
                        oid,
                        tid,
                        data: data.as_ref(),
                        data_txn: *data_txn,
                        prev,
                    },
                    &mut data_batch,
                    &mut staged,
                    None,
                    &HashMap::new(),
                    None,
                )
                .await?;
            revisions.insert(oid, rev);
        }
        let explicit: BTreeSet<Oid> = txn.stores.keys().copied().collect();
        for &undone in &txn.undos {
            self.stage_undo(undone, &mut revisions, &explicit).await?;
        }
        // The data goes into the WAL now, without waiting for it to be durable: finish's
        // durable commit is written after it and so makes both durable at once (one WAL
        // flush, one fsync in write-back mode, per transaction). Until then nothing names
        // this data, and nothing can delete it: pack takes the commit lock this vote holds.
        if !data_batch.is_empty() {
            handle::write_buffered(&self.kv, data_batch).await?;
        }
        // Undo replaced some stored revisions with older data: only the rest are cached.
        stored.retain(|oid, _| revisions.get(oid).is_some_and(|r| r.data_txn.is_none()));
        head_data.retain(|oid, _| stored.contains_key(oid));
        Ok(Voted {
            tid,
            revisions,
            stored,
            head_data,
            meta: txn.meta,
            _lock: lock,
        })
    }

    /// Uploads the blob file the transaction gives for `oid`, if any; returns its hash.
    pub(super) async fn upload_blob(&self, txn: &Txn, oid: Oid, tid: Tid) -> Result<Option<Hash>> {
        let Some(file) = txn.blobs.get(&oid) else {
            return Ok(None);
        };
        self.blobs
            .upload(file)
            .await
            .map(Some)
            .map_err(|f| ObjError::Blob {
                oid,
                tid,
                kind: f.kind,
                reason: f.reason,
            })
    }

    /// Undo of `undone`: each object it wrote goes back to its revision before `undone`,
    /// provided no later transaction changed it (or changed it back to the same data).
    pub(super) async fn stage_undo(
        &self,
        undone: Tid,
        revisions: &mut BTreeMap<Oid, Revision>,
        explicit: &BTreeSet<Oid>,
    ) -> Result<()> {
        self.txn_record(undone).await?;
        for oid in self.written_by(undone).await? {
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
                let copy = voted.head_data.get(&oid);
                b.put(
                    records::head_key(oid),
                    records::encode_head(voted.tid, rev, copy),
                );
            }
            b.put(records::wrote_key(voted.tid, oid), records::wrote_value());
            Self::note_oid(&mut meta, oid);
        }
        let record = TxnRecord {
            status: b' ',
            meta: voted.meta.clone(),
        };
        b.put(records::txn_key(voted.tid), record.encode());
        meta.last_tid = voted.tid;
        b.put(records::meta_key(), meta.encode());
        let created = voted
            .revisions
            .values()
            .filter(|r| r.prev == Tid::ZERO)
            .count() as u64;
        let count = self.count_change(created, 0);
        if let Some(n) = count {
            b.put(records::count_key(), records::encode_oids(n));
        }
        // No longer fresh, whatever the commit's outcome (a failed commit may still have
        // become durable): later votes look these objects up.
        self.written(voted.revisions.keys().copied());
        handle::commit(&self.kv, b).await?;
        *self.meta.lock() = meta;
        self.set_count(count);
        let Voted {
            tid,
            revisions,
            mut stored,
            ..
        } = voted;
        self.cache.committed(revisions.iter().map(|(&oid, &rev)| {
            (
                oid,
                cache::Cached {
                    tid,
                    rev,
                    data: stored.remove(&oid),
                },
            )
        }));
        // Oids the transaction chose itself (restore, imports) are never handed out later.
        if let Some(max) = revisions.keys().next_back() {
            self.oids.lock().skip_to(max.0.saturating_add(1));
        }
        Ok(tid)
    }

    /// Forgets that `oids` are fresh: a commit wrote them.
    pub(super) fn written(&self, oids: impl Iterator<Item = Oid>) {
        let mut fresh = self.fresh.lock();
        if !fresh.is_empty() {
            for oid in oids {
                fresh.remove(oid.0);
            }
        }
    }

    /// Abandons a voted transaction (its staged data is collected by the next pack).
    pub fn abort(&self, voted: Voted) {
        drop(voted);
    }
}
