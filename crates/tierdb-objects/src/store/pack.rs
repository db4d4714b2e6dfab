//! Pack: dropping revisions not needed as of a time, and unreachable objects.
//!
//! A pack is four passes, each reading the store a page at a time, so its memory does not
//! grow with the store (see [`VersionedStore::pack`] for what each holds):
//!
//! 1. **mark** (with garbage collection): the objects reachable from the root as of the
//!    pack time, and from every object written after it, one seek per object;
//! 2. **sweep**: per object, in oid order, the revisions it no longer needs, and its head
//!    record when it loses them all, deleted in one atomic commit with the object's
//!    "written by" keys (objects are never split across commits);
//! 3. **transactions** up to the pack time: deleted when no object record is left, marked
//!    packed otherwise;
//! 4. **data**: the data records and blobs no remaining revision or head names.
//!
//! A crash (SIGKILL) anywhere leaves a store that loads what it loaded before: every pass
//! only removes what the store no longer names, each commit is atomic, and an object's
//! head goes in the same commit as its last revision. Data goes last, after every revision
//! that named it is gone, so no head or revision can name data a pack deleted. The next
//! pack finds what is left to do and does it.

use roaring::RoaringTreemap;

use super::filter::NamedFilter;
use super::iter::{Pages, RevisionGroups};
use super::*;

/// Changes per key-value commit during pack (a commit ends at an object boundary).
const PACK_BATCH: usize = 2000;
/// The most memory the filters of named data and blobs may take together.
const NAMED_FILTER_MAX_BYTES: usize = 64 << 20;

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
    /// Objects found reachable (with garbage collection).
    pub objects_reachable: u64,
}

/// Where a long pass is, for progress bars: the pass's name and the items done in it.
pub trait Progress: Send + Sync {
    fn pass(&self, _name: &str) {}
    fn advance(&self, _items: u64) {}
}

/// No progress shown.
#[derive(Debug)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// Which revisions of an object a pack to `pack_tid` removes, given its revisions oldest
/// first: those older than its revision current at `pack_tid`, that one too if it has no
/// data, and all of those if the object is `garbage` (unreachable then).
pub(super) fn removed(revs: &[(Tid, Revision)], pack_tid: Tid, garbage: bool) -> Vec<bool> {
    let current = revs.iter().rposition(|(t, _)| *t <= pack_tid);
    (0..revs.len())
        .map(|i| match current {
            Some(c) => i < c || (i == c && revs[c].1.data.is_none()) || (i <= c && garbage),
            None => false,
        })
        .collect()
}

/// Pause points of a pack, for crash tests (debug builds; see `tierdb_store::testpoint`).
fn pause(point: &str) {
    tierdb_store::testpoint::pause_at(point);
}

impl VersionedStore {
    /// Removes every revision not needed to read the database as of `pack_tid` or later:
    /// per object, revisions older than its revision current at `pack_tid`, and that one too
    /// if it has no data. With `refs` (the references in an object's data), objects not
    /// reachable from the root at `pack_tid` and not written after it are removed too. Then
    /// data records no revision names are collected. Holds the commit lock throughout.
    pub async fn pack(&self, pack_tid: Tid, refs: Option<&References>) -> Result<PackStats> {
        self.pack_with(pack_tid, refs, &NoProgress).await
    }

