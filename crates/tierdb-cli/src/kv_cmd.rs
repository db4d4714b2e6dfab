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
use clap::{Args, Subcommand};
use std::time::Duration;

use tierdb_kv::{Compression, DbShape, KvDb, KvOptions, KvRead, KvReplica, KvWrite, ShowKey};
use tierdb_store::{StoreUrl, TieredStore};

use crate::{CliResult, TierArgs, capacity_options, tier_options};

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

/// Database settings shared by the kv commands.
#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// Create the database if it does not exist.
    #[arg(long)]
    pub create: bool,
    /// Become the writer even if another process is writing (it is fenced).
    #[arg(long)]
    pub take_over: bool,
    /// Memtable size before it is written as an L0 SST.
    #[arg(long, default_value = "16MiB")]
    pub memtable_bytes: ByteSize,
    /// SST block compression: zstd, lz4 or none.
    #[arg(long, default_value = "zstd")]
    pub compression: Compression,
    /// How often the manifest is polled (fencing detection; a follower's lag).
    #[arg(long, default_value = "500ms")]
    pub poll_interval: humantime::Duration,
    /// Do not run the compactor in this process.
    #[arg(long)]
    pub no_compaction: bool,
    #[command(flatten)]
    pub tiers: TierArgs,
}

impl KvArgs {
    pub fn options(&self) -> KvOptions {
        KvOptions {
            create: self.create,
            take_over: self.take_over,
            memtable_bytes: self.memtable_bytes.as_u64() as usize,
            max_unflushed_bytes: (self.memtable_bytes.as_u64() as usize * 8).max(64 << 20),
            compression: self.compression,
            poll_interval: self.poll_interval.into(),
            compaction: !self.no_compaction,
            ..KvOptions::default()
        }
    }
}

/// Splits a database URL into the store to open and the database's path in it.
pub fn locate(url: &str) -> CliResult<(StoreUrl, String)> {
    tierdb_kv::locate(url)
}

/// Opens the tiered store holding the database `url`.
pub async fn open_store(url: &str, tiers: &TierArgs) -> CliResult<(TieredStore, String)> {
    let (root, path) = locate(url)?;
    let options = tier_options(tiers);
    options.validate().map_err(|e| e.to_string())?;
    let capacity = tierdb_store::open_capacity(&root, &capacity_options(&tiers.s3, false))
        .map_err(|e| e.to_string())?;
    if let StoreUrl::S3 { .. } = root {
        tierdb_store::check_reachable(&root, capacity.as_ref())
            .await
            .map_err(|e| e.to_string())?;
    }
    let store = TieredStore::with_capacity(capacity, root.to_string(), options)
        .await
        .map_err(|e| e.to_string())?;
    Ok((store, path))
}

async fn open_db(url: &str, kv: &KvArgs) -> CliResult<KvDb> {
    let (store, path) = open_store(url, &kv.tiers).await?;
    KvDb::open(store, &path, url, &kv.options())
        .await
        .map_err(|e| e.to_string())
}

/// Reads go through a follower that writes nothing, so they never fence a running writer.
async fn open_reader(url: &str, kv: &KvArgs) -> CliResult<KvReplica> {
    let (store, path) = open_store(url, &kv.tiers).await?;
    KvReplica::open_unpinned(store, &path, url, Duration::from_secs(1))
        .await
        .map_err(|e| e.to_string())
}

async fn finish_reader(r: KvReplica) -> CliResult {
    let store = r.store().clone();
    r.close().await.map_err(|e| e.to_string())?;
    crate::close(&store).await
}

