//! Whole-store reads as of one transaction, a page at a time: what SQL over a ZODB
//! database (`zodb.objects`, `zodb.revisions`, `zodb.transactions`, `zodb.blobs`) reads.
//!
//! Invariants:
//! 1. A cursor shows the store as of its tid `at`: revisions and transactions committed
//!    after it are skipped, so a scan that runs beside commits sees one state (pages are
//!    separate reads, and commits only add keys above `at`). A pack running meanwhile may
//!    remove what a later page would have shown.
//! 2. Memory is one page (plus one carried revision), whatever the store's size.
//! 3. Damage is an error naming the key, never a row made up or skipped.

use super::*;
use iter::Pages;

/// One revision as the SQL tables show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionRow {
    pub oid: Oid,
    pub tid: Tid,
    /// The previous revision's tid (`Tid::ZERO`: none).
    pub prev: Tid,
    /// The content hash of its data (`None`: no data, an undone creation).
    pub data: Option<Hash>,
    /// For data copied from another revision (undo): that revision's tid.
    pub data_txn: Option<Tid>,
    /// Its blob's content hash, for a ZODB blob.
    pub blob: Option<Hash>,
}

/// Revisions in (oid, tid) order as of one tid (invariant 1).
#[derive(Debug)]
pub struct RevisionCursor {
    pages: Pages,
    at: Tid,
}

/// The current revision of each object as of one tid, in oid order; objects whose
/// revision then had no data (an undone creation) are left out.
#[derive(Debug)]
pub struct ObjectCursor {
    revisions: RevisionCursor,
    /// The last revision seen of the oid the previous page ended in.
    carried: Option<RevisionRow>,
    done: bool,
}

/// A data record's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSizes {
    /// The pickle's length.
    pub raw: u64,
    /// The bytes stored (after compression).
    pub stored: u64,
}

impl VersionedStore {
    pub fn revision_cursor(&self, at: Tid) -> RevisionCursor {
        RevisionCursor {
            pages: Pages::new(prefix(records::revisions_prefix())),
            at,
        }
    }

    pub fn object_cursor(&self, at: Tid) -> ObjectCursor {
        ObjectCursor {
            revisions: self.revision_cursor(at),
            carried: None,
            done: false,
        }
    }

    /// The next page of revisions (`None` after the last).
    pub async fn next_revisions(&self, c: &mut RevisionCursor) -> Result<Option<Vec<RevisionRow>>> {
        let Some(page) = c.pages.next(&self.kv).await? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(page.len());
        for (k, v) in page {
            let (oid, tid) = records::parse_rev_key(&k).ok_or_else(|| ObjError::Damaged {
                key: hex(&k),
                reason: "not a revision key".into(),
            })?;
            if tid > c.at {
                continue;
            }
            let r = Revision::decode(&k, &v)?;
            out.push(RevisionRow {
                oid,
                tid,
                prev: r.prev,
                data: r.data,
                data_txn: r.data_txn,
                blob: r.blob,
            });
        }
        Ok(Some(out))
    }

    /// The next page of current revisions (`None` after the last).
    pub async fn next_objects(&self, c: &mut ObjectCursor) -> Result<Option<Vec<RevisionRow>>> {
        while !c.done {
            let page = self.next_revisions(&mut c.revisions).await?;
            let last_page = page.is_none();
            let mut out = Vec::new();
            for r in page.into_iter().flatten() {
                match c.carried.take() {
                    Some(prev) if prev.oid != r.oid => {
                        out.extend(Some(prev).filter(|p| p.data.is_some()));
                    }
                    _ => {}
                }
                c.carried = Some(r);
            }
            if last_page {
                c.done = true;
                out.extend(c.carried.take().filter(|p| p.data.is_some()));
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }

    /// The sizes of data record `h`, without reading its chunks.
    pub async fn data_sizes(&self, h: &Hash) -> Result<DataSizes> {
        let rec = self.data_record(h).await?;
        let stored = if rec.chunks == 0 {
            rec.inline.len() as u64
        } else {
            // All chunks but the last are full.
            let last = records::chunk_key(h, rec.chunks - 1);
            let tail = self.kv.get(&last).await?.ok_or_else(|| ObjError::Damaged {
                key: format!("c{}/{}", hex(h), rec.chunks - 1),
                reason: "missing chunk of a large record".into(),
            })?;
            u64::from(rec.chunks - 1) * CHUNK_BYTES as u64
                + records::decode_chunk(&last, &tail)?.len() as u64
        };
        Ok(DataSizes {
            raw: rec.raw_len,
            stored,
        })
    }

    /// Up to `limit` transaction records after `after` (from the first when `None`) up to
    /// and including `at`, oldest first, without their object records.
    pub async fn transaction_records(
        &self,
        after: Option<Tid>,
        at: Tid,
        limit: usize,
    ) -> Result<Vec<(Tid, TxnRecord)>> {
        let start = match after {
            Some(t) => Bound::Excluded(records::txn_key(t)),
            None => Bound::Included(records::txn_key(Tid::ZERO)),
        };
        let range = (start, Bound::Included(records::txn_key(at)));
        let mut out = Vec::new();
        for (k, v) in self.kv.scan(range, Some(limit.max(1))).await? {
            let tid = records::parse_txn_key(&k).ok_or_else(|| ObjError::Damaged {
                key: hex(&k),
                reason: "not a transaction key".into(),
            })?;
            out.push((tid, TxnRecord::decode(&k, &v)?));
        }
        Ok(out)
    }

    /// The size of the blob of revision (`oid`, `tid`), whose content hash is `h`.
    pub async fn blob_size(&self, oid: Oid, tid: Tid, h: &Hash) -> Result<u64> {
        self.blobs.size(h).await.map_err(|f| ObjError::Blob {
            oid,
            tid,
            kind: f.kind,
            reason: f.reason,
        })
    }
}

/// Whether the database `kv` holds an object store (a ZODB database was ever committed
/// to it), without opening one.
pub async fn holds_objects(kv: &KvHandle) -> Result<bool> {
    Ok(kv.get(&records::meta_key()).await?.is_some())
}
