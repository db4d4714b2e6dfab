//! `tierdb sql`, `tierdb import`, `tierdb ssb …` and `tierdb bench ssb`: the columnar side.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytesize::ByteSize;
use clap::{Args, Subcommand, ValueEnum};
use datafusion::arrow::array::RecordBatch;

use tierdb_bench::ssb;
use tierdb_engine::{Database, Role, Workload};
use tierdb_tables::import::{Format, ImportOptions, ImportProgress, import};
use tierdb_tables::readahead::ReadAheadMode;
use tierdb_tables::segment::{SegmentCodec, SegmentOptions};
use tierdb_tables::{EngineOptions, SqlEngine, StatementResult};

use crate::args::KvArgs;
use crate::budget::{Given, MemoryPlan};
use crate::error::{CliError, CliResult, output_failed};
use crate::stats;

#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// Parallel threads per query (DataFusion partitions); default: the machine's cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Memory this process may use in all: the DRAM tier, query memory, the metadata cache
    /// and a reserve for the rest (see --memory for what a statement past it gets) [default:
    /// three quarters of the machine's memory].
    #[arg(long)]
    pub memory_limit: Option<ByteSize>,
    /// Query memory: sorts, joins and aggregations spill to disk past it where they can,
    /// otherwise the statement fails with SQLSTATE 53200 [default: what --memory-limit
    /// leaves after the DRAM tier, the metadata cache and the reserve].
    #[arg(long)]
    pub memory: Option<ByteSize>,
    /// Directory for spill files (default: the OS temporary directory).
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
    /// Keep DataFusion's FROM-clause join order (no statistics-based reordering).
    #[arg(long)]
    pub no_join_reorder: bool,
    /// Aggregate the whole input of a decorrelated subquery's grouped aggregate, as
    /// DataFusion plans it, instead of only the groups the outer query can join.
    #[arg(long)]
    pub no_semi_join_reduction: bool,
    /// Compute a subplan the query repeats (a CTE or view read twice) once per read, as
    /// DataFusion plans it, instead of once for all its reads.
    #[arg(long)]
    pub no_shared_subplans: bool,
    /// Sort the rows a write puts in a table's order (import, INSERT … SELECT, UPDATE) as
    /// DataFusion plans it, a sort per input partition merged on one thread, instead of
    /// in memory on every core.
    #[arg(long)]
    pub no_parallel_sort: bool,
    /// DRAM for parsed Parquet footers and page indexes, kept across queries [default:
    /// 256MiB, at most 1/16 of --memory-limit].
    #[arg(long)]
    pub metadata_cache: Option<ByteSize>,
    /// Compression of the segments this process writes: auto (the default: LZ4 only for
    /// columns a dictionary or delta encoding leaves dense, see docs/benchmarks.md "Column
    /// layout"), or one codec for every column: none, snappy, lz4, zstd or zstd:LEVEL.
    #[arg(long)]
    pub segment_codec: Option<SegmentCodec>,
    /// Rows per Parquet row group in the segments this process writes.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1024..=(1 << 24)))]
    pub row_group_rows: Option<u64>,
    /// Rows per segment file in the segments this process writes (the unit of extent
    /// elimination and of splitting a scan across workers) [default: 2097152].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1024..=(1 << 26)))]
    pub segment_rows: Option<u64>,
    /// Spread queries over these worker processes (`tierdb worker DB --listen ADDR`):
    /// HOST:PORT,… Stages that scan segments are split across them by segment.
    #[arg(long, value_parser = parse_workers, default_value = "")]
    pub workers: WorkerList,
    /// How far a sequential segment scan fetches ahead of its reader: off, segment (the
    /// next row groups of the segment) or across (also the start of the scan's next
    /// segment).
    #[arg(long, default_value_t = ReadAheadMode::Across)]
    pub read_ahead: ReadAheadMode,
}

/// `--workers`, parsed.
#[derive(Debug, Clone, Default)]
pub struct WorkerList(pub Vec<url::Url>);

fn parse_workers(list: &str) -> Result<WorkerList, String> {
    tierdb_tables::distributed::parse_workers(list)
        .map(WorkerList)
        .map_err(|e| e.to_string())
}