async fn finish(db: KvDb) -> CliResult {
    let store = db.store().clone();
    db.close().await.map_err(|e| e.to_string())?;
    crate::close(&store).await
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
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                        .map_err(|e| format!("cannot read the value from standard input: {e}"))?;
                    Bytes::from(buf)
                }
            };
            let handle = open_db(&db, &kv).await?;
            let seq = handle
                .put(key.as_bytes(), &value)
                .await
                .map_err(|e| e.to_string())?;
            finish(handle).await?;
            eprintln!(
                "committed {} ({} bytes) at seq {seq}",
                ShowKey(key.as_bytes()),
                value.len()
            );
            Ok(())
        }
        KvCommand::Get { db, key, kv } => {
            let handle = open_reader(&db, &kv).await?;
            let got = handle.get(key.as_bytes()).await.map_err(|e| e.to_string());
            finish_reader(handle).await?;
            match got? {
                Some(v) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&v)
                        .and_then(|()| out.flush())
                        .map_err(|e| format!("cannot write to standard output: {e}"))
                }
                None => Err(format!("key {} not found in {db}", ShowKey(key.as_bytes()))),
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
            let handle = open_reader(&db, &kv).await?;
            let rows = match prefix {
                Some(p) => handle.scan_prefix(p.as_bytes(), limit).await,
                None => {
                    let lo = start.map_or(Bound::Unbounded, |s| Bound::Included(Bytes::from(s)));
                    let hi = end.map_or(Bound::Unbounded, |s| Bound::Excluded(Bytes::from(s)));
                    handle.scan((lo, hi), limit).await
                }
            }
            .map_err(|e| e.to_string());
            finish_reader(handle).await?;
            let mut out = std::io::stdout().lock();
            for (k, v) in rows? {
                writeln!(out, "{}\t{}", escape(&k), escape(&v))
                    .map_err(|e| format!("cannot write to standard output: {e}"))?;
            }
            Ok(())
        }
        KvCommand::Del { db, key, kv } => {
            let handle = open_db(&db, &kv).await?;
            let seq = handle
                .delete(key.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            finish(handle).await?;
            eprintln!("deleted {} at seq {seq}", ShowKey(key.as_bytes()));
            Ok(())
        }
    }
}

/// `tierdb info DB`: reads the manifest without opening the database as writer, and shows
/// the tier statistics a process using `--cache-dir` left there.
pub async fn run_info(db: String, tiers: TierArgs) -> CliResult {
    // The cache directory may be in use (locked) by the writer: read its statistics file
    // only, and read the manifest through a DRAM-only store.
    let cache_dir = tiers.cache_dir.clone();
    let mut own = tiers.clone();
    own.cache_dir = None;
    own.cache_bytes = ByteSize(0);
    own.write_mode = tierdb_store::WriteMode::WriteThrough;
    let (store, path) = open_store(&db, &own).await?;
    let (marker, shape) = DbShape::read(&store, &path, &db)
        .await
        .map_err(|e| e.to_string())?;
    let stats = store.stats();
    println!("database      {db}");
    println!(
        "format        {} v{} ({})",
        marker.format, marker.version, marker.engine
    );
    if let Some(src) = &marker.clone_of {
        println!("clone of      {src}");
    }
    println!(
        "manifest      #{} (writer epoch {}, compactor epoch {})",
        shape.manifest_id, shape.writer_epoch, shape.compactor_epoch
    );
    println!(
        "size          {} in SSTs (estimated)",
        ByteSize(shape.total_bytes())
    );
    println!(
        "L0            {} SSTs, {}",
        shape.l0_bytes.len(),
        ByteSize(shape.l0_bytes.iter().sum())
    );
    for (id, ssts, bytes) in &shape.sorted_runs {
        println!("sorted run {id:<3}{ssts} SSTs, {}", ByteSize(*bytes));
    }
    println!(
        "WAL           replay after #{}, next #{}",
        shape.replay_after_wal_id, shape.next_wal_id
    );
    let lease = tierdb_kv::lease::read(&store, &object_store::path::Path::from(path.as_str()), &db)
        .await
        .map_err(|e| e.to_string())?;
    match lease.filter(|l| !l.released) {
        Some(l) => println!(
            "writer        process {} on {}, heartbeat {:.1} s ago ({})",
            l.pid,
            l.host,
            l.age().as_secs_f64(),
            if l.is_live() {
                "running"
            } else {
                "stale: crashed or stopped"
            }
        ),
        None => println!("writer        none (the last one closed cleanly)"),
    }
    println!("checkpoints   {}", shape.checkpoints);
    if !shape.external_dbs.is_empty() {
        println!(
            "shares SSTs of {} other database(s)",
            shape.external_dbs.len()
        );
    }
    match &cache_dir {
        Some(dir) => match tierdb_store::SavedStats::read(dir).map_err(|e| e.to_string())? {
            Some(saved) => {
                let age_s =
                    tierdb_kv::lease::now_ms().saturating_sub(saved.taken_ms) as f64 / 1000.0;
                println!(
                    "cache tiers in {} (process {}, {:.0} s ago, serving {}):",
                    dir.display(),
                    saved.pid,
                    age_s,
                    saved.capacity
                );
                print_tier_stats(&saved.stats);
            }
            None => println!("cache tiers: {} holds no statistics yet", dir.display()),
        },
        None => {
            println!(
                "cache tiers (this process, reading the manifest; --cache-dir DIR shows a writer's):"
            );
            print_tier_stats(&stats);
        }
    }
    crate::close(&store).await
}