    /// [`Self::pack`], reporting its passes to `progress`.
    ///
    /// Memory: one page of keys at a time in every pass, one object's revisions, and two
    /// sets. Garbage collection marks reachable oids in a compressed bitmap (RoaringTreemap:
    /// about 2 bits per object when oids are dense, as ZODB allocates them; 25 MB for 10^8
    /// objects). Named data and blobs go into Bloom filters of at most 64 MB together:
    /// a false positive only keeps a garbage record until a later pack (each pack salts its
    /// filter differently), so the filters are sized from the number of revisions kept
    /// (10 bits each, 1% kept) and capped there.
    pub async fn pack_with(
        &self,
        pack_tid: Tid,
        refs: Option<&References>,
        progress: &dyn Progress,
    ) -> Result<PackStats> {
        if self.kv.is_read_only() {
            return Err(ObjError::ReadOnly {
                db: self.kv.name().to_string(),
            });
        }
        let _lock = self.commit.clone().lock_owned().await;
        let mut stats = PackStats::default();
        let reachable = match refs {
            Some(refs) => {
                let r = self.mark(pack_tid, refs, progress).await?;
                stats.objects_reachable = r.len();
                Some(r)
            }
            None => None,
        };
        let kept = self
            .sweep(pack_tid, reachable.as_ref(), &mut stats, progress)
            .await?;
        drop(reachable);
        self.sweep_transactions(pack_tid, &mut stats, progress)
            .await?;
        self.collect_data(pack_tid, kept, &mut stats, progress)
            .await?;
        self.cache.clear();
        Ok(stats)
    }

    /// The revision of `oid` current at `at` (the newest with a tid `<= at`).
    async fn revision_at(&self, oid: Oid, at: Tid) -> Result<Option<(Tid, Revision)>> {
        let range = (
            Bound::Included(records::rev_prefix(oid)),
            Bound::Included(records::rev_key(oid, at)),
        );
        match self.kv.scan_desc(range, Some(1)).await?.into_iter().next() {
            Some((k, v)) => Ok(Some((rev_tid(&k)?, Revision::decode(&k, &v)?))),
            None => Ok(None),
        }
    }