impl EngineArgs {
    /// How `--memory-limit` is split, with a DRAM tier of `tier` bytes if the command line
    /// gave one (`budget.rs`).
    pub fn memory_plan(&self, tier: Option<ByteSize>) -> Result<MemoryPlan, CliError> {
        let given = Given {
            limit: self.memory_limit.map(|b| b.as_u64()),
            tier: tier.map(|b| b.as_u64()),
            metadata: self.metadata_cache.map(|b| b.as_u64()),
            query: self.memory.map(|b| b.as_u64()),
        };
        MemoryPlan::new(given, tierdb_engine::physical_memory_bytes()).map_err(CliError::input)
    }

    /// The engine's options within the default split of the budget (the DRAM tier's
    /// default size); [`EngineArgs::options_within`] for another.
    pub fn options(&self) -> EngineOptions {
        match self.memory_plan(None) {
            Ok(plan) => self.options_within(&plan),
            // Refused where the process opens its database (`open_engine`).
            Err(_) => self.options_within(&MemoryPlan {
                limit: 0,
                tier: 0,
                metadata: 256 << 20,
                reserve: 0,
                query: 2 << 30,
            }),
        }
    }

    pub fn options_within(&self, plan: &MemoryPlan) -> EngineOptions {
        let mut o = EngineOptions {
            memory_limit: plan.query as usize,
            spill_dir: self.spill_dir.clone(),
            join_reorder: !self.no_join_reorder,
            semi_join_reduction: !self.no_semi_join_reduction,
            share_subplans: !self.no_shared_subplans,
            parallel_sort: !self.no_parallel_sort,
            metadata_cache_bytes: plan.metadata as usize,
            workers: self.workers.0.clone(),
            read_ahead: self.read_ahead,
            ..EngineOptions::default()
        };
        if let Some(t) = self.threads {
            o.threads = t.max(1);
        }
        o
    }

