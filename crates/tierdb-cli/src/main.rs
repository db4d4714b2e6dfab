//! `tierdb`: the command line of the tierdb database engine. This file parses the command
//! line and dispatches; each command group lives in its own module, and every database is
//! opened through `tierdb_engine`.

mod args;
mod bench_cmd;
mod budget;
#[cfg(feature = "debug-commands")]
mod debug_cmd;
mod error;
mod kv_cmd;
mod serve;
mod sql_cmd;
mod stats;
mod store_cmd;
mod vacuum_cmd;
mod verify_cmd;
mod warm_cmd;
mod worker_cmd;
mod zodb_cmd;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::args::TierArgs;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crate::error::{EXIT_STATUSES, exit_code};

#[derive(Parser, Debug)]
#[command(
    name = "tierdb",
    version,
    about = "A database engine on object storage, made fast by DRAM and device cache tiers",
    after_help = EXIT_STATUSES
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
    Store(store_cmd::StoreCommand),
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
    /// Serve a database's tables over the PostgreSQL wire protocol (psql, PostgreSQL
    /// drivers and tools).
    Serve(serve::ServeArgs),
    /// Run the query stages a coordinator (`tierdb sql` or `tierdb serve` with --workers)
    /// sends, over the database opened as a follower with this process's own cache tiers.
    Worker(worker_cmd::WorkerArgs),
    /// Delete segment files no table references any more (replaced by UPDATE, DELETE or
    /// INSERT OVERWRITE, dropped, or never committed) once no reader can still use them;
    /// --dry-run lists them.
    Vacuum(vacuum_cmd::VacuumArgs),
    /// Check that every row table's rows and index entries agree (each row decodes under
    /// its key and has its entry in every index; each entry names a row with its values;
    /// UNIQUE holds). Read-only: runs beside a live writer. Exit status 6 if damaged.
    Verify(verify_cmd::VerifyArgs),
    /// Show a database's format, size, LSM levels and cache statistics (read-only: it does
    /// not disturb a running writer).
    Info {
        db: String,
        #[arg(long, value_enum, default_value_t)]
        format: stats::Format,
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
    /// Load a database's objects (or the named tables' segments) into the DRAM and device
    /// tiers at full bandwidth, so a started or restarted process reads from the device.
    Warm(warm_cmd::WarmArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// Load generators for the crash tests (not a stable interface).
    #[cfg(feature = "debug-commands")]
    #[command(subcommand, hide = true)]
    Debug(debug_cmd::DebugCommand),
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
            return ExitCode::from(exit_code(tierdb_store::ErrorKind::Retry));
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Store(cmd) => store_cmd::run_store(cmd).await,
            Command::Kv(cmd) => kv_cmd::run_kv(cmd).await,
            Command::Zodb(cmd) => zodb_cmd::run_zodb(cmd).await,
            Command::Sql(args) => sql_cmd::run_sql(args).await,
            Command::Import(args) => sql_cmd::run_import(args).await,
            Command::Ssb(cmd) => sql_cmd::run_ssb(cmd).await,
            Command::Serve(args) => serve::run_serve(args).await,
            Command::Worker(args) => worker_cmd::run_worker(args).await,
            Command::Vacuum(args) => vacuum_cmd::run_vacuum(args).await,
            Command::Verify(args) => verify_cmd::run_verify(args).await,
            Command::Info { db, format, tiers } => kv_cmd::run_info(db, format, tiers).await,
            Command::Clone { src, dst, tiers } => kv_cmd::run_clone(src, dst, tiers).await,
            Command::Warm(args) => warm_cmd::run_warm(args).await,
            Command::Bench(cmd) => bench_cmd::run_bench(cmd).await,
            #[cfg(feature = "debug-commands")]
            Command::Debug(cmd) => debug_cmd::run_debug(cmd).await,
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(exit_code(e.kind))
        }
    }
}
