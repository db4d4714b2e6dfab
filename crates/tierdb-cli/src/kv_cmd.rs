//! `tierdb kv …`, `tierdb info`, `tierdb clone`: the key-value engine by hand.
//!
//! A database URL names its own prefix: `s3://bucket/a/b` is the database at `a/b` in the
//! bucket, `/data/db` the one at `/data/db`. The store is opened at the bucket (or the
//! filesystem root), so a clone and its source, which refer to each other by path, resolve
//! the same way from either.

use std::io::Write;
use std::ops::Bound;

use bytes::Bytes;
use bytesize::ByteSize;
use clap::Subcommand;
use tierdb_engine::{Database, Role, Workload};
use tierdb_kv::{DbShape, KvRead, KvWrite, ShowKey};

use crate::args::{KvArgs, TierArgs};
use crate::error::{CliError, CliResult, output_failed};
use crate::stats::{self, Format};

#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Set KEY to VALUE (or to standard input). Opening a database as writer fences any
    /// other writer of it.
    Put {
        db: String,
        key: String,
        value: Option<String>,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Print the value of KEY (a read-only open: a running writer is not disturbed).
    Get {
        db: String,
        key: String,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Print keys and values in key order, tab-separated (non-printable bytes escaped).
    Scan {
        db: String,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// First key (inclusive).
        #[arg(long)]
        start: Option<String>,
        /// Last key (exclusive).
        #[arg(long)]
        end: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Delete KEY.
    Del {
        db: String,
        key: String,
        #[command(flatten)]
        kv: KvArgs,
    },
}

/// Opens `url` for the kv commands: as writer for a write, otherwise as a follower that
/// writes nothing, so a read never fences a running writer.
async fn open(url: &str, kv: &KvArgs, role: Role) -> CliResult<Database> {
    Ok(Database::open(url, &kv.open_options(Workload::Kv, role)).await?)
}

/// Closes `db`, or reports `failed` (closing first, so the store is left clean).
async fn finish<T>(db: Database, result: Result<T, tierdb_kv::KvError>) -> CliResult<T> {
    let closed = db.close().await;
    let value = result?;
    closed?;
    Ok(value)
}

/// Shows bytes as text when printable, escaping the rest (`\xNN`, `\t`, `\n`, `\\`).
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

pub async fn run_kv(cmd: KvCommand) -> CliResult {
    match cmd {
        KvCommand::Put { db, key, value, kv } => {
            let value = match value {
                Some(v) => Bytes::from(v),
                None => {
                    let mut buf = Vec::new();
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map_err(|e| {
                        CliError::input(format!("cannot read the value from standard input: {e}"))
                    })?;
                    Bytes::from(buf)
                }
            };
            let handle = open(&db, &kv, Role::Writer).await?;
            let writer = handle.writer("put")?.clone();
            let seq = finish(handle, writer.put(key.as_bytes(), &value).await).await?;
            eprintln!(
                "committed {} ({} bytes) at seq {seq}",
                ShowKey(key.as_bytes()),
                value.len()
            );
            Ok(())
        }
        KvCommand::Get { db, key, kv } => {
            let handle = open(&db, &kv, Role::Follower).await?;
            let got = handle.kv().get(key.as_bytes()).await;
            match finish(handle, got).await? {
                Some(v) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&v)
                        .and_then(|()| out.flush())
                        .map_err(output_failed)
                }
                None => Err(CliError::new(
                    tierdb_store::ErrorKind::NotFound,
                    format!("key {} not found in {db}", ShowKey(key.as_bytes())),
                )),
            }
        }
        KvCommand::Scan {
            db,
            prefix,
            start,
            end,
            limit,
            kv,
        } => {
            let handle = open(&db, &kv, Role::Follower).await?;
            let rows = match prefix {
                Some(p) => handle.kv().scan_prefix(p.as_bytes(), limit).await,
                None => {
                    let lo = start.map_or(Bound::Unbounded, |s| Bound::Included(Bytes::from(s)));
                    let hi = end.map_or(Bound::Unbounded, |s| Bound::Excluded(Bytes::from(s)));
                    handle.kv().scan((lo, hi), limit).await
                }
            };
            let rows = finish(handle, rows).await?;
            let mut out = std::io::stdout().lock();
            for (k, v) in rows {
                writeln!(out, "{}\t{}", escape(&k), escape(&v)).map_err(output_failed)?;
            }
            Ok(())
        }
        KvCommand::Del { db, key, kv } => {
            let handle = open(&db, &kv, Role::Writer).await?;
            let writer = handle.writer("del")?.clone();
            let seq = finish(handle, writer.delete(key.as_bytes()).await).await?;
            eprintln!("deleted {} at seq {seq}", ShowKey(key.as_bytes()));
            Ok(())
        }
    }
}

/// `tierdb info DB`: reads the manifest without opening the database as writer, and shows
/// the tier statistics a process using `--cache-dir` left there.
/// When the newest table commit in the object store was made (ms since the epoch), read by
/// a follower that writes nothing.
async fn newest_table_commit(
    db: &str,
    store: &tierdb_engine::StoreOptions,
) -> Result<Option<u64>, String> {
    let mut options = tierdb_engine::OpenOptions::new(Workload::Tables, Role::Follower);
    options.store = store.clone();
    let database = Database::open(db, &options)
        .await
        .map_err(|e| e.to_string())?;
    let newest = database
        .tables()
        .last_commit_ms()
        .await
        .map_err(|e| e.to_string());
    let _ = database.close().await;
    newest
}

