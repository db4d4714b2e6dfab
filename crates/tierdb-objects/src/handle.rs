//! The key-value database an object store reads and writes: the writer, or a follower for
//! a read-only open (which writes nothing and fences nobody).

use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tierdb_kv::{Batch, KvDb, KvRead, KvReplica, KvResult, KvWrite};
use tierdb_store::TieredStore;

use crate::error::{ObjError, Result};

/// The writer of the database, or a read-only follower of it.
#[derive(Debug, Clone)]
pub enum KvHandle {
    Writer(Arc<KvDb>),
    Reader(Arc<KvReplica>),
}

impl KvHandle {
    pub fn store(&self) -> &TieredStore {
        match self {
            KvHandle::Writer(w) => w.store(),
            KvHandle::Reader(r) => r.store(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            KvHandle::Writer(w) => w.name(),
            KvHandle::Reader(r) => r.name(),
        }
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self, KvHandle::Reader(_))
    }

    /// Commits `batch` durably; a read-only open refuses.
    pub async fn commit(&self, batch: Batch) -> Result<()> {
        match self {
            KvHandle::Writer(w) => {
                w.commit(batch).await?;
                Ok(())
            }
            KvHandle::Reader(r) => Err(ObjError::ReadOnly {
                db: r.name().to_string(),
            }),
        }
    }

    pub async fn close(&self) -> Result<()> {
        match self {
            KvHandle::Writer(w) => Ok(w.close().await?),
            KvHandle::Reader(r) => Ok(r.close().await?),
        }
    }
}

#[async_trait]
impl KvRead for KvHandle {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Bytes>> {
        match self {
            KvHandle::Writer(w) => w.get(key).await,
            KvHandle::Reader(r) => r.get(key).await,
        }
    }

    async fn scan(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> KvResult<Vec<(Bytes, Bytes)>> {
        match self {
            KvHandle::Writer(w) => w.scan(range, limit).await,
            KvHandle::Reader(r) => r.scan(range, limit).await,
        }
    }

    async fn scan_desc(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> KvResult<Vec<(Bytes, Bytes)>> {
        match self {
            KvHandle::Writer(w) => w.scan_desc(range, limit).await,
            KvHandle::Reader(r) => r.scan_desc(range, limit).await,
        }
    }
}
