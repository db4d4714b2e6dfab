//! # tierdb-kv: the key-value engine
//!
//! SlateDB (an LSM tree on object storage: WAL, memtables, SSTs, compaction) running on
//! tierdb's [`TieredStore`](tierdb_store::TieredStore), behind a small interface of tierdb's
//! own: [`KvRead`] (get, range and prefix scans) and [`KvWrite`] (atomic batches that are
//! durable when `commit` returns). The ZODB object store and the SQL catalog are built on it.
//!
//! - [`KvDb`]: the one writer of a database. Opening it fences the previous writer.
//! - [`KvSnapshot`]: a consistent read-only view.
//! - [`KvReplica`]: a read-only follower in any process, with bounded lag.
//! - [`clone_db`]: a zero-copy clone sharing its source's SSTs.
//! - [`KvHandle`]: the writer or a follower, as the engines above take it.
//!
//! Durability per write mode, fencing and what is lost when a device or node is lost:
//! docs/design/kv.md.

use std::ops::Bound;

use async_trait::async_trait;
use bytes::Bytes;

mod db;
mod error;
mod handle;
mod heartbeat;
pub mod lease;
pub mod marker;
mod options;
pub mod sealed;

pub use db::{DbShape, KvDb, KvReplica, KvSnapshot, clone_db};
pub use error::{ErrorKind, KvError, Result, Result as KvResult, ShowKey};
pub use handle::KvHandle;
pub use options::{Compression, KvOptions};

/// The SlateDB release the on-store format comes from (pinned exactly in Cargo.toml).
pub const SLATEDB_VERSION: &str = "0.18.0";

/// One change in a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put(Bytes, Bytes),
    Delete(Bytes),
}

/// Changes applied together: a reader sees all of them or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> &mut Self {
        self.ops.push(Op::Put(key.into(), value.into()));
        self
    }

    pub fn delete(&mut self, key: impl Into<Bytes>) -> &mut Self {
        self.ops.push(Op::Delete(key.into()));
        self
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
}

/// The upper bound of the keys starting with `prefix` (`None`: no bound).
pub fn prefix_end(prefix: &[u8]) -> Option<Bytes> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(Bytes::from(end));
        }
    }
    None
}

/// Whether a key range holds no key at all (SlateDB refuses such ranges; we answer them
/// with an empty result instead).
pub fn range_is_empty(range: &(Bound<Bytes>, Bound<Bytes>)) -> bool {
    use Bound::{Excluded, Included, Unbounded};
    match (&range.0, &range.1) {
        (Unbounded, _) | (_, Unbounded) => {
            // Only "< empty key" is empty among half-open ranges.
            matches!(&range.1, Excluded(e) if e.is_empty())
        }
        (Included(s), Included(e)) => s > e,
        (Included(s), Excluded(e)) | (Excluded(s), Included(e)) | (Excluded(s), Excluded(e)) => {
            s >= e
        }
    }
}

/// Reads, as every view of a database offers them.
#[async_trait]
pub trait KvRead: Send + Sync {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>>;

    /// Keys in `range`, ascending, at most `limit` of them.
    async fn scan(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> Result<Vec<(Bytes, Bytes)>>;

    /// Keys in `range`, descending (newest-first layouts: "the last key before X").
    async fn scan_desc(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> Result<Vec<(Bytes, Bytes)>>;

    /// Keys starting with `prefix`, ascending.
    async fn scan_prefix(
        &self,
        prefix: &[u8],
        limit: Option<usize>,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let start = Bound::Included(Bytes::copy_from_slice(prefix));
        let end = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        self.scan((start, end), limit).await
    }
}

/// Writes, offered by the writer of a database.
#[async_trait]
pub trait KvWrite: KvRead {
    /// Applies `batch` atomically; returns its sequence number once it is durable.
    async fn commit(&self, batch: Batch) -> Result<u64>;

    async fn put(&self, key: &[u8], value: &[u8]) -> Result<u64> {
        let mut b = Batch::new();
        b.put(Bytes::copy_from_slice(key), Bytes::copy_from_slice(value));
        self.commit(b).await
    }

    async fn delete(&self, key: &[u8]) -> Result<u64> {
        let mut b = Batch::new();
        b.delete(Bytes::copy_from_slice(key));
        self.commit(b).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ranges_are_recognized() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        use Bound::{Excluded, Included, Unbounded};
        assert!(range_is_empty(&(Included(b("a")), Excluded(b("a")))));
        assert!(range_is_empty(&(Included(b("b")), Included(b("a")))));
        assert!(range_is_empty(&(Excluded(b("a")), Included(b("a")))));
        assert!(range_is_empty(&(Unbounded, Excluded(b("")))));
        assert!(!range_is_empty(&(Included(b("a")), Included(b("a")))));
        assert!(!range_is_empty(&(Included(b("a")), Excluded(b("b")))));
        assert!(!range_is_empty(&(Unbounded, Unbounded)));
        assert!(!range_is_empty(&(Excluded(b("a")), Unbounded)));
    }

    #[test]
    fn prefix_end_skips_trailing_ff() {
        assert_eq!(prefix_end(b"ab"), Some(Bytes::from_static(b"ac")));
        assert_eq!(prefix_end(b"a\xff"), Some(Bytes::from_static(b"b")));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
