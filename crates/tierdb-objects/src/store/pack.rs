//! Pack: dropping revisions not needed as of a time, and unreachable objects.

use super::*;

/// Changes per key-value commit during pack.
const PACK_BATCH: usize = 2000;

/// The oids an object's data refers to (for ZODB: `ZODB.serialize.referencesf`), or why
/// they cannot be read (pack then stops: collecting garbage with unknown references could
/// delete live objects).
pub type References =
    dyn Fn(&[u8]) -> std::result::Result<Vec<Oid>, tierdb_store::Damage> + Send + Sync;

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

impl VersionedStore {
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
        let all = self
            .kv
            .scan(prefix(records::revisions_prefix()), None)
            .await?;
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
                    let found = refs(&data).map_err(|tierdb_store::Damage(reason)| {
                        ObjError::References { oid, tid, reason }
                    })?;
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
        for (k, v) in self.kv.scan(prefix(records::data_prefix()), None).await? {
            let Some(h) = records::parse_data_key(&k) else {
                continue;
            };
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
            handle::commit(&self.kv, std::mem::take(&mut batch)).await?;
        }
        self.cache.clear();
        // Blobs last: the revisions naming them are gone now, and uploads for new
        // revisions happen under the commit lock this pack holds.
        let blob_err = |f: crate::blobs::BlobFailure| ObjError::Blob {
            oid: Oid::ROOT,
            tid: pack_tid,
            kind: f.kind,
            reason: f.reason,
        };
        for h in self.blobs.list().await.map_err(blob_err)? {
            if !named_blobs.contains(&h) {
                self.blobs.delete(&h).await.map_err(blob_err)?;
                stats.blobs_removed += 1;
            }
        }
        Ok(stats)
    }
}
