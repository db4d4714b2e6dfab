//! `tierdb bench …`: the cache, OLTP and SSB benchmarks.

use std::path::PathBuf;

use bytesize::ByteSize;
use clap::{Args, Subcommand};
use tierdb_bench::cache_bench::{self, CacheBenchConfig};
use tierdb_engine::{Role, Workload};
use tierdb_store::{Eviction, StoreUrl};

use crate::args::{KvArgs, S3Args};
use crate::error::{CliError, CliResult};
use crate::sql_cmd::EngineArgs;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Zipfian hot reads per tier, a 70/30 mix in write-through vs write-back, and the
    /// eviction-policy simulator against OPT. Writes CSV and a PNG to --out.
    Cache(BenchCacheArgs),
    /// Seed 001's race: a sysbench-like 70/30 OLTP workload to N transactions on the
    /// key-value engine with (a) no device tier, (b) device write-through, (c) device
    /// write-back, and raw slatedb. Writes CSV and a PNG of the race to --out.
    Oltp(BenchOltpArgs),
    /// The 13 Star Schema Benchmark queries, warm (best of --runs) or --cold: per-query
    /// time, bytes read, bytes from object storage and segments skipped.
    Ssb(Box<BenchSsbArgs>),
    /// Named SQL queries, one per file (the name is the file's stem, e.g. TPC-H's q01.sql
    /// … q22.sql), run as `ssb` runs its own: the same options and figures.
    Queries(Box<BenchQueriesArgs>),
    /// The capacity store's own speed for large parallel ranged GETs of a database's
    /// objects, with no tiers: the physical limit for cold reads.
    Throughput(BenchThroughputArgs),
}

