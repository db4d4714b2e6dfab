//! DDL in a transaction block, undone by ROLLBACK: each catalog commit a statement of an
//! open transaction makes (CREATE, DROP, ALTER, RENAME, COMMENT, CREATE INDEX, …) also
//! writes, in the same KV batch, one *undo record* per key it changes: the key, its value
//! before and its value after. The records are the way back; COMMIT forgets them, ROLLBACK
//! follows them.
//!
//! Invariants:
//!
//! 1. A catalog commit made inside a transaction and its undo records are one KV batch:
//!    no change is ever stored without its way back ([`record`]).
//! 2. COMMIT deletes the transaction's records in the batch that commits its writes
//!    (`txn.rs`): the DDL and the writes become permanent together.
//! 3. ROLLBACK, ROLLBACK TO SAVEPOINT (the records since it), a COMMIT that fails and a
//!    session that ends inside its transaction put every key back as it was before the
//!    transaction first changed it, in one batch that also deletes the records
//!    ([`Tables::undo_ddl`]). A key the transaction created is deleted; a key that
//!    existed before is restored only if it still holds what this transaction last wrote:
//!    one another session changed since is left as it is and named in a warning (no lost
//!    update of someone else's definition).
//! 4. Undoing the creation of a table also removes what others put in it meanwhile (its
//!    segments, which are retired for VACUUM, and its rows and index entries): nothing is
//!    left that names a table that does not exist.
//! 5. Opening a database as its writer rolls back every record left by a process that
//!    ended with transactions open ([`recover`]), as PostgreSQL's recovery aborts them.
//! 6. VACUUM keeps every file a record's before-image names, and the Delta log of every
//!    table one names ([`held`]): a dropped table's segments can come back.
//!
//! 7. No other transaction commits writes to a table whose definition an open
//!    transaction has changed (created, altered, renamed, …): its rows or segments would be
//!    made for a definition that ROLLBACK then takes back (a row of three columns in a table
//!    of two reads as damaged; rows in a table whose creation is undone go with it). Each
//!    catalog key a transaction's DDL changes is noted in [`PendingDdl`] before its commit
//!    and forgotten when the transaction ends; a commit writing such a table of another
//!    transaction fails with 40001 and writes nothing ([`PendingDdl::check`]), so clients
//!    retry once the DDL's transaction has ended.
//!
//! Not isolated: other sessions see a transaction's DDL as soon as its statement ends (as
//! they would after COMMIT), not only after COMMIT; PostgreSQL makes them wait instead.
//! Invariant 7 keeps that from losing their writes.
//!
//! The record (`Tu` + transaction id (u64 BE) + sequence number (u64 BE)):
//!
//! | bytes | field |
//! |-------|-------|
//! | 1     | [`RECORD_VERSION`] |
//! | 4     | key length K (u32 BE) |
//! | K     | the key |
//! | 1     | 1 if the key had a value before, else 0 |
//! | 4 + B | before: its length (u32 BE), then the value (absent if the flag is 0) |
//! | 1     | 1 if the commit left a value, else 0 |
//! | 4 + A | after: its length (u32 BE), then the value (absent if the flag is 0) |

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use tierdb_kv::{Batch, KvRead, Op};

use crate::catalog::{self, SegmentMeta, TableDef};
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// The first byte of every undo record's value.
pub const RECORD_VERSION: u8 = 1;

const PREFIX: &[u8] = b"Tu";

tokio::task_local! {
    /// The transaction whose statement is running in this task: catalog commits made
    /// while it is set are recorded (invariant 1).
    static RECORDING: Arc<Recorder>;
}

/// One transaction's undo records: its id and the next record's number.
#[derive(Debug)]
pub struct Recorder {
    txn: u64,
    next: AtomicU64,
}

