//! The current-record cache: each object's current revision, with its data once loaded, so
//! a warm load is one in-process lookup instead of two key-value gets, a decompression and
//! a hash check (what ZEO's and RelStorage's client caches do for their clients).
//!
//! It is exact, not a guess validated later: the writer is the only process that commits
//! (opening a writer fences the previous one), and [`VersionedStore::finish`] puts every
//! revision it commits into the cache before it returns; a follower drops the entries of
//! every transaction [`VersionedStore::refresh`] catches up with. Pack clears it.
//!
//! A load that read the key-value store puts what it read into the cache only if no
//! commit, refresh or pack changed the cache meanwhile (an epoch counter checked under the
//! same lock the changes take), so a slow load can never put back a revision older than
//! the one a commit just put there.

use super::*;

/// Bytes of object data the cache holds by default.
pub const DEFAULT_RECORD_CACHE_BYTES: usize = 64 << 20;
/// Objects a follower's refresh invalidates one by one; past this it clears the cache.
const REFRESH_INVALIDATE_MAX: usize = 4096;

/// One object's current revision, with its data when it has been loaded.
#[derive(Debug, Clone)]
pub(super) struct Cached {
    pub tid: Tid,
    pub rev: Revision,
    pub data: Option<Bytes>,
}

pub(super) struct RecordCache {
    entries: Option<foyer::Cache<Oid, Cached>>,
    epoch: std::sync::atomic::AtomicU64,
    lock: parking_lot::Mutex<()>,
}

impl std::fmt::Debug for RecordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCache")
            .field("bytes", &self.entries.as_ref().map(|c| c.usage()))
            .finish_non_exhaustive()
    }
}

/// What a load saw of the cache before reading the key-value store.
#[derive(Debug, Clone, Copy)]
pub(super) struct Epoch(u64);

impl RecordCache {
    /// A cache of `bytes` (0: none).
    pub fn new(bytes: usize) -> Self {
        RecordCache {
            entries: (bytes > 0).then(|| {
                foyer::CacheBuilder::new(bytes)
                    .with_shards(8)
                    .with_weighter(|_: &Oid, v: &Cached| {
                        // The key, the revision and the entry's own bookkeeping.
                        128 + v.data.as_ref().map_or(0, |d| d.len())
                    })
                    .build()
            }),
            epoch: std::sync::atomic::AtomicU64::new(0),
            lock: parking_lot::Mutex::new(()),
        }
    }

    pub fn get(&self, oid: Oid) -> Option<Cached> {
        self.entries.as_ref()?.get(&oid).map(|e| e.value().clone())
    }

    pub fn epoch(&self) -> Epoch {
        Epoch(self.epoch.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Caches what a load read, unless the cache changed since `seen`.
    pub fn fill(&self, seen: Epoch, oid: Oid, entry: Cached) {
        let Some(c) = &self.entries else { return };
        let _g = self.lock.lock();
        if self.epoch.load(std::sync::atomic::Ordering::Acquire) == seen.0 {
            c.insert(oid, entry);
        }
    }

    /// A commit's revisions (with their data when known), replacing what was cached.
    pub fn committed(&self, revisions: impl IntoIterator<Item = (Oid, Cached)>) {
        let Some(c) = &self.entries else { return };
        let _g = self.lock.lock();
        for (oid, entry) in revisions {
            c.insert(oid, entry);
        }
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Forgets `oids` (changed by transactions a follower caught up with).
    pub fn forget(&self, oids: impl IntoIterator<Item = Oid>) {
        let Some(c) = &self.entries else { return };
        let _g = self.lock.lock();
        for oid in oids {
            c.remove(&oid);
        }
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    pub fn clear(&self) {
        let Some(c) = &self.entries else { return };
        let _g = self.lock.lock();
        c.clear();
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl VersionedStore {
    /// A follower caught up from `from` to `to`: forgets the objects the transactions in
    /// between wrote (all of the cache when there are many).
    pub(super) async fn invalidate_between(&self, from: Tid, to: Tid) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        let range = (
            Bound::Excluded(records::wrote_key(from, Oid(u64::MAX))),
            Bound::Included(records::wrote_key(to, Oid(u64::MAX))),
        );
        let wrote = self
            .kv
            .scan(range, Some(REFRESH_INVALIDATE_MAX + 1))
            .await?;
        if wrote.len() > REFRESH_INVALIDATE_MAX {
            self.cache.clear();
        } else {
            self.cache.forget(
                wrote
                    .iter()
                    .filter_map(|(k, _)| records::parse_wrote_key(k).map(|(_, oid)| oid)),
            );
        }
        Ok(())
    }
}