pub async fn run_info(db: String, format: Format, tiers: TierArgs) -> CliResult {
    // The cache directory may be in use (locked) by the writer: read its statistics file
    // only, and read the manifest through a DRAM-only store.
    let cache_dir = tiers.cache_dir.clone();
    let mut options = tiers.store_options(Workload::Kv);
    options.tiers.cache_dir = None;
    options.tiers.cache_bytes = 0;
    options.tiers.write_mode = tierdb_store::WriteMode::WriteThrough;
    let (store, path) = tierdb_engine::open_store_of(&db, &options).await?;
    let read = async {
        let (marker, shape) = DbShape::read(&store, &path, &db).await?;
        let lease =
            tierdb_kv::lease::read(&store, &object_store::path::Path::from(path.as_str()), &db)
                .await?;
        Ok::<_, tierdb_kv::KvError>((marker, shape, lease))
    }
    .await;
    let closed = crate::store_cmd::close(&store).await;
    let (marker, shape, lease) = read?;
    closed?;
    let newest_commit = newest_table_commit(&db, &options).await;
    let saved = match &cache_dir {
        Some(dir) => tierdb_store::SavedStats::read(dir)?,
        None => None,
    };
    let lease = lease.filter(|l| !l.released);
    if format == Format::Json {
        return stats::print_json(&serde_json::json!({
            "database": db,
            "marker": marker,
            "manifest_id": shape.manifest_id,
            "writer_epoch": shape.writer_epoch,
            "compactor_epoch": shape.compactor_epoch,
            "sst_bytes": shape.total_bytes(),
            "l0_bytes": shape.l0_bytes,
            "sorted_runs": shape.sorted_runs.iter().map(|(id, ssts, bytes)| {
                serde_json::json!({"id": id, "ssts": ssts, "bytes": bytes})
            }).collect::<Vec<_>>(),
            "next_wal_id": shape.next_wal_id,
            "replay_after_wal_id": shape.replay_after_wal_id,
            "checkpoints": shape.checkpoints,
            "external_dbs": shape.external_dbs,
            "newest_table_commit_ms": newest_commit.as_ref().ok().copied().flatten(),
            "writer": lease.as_ref().map(|l| serde_json::json!({
                "pid": l.pid,
                "host": l.host,
                "heartbeat_age_s": l.age().as_secs_f64(),
                "live": l.is_live(),
            })),
            "cache": saved,
        }));
    }
    let mut t = stats::key_value_table(["database", &db]);
    let mut row = |k: &str, v: String| {
        t.add_row(vec![k.to_string(), v]);
    };
    row(
        "format",
        format!("{} v{} ({})", marker.format, marker.version, marker.engine),
    );
    if let Some(src) = &marker.clone_of {
        row("clone of", src.clone());
    }
    row(
        "manifest",
        format!(
            "#{} (writer epoch {}, compactor epoch {})",
            shape.manifest_id, shape.writer_epoch, shape.compactor_epoch
        ),
    );
    row(
        "size",
        format!("{} in SSTs (estimated)", ByteSize(shape.total_bytes())),
    );
    row(
        "L0",
        format!(
            "{} SSTs, {}",
            shape.l0_bytes.len(),
            ByteSize(shape.l0_bytes.iter().sum())
        ),
    );
    for (id, ssts, bytes) in &shape.sorted_runs {
        row(
            &format!("sorted run {id}"),
            format!("{ssts} SSTs, {}", ByteSize(*bytes)),
        );
    }
    row(
        "WAL",
        format!(
            "replay after #{}, next #{}",
            shape.replay_after_wal_id, shape.next_wal_id
        ),
    );
    row(
        "writer",
        match &lease {
            Some(l) => format!(
                "process {} on {}, heartbeat {:.1} s ago ({})",
                l.pid,
                l.host,
                l.age().as_secs_f64(),
                if l.is_live() {
                    "running"
                } else {
                    "stale: crashed or stopped"
                }
            ),
            None => "none (the last one closed cleanly)".to_string(),
        },
    );
    row(
        "newest table commit",
        match &newest_commit {
            Ok(Some(ms)) => format!(
                "{:.1} s ago: what a replica that is up to date sees (serve --read-only, SHOW \
                 tierdb.replica_lag)",
                tierdb_kv::lease::now_ms().saturating_sub(*ms) as f64 / 1e3
            ),
            Ok(None) => "none".to_string(),
            Err(e) => format!("unknown: {e}"),
        },
    );
    row("checkpoints", shape.checkpoints.to_string());
    if !shape.external_dbs.is_empty() {
        row(
            "shares SSTs of",
            format!("{} other database(s)", shape.external_dbs.len()),
        );
    }
    println!("{t}\n");
    match (&cache_dir, saved) {
        (Some(dir), Some(saved)) => {
            let age_s = tierdb_kv::lease::now_ms().saturating_sub(saved.taken_ms) as f64 / 1000.0;
            println!(
                "cache tiers in {} (process {}, {:.0} s ago, serving {}):\n",
                dir.display(),
                saved.pid,
                age_s,
                saved.capacity
            );
            stats::print_tier_stats(&saved.stats);
        }
        (Some(dir), None) => println!("cache tiers: {} holds no statistics yet", dir.display()),
        (None, _) => println!("cache tiers: give --cache-dir DIR to see a process's statistics"),
    }
    Ok(())
}

/// `tierdb clone SRC DST`.
pub async fn run_clone(src: String, dst: String, tiers: TierArgs) -> CliResult {
    let t = std::time::Instant::now();
    tierdb_engine::clone_database(&src, &dst, &tiers.store_options(Workload::Kv)).await?;
    eprintln!(
        "cloned {src} into {dst} in {:.2?} (SST files shared, not copied)",
        t.elapsed()
    );
    Ok(())
}