impl Default for Recorder {
    fn default() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        // Unique among this process's transactions and, by the clock, among the records
        // an earlier process left (which opening rolls back before any session starts).
        let n = COUNTER.fetch_add(1, Ordering::Relaxed) & 0xFFFF;
        Recorder {
            txn: (tierdb_kv::lease::now_ms() << 16) | n,
            next: AtomicU64::new(0),
        }
    }
}

impl Recorder {
    /// How many records there are: what a savepoint remembers.
    pub fn mark(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// Whether a catalog commit was recorded (the transaction changed a definition).
    pub fn recorded(&self) -> bool {
        self.mark() > 0
    }

    pub fn txn(&self) -> u64 {
        self.txn
    }
}

/// Runs `work` with catalog commits recorded for `recorder`'s transaction.
pub async fn recording<T>(recorder: Arc<Recorder>, work: impl Future<Output = T>) -> T {
    RECORDING.scope(recorder, work).await
}

/// The transaction whose catalog commits are recorded here, if any.
fn current() -> Option<Arc<Recorder>> {
    RECORDING.try_with(Arc::clone).ok()
}

/// The catalog keys each open transaction's DDL has changed (invariant 7).
#[derive(Debug, Default)]
pub struct PendingDdl(parking_lot::Mutex<std::collections::HashMap<u64, HashSet<Bytes>>>);

impl PendingDdl {
    /// Notes the keys `batch` changes, if a transaction's statement is making it; before
    /// the batch is committed, so no commit can come between it and the note.
    pub(crate) fn note(&self, batch: &Batch) {
        let Some(recorder) = current() else {
            return;
        };
        let mut pending = self.0.lock();
        let keys = pending.entry(recorder.txn).or_default();
        for op in batch.ops() {
            let (Op::Put(k, _) | Op::Delete(k)) = op;
            if !catalog::is_unrecorded_key(k) && !k.starts_with(PREFIX) {
                keys.insert(k.clone());
            }
        }
    }

    /// Forgets transaction `txn`'s keys: it committed or rolled back.
    pub(crate) fn forget(&self, txn: u64) {
        self.0.lock().remove(&txn);
    }

    /// Fails with 40001 if another transaction than `own` has an uncommitted change of the
    /// definition of one of `tables` (invariant 7).
    pub(crate) fn check<'a>(
        &self,
        tables: impl IntoIterator<Item = &'a str>,
        own: Option<u64>,
    ) -> Result<()> {
        let pending = self.0.lock();
        if pending.is_empty() {
            return Ok(());
        }
        for name in tables {
            let key = catalog::table_key(name);
            if pending
                .iter()
                .any(|(txn, keys)| Some(*txn) != own && keys.contains(&key))
            {
                return Err(TableError::Conflict(format!(
                    "the definition of {name} was changed by another transaction that has not \
                     ended (CREATE, ALTER, RENAME … inside BEGIN); nothing was committed, \
                     retry once it has committed or rolled back"
                )));
            }
        }
        Ok(())
    }
}

/// One key's change, as a record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Bytes,
    pub before: Option<Bytes>,
    pub after: Option<Bytes>,
}

fn record_key(txn: u64, seq: u64) -> Bytes {
    let mut k = BytesMut::with_capacity(PREFIX.len() + 16);
    k.put_slice(PREFIX);
    k.put_u64(txn);
    k.put_u64(seq);
    k.freeze()
}

fn txn_prefix(txn: u64) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&txn.to_be_bytes());
    k
}

