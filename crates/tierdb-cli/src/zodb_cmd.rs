//! `tierdb zodb …`: import a ZODB FileStorage (or any zodburi, through the Python package),
//! verify, pack and describe an object store.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytesize::ByteSize;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use tierdb_kv::{KvDb, KvReplica};
use tierdb_objects::filestorage::{FsReader, FsTxn};
use tierdb_objects::{Oid, Tid, Txn, VersionedStore};

use crate::CliResult;
use crate::kv_cmd::{KvArgs, open_store};

#[derive(Subcommand, Debug)]
pub enum ZodbCommand {
    /// Copy every transaction of SRC into the object store DST, keeping tids. SRC is a
    /// FileStorage file (Data.fs, read natively) or a zodburi URI (zeo://, zconfig://,
    /// file://…, copied through the tierdb Python package). DST is created when missing;
    /// when it holds a previous import of SRC, the import continues after its last
    /// transaction.
    Import {
        src: String,
        dst: String,
        /// The FileStorage's blob directory, when SRC has blobs.
        #[arg(long)]
        blob_dir: Option<PathBuf>,
        /// Transactions are committed in groups of about this many bytes (each group is
        /// one durable commit: an interrupted import loses at most the group in flight).
        #[arg(long, default_value = "8MiB")]
        group_bytes: ByteSize,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Check every record of DB: transactions, revisions, data (against its hash), blobs.
    /// Exits non-zero, listing the problems, when anything is damaged.
    Verify {
        db: String,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Remove the revisions not needed to read DB as of N days ago or later, and (unless
    /// --no-gc) the objects unreachable from the root then; their data and blobs go too.
    Pack {
        db: String,
        #[arg(long)]
        days: f64,
        /// Keep unreachable objects (no garbage collection).
        #[arg(long)]
        no_gc: bool,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Objects, revisions, transactions, and the dedup and compression ratios of DB.
    Stats {
        db: String,
        #[command(flatten)]
        kv: KvArgs,
    },
}

pub async fn run_zodb(cmd: ZodbCommand) -> CliResult {
    match cmd {
        ZodbCommand::Import {
            src,
            dst,
            blob_dir,
            group_bytes,
            kv,
        } => {
            if FsPath::new(&src).is_file() {
                import_filestorage(&src, &dst, blob_dir.as_deref(), group_bytes.as_u64(), &kv).await
            } else if src.contains("://") {
                import_uri(&src, &dst)
            } else {
                Err(format!(
                    "{src}: no such file; give a FileStorage file (Data.fs) or a zodburi URI \
                     (zeo://host:port, zconfig:///path/zope.conf, file:///path/Data.fs)"
                ))
            }
        }
        ZodbCommand::Verify { db, kv } => {
            let (store, reader) = open_read_only(&db, &kv).await?;
            let started = Instant::now();
            let report = store.verify().await.map_err(|e| e.to_string())?;
            close_reader(reader).await?;
            println!(
                "checked {} transactions, {} revisions, {} data records ({}), {} blobs in {:.1} s",
                report.transactions,
                report.revisions,
                report.data_records,
                ByteSize(report.data_bytes),
                report.blobs,
                started.elapsed().as_secs_f64()
            );
            if report.problems.is_empty() {
                println!("{db}: no damage found");
                Ok(())
            } else {
                for p in &report.problems {
                    eprintln!("damaged: {p}");
                }
                Err(format!(
                    "{db}: {} problems found (listed above)",
                    report.problems.len()
                ))
            }
        }
        ZodbCommand::Pack {
            db,
            days,
            no_gc,
            kv,
        } => {
            if !days.is_finite() || days < 0.0 {
                return Err(format!(
                    "--days {days}: give a number of days, 0 or more (0 packs to now)"
                ));
            }
            let (store, writer) = open_writer(&db, &kv).await?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|e| e.to_string())?
                .as_secs_f64();
            let pack_tid = Tid::from_unix(now - days * 86400.0);
            let refs = |data: &[u8]| tierdb_objects::pickle::references(data);
            let started = Instant::now();
            let result = if no_gc {
                store.pack(pack_tid, None).await
            } else {
                store.pack(pack_tid, Some(&refs)).await
            };
            let closed = close_writer(writer).await;
            let stats = result.map_err(|e| e.to_string())?;
            closed?;
            println!(
                "packed {db} to {pack_tid} in {:.1} s: removed {} revisions, {} objects, {} data records, \
                 {} transactions, {} blobs",
                started.elapsed().as_secs_f64(),
                stats.revisions_removed,
                stats.objects_removed,
                stats.data_removed,
                stats.transactions_removed,
                stats.blobs_removed
            );
            Ok(())
        }
        ZodbCommand::Stats { db, kv } => {
            let (store, reader) = open_read_only(&db, &kv).await?;
            let s = store.stats().await.map_err(|e| e.to_string())?;
            let last = store.last_tid();
            close_reader(reader).await?;
            print_stats(&db, &s, last);
            Ok(())
        }
    }
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.2}x", a as f64 / b as f64)
    }
}

fn print_stats(db: &str, s: &tierdb_objects::StoreStats, last: Tid) {
    println!("object store   {db}");
    println!("last tid       {last}");
    println!("objects        {}", s.objects);
    println!("revisions      {}", s.revisions);
    println!("transactions   {}", s.transactions);
    println!(
        "data           {} in revisions, {} distinct, {} stored",
        ByteSize(s.logical_bytes),
        ByteSize(s.unique_bytes),
        ByteSize(s.stored_bytes)
    );
    println!(
        "dedup ratio    {} (revision bytes / distinct bytes)",
        ratio(s.logical_bytes, s.unique_bytes)
    );
    println!(
        "compression    {} (distinct bytes / stored bytes, zstd)",
        ratio(s.unique_bytes, s.stored_bytes)
    );
    println!(
        "blobs          {} distinct, named by {} revisions",
        s.blobs, s.blob_revisions
    );
}

async fn open_writer(db: &str, kv: &KvArgs) -> CliResult<(VersionedStore, Arc<KvDb>)> {
    let (tiered, path) = open_store(db, &kv.tiers).await?;
    let kvdb = Arc::new(
        KvDb::open(tiered, &path, db, &kv.options())
            .await
            .map_err(|e| e.to_string())?,
    );
    let store = VersionedStore::open(kvdb.clone())
        .await
        .map_err(|e| e.to_string())?;
    Ok((store, kvdb))
}

async fn close_writer(kv: Arc<KvDb>) -> CliResult {
    let store = kv.store().clone();
    kv.close().await.map_err(|e| e.to_string())?;
    crate::close(&store).await
}

/// Reads go through a follower: they never fence a running writer.
async fn open_read_only(db: &str, kv: &KvArgs) -> CliResult<(VersionedStore, Arc<KvReplica>)> {
    let (tiered, path) = open_store(db, &kv.tiers).await?;
    let replica = Arc::new(
        KvReplica::open_unpinned(tiered, &path, db, kv.poll_interval.into())
            .await
            .map_err(|e| e.to_string())?,
    );
    let store = VersionedStore::open_read_only(replica.clone(), &path)
        .await
        .map_err(|e| e.to_string())?;
    Ok((store, replica))
}

async fn close_reader(r: Arc<KvReplica>) -> CliResult {
    let store = r.store().clone();
    r.close().await.map_err(|e| e.to_string())?;
    crate::close(&store).await
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
fn blob_file(dir: &FsPath, layout: &str, oid: Oid, tid: Tid) -> PathBuf {
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

async fn import_filestorage(
    src: &str,
    dst: &str,
    blob_dir: Option<&FsPath>,
    group_bytes: u64,
    kv: &KvArgs,
) -> CliResult {
    // A first pass checks the whole file, so damage anywhere stops the import before
    // anything is committed.
    let mut check = FsReader::open(FsPath::new(src))?;
    let bar = ProgressBar::new(check.len());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} check {bar:40} {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .map_err(|e| e.to_string())?,
    );
    let checked = loop {
        match check.next_txn() {
            Ok(Some(_)) => bar.set_position(check.position()),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    bar.finish_and_clear();
    checked.map_err(|e| format!("{e}; nothing was imported"))?;
    let mut reader = FsReader::open(FsPath::new(src))?;
    let layout = match blob_dir {
        Some(d) => {
            if !d.is_dir() {
                return Err(format!(
                    "--blob-dir {}: not a directory; give the FileStorage's blob directory",
                    d.display()
                ));
            }
            std::fs::read_to_string(d.join(".layout"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "bushy".into())
        }
        None => String::new(),
    };
    let mut kv = kv.clone();
    kv.create = true;
    let (store, writer) = open_writer(dst, &kv).await?;
    let resume_after = store.last_tid();
    if resume_after != Tid::ZERO {
        eprintln!("{dst} holds transactions up to {resume_after}: continuing after it");
    }
    let bar = ProgressBar::new(reader.len());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} import {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        )
        .map_err(|e| e.to_string())?,
    );
    let started = Instant::now();
    let (mut txns, mut records, mut skipped) = (0u64, 0u64, 0u64);
    let mut group: Vec<Txn> = Vec::new();
    let mut counts = tierdb_objects::RestoreStats::default();
    let mut group_size = 0u64;
    let result: CliResult = async {
        loop {
            let next = reader.next_txn()?;
            let done = next.is_none();
            if let Some(t) = next {
                bar.set_position(reader.position());
                if t.tid <= resume_after {
                    skipped += 1;
                } else {
                    group_size += t.bytes;
                    records += t.records.len() as u64;
                    txns += 1;
                    group.push(to_txn(t, blob_dir, &layout)?);
                }
            }
            if !group.is_empty() && (done || group_size >= group_bytes) {
                let (_, c) = store
                    .restore_many(std::mem::take(&mut group))
                    .await
                    .map_err(|e| {
                        format!("importing into {dst}: {e}; nothing of this group was committed")
                    })?;
                counts += c;
                group_size = 0;
                bar.set_message(format!("{txns} transactions"));
            }
            if done {
                return Ok(());
            }
        }
    }
    .await;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let closed = close_writer(writer).await;
    result?;
    closed?;
    let read = reader.position();
    println!(
        "imported {txns} transactions ({records} records) from {src} into {dst} in {secs:.1} s: \
         {:.1} MB/s of Data.fs ({} read){}",
        read as f64 / 1e6 / secs.max(1e-9),
        ByteSize(read),
        if skipped > 0 {
            format!(", {skipped} transactions already there skipped")
        } else {
            String::new()
        }
    );
    println!(
        "this import: dedup ratio {} ({} in {} records, {} distinct), compression ratio {} \
         ({} stored, zstd)",
        ratio(counts.logical_bytes, counts.new_bytes),
        ByteSize(counts.logical_bytes),
        counts.records,
        ByteSize(counts.new_bytes),
        ratio(counts.new_bytes, counts.new_stored_bytes),
        ByteSize(counts.new_stored_bytes)
    );
    Ok(())
}

fn to_txn(t: FsTxn, blob_dir: Option<&FsPath>, layout: &str) -> CliResult<Txn> {
    let mut txn = Txn::restoring(t.meta, t.tid);
    for r in t.records {
        let blob = match &r.data {
            Some(d) if is_blob_record(d) => Some(match blob_dir {
                None => {
                    return Err(format!(
                        "object {} in transaction {} is a blob: give --blob-dir (the \
                         FileStorage's blob directory); nothing of this group was committed",
                        r.oid, t.tid
                    ));
                }
                Some(dir) => {
                    let mut f = blob_file(dir, layout, r.oid, t.tid);
                    if !f.is_file()
                        && let Some(from) = r.data_txn
                    {
                        f = blob_file(dir, layout, r.oid, from);
                    }
                    if !f.is_file() {
                        return Err(format!(
                            "object {} in transaction {} is a blob, but {} does not exist",
                            r.oid,
                            t.tid,
                            f.display()
                        ));
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

/// Any other source: the Python package copies it (ZODB opens the zodburi).
fn import_uri(src: &str, dst: &str) -> CliResult {
    let python = std::env::var("TIERDB_PYTHON").unwrap_or_else(|_| "python3".into());
    let status = std::process::Command::new(&python)
        .args(["-m", "tierdb.tool", "import", src, dst])
        .status()
        .map_err(|e| {
            format!(
                "cannot run {python} for the zodburi import ({e}); set TIERDB_PYTHON to a \
                 Python with the tierdb package (scripts/python-env.sh makes one)"
            )
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("import of {src} failed (see above)"))
    }
}