#[derive(Args, Debug)]
pub struct BenchOltpArgs {
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

#[derive(Args, Debug)]
pub struct BenchCacheArgs {
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

pub async fn run_bench(cmd: BenchCommand) -> CliResult {
    match cmd {
        BenchCommand::Cache(a) => {
            let url = StoreUrl::parse(&a.url)?;
            let tmp = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let config = CacheBenchConfig {
                url,
                capacity: a.s3.capacity(true),
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
        BenchCommand::Ssb(a) => run_bench_ssb(*a, Vec::new()).await,
        BenchCommand::Queries(a) => {
            let sql = read_query_files(&a.files)?;
            run_bench_ssb(a.run, sql).await
        }
        BenchCommand::Throughput(a) => run_bench_throughput(a).await,
        BenchCommand::Oltp(a) => {
            use tierdb_bench::oltp_bench::{self, OltpConfig, Variant};
            let url = StoreUrl::parse(&a.url)?;
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
                capacity: a.s3.capacity(true),
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

#[derive(Args, Debug)]
pub struct BenchSsbArgs {
    pub db: String,
    /// Runs of each query; the best time is reported (warm runs).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Cold: every query runs once on freshly opened, empty DRAM and device tiers.
    #[arg(long)]
    pub cold: bool,
    /// Each query once, with no warming run, on the tiers as configured: with the
    /// --cache-dir of an earlier run, this measures a restarted process.
    #[arg(long, conflicts_with = "cold")]
    pub once: bool,
    /// Read segment files straight from the local filesystem, bypassing tierdb's store
    /// layers (tiers, checksums): the same plans, to measure what those layers cost. DB must
    /// be a local directory.
    #[arg(long)]
    pub direct_files: bool,
    /// Run the queries in plain DataFusion (its defaults, a listing table per table over
    /// the same segment files) instead of tierdb: what tierdb's own layers cost. DB must
    /// be a local directory.
    #[arg(long, conflicts_with_all = ["cold", "direct_files"])]
    pub plain_datafusion: bool,
    /// Skip segments with the extent map (on by default; off to measure what it saves).
    #[arg(long)]
    pub no_extent_elimination: bool,
    /// Plan without the scans' row counts and column ranges (on by default: they pick each
    /// hash join's build side; off to measure what they buy).
    #[arg(long)]
    pub no_scan_statistics: bool,
    /// Only these queries (e.g. Q1.1,Q2.1).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<String>,
    /// A DataFusion setting for the run, KEY=VALUE (repeatable), e.g.
    /// `--set datafusion.execution.parquet.pushdown_filters=true`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Write each query's answer as CSV here (for comparing with another engine).
    #[arg(long)]
    pub answers: Option<PathBuf>,
    /// Write the per-query figures as CSV here.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

#[derive(Args, Debug)]
pub struct BenchQueriesArgs {
    /// SQL files, one query each (a trailing `;` is allowed); run in the order given.
    #[arg(long = "file", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub run: BenchSsbArgs,
}

/// (name, SQL) of each file: the name is the file's stem.
fn read_query_files(files: &[PathBuf]) -> Result<Vec<(String, String)>, CliError> {
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let text = std::fs::read_to_string(f)
            .map_err(|e| CliError::input(format!("cannot read query file {}: {e}", f.display())))?;
        let sql = text.trim().trim_end_matches(';').trim().to_string();
        if sql.is_empty() {
            return Err(CliError::input(format!(
                "query file {} is empty; give one SQL query per file",
                f.display()
            )));
        }
        let name = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| f.display().to_string());
        out.push((name, sql));
    }
    Ok(out)
}

pub async fn run_bench_ssb(args: BenchSsbArgs, sql: Vec<(String, String)>) -> CliResult {
    use tierdb_bench::ssb_bench::{self, SsbBenchConfig};
    let config = SsbBenchConfig {
        db: args.db.clone(),
        open: args.kv.open_options(Workload::Tables, Role::Follower),
        engine: args.engine.options(),
        runs: args.runs,
        cold: args.cold,
        once: args.once,
        direct_files: args.direct_files,
        plain_datafusion: args.plain_datafusion,
        extent_elimination: !args.no_extent_elimination,
        scan_statistics: !args.no_scan_statistics,
        queries: args.queries.clone(),
        sql,
        settings: args.settings.clone(),
    };
    let report = ssb_bench::run(&config).await?;
    print!("{}", ssb_bench::render(&report));
    if let Some(p) = &args.csv {
        ssb_bench::write_csv(&report, p)?;
    }
    if let Some(p) = &args.answers {
        std::fs::write(p, &report.answers)
            .map_err(|e| CliError::input(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct BenchThroughputArgs {
    /// The database URL (its objects under --under are read).
    pub db: String,
    /// The folder of the database to read.
    #[arg(long, default_value = "tables")]
    pub under: String,
    /// Bytes per ranged GET.
    #[arg(long, default_value = "8MiB")]
    pub piece: ByteSize,
    /// GETs in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Stop after this many bytes.
    #[arg(long, default_value = "4GiB")]
    pub bytes_max: ByteSize,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

pub async fn run_bench_throughput(a: BenchThroughputArgs) -> CliResult {
    use tierdb_bench::throughput::{self, ThroughputConfig};
    let options = tierdb_engine::StoreOptions {
        s3: a.s3.options(),
        ..Default::default()
    };
    let (store, path) = tierdb_engine::open_store_of(&a.db, &options).await?;
    let config = ThroughputConfig {
        prefix: object_store::path::Path::from(format!("{path}/{}", a.under.trim_matches('/'))),
        piece_bytes: a.piece.as_u64(),
        concurrency: a.concurrency,
        bytes_max: a.bytes_max.as_u64(),
    };
    let report = throughput::run(store.capacity().clone(), &config).await;
    store.close().await?;
    let report = report?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&report)
                .map_err(|e| CliError::new(tierdb_store::ErrorKind::Bug, e.to_string()))?
        );
    } else {
        println!(
            "capacity store throughput: {} in {} ranged GETs of {} from {} objects, {} at once: {:.2} s, {:.1} MiB/s",
            ByteSize::b(report.bytes),
            report.requests,
            a.piece,
            report.objects,
            a.concurrency,
            report.seconds,
            report.mib_per_second()
        );
    }
    Ok(())
}