impl Record {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u8(RECORD_VERSION);
        put_len(&mut out, &self.key);
        for v in [&self.before, &self.after] {
            match v {
                None => out.put_u8(0),
                Some(v) => {
                    out.put_u8(1);
                    put_len(&mut out, v);
                }
            }
        }
        out.freeze()
    }

    /// Decodes the value of record `key`; a value this build cannot read is `Damaged`.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self> {
        let damaged = |reason: &str| TableError::Damaged {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: format!("undo record: {reason}"),
        };
        let (&version, mut rest) = value.split_first().ok_or_else(|| damaged("empty"))?;
        if version != RECORD_VERSION {
            return Err(damaged(&format!(
                "version {version}, this build reads version {RECORD_VERSION}"
            )));
        }
        let mut take = |what: &str, flagged: bool| -> Result<Option<Bytes>> {
            if flagged {
                let (&flag, r) = rest.split_first().ok_or_else(|| damaged(what))?;
                rest = r;
                match flag {
                    0 => return Ok(None),
                    1 => {}
                    _ => return Err(damaged(&format!("{what}: flag {flag}"))),
                }
            }
            let (len, r) = rest.split_first_chunk::<4>().ok_or_else(|| damaged(what))?;
            let len = u32::from_be_bytes(*len) as usize;
            if r.len() < len {
                return Err(damaged(&format!("{what}: cut short")));
            }
            let (v, r) = r.split_at(len);
            rest = r;
            Ok(Some(Bytes::copy_from_slice(v)))
        };
        let key_bytes = take("key", false)?.ok_or_else(|| damaged("key"))?;
        let before = take("before", true)?;
        let after = take("after", true)?;
        if !rest.is_empty() {
            return Err(damaged("trailing bytes"));
        }
        Ok(Record {
            key: key_bytes,
            before,
            after,
        })
    }
}

/// Its length (u32 BE), then `v`. Keys and catalog values are far below 4 GiB.
fn put_len(out: &mut BytesMut, v: &[u8]) {
    out.put_u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
    out.put_slice(v);
}

/// Adds to `batch` the undo records of its changes when a transaction's statement is
/// making it (invariant 1); `reader` gives the values before. The commit stamp and the id
/// counter are not undone (ids stay unique).
pub(crate) async fn record(reader: &dyn KvRead, batch: &mut Batch) -> tierdb_kv::Result<()> {
    let Some(recorder) = current() else {
        return Ok(());
    };
    // The last change of each key in the batch is what it leaves.
    let mut last: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
    for op in batch.ops() {
        match op {
            Op::Put(k, v) => last.insert(k.clone(), Some(v.clone())),
            Op::Delete(k) => last.insert(k.clone(), None),
        };
    }
    for (key, after) in last {
        if catalog::is_unrecorded_key(&key) || key.starts_with(PREFIX) {
            continue;
        }
        let before = reader.get(&key).await?;
        if before == after {
            continue;
        }
        let seq = recorder.next.fetch_add(1, Ordering::AcqRel);
        let r = Record { key, before, after };
        batch.put(record_key(recorder.txn, seq), r.encode());
    }
    Ok(())
}

/// The records of transaction `txn` numbered `from` or later, oldest first, with their keys.
pub(crate) async fn records(
    reader: &dyn KvRead,
    txn: u64,
    from: u64,
) -> Result<Vec<(Bytes, Record)>> {
    let prefix = txn_prefix(txn);
    let start = std::ops::Bound::Included(record_key(txn, from));
    let end = tierdb_kv::prefix_end(&prefix)
        .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
    reader
        .scan((start, end), None)
        .await?
        .into_iter()
        .map(|(k, v)| Ok((k.clone(), Record::decode(&k, &v)?)))
        .collect()
}

/// Adds to `batch` the deletion of `txn`'s records (invariant 2).
pub(crate) async fn forget(reader: &dyn KvRead, txn: u64, batch: &mut Batch) -> Result<()> {
    for (k, _) in reader.scan_prefix(&txn_prefix(txn), None).await? {
        batch.delete(k);
    }
    Ok(())
}

/// What undoing a set of records takes: the batch, the keys it could not put back (another
/// session changed them since) and the sequences whose cached values must be forgotten.
#[derive(Debug, Default)]
pub(crate) struct Undo {
    pub batch: Batch,
    pub conflicts: Vec<String>,
    pub sequences: Vec<String>,
}

