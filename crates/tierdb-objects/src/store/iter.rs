//! Iteration: objects in oid order, transactions in tid order, prefetch.

use super::*;

/// The widest gap between two oids a prefetch reads with one scan of the head keys: the
/// keys between them (at most this many) are read and dropped.
pub const PREFETCH_GAP: u64 = 64;

/// One record of a transaction, as iteration shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRecordInfo {
    pub oid: Oid,
    pub tid: Tid,
    /// `None`: no data (an undone creation).
    pub data: Option<Bytes>,
    pub data_txn: Option<Tid>,
}

/// A transaction as iteration shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionInfo {
    pub tid: Tid,
    pub record: TxnRecord,
    pub records: Vec<DataRecordInfo>,
}

impl VersionedStore {
    /// The first object with an oid at or after `from` that has data in its current
    /// revision: (oid, tid, data). For ZODB's record_iternext.
    pub async fn next_object(&self, from: Oid) -> Result<Option<(Oid, Tid, Bytes)>> {
        let mut at = from;
        loop {
            let start = Bound::Included(records::rev_prefix(at));
            let end =
                prefix_end(&records::revisions_prefix()).map_or(Bound::Unbounded, Bound::Excluded);
            let Some((k, _)) = self
                .kv
                .scan((start, end), Some(1))
                .await?
                .into_iter()
                .next()
            else {
                return Ok(None);
            };
            let Some((oid, _)) = records::parse_rev_key(&k) else {
                return Err(ObjError::Damaged {
                    key: hex(&k),
                    reason: "not a revision key".into(),
                });
            };
            if let Some((tid, Revision { data: Some(h), .. })) = self.current(oid).await? {
                return Ok(Some((oid, tid, self.read_data(&h).await?)));
            }
            match oid.0.checked_add(1) {
                Some(n) => at = Oid(n),
                None => return Ok(None),
            }
        }
    }

    /// Reads the revisions of `oids` current before `before` into the record cache, so they
    /// are there when asked for: ZODB's `prefetch`. Returns how many were found; missing
    /// objects and errors are left for the real load to report.
    ///
    /// One batch, not one load per object: the oids are sorted and cut into runs of nearby
    /// oids (no gap over [`PREFETCH_GAP`]), each run's current revisions read by one scan
    /// of its head keys (small data comes with them), then every other revision's data by
    /// its hash, 32 reads at a time. An
    /// object whose current revision is not older than `before` (or a store without head
    /// keys) takes [`Self::load_before`].
    pub async fn prefetch(&self, oids: &[Oid], before: Tid) -> usize {
        use futures::StreamExt;
        let (mut want, mut cached) = (Vec::with_capacity(oids.len()), 0);
        for &oid in oids {
            match self.load_cached(oid) {
                Some((_, t)) if t < before => cached += 1,
                _ => want.push(oid),
            }
        }
        want.sort_unstable();
        want.dedup();
        let mut reads = Vec::new();
        let mut singly = Vec::new();
        let mut copied = 0;
        if self.meta.lock().heads {
            for run in want.chunk_by(|a, b| b.0 - a.0 <= PREFETCH_GAP) {
                let (first, last) = (run[0], run[run.len() - 1]);
                let seen = self.cache.epoch();
                let range = (
                    Bound::Included(records::head_key(first)),
                    Bound::Included(records::head_key(last)),
                );
                let Ok(heads) = self.kv.scan(range, None).await else {
                    singly.extend_from_slice(run);
                    continue;
                };
                // An oid of the run without a head key is missing: left for its load.
                for (k, v) in heads {
                    let Some(oid) = records::parse_head_key(&k) else {
                        continue;
                    };
                    if run.binary_search(&oid).is_err() {
                        continue;
                    }
                    match records::decode_head_data(&k, &v) {
                        // The head carries the data: into the cache, no further read.
                        Ok((tid, rev, Some(copy))) if tid < before => {
                            let Some(h) = rev.data else { continue };
                            match unpack(&h, &copy, copy.inline.clone()) {
                                Ok(data) => {
                                    let data = Some(data);
                                    self.cache.fill(seen, oid, cache::Cached { tid, rev, data });
                                    copied += 1;
                                }
                                Err(_) => singly.push(oid),
                            }
                        }
                        Ok((tid, rev, None)) if tid < before && rev.data.is_some() => {
                            reads.push((seen, oid, tid, rev))
                        }
                        _ => singly.push(oid),
                    }
                }
            }
        } else {
            singly = want;
        }
        let batched = futures::stream::iter(reads)
            .map(|(seen, oid, tid, rev)| async move {
                let Some(h) = rev.data else { return false };
                let Ok(data) = self.read_data(&h).await else {
                    return false;
                };
                let entry = cache::Cached {
                    tid,
                    rev,
                    data: Some(data),
                };
                self.cache.fill(seen, oid, entry);
                true
            })
            .buffer_unordered(32)
            .filter(|found| std::future::ready(*found))
            .count()
            .await;
        let single = futures::stream::iter(singly)
            .map(|oid| async move { matches!(self.load_before(oid, before).await, Ok(Some(_))) })
            .buffer_unordered(32)
            .filter(|found| std::future::ready(*found))
            .count()
            .await;
        cached + copied + batched + single
    }

    /// Transactions with `start <= tid <= stop`, oldest first, with their records. Reads
    /// them all: for tests and small ranges; iteration pages with [`Self::transactions_page`].
    pub async fn transactions(&self, start: Tid, stop: Tid) -> Result<Vec<TransactionInfo>> {
        let mut out = Vec::new();
        let mut from = start;
        loop {
            let page = self.transactions_page(from, stop, TXN_PAGE).await?;
            let Some(last) = page.last().map(|t| t.tid) else {
                return Ok(out);
            };
            out.extend(page);
            match last.0.checked_add(1) {
                Some(n) if Tid(n) <= stop => from = Tid(n),
                _ => return Ok(out),
            }
        }
    }

