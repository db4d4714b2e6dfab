//! Importing a ZODB FileStorage (`Data.fs` and its blob directory), read natively: the one
//! import the command line (`tierdb zodb import`) and the Python package
//! (`tierdb.tool import`) share.
//!
//! The whole file is checked first ([`check_filestorage`], before the destination is opened),
//! so damage anywhere stops the import before anything is created or committed. Transactions keep their tids and are committed in groups of about
//! [`ImportOptions::group_bytes`], each group one durable commit; an interrupted import
//! loses at most the group in flight, and rerunning it continues after the store's last
//! transaction (a store that already holds transactions up to tid T skips every source
//! transaction at or before T).

use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, ObjError, Result};
use crate::filestorage::{FsReader, FsTxn};
use crate::ids::{Oid, Tid};
use crate::store::{ImportState, RestoreStats, Txn, VersionedStore};

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The FileStorage's blob directory, when it has blobs.
    pub blob_dir: Option<PathBuf>,
    /// Transactions are committed in groups of about this many bytes of the source.
    pub group_bytes: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            blob_dir: None,
            group_bytes: 8 << 20,
        }
    }
}

/// Where an import is, for a progress display. Every method has an empty default.
pub trait ImportProgress: Sync {
    /// The check pass has read `position` of `len` bytes.
    fn checking(&self, _position: u64, _len: u64) {}
    /// The store already holds transactions up to `tid`: the import continues after it.
    fn resuming(&self, _tid: Tid) {}
    /// The import has read `position` of `len` bytes and committed `txns` transactions.
    fn importing(&self, _position: u64, _len: u64, _txns: u64) {}
}

/// No progress display.
impl ImportProgress for () {}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub transactions: u64,
    pub records: u64,
    /// Source transactions the store already held (an earlier, interrupted import).
    pub skipped: u64,
    /// Bytes of the source read.
    pub bytes_read: u64,
    /// What the imported records added to the store: bytes before and after dedup and
    /// compression.
    pub stored: RestoreStats,
}

/// Reads the whole FileStorage at `src` and checks every transaction, without importing
/// anything. Call it before opening (or creating) the destination, so that a damaged
/// source leaves nothing behind; [`import_filestorage`] expects a checked source.
pub fn check_filestorage(src: &Path, progress: &dyn ImportProgress) -> Result<u64> {
    let mut check = FsReader::open(src)?;
    let mut txns = 0;
    while check.next_txn()?.is_some() {
        txns += 1;
        progress.checking(check.position(), check.len());
    }
    Ok(txns)
}