/// Plans undoing `recs` (oldest first) as invariants 3 and 4 say, reading the present
/// values through `reader`; the records themselves are deleted in the same batch.
pub(crate) async fn plan(reader: &dyn KvRead, recs: &[(Bytes, Record)]) -> Result<Undo> {
    let mut first_before: BTreeMap<&Bytes, &Option<Bytes>> = BTreeMap::new();
    let mut last_after: BTreeMap<&Bytes, &Option<Bytes>> = BTreeMap::new();
    for (_, r) in recs {
        first_before.entry(&r.key).or_insert(&r.before);
        last_after.insert(&r.key, &r.after);
    }
    // Tables that exist again after the undo (a rename's old name): what a new key of
    // theirs names is theirs, not a creation's.
    let mut restored = HashSet::new();
    for (key, before) in &first_before {
        if let Some(v) = before
            && catalog::is_table_key(key)
        {
            restored.insert(catalog::decode::<TableDef>(key, v)?.id);
        }
    }
    let mut undo = Undo::default();
    let now = tierdb_kv::lease::now_ms();
    for (key, before) in first_before {
        let now_value = reader.get(key).await?;
        let ours = last_after.get(key).copied().cloned().flatten();
        let created = before.is_none();
        if !created && now_value != ours {
            undo.conflicts.push(format!(
                "{}: another session changed it since",
                catalog::describe_key(key)
            ));
            continue;
        }
        if let Some(name) = catalog::sequence_name(key) {
            undo.sequences.push(name);
        }
        match before {
            Some(v) => {
                undo.batch.put(key.clone(), v.clone());
            }
            None if now_value.is_some() => {
                undo.batch.delete(key.clone());
                if let Some(v) = &now_value {
                    uncreate(reader, key, v, now, &restored, &mut undo.batch).await?;
                }
            }
            None => {}
        }
    }
    for (k, _) in recs {
        undo.batch.delete(k.clone());
    }
    Ok(undo)
}

/// What goes with a key this transaction created (invariant 4): a segment's file is
/// retired; a table's segments, rows and index entries go, unless the table is `restored`
/// under another name (the key was a rename's new name).
async fn uncreate(
    reader: &dyn KvRead,
    key: &[u8],
    value: &[u8],
    now_ms: u64,
    restored: &HashSet<u64>,
    batch: &mut Batch,
) -> Result<()> {
    let mut b = crate::catalog::CatalogBatch::default();
    if catalog::is_segment_key(key) {
        let seg: SegmentMeta = catalog::decode(key, value)?;
        b.retire(&seg, now_ms);
    } else if catalog::is_table_key(key) {
        let def: TableDef = catalog::decode(key, value)?;
        if restored.contains(&def.id) {
            return Ok(());
        }
        for seg in catalog::segments(reader, def.id).await? {
            b.delete_segment(def.id, seg.id);
            b.retire(&seg, now_ms);
        }
        let mut ranges = vec![crate::rows::table_range(def.id)];
        ranges.extend(
            def.indexes
                .iter()
                .map(|i| crate::rows::index::index_range(i.id)),
        );
        for range in ranges {
            for (k, _) in reader.scan(range, None).await? {
                b.batch.delete(k);
            }
        }
    }
    for op in b.batch.ops() {
        match op {
            Op::Put(k, v) => batch.put(k.clone(), v.clone()),
            Op::Delete(k) => batch.delete(k.clone()),
        };
    }
    Ok(())
}

/// What undo records could bring back (invariant 6): segment files, and the tables whose
/// Delta logs go with them.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub paths: HashSet<String>,
    pub tables: HashSet<u64>,
}