    /// How this process encodes the segments it writes.
    pub fn segment_options(&self) -> SegmentOptions {
        let mut o = SegmentOptions::default();
        if let Some(codec) = self.segment_codec {
            o.codec = codec;
        }
        if let Some(rows) = self.row_group_rows {
            o.row_group_rows = rows as usize;
        }
        if let Some(rows) = self.segment_rows {
            o.segment_rows = rows as usize;
            o.row_group_rows = o.row_group_rows.min(o.segment_rows);
        }
        o
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

#[derive(Args, Debug)]
pub struct SqlArgs {
    /// Database URL (a directory, file:///…, or s3://bucket/path).
    pub db: String,
    /// Run these statements and exit (otherwise: an interactive shell, or statements from
    /// standard input when it is not a terminal).
    #[arg(short = 'c', long = "command")]
    pub command: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Open as a follower: queries only, never fences a running writer (e.g. `tierdb serve`).
    #[arg(long)]
    pub read_only: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    pub db: String,
    pub table: String,
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// csv, tsv, tbl (|-delimited, trailing |) or parquet; default: from each file's name.
    #[arg(long)]
    pub format: Option<String>,
    /// Field delimiter (one character) for csv-like files.
    #[arg(long)]
    pub delimiter: Option<char>,
    /// CSV/TSV files have no header line.
    #[arg(long)]
    pub no_header: bool,
    /// Abort (committing nothing) after more than this many bad rows.
    #[arg(long, default_value_t = 100)]
    pub max_rejects: u64,
    /// Where bad rows are written, with file, line and reason (default: TABLE.rejects).
    #[arg(long)]
    pub rejects: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

#[derive(Subcommand, Debug)]
pub enum SsbCommand {
    /// Write the five SSB tables for scale factor SF into DIR (.tbl files, as dbgen does).
    Generate {
        #[arg(long)]
        sf: f64,
        dir: PathBuf,
        /// Parallel lineorder chunks (files lineorder.tbl.1…).
        #[arg(long, default_value_t = 2)]
        chunks: usize,
    },
    /// Print the 13 queries (`-- Q1.1` lines, then the statement and `;`).
    Queries,
    /// Print the CREATE TABLE statements (with --sorted: with tierdb's sort keys).
    Schema {
        #[arg(long)]
        sorted: bool,
    },
    /// Create the SSB tables in DB and import DIR's files into them.
    Load(Box<SsbLoadArgs>),
}

#[derive(Args, Debug)]
pub struct SsbLoadArgs {
    pub db: String,
    pub dir: PathBuf,
    /// No sort keys (rows stay in file order): the "loaded unsorted" case.
    #[arg(long)]
    pub unsorted: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

/// A SQL engine over the tables of `db`: read-write as its writer, read-only as a follower
/// (which never disturbs a running writer).
pub async fn open_engine(
    db: &str,
    kv: &KvArgs,
    engine: &EngineArgs,
    role: Role,
) -> CliResult<(SqlEngine, Database)> {
    let mut options = kv.open_options(Workload::Tables, role);
    // A follower here may live long (a shell, a replica server): it pins what it reads so
    // the writer's garbage collector cannot delete SSTs under it.
    options.pin_checkpoint = role == Role::Follower;
    let plan = engine.memory_plan(kv.tiers.memory_bytes)?;
    // Row tables read a 4 KiB SST block per point read: decoded blocks kept in SlateDB's
    // cache skip the DRAM tier's copy, the checksum and the decompression of each one.
    // The cache comes out of the DRAM tier, so the process holds no more than it did.
    let block_cache = match kv.block_cache_bytes {
        Some(b) if b.as_u64() > plan.tier / 2 => {
            return Err(CliError::input(format!(
                "--block-cache-bytes {b} is more than half of the DRAM tier ({}): make it \
                 smaller or the tier (--memory-bytes) larger",
                ByteSize(plan.tier)
            )));
        }
        Some(b) => b.as_u64(),
        None => plan.tier / 4,
    };
    options.kv.block_cache_bytes = block_cache;
    options.store.tiers.memory_bytes = plan.tier - block_cache;
    tracing::info!(
        "{}; SST block cache {} of the DRAM tier",
        plan.describe(),
        ByteSize(block_cache)
    );
    let database = Database::open(db, &options).await?;
    let mut tables = database.tables();
    tables.segment_options = engine.segment_options();
    let made = match SqlEngine::new(Arc::new(tables), &engine.options_within(&plan)) {
        Ok(sql) => with_objects(sql, &database).await,
        Err(e) => Err(e.into()),
    };
    match made {
        Ok(sql) => Ok((sql, database)),
        Err(e) => {
            let _ = database.close().await;
            Err(e)
        }
    }
}

/// A database that holds a ZODB object store shows it as the read-only tables of schema
/// `zodb` (tierdb-objects-sql).
async fn with_objects(sql: SqlEngine, database: &Database) -> CliResult<SqlEngine> {
    if tierdb_objects::holds_objects(database.kv()).await? {
        let store = Arc::new(database.objects().await?);
        tierdb_objects_sql::register(sql.context(), store)
            .map_err(|e| CliError::from(format!("cannot show the ZODB objects as tables: {e}")))?;
    }
    Ok(sql)
}

pub async fn run_sql(args: SqlArgs) -> CliResult {
    let (engine, handle) = if args.read_only {
        open_engine(&args.db, &args.kv, &args.engine, Role::Follower).await?
    } else {
        open_engine(&args.db, &args.kv, &args.engine, Role::Writer).await?
    };
    let result = match &args.command {
        Some(sql) => run_script(&engine, sql, args.format).await,
        None => shell(&engine, args.format).await,
    };
    // Segment merges the statements started finish first (or a short-lived writer's
    // would never run: tierdb-tables merge.rs invariant 4).
    engine.tables().settle().await;
    let closed = handle.close().await;
    result.and(closed.map_err(CliError::from))
}

async fn run_script(engine: &SqlEngine, sql: &str, format: OutputFormat) -> CliResult {
    // Like `psql -c`: one string of INSERTs is one implicit transaction (SqlEngine::run).
    let statements = engine.parse(sql)?;
    let (results, error) = engine.run(statements).await;
    // As psql shows them: `BEGIN` inside a transaction, `COMMIT` outside one.
    for n in engine.session().take_notices() {
        eprintln!("{}:  {}", n.severity(), n.message);
    }
    for r in &results {
        print_result(r, format)?;
    }
    match error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Reads statements ending in `;` from standard input; errors are printed and the shell
/// goes on.
async fn shell(engine: &SqlEngine, format: OutputFormat) -> CliResult {
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        println!(
            "tierdb SQL shell on {}. End statements with ;  Quit with \\q or Ctrl-D.",
            engine.tables().name()
        );
    }
    let stdin = std::io::stdin();
    let mut buf = String::new();
    let mut failed = false;
    loop {
        if interactive {
            print!(
                "{}",
                if buf.trim().is_empty() {
                    "tierdb> "
                } else {
                    "   ...> "
                }
            );
            let _ = std::io::stdout().flush();
        }
        let mut line = String::new();
        let n = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::input(format!("cannot read standard input: {e}")))?;
        if n == 0 {
            break;
        }
        if buf.trim().is_empty() && matches!(line.trim(), "\\q" | "quit" | "exit") {
            break;
        }
        buf.push_str(&line);
        if !buf.trim_end().ends_with(';') {
            continue;
        }
        let sql = std::mem::take(&mut buf);
        let started = Instant::now();
        match run_script(engine, &sql, format).await {
            Ok(()) if interactive => println!("({:.3} s)", started.elapsed().as_secs_f64()),
            Ok(()) => {}
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    if !buf.trim().is_empty() {
        run_script(engine, &buf, format).await?;
    }
    if failed && !interactive {
        return Err("some statements failed (see above)".into());
    }
    Ok(())
}

pub fn print_result(r: &StatementResult, format: OutputFormat) -> CliResult {
    if let Some(tag) = &r.command {
        println!("{tag}");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match format {
        OutputFormat::Table => {
            let text = datafusion::arrow::util::pretty::pretty_format_batches(&r.batches)
                .map_err(output_failed)?;
            if r.batches.is_empty() {
                let names: Vec<_> = r
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect();
                writeln!(out, "{}", names.join(" | ")).map_err(output_failed)?;
            } else {
                writeln!(out, "{text}").map_err(output_failed)?;
            }
            writeln!(out, "({} rows)", r.rows()).map_err(output_failed)?;
        }
        OutputFormat::Csv => {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            if r.batches.is_empty() {
                let empty = RecordBatch::new_empty(r.schema.clone());
                w.write(&empty).map_err(output_failed)?;
            }
            for b in &r.batches {
                w.write(b).map_err(output_failed)?;
            }
        }
        OutputFormat::Json => {
            let mut w = datafusion::arrow::json::ArrayWriter::new(&mut out);
            let refs: Vec<&RecordBatch> = r.batches.iter().collect();
            w.write_batches(&refs).map_err(output_failed)?;
            w.finish().map_err(output_failed)?;
            if r.batches.is_empty() {
                write!(out, "[]").map_err(output_failed)?;
            }
            writeln!(out).map_err(output_failed)?;
        }
    }
    Ok(())
}

fn import_options(args: &ImportArgs, threads: usize) -> CliResult<ImportOptions> {
    let format = match &args.format {
        None => None,
        Some(f) => Some(Format::parse(f).ok_or_else(|| {
            format!("--format {f}: unknown format; use csv, tsv, tbl or parquet")
        })?),
    };
    let delimiter = match args.delimiter {
        None => None,
        Some(c) if c.is_ascii() => Some(c as u8),
        Some(c) => {
            return Err(CliError::input(format!(
                "--delimiter {c:?}: must be a single ASCII character"
            )));
        }
    };
    Ok(ImportOptions {
        format,
        delimiter,
        header: args.no_header.then_some(false),
        max_rejects: args.max_rejects,
        reject_file: args
            .rejects
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.rejects", args.table))),
        threads,
        transaction: None,
        time_zone: None,
    })
}

/// Imports `files` into `table` with a progress bar; prints the summary.
async fn import_with_progress(
    engine: &SqlEngine,
    table: &str,
    files: &[PathBuf],
    options: &ImportOptions,
) -> CliResult<tierdb_tables::import::ImportSummary> {
    let progress = Arc::new(ImportProgress::default());
    let bar = stats::progress_bar(
        "{prefix:>10} [{elapsed_precise}] {bar:30.cyan/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {msg}",
    );
    bar.set_prefix(table.to_string());
    let ticker = {
        let bar = bar.clone();
        let progress = progress.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                bar.set_length(progress.bytes_total.load(Ordering::Relaxed));
                bar.set_position(progress.bytes_read.load(Ordering::Relaxed));
                let parsed = progress.rows_parsed.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64().max(1e-3);
                let rejected = progress.rows_rejected.load(Ordering::Relaxed);
                let mut msg = format!("{parsed} rows ({:.0} rows/s)", parsed as f64 / secs);
                if rejected > 0 {
                    msg.push_str(&format!(", {rejected} rejected"));
                }
                if progress.writing.load(Ordering::Relaxed) {
                    msg.push_str(&format!(
                        ", sorted and written {}",
                        progress.rows_written.load(Ordering::Relaxed)
                    ));
                }
                bar.set_message(msg);
            }
        })
    };
    let result = import(
        engine.tables().clone(),
        table,
        files,
        options,
        engine.context().task_ctx(),
        progress,
    )
    .await;
    ticker.abort();
    bar.finish_and_clear();
    let s = result?;
    println!(
        "{table}: imported {} rows from {} file(s), {} in {:.2} s: {:.0} rows/s, {:.1} MB/s; \
         {} segment(s), {} of Parquet{}",
        s.rows,
        s.files,
        ByteSize(s.bytes),
        s.elapsed.as_secs_f64(),
        s.rows_per_sec(),
        s.mb_per_sec(),
        s.segments,
        ByteSize(s.segment_bytes),
        match &s.reject_file {
            Some(p) => format!("; {} rows rejected, see {}", s.rejected, p.display()),
            None => String::new(),
        }
    );
    Ok(s)
}

pub async fn run_import(args: ImportArgs) -> CliResult {
    let (engine, handle) = open_engine(&args.db, &args.kv, &args.engine, Role::Writer).await?;
    let threads = args.engine.options().threads;
    let result = async {
        let options = import_options(&args, threads)?;
        import_with_progress(&engine, &args.table, &args.files, &options).await
    }
    .await;
    let closed = handle.close().await;
    result.map(|_| ()).and(closed.map_err(CliError::from))
}

pub async fn run_ssb(cmd: SsbCommand) -> CliResult {
    match cmd {
        SsbCommand::Queries => {
            for (name, sql) in ssb::QUERIES {
                println!("-- {name}\n{sql};");
            }
            Ok(())
        }
        SsbCommand::Schema { sorted } => {
            for (_, sql) in ssb::ddl(sorted) {
                println!("{sql};");
            }
            Ok(())
        }
        SsbCommand::Generate { sf, dir, chunks } => {
            let progress = Arc::new(ssb::GenProgress::default());
            let bar = stats::progress_bar(
                "generate [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} orders ({per_sec})",
            );
            let started = Instant::now();
            let generating = {
                let progress = progress.clone();
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || ssb::generate(sf, &dir, chunks, &progress))
            };
            tokio::pin!(generating);
            let files = loop {
                tokio::select! {
                    r = &mut generating => break r.map_err(|e| CliError::new(tierdb_store::ErrorKind::Bug, format!("the generator failed: {e}")))??,
                    () = tokio::time::sleep(Duration::from_millis(200)) => {
                        bar.set_length(progress.orders_total.load(Ordering::Relaxed));
                        bar.set_position(progress.orders_done.load(Ordering::Relaxed));
                    }
                }
            };
            bar.finish_and_clear();
            let bytes: u64 = files
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum();
            println!(
                "SSB SF {sf}: {} files, {} in {:.1} s into {}",
                files.len(),
                ByteSize(bytes),
                started.elapsed().as_secs_f64(),
                dir.display()
            );
            Ok(())
        }
        SsbCommand::Load(args) => {
            let SsbLoadArgs {
                db,
                dir,
                unsorted,
                engine: eargs,
                kv,
            } = *args;
            let files = ssb::files_in(&dir)?;
            let (engine, handle) = open_engine(&db, &kv, &eargs, Role::Writer).await?;
            let threads = eargs.options().threads;
            let result = async {
                let mut total = (0u64, 0u64, Duration::ZERO);
                for (table, sql) in ssb::ddl(!unsorted) {
                    engine.sql(&format!("DROP TABLE IF EXISTS {table}")).await?;
                    engine.sql(&sql).await?;
                    let paths = files
                        .iter()
                        .find(|(t, _)| *t == table)
                        .map(|(_, p)| p.clone())
                        .unwrap_or_default();
                    let options = ImportOptions {
                        format: Some(Format::Tbl),
                        delimiter: None,
                        header: Some(false),
                        max_rejects: 0,
                        reject_file: PathBuf::from(format!("{table}.rejects")),
                        threads,
                        transaction: None,
                        time_zone: None,
                    };
                    let s = import_with_progress(&engine, &table, &paths, &options).await?;
                    total.0 += s.rows;
                    total.1 += s.bytes;
                    total.2 += s.elapsed;
                }
                println!(
                    "SSB loaded{}: {} rows, {} in {:.2} s: {:.0} rows/s, {:.1} MB/s",
                    if unsorted {
                        " (unsorted)"
                    } else {
                        " (sorted on ingest)"
                    },
                    total.0,
                    ByteSize(total.1),
                    total.2.as_secs_f64(),
                    total.0 as f64 / total.2.as_secs_f64().max(1e-9),
                    total.1 as f64 / 1e6 / total.2.as_secs_f64().max(1e-9)
                );
                Ok::<_, CliError>(())
            }
            .await;
            let closed = handle.close().await;
            result.and(closed.map_err(CliError::from))
        }
    }
}