/// Imports the FileStorage at `src`, checked by [`check_filestorage`], into `store` (see
/// the module doc for the guarantees). A damaged transaction found here all the same (the
/// file changed since the check) stops the import after the groups already committed.
pub async fn import_filestorage(
    store: &VersionedStore,
    src: &Path,
    options: &ImportOptions,
    progress: &dyn ImportProgress,
) -> Result<ImportReport> {
    let layout = match &options.blob_dir {
        Some(d) if !d.is_dir() => {
            return Err(ObjError::Invalid(format!(
                "blob directory {}: not a directory; give the FileStorage's blob directory",
                d.display()
            )));
        }
        Some(d) => std::fs::read_to_string(d.join(".layout"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "bushy".into()),
        None => String::new(),
    };
    let resume_after = store.last_tid();
    if resume_after != Tid::ZERO {
        progress.resuming(resume_after);
    }
    let len = std::fs::metadata(src).map(|m| m.len()).unwrap_or(0);
    // About one record per 100 bytes of a Data.fs (headers included).
    let mut state = ImportState::new(store, len / 100);
    let mut report = ImportReport::default();
    // Reading, parsing, hashing and compressing run on their own threads, a group ahead of
    // the commits (which write each group as one durable key-value commit, in order).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Group>>(2);
    let reader = {
        let src = src.to_path_buf();
        let blob_dir = options.blob_dir.clone();
        let group_bytes = options.group_bytes;
        tokio::task::spawn_blocking(move || {
            let sent = read_groups(
                &src,
                blob_dir.as_deref(),
                &layout,
                group_bytes,
                resume_after,
                &tx,
            );
            if let Err(e) = sent {
                let _ = tx.blocking_send(Err(e));
            }
        })
    };
    let mut failed = None;
    while let Some(group) = rx.recv().await {
        let group = match group {
            Ok(g) => g,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        report.skipped += group.skipped;
        report.records += group.records;
        if !group.txns.is_empty() {
            let n = group.txns.len() as u64;
            match store.restore_many_with(group.txns, Some(&mut state)).await {
                Ok((_, stored)) => {
                    report.transactions += n;
                    report.stored += stored;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        report.bytes_read = group.position;
        progress.importing(group.position, len, report.transactions);
    }
    drop(rx);
    let _ = reader.await;
    match failed {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// A group of transactions, read and prepared, for one commit.
struct Group {
    txns: Vec<Txn>,
    records: u64,
    skipped: u64,
    /// Where the reader is in the file after this group.
    position: u64,
}

/// Reads the file into groups of about `group_bytes`, prepares each (hash and compress on
/// every core) and sends it; stops when the receiver is gone.
fn read_groups(
    src: &Path,
    blob_dir: Option<&Path>,
    layout: &str,
    group_bytes: u64,
    resume_after: Tid,
    tx: &tokio::sync::mpsc::Sender<Result<Group>>,
) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut reader = FsReader::open(src)?;
    loop {
        let mut group = Group {
            txns: Vec::new(),
            records: 0,
            skipped: 0,
            position: 0,
        };
        let mut size = 0u64;
        let mut done = false;
        while size < group_bytes {
            match reader.next_txn()? {
                Some(t) if t.tid <= resume_after => group.skipped += 1,
                Some(t) => {
                    size += t.bytes;
                    group.records += t.records.len() as u64;
                    group.txns.push(to_txn(t, blob_dir, layout)?);
                }
                None => {
                    done = true;
                    break;
                }
            }
        }
        prepare_all(&mut group.txns, threads)?;
        group.position = reader.position();
        if tx.blocking_send(Ok(group)).is_err() || done {
            return Ok(());
        }
    }
}

/// Hashes and compresses the records of `txns` on `threads` threads.
fn prepare_all(txns: &mut [Txn], threads: usize) -> Result<()> {
    let per = txns.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = txns
            .chunks_mut(per)
            .map(|chunk| s.spawn(move || chunk.iter_mut().try_for_each(Txn::prepare)))
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(ObjError::Invalid("a prepare thread panicked".into())))
        })
    })
}

/// ZODB's blob file name of a revision: its tid as ZODB's `tid_repr` writes it.
fn zodb_repr(v: u64) -> String {
    let hex = format!("{v:x}");
    if hex.len() % 2 == 1 {
        format!("0x0{hex}")
    } else {
        format!("0x{hex}")
    }
}

/// Where a FileStorage blob directory keeps the blob of (oid, tid), in its layout.
fn blob_file(dir: &Path, layout: &str, oid: Oid, tid: Tid) -> PathBuf {
    let name = format!("{}.blob", zodb_repr(tid.0));
    if layout == "lawn" {
        dir.join(zodb_repr(oid.0)).join(name)
    } else {
        let mut p = dir.to_path_buf();
        for b in oid.to_bytes() {
            p.push(format!("0x{b:02x}"));
        }
        p.join(name)
    }
}

/// A record whose class is ZODB.blob.Blob (what ZODB's is_blob_record decides): its class
/// pickle names it with GLOBAL (protocols 0-3) or with two short strings (4 and later).
fn is_blob_record(data: &[u8]) -> bool {
    let head = &data[..data.len().min(64)];
    let has = |pat: &[u8]| head.windows(pat.len()).any(|w| w == pat);
    has(b"cZODB.blob\nBlob\n") || (has(b"\x8c\x09ZODB.blob") && has(b"\x8c\x04Blob"))
}

fn to_txn(t: FsTxn, blob_dir: Option<&Path>, layout: &str) -> Result<Txn> {
    let mut txn = Txn::restoring(t.meta, t.tid);
    for r in t.records {
        let blob = match &r.data {
            Some(d) if is_blob_record(d) => Some(match blob_dir {
                None => {
                    return Err(ObjError::Invalid(format!(
                        "object {} in transaction {} is a blob: give the FileStorage's blob \
                         directory (--blob-dir); nothing of this group was committed",
                        r.oid, t.tid
                    )));
                }
                Some(dir) => {
                    let mut f = blob_file(dir, layout, r.oid, t.tid);
                    if !f.is_file()
                        && let Some(from) = r.data_txn
                    {
                        f = blob_file(dir, layout, r.oid, from);
                    }
                    if !f.is_file() {
                        return Err(ObjError::Blob {
                            oid: r.oid,
                            tid: t.tid,
                            kind: ErrorKind::NotFound,
                            reason: format!(
                                "the FileStorage's blob file {} does not exist; nothing of \
                                 this group was committed",
                                f.display()
                            ),
                        });
                    }
                    f
                }
            }),
            _ => None,
        };
        match (r.data, blob) {
            (Some(d), Some(f)) => txn.restore_blob(r.oid, d, f),
            (data, _) => txn.restore(r.oid, data, r.data_txn),
        }
    }
    Ok(txn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_files_follow_zodbs_layouts() {
        let dir = Path::new("/b");
        let (oid, tid) = (Oid(0x1234), Tid(0x3a5f));
        assert_eq!(
            blob_file(dir, "lawn", oid, tid),
            PathBuf::from("/b/0x1234/0x3a5f.blob")
        );
        assert_eq!(
            blob_file(dir, "bushy", oid, tid),
            PathBuf::from("/b/0x00/0x00/0x00/0x00/0x00/0x00/0x12/0x34/0x3a5f.blob")
        );
        assert_eq!(zodb_repr(0xabc), "0x0abc");
    }

    #[test]
    fn blob_records_are_recognized_in_every_pickle_protocol() {
        assert!(is_blob_record(b"cZODB.blob\nBlob\nq\x01."));
        assert!(is_blob_record(
            b"\x80\x04\x8c\x09ZODB.blob\x94\x8c\x04Blob\x94"
        ));
        assert!(!is_blob_record(b"cpersistent.mapping\nPersistentMapping\n"));
    }
}
