//! Object metadata learned from the capacity store, so cached reads need no round trip.
//!
//! Consistency: an entry is trusted for `ttl` after it was learned. Writes, deletes, copies
//! and renames made through the tiered store replace or drop the entry at once, so this
//! process reads its own writes. A write made by another process becomes visible within
//! `ttl`; until then the old version's blocks may be served, but never a mix of versions,
//! because every block fetched for a version is fetched with `If-Match` on its e_tag.
//!
//! Objects under an immutable prefix (see `TierOptions::immutable_prefixes`) never change,
//! so their entries do not expire.
//!
//! A read that learns metadata while a write to the same path is in progress must not
//! install the older version after the write installed the newer one; each path hashes to
//! an epoch stripe that writes bump, and a read installs its result only if the stripe did
//! not move while it was reading.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use object_store::ObjectMeta;
use parking_lot::Mutex;

const STRIPES: usize = 64;
/// Entries held at most; the table is cleared when full (entries are cheap to relearn).
const ENTRIES_MAX: usize = 1 << 18;

#[derive(Debug)]
pub(crate) struct MetaCache {
    ttl: Duration,
    immutable_prefixes: Vec<String>,
    entries: Mutex<HashMap<String, (ObjectMeta, Instant)>>,
    epochs: [AtomicU64; STRIPES],
}

/// Taken before a read asks the capacity store; see the module docs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    stripe: usize,
    epoch: u64,
}

impl MetaCache {
    pub fn new(ttl: Duration, immutable_prefixes: Vec<String>) -> Self {
        Self {
            ttl,
            immutable_prefixes,
            entries: Mutex::new(HashMap::new()),
            epochs: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn stripe(path: &str) -> usize {
        let mut h = DefaultHasher::new();
        path.hash(&mut h);
        (h.finish() % STRIPES as u64) as usize
    }

    pub fn get(&self, path: &str) -> Option<ObjectMeta> {
        let entries = self.entries.lock();
        let (meta, at) = entries.get(path)?;
        (at.elapsed() < self.ttl || self.is_immutable(path)).then(|| meta.clone())
    }

    fn is_immutable(&self, path: &str) -> bool {
        self.immutable_prefixes
            .iter()
            .any(|prefix| path.starts_with(prefix.as_str()))
    }

    pub fn ticket(&self, path: &str) -> Ticket {
        let stripe = Self::stripe(path);
        Ticket {
            stripe,
            epoch: self.epochs[stripe].load(Ordering::Acquire),
        }
    }

    /// Installs metadata a read learned, unless a write raced with the read.
    pub fn learn(&self, ticket: Ticket, meta: &ObjectMeta) {
        if self.ttl.is_zero() && !self.is_immutable(meta.location.as_ref()) {
            return;
        }
        let mut entries = self.entries.lock();
        if self.epochs[ticket.stripe].load(Ordering::Acquire) != ticket.epoch {
            return;
        }
        Self::insert(&mut entries, meta.clone());
    }

    /// Installs metadata of a write made through this store.
    pub fn wrote(&self, meta: ObjectMeta) {
        let mut entries = self.entries.lock();
        self.epochs[Self::stripe(meta.location.as_ref())].fetch_add(1, Ordering::AcqRel);
        if !self.ttl.is_zero() || self.is_immutable(meta.location.as_ref()) {
            Self::insert(&mut entries, meta);
        }
    }

    pub fn forget(&self, path: &str) {
        let mut entries = self.entries.lock();
        self.epochs[Self::stripe(path)].fetch_add(1, Ordering::AcqRel);
        entries.remove(path);
    }

    fn insert(entries: &mut HashMap<String, (ObjectMeta, Instant)>, meta: ObjectMeta) {
        if entries.len() >= ENTRIES_MAX {
            entries.clear();
        }
        entries.insert(meta.location.as_ref().to_string(), (meta, Instant::now()));
    }
}
