//! Whole-store checks and statistics.

use std::collections::HashSet;

use super::iter::Pages;
use super::pack::{NoProgress, Progress};
use super::*;

/// Counts for `tierdb zodb stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub objects: u64,
    pub revisions: u64,
    pub transactions: u64,
    pub data_records: u64,
    /// Sum of the sizes of every revision's data (what a store without dedup would hold).
    pub logical_bytes: u64,
    /// Sum of raw sizes of the distinct data records.
    pub unique_bytes: u64,
    /// Bytes stored for the data records (after compression).
    pub stored_bytes: u64,
    /// Revisions with a blob, and the blobs stored (after a pack: the distinct blobs the
    /// revisions name).
    pub blob_revisions: u64,
    pub blobs: u64,
}

/// What `verify` checked and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub transactions: u64,
    pub revisions: u64,
    pub data_records: u64,
    pub data_bytes: u64,
    pub blobs: u64,
    pub problems: Vec<String>,
}

/// Data sizes a stats pass remembers from the data records (beyond it, a revision's size is
/// read again): a bound, so stats' memory does not grow with the store.
const SIZES_MAX: usize = 256 * 1024;
/// Transactions a verify pass remembers as present.
const TIDS_MAX: usize = 64 * 1024;

impl VersionedStore {
    /// Checks every record: transactions, revisions and data decode; every revision's
    /// transaction and data exist; every data record is complete and matches its hash;
    /// every blob exists. Returns what was checked and each problem found (empty when
    /// sound). Reads the store a page at a time (memory does not grow with it).
    pub async fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(&NoProgress).await
    }

    /// [`Self::verify`], reporting its passes to `progress`.
    pub async fn verify_with(&self, progress: &dyn Progress) -> Result<VerifyReport> {
        const MAX_PROBLEMS: usize = 1000;
        let mut r = VerifyReport::default();
        let problem = |r: &mut VerifyReport, p: String| {
            if r.problems.len() < MAX_PROBLEMS {
                r.problems.push(p);
            } else if r.problems.len() == MAX_PROBLEMS {
                r.problems.push("more problems not listed".into());
            }
        };
        progress.pass("transactions");
        let mut pages = Pages::new(prefix(records::transactions_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                r.transactions += 1;
                progress.advance(1);
                match (records::parse_txn_key(&k), TxnRecord::decode(&k, &v)) {
                    (Some(_), Ok(_)) => {}
                    (_, Err(e)) => problem(&mut r, e.to_string()),
                    (None, _) => problem(&mut r, format!("bad transaction key {}", hex(&k))),
                }
            }
        }
        progress.pass("data");
        let mut pages = Pages::new(prefix(records::data_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, _) in page {
                r.data_records += 1;
                progress.advance(1);
                let Some(h) = records::parse_data_key(&k) else {
                    problem(&mut r, format!("bad data key {}", hex(&k)));
                    continue;
                };
                match self.read_data(&h).await {
                    Ok(d) => r.data_bytes += d.len() as u64,
                    Err(e) => problem(&mut r, e.to_string()),
                }
            }
        }
        progress.pass("revisions");
        let mut tids: HashSet<Tid> = HashSet::new();
        let mut blobs: HashSet<Hash> = HashSet::new();
        let mut pages = Pages::new(prefix(records::revisions_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                r.revisions += 1;
                progress.advance(1);
                let Some((oid, tid)) = records::parse_rev_key(&k) else {
                    problem(&mut r, format!("bad revision key {}", hex(&k)));
                    continue;
                };
                let rev = match Revision::decode(&k, &v) {
                    Ok(rev) => rev,
                    Err(e) => {
                        problem(&mut r, e.to_string());
                        continue;
                    }
                };
                if !tids.contains(&tid) {
                    if self.kv.get(&records::txn_key(tid)).await?.is_none() {
                        problem(
                            &mut r,
                            format!(
                                "object {oid} revision {tid}: its transaction record is missing"
                            ),
                        );
                    } else {
                        if tids.len() >= TIDS_MAX {
                            tids.clear();
                        }
                        tids.insert(tid);
                    }
                }
                if let Some(h) = rev.data
                    && self.kv.get(&records::data_key(&h)).await?.is_none()
                {
                    problem(
                        &mut r,
                        format!(
                            "object {oid} revision {tid}: its data d{} is missing",
                            hex(&h)
                        ),
                    );
                }
                if let Some(b) = rev.blob
                    && !blobs.contains(&b)
                {
                    if blobs.len() >= TIDS_MAX {
                        blobs.clear();
                    }
                    blobs.insert(b);
                    r.blobs += 1;
                    if let Err(e) = self.blobs.exists(&b).await {
                        problem(
                            &mut r,
                            format!("object {oid} revision {tid}: blob {}", e.reason),
                        );
                    }
                }
            }
        }
        progress.pass("heads");
        // Every head names a revision that exists, with the same content (a head left
        // behind by an interrupted pack would name data a later pack deleted).
        let mut pages = Pages::new(prefix(Bytes::from_static(b"h")));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                progress.advance(1);
                let (tid, rev, copy) = match records::decode_head_data(&k, &v) {
                    Ok(h) => h,
                    Err(e) => {
                        problem(&mut r, e.to_string());
                        continue;
                    }
                };
                let Some(oid) = k.get(1..9).and_then(Oid::from_bytes) else {
                    problem(&mut r, format!("bad head key {}", hex(&k)));
                    continue;
                };
                match self.revision(oid, tid).await? {
                    Some(stored) if stored == rev => {}
                    Some(_) => problem(
                        &mut r,
                        format!("object {oid}: its head differs from its revision {tid}"),
                    ),
                    None => problem(
                        &mut r,
                        format!("object {oid}: its head names revision {tid}, which is missing"),
                    ),
                }
                if let (Some(copy), Some(h)) = (copy, rev.data)
                    && let Err(e) = unpack(&h, &copy, copy.inline.clone())
                {
                    problem(
                        &mut r,
                        format!("object {oid}: the data its head carries: {e}"),
                    );
                }
            }
        }
        Ok(r)
    }

    /// Object, revision, transaction and data counts with dedup and compression figures.
    /// Reads the store a page at a time (memory does not grow with it).
    pub async fn stats(&self) -> Result<StoreStats> {
        self.stats_with(&NoProgress).await
    }

    /// [`Self::stats`], reporting its passes to `progress`.
    pub async fn stats_with(&self, progress: &dyn Progress) -> Result<StoreStats> {
        let mut s = StoreStats::default();
        let mut sizes: HashMap<Hash, u64> = HashMap::new();
        progress.pass("data");
        let mut pages = Pages::new(prefix(records::data_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                let Some(h) = records::parse_data_key(&k) else {
                    continue;
                };
                progress.advance(1);
                let rec = DataRecord::decode(&k, &v)?;
                s.data_records += 1;
                s.unique_bytes += rec.raw_len;
                if rec.chunks == 0 {
                    s.stored_bytes += rec.inline.len() as u64;
                }
                if sizes.len() < SIZES_MAX {
                    sizes.insert(h, rec.raw_len);
                }
            }
        }
        // Large records' chunks (their stored bytes).
        let mut pages = Pages::new(prefix(Bytes::from_static(b"c")));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                s.stored_bytes += records::decode_chunk(&k, &v)?.len() as u64;
            }
        }
        progress.pass("revisions");
        let mut last_oid = None;
        let mut pages = Pages::new(prefix(records::revisions_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            for (k, v) in page {
                let Some((oid, _)) = records::parse_rev_key(&k) else {
                    continue;
                };
                progress.advance(1);
                s.revisions += 1;
                if last_oid != Some(oid) {
                    s.objects += 1;
                    last_oid = Some(oid);
                }
                let rev = Revision::decode(&k, &v)?;
                if let Some(h) = rev.data {
                    s.logical_bytes += match sizes.get(&h) {
                        Some(n) => *n,
                        None => self.data_record(&h).await.map_or(0, |d| d.raw_len),
                    };
                }
                if rev.blob.is_some() {
                    s.blob_revisions += 1;
                }
            }
        }
        progress.pass("transactions");
        let mut pages = Pages::new(prefix(records::transactions_prefix()));
        while let Some(page) = pages.next(&self.kv).await? {
            s.transactions += page.len() as u64;
            progress.advance(page.len() as u64);
        }
        s.blobs = self
            .blobs
            .list()
            .await
            .map_err(|f| ObjError::Invalid(format!("listing blobs: {}", f.reason)))?
            .len() as u64;
        Ok(s)
    }
}