    /// Pass 1: every object reachable from the root as of `pack_tid` or from an object
    /// written after it (whose every revision after `pack_tid` counts).
    pub(super) async fn mark(
        &self,
        pack_tid: Tid,
        refs: &References,
        progress: &dyn Progress,
    ) -> Result<RoaringTreemap> {
        progress.pass("mark");
        let mut reachable = RoaringTreemap::new();
        let mut todo: Vec<Oid> = vec![Oid::ROOT];
        // Objects written after the pack time: the "written by" keys of later transactions.
        let after = match pack_tid.0.checked_add(1) {
            Some(t) => Bound::Included(records::wrote_prefix(Tid(t))),
            None => Bound::Excluded(records::wrote_prefix(Tid::MAX)),
        };
        let mut written_after = RoaringTreemap::new();
        let mut pages = Pages::new((after, prefix(Bytes::from_static(b"r")).1));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, _) in page {
                if let Some((_, oid)) = records::parse_wrote_key(&k)
                    && written_after.insert(oid.0)
                {
                    todo.push(oid);
                }
            }
        }
        while let Some(oid) = todo.pop() {
            if !reachable.insert(oid.0) {
                continue;
            }
            progress.advance(1);
            let mut datas: Vec<(Tid, Hash)> = Vec::new();
            if let Some((t, rev)) = self.revision_at(oid, pack_tid).await?
                && let Some(h) = rev.data
            {
                datas.push((t, h));
            }
            if written_after.contains(oid.0) {
                let later = (
                    Bound::Excluded(records::rev_key(oid, pack_tid)),
                    prefix(records::rev_prefix(oid)).1,
                );
                let mut pages = Pages::new(later);
                while let Some(page) = pages.next(&self.kv).await? {
                    for (k, v) in page {
                        if let Some(h) = Revision::decode(&k, &v)?.data {
                            datas.push((rev_tid(&k)?, h));
                        }
                    }
                }
            }
            for (tid, h) in datas {
                let data = self.read_data(&h).await?;
                let found = refs(&data).map_err(|tierdb_store::Damage(reason)| {
                    ObjError::References { oid, tid, reason }
                })?;
                todo.extend(found.into_iter().filter(|o| !reachable.contains(o.0)));
            }
        }
        Ok(reachable)
    }

    /// Pass 2: per object, removes the revisions not needed as of `pack_tid` (and the
    /// unreachable ones), with the object's head when no revision is left, one object per
    /// atomic commit at least. Also removes head records no revision backs (left by
    /// packs before this design). Returns how many revisions are kept.
    async fn sweep(
        &self,
        pack_tid: Tid,
        reachable: Option<&RoaringTreemap>,
        stats: &mut PackStats,
        progress: &dyn Progress,
    ) -> Result<u64> {
        progress.pass("sweep");
        let heads = self.meta.lock().heads;
        let mut head_pages = heads.then(|| Pages::new(prefix(Bytes::from_static(b"h"))));
        let mut head_buf: std::collections::VecDeque<Oid> = Default::default();
        let mut batch = Counted::default();
        let mut kept = 0u64;
        let mut groups = RevisionGroups::new();
        while let Some((oid, revs)) = groups.next(&self.kv).await? {
            progress.advance(revs.len() as u64);
            kept += self.sweep_object(oid, &revs, pack_tid, reachable, stats, &mut batch);
            self.stale_heads(&mut head_pages, &mut head_buf, Some(oid), &mut batch)
                .await?;
            if batch.batch.len() >= PACK_BATCH {
                self.commit_counted(std::mem::take(&mut batch)).await?;
                pause("pack-sweep-batch");
            }
        }
        self.stale_heads(&mut head_pages, &mut head_buf, None, &mut batch)
            .await?;
        self.commit_counted(batch).await?;
        pause("pack-swept");
        Ok(kept)
    }

    /// Adds the deletions for one object to `batch`; returns how many revisions it keeps.
    fn sweep_object(
        &self,
        oid: Oid,
        revs: &[(Tid, Revision)],
        pack_tid: Tid,
        reachable: Option<&RoaringTreemap>,
        stats: &mut PackStats,
        batch: &mut Counted,
    ) -> u64 {
        let garbage = reachable.is_some_and(|r| !r.contains(oid.0));
        let mut gone = 0;
        for ((t, r), removed) in revs.iter().zip(removed(revs, pack_tid, garbage)) {
            if removed {
                batch.batch.delete(records::rev_key(oid, *t));
                batch.batch.delete(records::wrote_key(*t, oid));
                if r.blob.is_some() {
                    stats.blob_revisions_removed.push((oid, *t));
                }
                gone += 1;
            }
        }
        stats.revisions_removed += gone as u64;
        if gone == revs.len() {
            batch.batch.delete(records::head_key(oid));
            batch.objects_removed += 1;
            stats.objects_removed += 1;
        }
        (revs.len() - gone) as u64
    }

    /// Deletes head records with no revision below `upto` (all remaining when `None`).
    async fn stale_heads(
        &self,
        pages: &mut Option<Pages>,
        buf: &mut std::collections::VecDeque<Oid>,
        upto: Option<Oid>,
        batch: &mut Counted,
    ) -> Result<()> {
        let Some(p) = pages else { return Ok(()) };
        loop {
            if buf.is_empty() {
                match p.next(&self.kv).await? {
                    Some(page) => buf.extend(page.iter().filter_map(|(k, _)| {
                        (k.len() == 9).then(|| Oid::from_bytes(&k[1..9])).flatten()
                    })),
                    None => return Ok(()),
                }
            }
            while let Some(&h) = buf.front() {
                match upto {
                    Some(u) if h == u => {
                        buf.pop_front();
                        return Ok(());
                    }
                    Some(u) if h > u => return Ok(()),
                    _ => {
                        buf.pop_front();
                        batch.batch.delete(records::head_key(h));
                        batch.objects_removed += 1;
                    }
                }
            }
        }
    }

    /// Commits a sweep batch with the object count it changes.
    async fn commit_counted(&self, c: Counted) -> Result<()> {
        let Counted {
            mut batch,
            objects_removed,
        } = c;
        let count = self.count_change(0, objects_removed);
        if let Some(n) = count {
            batch.put(records::count_key(), records::encode_oids(n));
        }
        handle::commit(&self.kv, batch).await?;
        self.set_count(count);
        Ok(())
    }

    /// Pass 3: transactions up to `pack_tid` are no longer undoable: those that lost every
    /// record go, the others are marked packed (and leave the undo log).
    async fn sweep_transactions(
        &self,
        pack_tid: Tid,
        stats: &mut PackStats,
        progress: &dyn Progress,
    ) -> Result<()> {
        progress.pass("transactions");
        let range = (
            Bound::Included(records::txn_key(Tid::ZERO)),
            Bound::Included(records::txn_key(pack_tid)),
        );
        let mut pages = Pages::new(range);
        let mut batch = Batch::new();
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                let Some(tid) = records::parse_txn_key(&k) else {
                    continue;
                };
                progress.advance(1);
                let left = self
                    .kv
                    .scan(prefix(records::wrote_prefix(tid)), Some(1))
                    .await?;
                if left.is_empty() {
                    batch.delete(k);
                    stats.transactions_removed += 1;
                } else {
                    let mut rec = TxnRecord::decode(&k, &v)?;
                    if rec.status != b'p' {
                        rec.status = b'p';
                        batch.put(k, rec.encode());
                    }
                }
            }
            if batch.len() >= PACK_BATCH {
                handle::commit(&self.kv, std::mem::take(&mut batch)).await?;
            }
        }
        handle::commit(&self.kv, batch).await?;
        pause("pack-transactions");
        Ok(())
    }

    /// Pass 4: data records and blobs that no revision and no head names.
    async fn collect_data(
        &self,
        pack_tid: Tid,
        kept: u64,
        stats: &mut PackStats,
        progress: &dyn Progress,
    ) -> Result<()> {
        progress.pass("data");
        let mut named = NamedFilter::new(kept, NAMED_FILTER_MAX_BYTES * 3 / 4, pack_tid.0);
        let mut named_blobs = NamedFilter::new(kept, NAMED_FILTER_MAX_BYTES / 4, !pack_tid.0);
        for what in [records::revisions_prefix(), Bytes::from_static(b"h")] {
            let heads = what.as_ref() == b"h";
            let mut pages = Pages::new(prefix(what));
            while let Some(page) = pages.next(&self.kv).await? {
                for (k, v) in page {
                    let rev = if heads {
                        records::decode_head(&k, &v)?.1
                    } else {
                        Revision::decode(&k, &v)?
                    };
                    if let Some(h) = rev.data {
                        named.insert(&h);
                    }
                    if let Some(b) = rev.blob {
                        named_blobs.insert(&b);
                    }
                }
            }
        }
        let mut batch = Batch::new();
        let mut pages = Pages::new(prefix(records::data_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                progress.advance(1);
                let Some(h) = records::parse_data_key(&k) else {
                    continue;
                };
                if named.contains(&h) {
                    continue;
                }
                let rec = DataRecord::decode(&k, &v)?;
                for n in 0..rec.chunks {
                    batch.delete(records::chunk_key(&h, n));
                }
                batch.delete(k);
                stats.data_removed += 1;
            }
            if batch.len() >= PACK_BATCH {
                handle::commit(&self.kv, std::mem::take(&mut batch)).await?;
                pause("pack-data-batch");
            }
        }
        handle::commit(&self.kv, batch).await?;
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
        Ok(())
    }
}

/// A sweep batch and the objects it removes (the count is written in the same commit).
#[derive(Default)]
struct Counted {
    batch: Batch,
    objects_removed: u64,
}

fn rev_tid(k: &[u8]) -> Result<Tid> {
    records::parse_rev_key(k)
        .map(|(_, t)| t)
        .ok_or_else(|| ObjError::Damaged {
            key: hex(k),
            reason: "not a revision key".into(),
        })
}
