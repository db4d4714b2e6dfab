//! [`KvHandle`]: an open database in one of its two roles, the writer or a follower.
//!
//! The engines above (the object store, the tables) take a handle and ask it whether they
//! may write; the facade (`tierdb-engine`) is what opens one.

use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use tierdb_store::TieredStore;

use crate::{KvDb, KvRead, KvReplica, Result};

/// An open database: its one writer, or a read-only follower that writes nothing and fences
/// nobody.
#[derive(Debug, Clone)]
pub enum KvHandle {
    Writer(Arc<KvDb>),
    Follower(Arc<KvReplica>),
}

impl KvHandle {
    pub fn store(&self) -> &TieredStore {
        match self {
            KvHandle::Writer(w) => w.store(),
            KvHandle::Follower(r) => r.store(),
        }
    }

    /// The name used in messages (usually the URL).
    pub fn name(&self) -> &str {
        match self {
            KvHandle::Writer(w) => w.name(),
            KvHandle::Follower(r) => r.name(),
        }
    }

    /// The database's prefix in its store.
    pub fn path(&self) -> &Path {
        match self {
            KvHandle::Writer(w) => w.path(),
            KvHandle::Follower(r) => r.path(),
        }
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self, KvHandle::Follower(_))
    }

    /// The writer, if this handle is one.
    pub fn writer(&self) -> Option<&Arc<KvDb>> {
        match self {
            KvHandle::Writer(w) => Some(w),
            KvHandle::Follower(_) => None,
        }
    }

    /// Closes the database (a writer flushes its WAL first). The store under it stays open:
    /// whoever opened the store closes it.
    pub async fn close(&self) -> Result<()> {
        match self {
            KvHandle::Writer(w) => w.close().await,
            KvHandle::Follower(r) => r.close().await,
        }
    }

    /// Gives the database up as a crash would (see [`KvDb::abandon`]); a follower has
    /// nothing to lose, and its store is abandoned too.
    pub async fn abandon(&self) {
        match self {
            KvHandle::Writer(w) => w.abandon().await,
            KvHandle::Follower(r) => r.store().abandon().await,
        }
    }
}

#[async_trait]
impl KvRead for KvHandle {
    async fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self {
            KvHandle::Writer(w) => w.get(key).await,
            KvHandle::Follower(r) => r.get(key).await,
        }
    }

    async fn scan(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        match self {
            KvHandle::Writer(w) => w.scan(range, limit).await,
            KvHandle::Follower(r) => r.scan(range, limit).await,
        }
    }

    async fn scan_desc(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        match self {
            KvHandle::Writer(w) => w.scan_desc(range, limit).await,
            KvHandle::Follower(r) => r.scan_desc(range, limit).await,
        }
    }
}
