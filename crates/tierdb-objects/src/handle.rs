//! Writing through a [`KvHandle`]: a follower (a read-only open) refuses with
//! [`ObjError::ReadOnly`].

use tierdb_kv::{Batch, KvHandle, KvWrite};

use crate::error::{ObjError, Result};

/// Commits `batch` durably; a read-only open refuses.
pub(crate) async fn commit(kv: &KvHandle, batch: Batch) -> Result<()> {
    match kv.writer() {
        Some(w) => {
            w.commit(batch).await?;
            Ok(())
        }
        None => Err(ObjError::ReadOnly {
            db: kv.name().to_string(),
        }),
    }
}

/// Writes `batch` without waiting for durability: the next [`commit`] makes it durable with
/// itself (see `KvDb::write_buffered`); a read-only open refuses.
pub(crate) async fn write_buffered(kv: &KvHandle, batch: Batch) -> Result<()> {
    match kv.writer() {
        Some(w) => {
            w.write_buffered(batch).await?;
            Ok(())
        }
        None => Err(ObjError::ReadOnly {
            db: kv.name().to_string(),
        }),
    }
}
