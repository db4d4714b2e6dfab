//! Iteration: objects in oid order, transactions in tid order, prefetch.

use super::*;

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

    /// Reads the revisions of `oids` current before `before`, 32 at a time, so they are in
    /// the caches (DRAM tier, block cache) when asked for: ZODB's `prefetch`. Returns how
    /// many were found; missing objects and errors are left for the real load to report.
    pub async fn prefetch(&self, oids: &[Oid], before: Tid) -> usize {
        use futures::StreamExt;
        futures::stream::iter(oids.iter().copied())
            .map(|oid| async move { matches!(self.load_before(oid, before).await, Ok(Some(_))) })
            .buffer_unordered(32)
            .filter(|found| std::future::ready(*found))
            .count()
            .await
    }

    /// Transactions with `start <= tid <= stop`, oldest first, with their records.
    pub async fn transactions(&self, start: Tid, stop: Tid) -> Result<Vec<TransactionInfo>> {
        let range = (
            Bound::Included(records::txn_key(start)),
            Bound::Included(records::txn_key(stop)),
        );
        let mut out = Vec::new();
        for (k, v) in self.kv.scan(range, None).await? {
            let Some(tid) = records::parse_txn_key(&k) else {
                continue;
            };
            let record = TxnRecord::decode(&k, &v)?;
            let mut recs = Vec::new();
            for (wk, _) in self
                .kv
                .scan(prefix(records::wrote_prefix(tid)), None)
                .await?
            {
                let Some((_, oid)) = records::parse_wrote_key(&wk) else {
                    continue;
                };
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
}
