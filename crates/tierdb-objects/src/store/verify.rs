//! Whole-store checks and statistics.

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
    /// Revisions with a blob, and the distinct blobs they name.
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

impl VersionedStore {
    /// Checks every record: transactions, revisions and data decode; every revision's
    /// transaction exists; every data record is complete and matches its hash; every blob
    /// exists. Returns what was checked and each problem found (empty when sound).
    pub async fn verify(&self) -> Result<VerifyReport> {
        let mut r = VerifyReport::default();
        let mut tids = BTreeSet::new();
        for (k, v) in self
            .kv
            .scan(prefix(records::transactions_prefix()), None)
            .await?
        {
            r.transactions += 1;
            match (records::parse_txn_key(&k), TxnRecord::decode(&k, &v)) {
                (Some(t), Ok(_)) => {
                    tids.insert(t);
                }
                (_, Err(e)) => r.problems.push(e.to_string()),
                (None, _) => r.problems.push(format!("bad transaction key {}", hex(&k))),
            }
        }
        let mut checked: BTreeSet<Hash> = BTreeSet::new();
        let mut blobs: BTreeSet<Hash> = BTreeSet::new();
        for (k, v) in self
            .kv
            .scan(prefix(records::revisions_prefix()), None)
            .await?
        {
            r.revisions += 1;
            let Some((oid, tid)) = records::parse_rev_key(&k) else {
                r.problems.push(format!("bad revision key {}", hex(&k)));
                continue;
            };
            let rev = match Revision::decode(&k, &v) {
                Ok(rev) => rev,
                Err(e) => {
                    r.problems.push(e.to_string());
                    continue;
                }
            };
            if !tids.contains(&tid) {
                r.problems.push(format!(
                    "object {oid} revision {tid}: its transaction record is missing"
                ));
            }
            if let Some(h) = rev.data
                && checked.insert(h)
            {
                r.data_records += 1;
                match self.read_data(&h).await {
                    Ok(d) => r.data_bytes += d.len() as u64,
                    Err(e) => r.problems.push(format!("object {oid} revision {tid}: {e}")),
                }
            }
            if let Some(b) = rev.blob
                && blobs.insert(b)
            {
                r.blobs += 1;
                if let Err(e) = self.blobs.exists(&b).await {
                    r.problems
                        .push(format!("object {oid} revision {tid}: blob {}", e.reason));
                }
            }
        }
        Ok(r)
    }

    /// Object, revision, transaction and data counts with dedup and compression figures.
    pub async fn stats(&self) -> Result<StoreStats> {
        let mut s = StoreStats::default();
        let mut sizes: HashMap<Hash, u64> = HashMap::new();
        for (k, v) in self.kv.scan(prefix(records::data_prefix()), None).await? {
            let Some(h) = records::parse_data_key(&k) else {
                continue;
            };
            let rec = DataRecord::decode(&k, &v)?;
            s.data_records += 1;
            s.unique_bytes += rec.raw_len;
            s.stored_bytes += if rec.chunks == 0 {
                rec.inline.len() as u64
            } else {
                let mut n = 0;
                for i in 0..rec.chunks {
                    let key = records::chunk_key(&h, i);
                    if let Some(c) = self.kv.get(&key).await? {
                        n += records::decode_chunk(&key, &c)?.len() as u64;
                    }
                }
                n
            };
            sizes.insert(h, rec.raw_len);
        }
        let mut last_oid = None;
        let mut blobs = BTreeSet::new();
        for (k, v) in self
            .kv
            .scan(prefix(records::revisions_prefix()), None)
            .await?
        {
            let Some((oid, _)) = records::parse_rev_key(&k) else {
                continue;
            };
            s.revisions += 1;
            if last_oid != Some(oid) {
                s.objects += 1;
                last_oid = Some(oid);
            }
            let rev = Revision::decode(&k, &v)?;
            if let Some(h) = rev.data {
                s.logical_bytes += sizes.get(&h).copied().unwrap_or(0);
            }
            if let Some(b) = rev.blob {
                s.blob_revisions += 1;
                blobs.insert(b);
            }
        }
        s.blobs = blobs.len() as u64;
        s.transactions = self
            .kv
            .scan(prefix(records::transactions_prefix()), None)
            .await?
            .len() as u64;
        Ok(s)
    }
}