    /// Up to `limit` transactions with `start <= tid <= stop`, oldest first, with their
    /// records (ZODB's iterator reads the next page from the last tid + 1).
    pub async fn transactions_page(
        &self,
        start: Tid,
        stop: Tid,
        limit: usize,
    ) -> Result<Vec<TransactionInfo>> {
        let range = (
            Bound::Included(records::txn_key(start)),
            Bound::Included(records::txn_key(stop)),
        );
        let mut out = Vec::new();
        for (k, v) in self.kv.scan(range, Some(limit.max(1))).await? {
            let Some(tid) = records::parse_txn_key(&k) else {
                continue;
            };
            let record = TxnRecord::decode(&k, &v)?;
            let mut recs = Vec::new();
            for oid in self.written_by(tid).await? {
                let Some(rev) = self.revision(oid, tid).await? else {
                    continue;
                };
                let data = match rev.data {
                    Some(h) => Some(self.read_data(&h).await?),
                    None => None,
                };
                recs.push(DataRecordInfo {
                    oid,
                    tid,
                    data,
                    data_txn: rev.data_txn,
                });
            }
            out.push(TransactionInfo {
                tid,
                record,
                records: recs,
            });
        }
        Ok(out)
    }

    /// Up to `limit` transaction records with a tid below `before`, newest first, without
    /// their object records: what ZODB's undoLog shows, read no further than it asks.
    pub async fn transactions_desc(
        &self,
        before: Tid,
        limit: usize,
    ) -> Result<Vec<(Tid, TxnRecord)>> {
        let range = (
            Bound::Included(records::txn_key(Tid::ZERO)),
            Bound::Excluded(records::txn_key(before)),
        );
        let mut out = Vec::new();
        for (k, v) in self.kv.scan_desc(range, Some(limit.max(1))).await? {
            if let Some(tid) = records::parse_txn_key(&k) {
                out.push((tid, TxnRecord::decode(&k, &v)?));
            }
        }
        Ok(out)
    }

    /// The objects transaction `tid` wrote, in oid order.
    pub async fn written_by(&self, tid: Tid) -> Result<Vec<Oid>> {
        let mut out = Vec::new();
        let mut pages = Pages::new(prefix(records::wrote_prefix(tid)));
        while let Some(page) = pages.next(&self.kv).await? {
            out.extend(
                page.iter()
                    .filter_map(|(k, _)| records::parse_wrote_key(k).map(|(_, oid)| oid)),
            );
        }
        Ok(out)
    }
}

/// Transactions per page of [`VersionedStore::transactions`].
const TXN_PAGE: usize = 64;
/// Keys per page of a [`Pages`] scan.
pub(super) const SCAN_PAGE: usize = 1024;

/// A key range read a page at a time, so whole-store passes (pack, verify, stats) hold one
/// page in memory, not the store. Each page is a new scan from just after the last key of
/// the one before: keys written meanwhile behind the cursor are not seen, as a snapshot
/// would not see them either.
#[derive(Debug)]
pub(super) struct Pages {
    range: (Bound<Bytes>, Bound<Bytes>),
    done: bool,
}

impl Pages {
    pub fn new(range: (Bound<Bytes>, Bound<Bytes>)) -> Self {
        Pages { range, done: false }
    }

    /// The next page (`None` after the last).
    pub async fn next(&mut self, kv: &KvHandle) -> Result<Option<Vec<(Bytes, Bytes)>>> {
        if self.done {
            return Ok(None);
        }
        let page = kv.scan(self.range.clone(), Some(SCAN_PAGE)).await?;
        if page.len() < SCAN_PAGE {
            self.done = true;
        }
        match page.last() {
            Some((k, _)) => {
                self.range.0 = Bound::Excluded(k.clone());
                Ok(Some(page))
            }
            None => {
                self.done = true;
                Ok(None)
            }
        }
    }
}

/// Every object's revisions, oldest first, one object at a time in oid order, read a page
/// of keys at a time (pack's sweep and its dry run).
#[derive(Debug)]
pub(super) struct RevisionGroups {
    pages: Pages,
    page: std::collections::VecDeque<(Bytes, Bytes)>,
    group: Option<(Oid, Vec<(Tid, Revision)>)>,
    done: bool,
}

impl RevisionGroups {
    pub fn new() -> Self {
        RevisionGroups {
            pages: Pages::new(prefix(records::revisions_prefix())),
            page: Default::default(),
            group: None,
            done: false,
        }
    }

    /// The next object and its revisions (`None` after the last).
    pub async fn next(&mut self, kv: &KvHandle) -> Result<Option<(Oid, Vec<(Tid, Revision)>)>> {
        loop {
            let Some((k, v)) = self.page.pop_front() else {
                if !self.done {
                    match self.pages.next(kv).await? {
                        Some(p) => self.page.extend(p),
                        None => self.done = true,
                    }
                    continue;
                }
                return Ok(self.group.take());
            };
            let Some((oid, tid)) = records::parse_rev_key(&k) else {
                return Err(ObjError::Damaged {
                    key: hex(&k),
                    reason: "not a revision key".into(),
                });
            };
            let rev = Revision::decode(&k, &v)?;
            match &mut self.group {
                Some((g, revs)) if *g == oid => revs.push((tid, rev)),
                _ => {
                    if let Some(done) = self.group.replace((oid, vec![(tid, rev)])) {
                        return Ok(Some(done));
                    }
                }
            }
        }
    }
}
