//! `tierdb zodb …`: import a ZODB FileStorage (or any zodburi, through the Python package),
//! verify, pack and describe an object store.

use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use bytesize::ByteSize;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use tierdb_engine::{Database, Role, Workload};
use tierdb_objects::{Tid, VersionedStore};

use crate::args::KvArgs;
use crate::error::{CliError, CliResult, exit_kind};

#[derive(Subcommand, Debug)]
pub enum ZodbCommand {
    /// Copy every transaction of SRC into the object store DST, keeping tids. SRC is a
    /// FileStorage file (Data.fs, read natively) or a zodburi URI (zeo://, zconfig://,
    /// file://…, copied through the tierdb Python package). DST is created when missing;
    /// when it holds a previous import of SRC, the import continues after its last
    /// transaction. A FileStorage import writes with 64 MiB memtables unless
    /// --memtable-bytes is given.
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
        /// Report what the pack would remove (revisions, objects by class) and write
        /// nothing: runs as a follower, beside a live writer.
        #[arg(long)]
        dry_run: bool,
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
                import_filestorage(&src, &dst, blob_dir, group_bytes.as_u64(), &kv).await
            } else if src.contains("://") {
                import_uri(&src, &dst)
            } else {
                Err(CliError::new(
                    tierdb_store::ErrorKind::NotFound,
                    format!(
                        "{src}: no such file; give a FileStorage file (Data.fs) or a zodburi URI \
                     (zeo://host:port, zconfig:///path/zope.conf, file:///path/Data.fs)"
                    ),
                ))
            }
        }
        ZodbCommand::Verify { db, kv } => {
            let (store, database) = open(&db, &kv, Role::Follower).await?;
            let started = Instant::now();
            let passes = Passes::new("verify");
            let report = store.verify_with(&passes).await;
            passes.done();
            database.close().await?;
            let report = report?;
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
                Err(CliError::new(
                    tierdb_store::ErrorKind::Data,
                    format!(
                        "{db}: {} problems found (listed above)",
                        report.problems.len()
                    ),
                ))
            }
        }
        ZodbCommand::Pack {
            db,
            days,
            no_gc,
            dry_run,
            kv,
        } => {
            if !days.is_finite() || days < 0.0 {
                return Err(CliError::input(format!(
                    "--days {days}: give a number of days, 0 or more (0 packs to now)"
                )));
            }
            let role = if dry_run {
                Role::Follower
            } else {
                Role::Writer
            };
            let (store, database) = open(&db, &kv, role).await?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|e| CliError::input(format!("the system clock is before 1970: {e}")))?
                .as_secs_f64();
            let pack_tid = Tid::from_unix(now - days * 86400.0);
            let refs = |data: &[u8]| tierdb_objects::pickle::references(data);
            let started = Instant::now();
            if dry_run {
                let passes = Passes::new("pack --dry-run");
                let gc: Option<&tierdb_objects::References> =
                    if no_gc { None } else { Some(&refs) };
                let result = store.pack_preview(pack_tid, gc, &passes).await;
                passes.done();
                let closed = database.close().await;
                let preview = result?;
                closed?;
                print_preview(&db, pack_tid, &preview, started.elapsed().as_secs_f64());
                return Ok(());
            }
            let passes = Passes::new("pack");
            let result = if no_gc {
                store.pack_with(pack_tid, None, &passes).await
            } else {
                store.pack_with(pack_tid, Some(&refs), &passes).await
            };
            passes.done();
            let closed = database.close().await;
            let stats = result?;
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
            let (store, database) = open(&db, &kv, Role::Follower).await?;
            let passes = Passes::new("stats");
            let s = store.stats_with(&passes).await;
            passes.done();
            let last = store.last_tid();
            database.close().await?;
            let s = s?;
            print_stats(&db, &s, last);
            Ok(())
        }
    }
}

