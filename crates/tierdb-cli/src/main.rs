//! `tierdb`: the command line of the tierdb database engine.

mod kv_cmd;
mod serve;
mod sql_cmd;
mod zodb_cmd;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bytesize::ByteSize;
use clap::{Args, Parser, Subcommand};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tierdb_bench::cache_bench::{self, CacheBenchConfig};
use tierdb_store::{
    CapacityOptions, Eviction, S3Options, StoreUrl, TierOptions, TieredStore, WriteMode,
};

#[derive(Parser, Debug)]
#[command(
    name = "tierdb",
    version,
    about = "A database engine on object storage, made fast by DRAM and device cache tiers"
)]
struct Cli {
    /// Log filter (tracing's env-filter syntax), e.g. info or tierdb_store=debug.
    #[arg(long, global = true, env = "TIERDB_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Use a (tiered) object store by hand.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Read and write a key-value database by hand.
    #[command(subcommand)]
    Kv(kv_cmd::KvCommand),
    /// ZODB object stores: import a FileStorage or zodburi, verify, pack, stats.
    #[command(subcommand)]
    Zodb(zodb_cmd::ZodbCommand),
    /// Run SQL on a database's tables: -c "…", or an interactive shell.
    Sql(sql_cmd::SqlArgs),
    /// Bulk-import CSV, TSV, .tbl (|-delimited) or Parquet files into a table: parallel
    /// parsing, sort on ingest, rejects to a file, one atomic commit.
    Import(sql_cmd::ImportArgs),
    /// The Star Schema Benchmark: generate its data, load it.
    #[command(subcommand)]
    Ssb(sql_cmd::SsbCommand),
    /// Serve a database's tables over the PostgreSQL wire protocol (psql works).
    Serve(serve::ServeArgs),
    /// Show a database's format, size, LSM levels and cache statistics (read-only: it does
    /// not disturb a running writer).
    Info {
        db: String,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Make DST a zero-copy clone of SRC (same bucket or filesystem): it shares SRC's SST
    /// files and takes its own writes. It holds SRC's commits up to SRC's last memtable
    /// flush (all of them if SRC's writer closed cleanly).
    Clone {
        src: String,
        dst: String,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Test helpers (not a stable interface).
    #[command(subcommand, hide = true)]
    Debug(DebugCommand),
}

#[derive(Subcommand, Debug)]
enum StoreCommand {
    /// Write FILE (or standard input) as object KEY.
    Put {
        url: String,
        key: String,
        file: Option<PathBuf>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Write object KEY to standard output or --output.
    Get {
        url: String,
        key: String,
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// List objects under PREFIX.
    Ls {
        url: String,
        prefix: Option<String>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Show an object's metadata, or with no KEY the store's tiers and statistics.
    Stat {
        url: String,
        key: Option<String>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Delete object KEY.
    Rm {
        url: String,
        key: String,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Rewrite a damaged write-back log so the store opens again: keeps every readable
    /// record, prints the byte ranges it dropped (those writes are lost unless already
    /// uploaded) and moves the damaged segment files aside unchanged. Run it only after an
    /// open failed with "write-back log ... is damaged" and the device cannot be restored.
    SalvageLog {
        /// The cache directory whose write-back log is damaged.
        #[arg(long)]
        cache_dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Zipfian hot reads per tier, a 70/30 mix in write-through vs write-back, and the
    /// eviction-policy simulator against OPT. Writes CSV and a PNG to --out.
    Cache(BenchCacheArgs),
    /// Seed 001's race: a sysbench-like 70/30 OLTP workload to N transactions on the
    /// key-value engine with (a) no device tier, (b) device write-through, (c) device
    /// write-back, and raw slatedb. Writes CSV and a PNG of the race to --out.
    Oltp(BenchOltpArgs),
    /// The 13 Star Schema Benchmark queries, warm (best of --runs) or --cold: per-query
    /// time, bytes read, bytes from object storage and segments skipped.
    Ssb(sql_cmd::BenchSsbArgs),
}

#[derive(Args, Debug)]
struct BenchOltpArgs {
    /// Capacity store URL (MinIO: s3://bucket/prefix with AWS_ENDPOINT_URL set).
    url: String,
    /// Table rows (keys are Gaussian over them).
    #[arg(long, default_value_t = 400_000)]
    rows: u64,
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
    /// The race ends when this many transactions have committed.
    #[arg(long, default_value_t = 20_000)]
    transactions: u64,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// DRAM tier (also raw slatedb's block cache); keep it several times below the table.
    #[arg(long, default_value = "8MiB")]
    memory_bytes: ByteSize,
    #[arg(long, default_value = "512MiB")]
    cache_bytes: ByteSize,
    /// Device tier directory (default: a temporary directory).
    #[arg(long)]
    pub(crate) cache_dir: Option<PathBuf>,
    #[arg(long, default_value = "16MiB")]
    memtable_bytes: ByteSize,
    /// Contestants, comma-separated: a, b, c, raw.
    #[arg(long, default_value = "a,b,c,raw", value_delimiter = ',')]
    only: Vec<String>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    #[command(flatten)]
    s3: S3Args,
}

#[derive(Subcommand, Debug)]
enum DebugCommand {
    /// Commit batches 0, 1, ... (batch i sets b{i}/r0 .. b{i}/r{rows-1} to "v{i}") from
    /// concurrent writers and print "acked i" after each commit returns.
    KvCommitStream {
        db: String,
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 4)]
        writers: u64,
        #[arg(long, default_value_t = 20)]
        rows: u64,
        #[command(flatten)]
        kv: kv_cmd::KvArgs,
    },
    /// Put objects k0, k1, ... and print "acked kN" after each acknowledgement.
    WriteStream {
        url: String,
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 4)]
        writers: u64,
        #[command(flatten)]
        tiers: TierArgs,
    },
}

/// Cache tier settings shared by the store commands.
#[derive(Args, Debug, Clone)]
pub(crate) struct TierArgs {
    /// Directory on a fast device for the device tier and the write-back log.
    #[arg(long, env = "TIERDB_CACHE_DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Size of the device tier (0 = off), e.g. 10GiB.
    #[arg(long, default_value = "0")]
    cache_bytes: ByteSize,
    /// Size of the DRAM tier (0 = off).
    #[arg(long, default_value = "256MiB")]
    memory_bytes: ByteSize,
    /// write-through, write-around or write-back.
    #[arg(long, default_value = "write-through")]
    write_mode: WriteMode,
    /// Eviction policy of the DRAM tier: lru, lfu, fifo, s3fifo, sieve.
    #[arg(long, default_value = "lfu")]
    eviction: Eviction,
    /// Cached block size.
    #[arg(long, default_value = "64KiB")]
    block_bytes: ByteSize,
    /// Write-back: cap on data not yet uploaded (writers wait at the cap).
    #[arg(long, default_value = "256MiB")]
    dirty_bytes_max: ByteSize,
    /// Write-back: longest wait for room under the cap (or on a full cache device) before a
    /// write goes straight to the capacity store instead.
    #[arg(long, default_value = "10s")]
    dirty_wait_max: humantime::Duration,
    /// A read run longer than this bypasses the caches (default 1MiB; SQL commands cache
    /// everything unless this is given, since segment scans are the hot data).
    #[arg(long)]
    pub(crate) sequential_cutoff: Option<ByteSize>,
    #[command(flatten)]
    s3: S3Args,
}

#[derive(Args, Debug, Clone)]
struct S3Args {
    /// S3 endpoint (default: AWS_ENDPOINT_URL), e.g. http://127.0.0.1:9000 for MinIO.
    #[arg(long)]
    endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, or us-east-1 with a custom endpoint).
    #[arg(long)]
    region: Option<String>,
}

#[derive(Args, Debug)]
struct BenchCacheArgs {
    /// Capacity store URL (MinIO: s3://bucket/prefix with AWS_ENDPOINT_URL set).
    url: String,
    #[arg(long, default_value_t = 256)]
    objects: u64,
    #[arg(long, default_value = "256KiB")]
    object_bytes: ByteSize,
    #[arg(long, default_value = "64KiB")]
    block_bytes: ByteSize,
    /// DRAM tier; the working set (objects x object size) should be several times larger.
    #[arg(long, default_value = "16MiB")]
    memory_bytes: ByteSize,
    #[arg(long, default_value = "128MiB")]
    cache_bytes: ByteSize,
    /// Device tier directory (default: a temporary directory).
    #[arg(long)]
    pub(crate) cache_dir: Option<PathBuf>,
    #[arg(long, default_value = "lfu")]
    eviction: Eviction,
    /// Zipf skew.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    #[arg(long, default_value_t = 20_000)]
    warmup_ops: u64,
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    #[arg(long, default_value_t = 5_000)]
    mix_ops: u64,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    #[command(flatten)]
    s3: S3Args,
}

fn capacity_options(s3: &S3Args, create: bool) -> CapacityOptions {
    CapacityOptions {
        create,
        s3: S3Options {
            endpoint: s3.endpoint.clone(),
            region: s3.region.clone(),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn tier_options(t: &TierArgs) -> TierOptions {
    TierOptions {
        memory_bytes: t.memory_bytes.as_u64(),
        cache_dir: t.cache_dir.clone(),
        cache_bytes: t.cache_bytes.as_u64(),
        block_bytes: t.block_bytes.as_u64(),
        write_mode: t.write_mode,
        eviction: t.eviction,
        dirty_bytes_max: t.dirty_bytes_max.as_u64(),
        dirty_wait_max: t.dirty_wait_max.into(),
        sequential_cutoff_bytes: t
            .sequential_cutoff
            .map_or(TierOptions::default().sequential_cutoff_bytes, |b| {
                b.as_u64()
            }),
        ..TierOptions::default()
    }
}

type CliResult<T = ()> = Result<T, String>;

async fn open(url: &str, tiers: &TierArgs, create: bool) -> CliResult<TieredStore> {
    let url = StoreUrl::parse(url).map_err(|e| e.to_string())?;
    let tier_options = tier_options(tiers);
    tier_options.validate().map_err(|e| e.to_string())?;
    let options = capacity_options(&tiers.s3, create);
    let capacity = tierdb_store::open_capacity(&url, &options).map_err(|e| e.to_string())?;
    tierdb_store::check_reachable(&url, capacity.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    TieredStore::with_capacity(capacity, url.to_string(), tier_options)
        .await
        .map_err(|e| e.to_string())
}

fn object_path(key: &str) -> CliResult<Path> {
    Path::parse(key)
        .map_err(|e| format!("invalid object key {key:?}: {e}; use names like dir/name.bin"))
}

/// Closes the store; a failed drain leaves acknowledged data in the write-back log.
async fn close(store: &TieredStore) -> CliResult {
    store.close().await.map_err(|e| {
        format!("{e} (acknowledged writes are safe in the write-back log and are uploaded the next time this cache directory is opened)")
    })
}

async fn run_store(cmd: StoreCommand) -> CliResult {
    match cmd {
        StoreCommand::Put {
            url,
            key,
            file,
            tiers,
        } => {
            let path = object_path(&key)?;
            let data = match &file {
                Some(f) => {
                    std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
                }
                None => {
                    let mut buf = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut buf)
                        .map_err(|e| format!("cannot read standard input: {e}"))?;
                    buf
                }
            };
            let store = open(&url, &tiers, true).await?;
            store
                .put(&path, PutPayload::from(data))
                .await
                .map_err(|e| format!("cannot put {key}: {e}"))?;
            close(&store).await
        }
        StoreCommand::Get {
            url,
            key,
            output,
            tiers,
        } => {
            let path = object_path(&key)?;
            let store = open(&url, &tiers, false).await?;
            let bytes = store
                .get(&path)
                .await
                .map_err(|e| format!("cannot get {key}: {e}"))?
                .bytes()
                .await
                .map_err(|e| format!("cannot get {key}: {e}"))?;
            match output {
                Some(out) => write_atomically(&out, &bytes)?,
                None => std::io::stdout()
                    .write_all(&bytes)
                    .map_err(|e| format!("cannot write to standard output: {e}"))?,
            }
            close(&store).await
        }
        StoreCommand::Ls { url, prefix, tiers } => {
            let store = open(&url, &tiers, false).await?;
            let prefix = prefix.as_deref().map(object_path).transpose()?;
            let mut objects: Vec<_> = store
                .list(prefix.as_ref())
                .try_collect()
                .await
                .map_err(|e| format!("cannot list: {e}"))?;
            objects.sort_by(|a, b| a.location.cmp(&b.location));
            let mut out = std::io::stdout().lock();
            for m in objects {
                writeln!(
                    out,
                    "{:>12}  {}  {}",
                    m.size,
                    m.last_modified.format("%Y-%m-%d %H:%M:%S"),
                    m.location
                )
                .map_err(|e| e.to_string())?;
            }
            close(&store).await
        }
        StoreCommand::Stat { url, key, tiers } => {
            let store = open(&url, &tiers, false).await?;
            match key {
                Some(key) => {
                    let m = store
                        .head(&object_path(&key)?)
                        .await
                        .map_err(|e| format!("cannot stat {key}: {e}"))?;
                    println!("path:          {}", m.location);
                    println!("size:          {}", m.size);
                    println!("last_modified: {}", m.last_modified);
                    println!("e_tag:         {}", m.e_tag.as_deref().unwrap_or("-"));
                }
                None => println!("{store}\n{:#?}", store.stats()),
            }
            close(&store).await
        }
        StoreCommand::Rm { url, key, tiers } => {
            let store = open(&url, &tiers, false).await?;
            store
                .delete(&object_path(&key)?)
                .await
                .map_err(|e| format!("cannot delete {key}: {e}"))?;
            close(&store).await
        }
        StoreCommand::SalvageLog { cache_dir, json } => {
            let report = tierdb_store::salvage_write_back_log(&cache_dir).map_err(|e| {
                format!(
                    "cannot salvage the write-back log in {}: {e}",
                    cache_dir.display()
                )
            })?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
                );
                return Ok(());
            }
            println!(
                "segments: {}  records kept: {}  segments rewritten: {}  ranges dropped: {}",
                report.segments,
                report.records_kept,
                report.segments_rewritten,
                report.dropped.len()
            );
            for d in &report.dropped {
                println!(
                    "dropped {} bytes at byte {} of {}: {}",
                    d.bytes,
                    d.offset,
                    d.segment.display(),
                    d.reason
                );
            }
            if let Some(dir) = &report.damaged_dir {
                println!("damaged originals kept in {}", dir.display());
            } else {
                println!("the log is undamaged; nothing was changed");
            }
            Ok(())
        }
    }
}

/// Writes `bytes` to `out` through a temporary file, so a failure leaves nothing half-written.
fn write_atomically(out: &std::path::Path, bytes: &[u8]) -> CliResult {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    tmp.persist(out)
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(())
}

/// Content of object `i` in the crash test: self-describing, so a reader can check it.
pub fn stream_object(i: u64) -> Vec<u8> {
    let line = format!("object {i} of the write stream\n");
    line.repeat(1 + (i % 50) as usize * 20).into_bytes()
}

async fn run_debug(cmd: DebugCommand) -> CliResult {
    match cmd {
        DebugCommand::KvCommitStream {
            db,
            count,
            writers,
            rows,
            kv,
        } => kv_cmd::commit_stream(&db, count, writers, rows, &kv).await,
        DebugCommand::WriteStream {
            url,
            count,
            writers,
            tiers,
        } => {
            let store = open(&url, &tiers, true).await?;
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            for w in 0..writers.max(1) {
                let (store, tx) = (store.clone(), tx.clone());
                tokio::spawn(async move {
                    let mut i = w;
                    while i < count {
                        let path = Path::from(format!("k{i}"));
                        if store
                            .put(&path, PutPayload::from(stream_object(i)))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        if tx.send(i).is_err() {
                            return;
                        }
                        i += writers.max(1);
                    }
                });
            }
            drop(tx);
            let mut out = std::io::stdout().lock();
            while let Some(i) = rx.recv().await {
                writeln!(out, "acked k{i}")
                    .and_then(|()| out.flush())
                    .map_err(|e| e.to_string())?;
            }
            close(&store).await
        }
    }
}

async fn run_bench(cmd: BenchCommand) -> CliResult {
    match cmd {
        BenchCommand::Cache(a) => {
            let url = StoreUrl::parse(&a.url).map_err(|e| e.to_string())?;
            let tmp = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let config = CacheBenchConfig {
                url,
                capacity: capacity_options(&a.s3, true),
                objects: a.objects,
                object_bytes: a.object_bytes.as_u64(),
                block_bytes: a.block_bytes.as_u64(),
                memory_bytes: a.memory_bytes.as_u64(),
                device_bytes: a.cache_bytes.as_u64(),
                cache_dir: a
                    .cache_dir
                    .unwrap_or_else(|| tmp.path().to_path_buf())
                    .join("tierdb-bench-cache"),
                eviction: a.eviction,
                theta: a.theta,
                warmup_ops: a.warmup_ops,
                ops: a.ops,
                mix_ops: a.mix_ops,
                clients: a.clients,
                seed: a.seed,
                out_dir: a.out,
            };
            println!(
                "tierdb bench cache: {} objects x {} = {} working set, DRAM {}, device {}, {} clients, {} cores",
                a.objects,
                a.object_bytes,
                ByteSize(a.objects * a.object_bytes.as_u64()),
                a.memory_bytes,
                a.cache_bytes,
                a.clients,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            );
            let report = cache_bench::run(&config).await?;
            print!("{}", cache_bench::render(&report));
            Ok(())
        }
        BenchCommand::Ssb(a) => sql_cmd::run_bench_ssb(a).await,
        BenchCommand::Oltp(a) => {
            use tierdb_bench::oltp_bench::{self, OltpConfig, Variant};
            let url = StoreUrl::parse(&a.url).map_err(|e| e.to_string())?;
            let variants = a
                .only
                .iter()
                .map(|v| match v.trim() {
                    "a" => Ok(Variant::NoDevice),
                    "b" => Ok(Variant::DeviceWriteThrough),
                    "c" => Ok(Variant::DeviceWriteBack),
                    "raw" => Ok(Variant::RawSlatedb),
                    other => Err(format!(
                        "unknown contestant {other:?} in --only; use a, b, c or raw"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let tmp = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let config = OltpConfig {
                url,
                capacity: capacity_options(&a.s3, true),
                rows: a.rows,
                value_bytes: a.value_bytes.max(8),
                transactions: a.transactions,
                clients: a.clients,
                memory_bytes: a.memory_bytes.as_u64(),
                device_bytes: a.cache_bytes.as_u64(),
                cache_dir: a
                    .cache_dir
                    .unwrap_or_else(|| tmp.path().to_path_buf())
                    .join("tierdb-bench-oltp"),
                memtable_bytes: a.memtable_bytes.as_u64() as usize,
                seed: a.seed,
                out_dir: a.out,
                variants,
            };
            println!(
                "tierdb bench oltp: {} rows, race to {} transactions, {} clients, DRAM {}, device {}, {} cores",
                a.rows,
                a.transactions,
                a.clients,
                a.memory_bytes,
                a.cache_bytes,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            );
            let report = oltp_bench::run(&config).await?;
            print!("{}", oltp_bench::render(&report));
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Store(cmd) => run_store(cmd).await,
            Command::Kv(cmd) => kv_cmd::run_kv(cmd).await,
            Command::Zodb(cmd) => zodb_cmd::run_zodb(cmd).await,
            Command::Sql(args) => sql_cmd::run_sql(args).await,
            Command::Import(args) => sql_cmd::run_import(args).await,
            Command::Ssb(cmd) => sql_cmd::run_ssb(cmd).await,
            Command::Serve(args) => serve::run_serve(args).await,
            Command::Info { db, tiers } => kv_cmd::run_info(db, tiers).await,
            Command::Clone { src, dst, tiers } => kv_cmd::run_clone(src, dst, tiers).await,
            Command::Bench(cmd) => run_bench(cmd).await,
            Command::Debug(cmd) => run_debug(cmd).await,
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