/// `tierdb clone SRC DST`.
pub async fn run_clone(src: String, dst: String, tiers: TierArgs) -> CliResult {
    let (src_root, src_path) = locate(&src)?;
    let (dst_root, dst_path) = locate(&dst)?;
    if src_root != dst_root {
        return Err(format!(
            "cannot clone {src} into {dst}: a clone shares its source's files, so both must be in \
             the same bucket (or on the same local filesystem)"
        ));
    }
    let (store, _) = open_store(&src, &tiers).await?;
    let t = std::time::Instant::now();
    tierdb_kv::clone_db(&store, &src_path, &dst_path, &src, &dst)
        .await
        .map_err(|e| e.to_string())?;
    crate::close(&store).await?;
    eprintln!(
        "cloned {src} into {dst} in {:.2?} (SST files shared, not copied)",
        t.elapsed()
    );
    Ok(())
}

/// Per-tier statistics, one line per tier.
pub fn print_tier_stats(stats: &tierdb_store::TierStats) {
    let (dram, device, capacity) = stats.hit_ratios();
    println!(
        "  DRAM        {} block hits ({:.1}%), {} used of {}",
        stats.dram.hits,
        dram * 100.0,
        ByteSize(stats.dram.usage_bytes),
        ByteSize(stats.dram.capacity_bytes)
    );
    println!(
        "  device      {} block hits ({:.1}%), {} read, {} written",
        stats.device.hits,
        device * 100.0,
        ByteSize(stats.device.read_bytes),
        ByteSize(stats.device.write_bytes)
    );
    println!(
        "  capacity    {} block misses ({:.1}%), {} GETs ({}), {} PUTs ({}), {} LISTs",
        stats.capacity.misses,
        capacity * 100.0,
        stats.capacity.gets,
        ByteSize(stats.capacity.get_bytes),
        stats.capacity.puts,
        ByteSize(stats.capacity.put_bytes),
        stats.capacity.lists
    );
    if let Some(wb) = &stats.write_back {
        println!(
            "  write-back  {} appends in {} fsyncs, {} pending objects, {} dirty, {} uploaded, \
             upload lag {} ms (what a take-over or a lost device would lose)",
            wb.appends,
            wb.group_commits,
            wb.pending_objects,
            ByteSize(wb.dirty_bytes),
            wb.uploaded_objects,
            wb.upload_lag_ms
        );
    }
}

/// `tierdb debug kv-commit-stream`, for the crash tests: prints "acked i" per commit; the
/// first failed commit ends the run with its error.
pub async fn commit_stream(
    url: &str,
    count: u64,
    writers: u64,
    rows: u64,
    kv: &KvArgs,
) -> CliResult {
    let db = std::sync::Arc::new(open_db(url, kv).await?);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<u64, String>>();
    let writers = writers.max(1);
    for w in 0..writers {
        let (db, tx) = (db.clone(), tx.clone());
        tokio::spawn(async move {
            let mut i = w;
            while i < count {
                let mut batch = tierdb_kv::Batch::new();
                for r in 0..rows {
                    batch.put(format!("b{i:08}/r{r:03}"), format!("v{i}"));
                }
                let result = db.commit(batch).await.map(|_| i).map_err(|e| e.to_string());
                let failed = result.is_err();
                if tx.send(result).is_err() || failed {
                    return;
                }
                i += writers;
            }
        });
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    while let Some(acked) = rx.recv().await {
        writeln!(out, "acked {}", acked?)
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
    }
    drop(out);
    match std::sync::Arc::try_unwrap(db) {
        Ok(db) => finish(db).await,
        Err(_) => Ok(()),
    }
}