pub(crate) async fn held(reader: &dyn KvRead) -> Result<Held> {
    let mut held = Held::default();
    for (k, v) in reader.scan_prefix(PREFIX, None).await? {
        let r = Record::decode(&k, &v)?;
        let Some(before) = &r.before else { continue };
        if catalog::is_segment_key(&r.key) {
            let seg: SegmentMeta = catalog::decode(&r.key, before)?;
            held.paths.insert(seg.path);
        } else if catalog::is_table_key(&r.key) {
            let def: TableDef = catalog::decode(&r.key, before)?;
            held.tables.insert(def.id);
        }
    }
    Ok(held)
}

/// Rolls back every transaction whose records are left (invariant 5): run when a writer
/// opens, before any session. Returns how many transactions it rolled back.
pub async fn recover(kv: &tierdb_kv::KvDb) -> Result<usize> {
    let left = kv.scan_prefix(PREFIX, None).await?;
    let mut txns: Vec<u64> = left
        .iter()
        .filter_map(|(k, _)| k.get(2..10)?.try_into().ok().map(u64::from_be_bytes))
        .collect();
    txns.dedup();
    for &txn in &txns {
        let recs = records(kv, txn, 0).await?;
        let undo = plan(kv, &recs).await?;
        for c in &undo.conflicts {
            tracing::warn!(txn, key = %c, "an unfinished transaction's DDL was not undone: changed since");
        }
        use tierdb_kv::KvWrite;
        kv.commit(undo.batch).await?;
        tracing::info!(
            txn,
            changes = recs.len(),
            "rolled back the DDL of a transaction left open"
        );
    }
    Ok(txns.len())
}

impl Tables {
    /// Undoes the records of transaction `txn` numbered `from` or later (invariant 3) in
    /// one commit; returns what it could not undo, described for a warning.
    pub(crate) async fn undo_ddl(&self, txn: u64, from: u64) -> Result<Vec<String>> {
        let kv = self.kv_writer()?;
        // As a transaction's commit takes them: the row gate, then the commit lock.
        let _gate = self.row_state().gate.write().await;
        let _guard = self.commit_lock.lock().await;
        let recs = records(self.reader.as_ref(), txn, from).await?;
        if recs.is_empty() {
            return Ok(Vec::new());
        }
        let undo = plan(self.reader.as_ref(), &recs).await?;
        self.commit_unrecorded(kv, undo.batch).await?;
        for s in &undo.sequences {
            self.sequences.forget(s);
        }
        Ok(undo.conflicts)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip() {
        for (before, after) in [
            (None, Some(Bytes::from_static(b"x"))),
            (Some(Bytes::from_static(b"")), None),
            (
                Some(Bytes::from_static(b"old")),
                Some(Bytes::from_static(b"new")),
            ),
        ] {
            let r = Record {
                key: Bytes::from_static(b"Tnt\x00\xff"),
                before,
                after,
            };
            assert_eq!(Record::decode(b"k", &r.encode()).unwrap(), r);
        }
    }

    /// Fuzz (proptest): record values cut short, flipped or random decode to a record or a
    /// `Damaged` error; never a panic.
    #[test]
    fn decoding_never_panics() {
        use proptest::prelude::*;
        let good = Record {
            key: Bytes::from_static(b"Tnabc"),
            before: Some(Bytes::from_static(b"before")),
            after: None,
        }
        .encode()
        .to_vec();
        proptest!(ProptestConfig::with_cases(2000), |(
            noise in proptest::collection::vec(any::<u8>(), 0..64),
            cut in 0usize..40,
            flip in 0usize..40,
        )| {
            let _ = Record::decode(b"k", &noise);
            let _ = Record::decode(b"k", &good[..cut.min(good.len())]);
            let mut v = good.clone();
            let i = flip % v.len();
            v[i] ^= 0x5A;
            let _ = Record::decode(b"k", &v);
        });
    }

    #[test]
    fn record_keys_order_by_transaction_then_number() {
        assert!(record_key(1, 9) < record_key(2, 0));
        assert!(record_key(2, 1) < record_key(2, 256));
        assert!(record_key(2, 0).starts_with(&txn_prefix(2)));
    }
}