/// What `pack --dry-run` found, as a table (the objects that would go, by class).
fn print_preview(db: &str, pack_tid: Tid, p: &tierdb_objects::PackPreview, secs: f64) {
    println!(
        "a pack of {db} to {pack_tid} would remove {} revisions and {} objects{} (dry run, {secs:.1} s; nothing written)",
        p.revisions_removed,
        p.objects_removed,
        match p.objects_reachable {
            Some(n) => format!("; {n} objects are reachable from the root"),
            None => String::new(),
        }
    );
    if p.removed_by_class.is_empty() {
        return;
    }
    let mut rows: Vec<_> = p.removed_by_class.iter().collect();
    rows.sort_by(|a, b| b.1.objects.cmp(&a.1.objects).then(a.0.cmp(b.0)));
    let width = rows.iter().map(|(c, _)| c.len()).max().unwrap_or(5).max(5);
    println!("{:<width$}  {:>10}  {:>12}", "class", "objects", "bytes");
    for (class, t) in rows {
        println!("{class:<width$}  {:>10}  {:>12}", t.objects, t.bytes);
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

/// Opens the object store of `db` as its writer, or (`Role::Follower`) read-only: then
/// nothing is written and a running writer is not fenced.
async fn open(db: &str, kv: &KvArgs, role: Role) -> CliResult<(VersionedStore, Database)> {
    let database = Database::open(db, &kv.open_options(Workload::Objects, role)).await?;
    match database.objects().await {
        Ok(store) => Ok((store, database)),
        Err(e) => {
            let _ = database.close().await;
            Err(e.into())
        }
    }
}

/// The progress bars of an import: the check pass, then the import.
struct Bars {
    check: ProgressBar,
    import: ProgressBar,
    dst: String,
}

impl tierdb_objects::ImportProgress for Bars {
    fn checking(&self, position: u64, len: u64) {
        self.check.set_length(len);
        self.check.set_position(position);
    }

    fn resuming(&self, tid: Tid) {
        self.check.finish_and_clear();
        self.import.suspend(|| {
            eprintln!(
                "{} holds transactions up to {tid}: continuing after it",
                self.dst
            )
        });
    }

    fn importing(&self, position: u64, len: u64, txns: u64) {
        self.check.finish_and_clear();
        self.import.set_length(len);
        self.import.set_position(position);
        self.import.set_message(format!("{txns} transactions"));
    }
}

/// A spinner naming the pass a whole-store command is in and how many items it did.
struct Passes {
    what: &'static str,
    bar: ProgressBar,
}

impl Passes {
    fn new(what: &'static str) -> Self {
        let bar = bar("{spinner} {msg} {human_pos} items {per_sec} {elapsed}");
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Passes { what, bar }
    }

    fn done(&self) {
        self.bar.finish_and_clear();
    }
}

impl tierdb_objects::Progress for Passes {
    fn pass(&self, name: &str) {
        self.bar.set_message(format!("{}: {name}", self.what));
        self.bar.set_position(0);
        self.bar.reset_elapsed();
    }

    fn advance(&self, items: u64) {
        self.bar.inc(items);
    }
}

fn bar(template: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// The memtable size an import writes with unless `--memtable-bytes` says otherwise.
const IMPORT_MEMTABLE_BYTES: u64 = 64 << 20;

async fn import_filestorage(
    src: &str,
    dst: &str,
    blob_dir: Option<PathBuf>,
    group_bytes: u64,
    kv: &KvArgs,
) -> CliResult {
    let bars = Bars {
        check: bar("{spinner} check {bar:40} {bytes}/{total_bytes} {bytes_per_sec}"),
        import: bar(
            "{spinner} import {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ),
        dst: dst.to_string(),
    };
    let options = tierdb_objects::ImportOptions {
        blob_dir,
        group_bytes,
    };
    let started = Instant::now();
    // Checked before the destination is opened: a damaged source creates nothing.
    tierdb_objects::check_filestorage(FsPath::new(src), &bars)?;
    let mut kv = kv.clone();
    kv.create = true;
    // A bulk load: memtables of 64 MiB (not 16) write a quarter as many L0 SSTs, so less
    // flushing and compaction on the same cores (a 1 GiB Data.fs, one run each: 146 SSTs
    // left instead of 216, 17.6 s instead of 22.9 s). Writers may then hold up to 512 MiB
    // unflushed (eight memtables, see `KvArgs::open_options`). `--memtable-bytes` overrides.
    kv.memtable_bytes
        .get_or_insert(ByteSize(IMPORT_MEMTABLE_BYTES));
    let (store, database) = open(dst, &kv, Role::Writer).await?;
    let result =
        tierdb_objects::import_filestorage(&store, FsPath::new(src), &options, &bars).await;
    bars.check.finish_and_clear();
    bars.import.finish_and_clear();
    // The import is done when the database is closed (its last memtable written, the
    // compactions it started finished or stopped): the time includes the close.
    let closed = database.close().await;
    let secs = started.elapsed().as_secs_f64();
    let report =
        result.map_err(|e| CliError::from(e).context(format_args!("importing into {dst}")))?;
    closed?;
    let read = report.bytes_read;
    println!(
        "imported {} transactions ({} records) from {src} into {dst} in {secs:.1} s: \
         {:.1} MB/s of Data.fs ({} read){}",
        report.transactions,
        report.records,
        read as f64 / 1e6 / secs.max(1e-9),
        ByteSize(read),
        if report.skipped > 0 {
            format!(", {} transactions already there skipped", report.skipped)
        } else {
            String::new()
        }
    );
    let counts = report.stored;
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
        // The tool's exit status already says what kind of failure it was.
        Err(CliError::new(
            exit_kind(status.code()),
            format!("import of {src} failed (see above)"),
        ))
    }
}
