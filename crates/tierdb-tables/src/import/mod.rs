//! Bulk import (what ColumnStore's cpimport is): CSV, TSV, pipe-delimited `.tbl` (SSB's
//! generator output, one trailing `|` per line) and Parquet files into one table.
//!
//! One reader thread splits records (quotes and escapes handled by the `csv` crate) into
//! reused record buffers and hands chunks of them to parser threads, which build Arrow
//! batches, each parser feeding its own input partition; rows that do not parse go to the
//! reject file with their file, line and reason. The partitions are sorted together by the
//! table's ingest order on every core (`parsort.rs`; DataFusion's spilling sort beyond the
//! memory limit), cut into segments, encoded on every core and uploaded; the segments are
//! committed in one KV batch at the end. More rejects than `max_rejects`, or any other error, aborts the import: the
//! uploaded segments are deleted and nothing is committed.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use parking_lot::Mutex;

use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;
use crate::write::{sorted_plan, write_plan};

/// Records per chunk handed to a parser thread.
const CHUNK_RECORDS: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Tsv,
    /// `|`-delimited, every line ending in `|` (dbgen's output).
    Tbl,
    Parquet,
    /// PostgreSQL's COPY text format as the server spools it: quoted CSV in which a NULL
    /// is the one unquoted byte [`COPY_NULL`] (never in UTF-8 text), so an empty field is
    /// an empty string, as in PostgreSQL. Not chosen from a file name.
    CopyText,
}

/// The NULL field of [`Format::CopyText`].
pub const COPY_NULL: u8 = 0xFF;

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s.to_ascii_lowercase().as_str() {
            "csv" => Format::Csv,
            "tsv" | "tab" => Format::Tsv,
            "tbl" | "pipe" => Format::Tbl,
            "parquet" => Format::Parquet,
            _ => return None,
        })
    }

    /// From the file name (`.csv`, `.tsv`, `.tbl`, `.parquet`, also with `.N` shard suffixes).
    pub fn detect(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        let parts: Vec<&str> = name.split('.').skip(1).collect();
        parts.into_iter().rev().find_map(Format::parse)
    }
}

#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Forces a format for every file (otherwise by extension).
    pub format: Option<Format>,
    /// Overrides the delimiter of CSV-like formats.
    pub delimiter: Option<u8>,
    /// Whether CSV/TSV files start with a header line (default: yes; `.tbl` never).
    pub header: Option<bool>,
    /// More rejected rows than this aborts the import, committing nothing.
    pub max_rejects: u64,
    /// Where rejected rows are written (created only if there are any).
    pub reject_file: PathBuf,
    /// Parser threads.
    pub threads: usize,
    /// Leave the rows to this transaction's commit instead of committing them (COPY
    /// inside BEGIN … COMMIT).
    pub transaction: Option<Arc<crate::txn::Transaction>>,
    /// The zone TIMESTAMPTZ text without an offset is read in (`2024-01-01 10:00` is
    /// 10:00 there), as PostgreSQL reads it in the session's TimeZone; `None`: UTC.
    pub time_zone: Option<Tz>,
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct ImportProgress {
    pub bytes_total: AtomicU64,
    pub bytes_read: AtomicU64,
    pub rows_parsed: AtomicU64,
    pub rows_rejected: AtomicU64,
    pub rows_written: AtomicU64,
    /// Set while the sorted rows are being written (after the whole input was read).
    pub writing: AtomicBool,
}

#[derive(Debug, Clone)]
pub struct ImportSummary {
    pub files: usize,
    pub bytes: u64,
    pub rows: u64,
    pub rejected: u64,
    pub segments: usize,
    pub segment_bytes: u64,
    pub elapsed: Duration,
    pub reject_file: Option<PathBuf>,
}

impl ImportSummary {
    pub fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Imports `files` into `table`. On success every row is committed at once; on failure
/// nothing is.
pub async fn import(
    tables: Arc<Tables>,
    table: &str,
    files: &[PathBuf],
    options: &ImportOptions,
    ctx: Arc<TaskContext>,
    progress: Arc<ImportProgress>,
) -> Result<ImportSummary> {
    let started = Instant::now();
    let def = tables.require(table).await?;
    let Reading {
        input,
        reader,
        rejects,
        bytes: total,
    } = start_reading(&def, files, options, &progress)?;
    if def.is_row_table() {
        let result = crate::rows::insert_plan(
            &tables,
            &def,
            input,
            ctx,
            options.transaction.as_ref(),
            &|n| {
                progress.writing.store(true, Ordering::Relaxed);
                progress.rows_written.fetch_add(n, Ordering::Relaxed);
            },
        )
        .await;
        let read = reader
            .join()
            .map_err(|_| TableError::Import("the import reader thread panicked".into()))?;
        let rows = match (read, result) {
            (Err(e), _) | (Ok(()), Err(e)) => return Err(nothing_committed(e)),
            (Ok(()), Ok(n)) => n,
        };
        rejects.finish()?;
        if rows == 0 {
            return Err(TableError::Import(
                "the input holds no rows; nothing was imported".into(),
            ));
        }
        return Ok(ImportSummary {
            files: files.len(),
            bytes: total,
            rows,
            rejected: rejects.count(),
            segments: 0,
            segment_bytes: 0,
            elapsed: started.elapsed(),
            reject_file: (rejects.count() > 0).then(|| options.reject_file.clone()),
        });
    }
    let plan = sorted_plan(&def, input)?;
    let written = progress.clone();
    let result = write_plan(&tables, &def, plan, ctx, &move |n| {
        written.writing.store(true, Ordering::Relaxed);
        written.rows_written.fetch_add(n, Ordering::Relaxed);
    })
    .await;
    // The reader has finished (the stream ended) or is stopping (the receiver is gone).
    let read = reader
        .join()
        .map_err(|_| TableError::Import("the import reader thread panicked".into()))?;
    let segments = match (read, result) {
        (Err(e), Ok(segments)) => {
            tables.discard(&segments).await;
            return Err(e);
        }
        (Err(e), Err(_)) | (Ok(()), Err(e)) => return Err(nothing_committed(e)),
        (Ok(()), Ok(segments)) => segments,
    };
    rejects.finish()?;
    if segments.iter().all(|s| s.rows == 0) {
        tables.discard(&segments).await;
        let why = match rejects.count() {
            0 => "the input holds no rows".to_string(),
            n => format!(
                "all {n} rows were rejected (reasons in {})",
                options.reject_file.display()
            ),
        };
        return Err(TableError::Import(format!("{why}; nothing was imported")));
    }
    tierdb_store::testpoint::pause_at("import-commit");
    let segments = match &options.transaction {
        Some(tx) => {
            tx.push(crate::tables::PendingWrite {
                table: def.clone(),
                segments: segments.clone(),
                replace: false,
                removed: Vec::new(),
            });
            segments
        }
        // On failure commit_segments deletes the files if nothing was committed.
        None => tables
            .commit_segments(&def, segments, false)
            .await
            .map_err(nothing_committed)?,
    };
    Ok(ImportSummary {
        files: files.len(),
        bytes: total,
        rows: segments.iter().map(|s| s.rows).sum(),
        rejected: rejects.count(),
        segments: segments.len(),
        segment_bytes: segments.iter().map(|s| s.bytes).sum(),
        elapsed: started.elapsed(),
        reject_file: (rejects.count() > 0).then(|| options.reject_file.clone()),
    })
}

/// Files being read as rows of a table's columns: the rows as one plan, and the thread that
/// reads and parses them (it ends when the plan's streams end or are dropped).
pub(crate) struct Reading {
    pub(crate) input: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    reader: std::thread::JoinHandle<Result<()>>,
    rejects: Arc<Rejects>,
    pub(crate) bytes: u64,
}

impl Reading {
    /// Waits for the reader and closes the reject file: the reader's error (a row that
    /// does not parse, an unreadable file) is the one to report, also when the consumer of
    /// [`Reading::input`] failed because of it. Returns how many rows were rejected.
    pub(crate) fn finish(self) -> Result<u64> {
        let Reading {
            input,
            reader,
            rejects,
            ..
        } = self;
        // Unread partitions would keep the reader waiting to send to them.
        drop(input);
        reader
            .join()
            .map_err(|_| TableError::Import("the import reader thread panicked".into()))??;
        rejects.finish()?;
        Ok(rejects.count())
    }
}

/// Starts reading `files` as rows of `def`'s columns (in their order): one input partition
/// per parser thread.
pub(crate) fn start_reading(
    def: &TableDef,
    files: &[PathBuf],
    options: &ImportOptions,
    progress: &Arc<ImportProgress>,
) -> Result<Reading> {
    if files.is_empty() {
        return Err(TableError::Import("no input files given".into()));
    }
    let mut plans = Vec::new();
    let mut total = 0u64;
    for f in files {
        let meta = std::fs::metadata(f)
            .map_err(|e| TableError::Import(format!("{}: {e}", f.display())))?;
        if !meta.is_file() {
            return Err(TableError::Import(format!("{}: not a file", f.display())));
        }
        total += meta.len();
        let format = match options.format.or_else(|| Format::detect(f)) {
            Some(fmt) => fmt,
            None => {
                return Err(TableError::Import(format!(
                    "{}: cannot tell the format from the name; give --format csv, tsv, tbl \
                     or parquet",
                    f.display()
                )));
            }
        };
        plans.push((f.clone(), format));
    }
    progress.bytes_total.store(total, Ordering::Relaxed);
    let schema = def.schema();
    let rejects = Arc::new(Rejects::new(
        options.reject_file.clone(),
        options.max_rejects,
        progress.clone(),
    ));
    // One input partition per parser thread: the sort reads every partition at once (a
    // task each under a multi-threaded runtime; `parsort.rs`).
    let partitions = options.threads.max(1);
    let mut senders = Vec::with_capacity(partitions);
    let mut inputs: Vec<Arc<dyn PartitionStream>> = Vec::with_capacity(partitions);
    for _ in 0..partitions {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, DataFusionError>>(8);
        senders.push(tx);
        inputs.push(Arc::new(ChannelPartition {
            schema: schema.clone(),
            rx: Mutex::new(Some(rx)),
        }));
    }
    // Parquet is read by one thread: its batches go round the partitions only where they
    // are consumed at once (otherwise one full partition would wait for another).
    let spread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let reader = {
        let def = def.clone();
        let options = options.clone();
        let rejects = rejects.clone();
        let progress = progress.clone();
        std::thread::Builder::new()
            .name("tierdb-import".into())
            .spawn(move || {
                read_all(
                    &def, &plans, &options, &rejects, &progress, &senders, spread,
                )
            })
            .map_err(TableError::Io)?
    };
    let input: Arc<dyn datafusion::physical_plan::ExecutionPlan> = Arc::new(
        StreamingTableExec::try_new(schema.clone(), inputs, None, Vec::new(), false, None)?,
    );
    Ok(Reading {
        input,
        reader,
        rejects,
        bytes: total,
    })
}

fn nothing_committed(e: TableError) -> TableError {
    // Errors raised inside the reader come back through DataFusion wrapped; unwrap them.
    let msg = match e {
        TableError::DataFusion(DataFusionError::External(inner)) => inner.to_string(),
        TableError::DataFusion(other) => other.to_string(),
        other => other.to_string(),
    };
    TableError::Import(format!("{msg}; nothing was imported"))
}

/// One partition fed by the reader through a channel.
#[derive(Debug)]
struct ChannelPartition {
    schema: SchemaRef,
    rx: Mutex<Option<tokio::sync::mpsc::Receiver<Result<RecordBatch, DataFusionError>>>>,
}

impl PartitionStream for ChannelPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> datafusion::execution::SendableRecordBatchStream {
        let rx = self.rx.lock().take();
        let stream = futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            let item = rx.recv().await?;
            Some((item, Some(rx)))
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

type Sender = tokio::sync::mpsc::Sender<Result<RecordBatch, DataFusionError>>;

/// The reject file and count. Exceeding the cap is an error for the whole import.
#[derive(Debug)]
pub(crate) struct Rejects {
    path: PathBuf,
    max: u64,
    count: AtomicU64,
    out: Mutex<Option<BufWriter<File>>>,
    progress: Arc<ImportProgress>,
}

impl Rejects {
    fn new(path: PathBuf, max: u64, progress: Arc<ImportProgress>) -> Self {
        Rejects {
            path,
            max,
            count: AtomicU64::new(0),
            out: Mutex::new(None),
            progress,
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Records one bad row; fails once there are more than `max`.
    fn reject(&self, file: &Path, line: u64, reason: &str, raw: &[u8]) -> Result<()> {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        self.progress.rows_rejected.fetch_add(1, Ordering::Relaxed);
        {
            let mut out = self.out.lock();
            if out.is_none() {
                *out = Some(BufWriter::new(File::create(&self.path).map_err(|e| {
                    TableError::Import(format!(
                        "cannot create the reject file {}: {e}",
                        self.path.display()
                    ))
                })?));
            }
            if let Some(w) = out.as_mut() {
                writeln!(
                    w,
                    "{}:{line}: {reason}\t{}",
                    file.display(),
                    String::from_utf8_lossy(raw).trim_end()
                )?;
            }
        }
        if n > self.max {
            return Err(TableError::Import(format!(
                "{}:{line}: {reason}; that is {n} rejected rows, more than --max-rejects {} \
                 (the rejects are in {})",
                file.display(),
                self.max,
                self.path.display()
            )));
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        if let Some(w) = self.out.lock().as_mut() {
            w.flush()?;
        }
        Ok(())
    }
}

/// The reader thread: reads every file in turn; parser threads turn record chunks into
/// batches. Errors are also sent down the channel so the writer stops at once.
fn read_all(
    def: &TableDef,
    files: &[(PathBuf, Format)],
    options: &ImportOptions,
    rejects: &Arc<Rejects>,
    progress: &Arc<ImportProgress>,
    txs: &[Sender],
    spread: bool,
) -> Result<()> {
    let result = (|| -> Result<()> {
        for (path, format) in files {
            match format {
                Format::Parquet => {
                    let txs = if spread { txs } else { &txs[..1] };
                    read_parquet(def, path, progress, txs)?
                }
                _ => read_delimited(def, path, *format, options, rejects, progress, txs)?,
            }
        }
        Ok(())
    })();
    if let Err(e) = &result {
        for tx in txs {
            let _ = tx.blocking_send(Err(DataFusionError::External(Box::new(
                TableError::Import(e.to_string()),
            ))));
        }
    }
    result
}

fn read_parquet(
    def: &TableDef,
    path: &Path,
    progress: &ImportProgress,
    txs: &[Sender],
) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| {
        TableError::Import(format!(
            "{}: not a readable Parquet file: {e}",
            path.display()
        ))
    };
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
    let file_schema = builder.schema().clone();
    // Table columns by name from the file.
    let mut indices = Vec::with_capacity(def.columns.len());
    for c in &def.columns {
        match file_schema.index_of(&c.name) {
            Ok(i) => indices.push(i),
            Err(_) => {
                return Err(TableError::Import(format!(
                    "{}: has no column {} (it has: {})",
                    path.display(),
                    c.name,
                    file_schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    let schema = def.schema();
    let reader = builder.with_batch_size(8192).build().map_err(|e| bad(&e))?;
    for (k, batch) in reader.enumerate() {
        let tx = &txs[k % txs.len()];
        let batch = batch.map_err(|e| bad(&e))?;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(indices.len());
        for (c, &i) in def.columns.iter().zip(&indices) {
            let a = batch.column(i);
            let a = if a.data_type() == &c.ty.arrow() {
                a.clone()
            } else {
                cast(a, &c.ty.arrow()).map_err(|e| {
                    TableError::Import(format!(
                        "{}: column {} ({}) cannot be stored as {}: {e}",
                        path.display(),
                        c.name,
                        a.data_type(),
                        c.ty.sql()
                    ))
                })?
            };
            columns.push(a);
        }
        let out = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| TableError::Import(format!("{}: {e}", path.display())))?;
        progress
            .rows_parsed
            .fetch_add(out.num_rows() as u64, Ordering::Relaxed);
        if tx.blocking_send(Ok(out)).is_err() {
            return Ok(()); // the writer stopped; its error is reported
        }
    }
    progress.bytes_read.fetch_add(len, Ordering::Relaxed);
    Ok(())
}

/// A chunk of raw records and the line each starts on: `records[..used]` (the records
/// beyond are spare buffers to read into).
struct Chunk {
    lines: Vec<u64>,
    records: Vec<csv::ByteRecord>,
    used: usize,
}

#[allow(clippy::too_many_arguments)]
fn read_delimited(
    def: &TableDef,
    path: &Path,
    format: Format,
    options: &ImportOptions,
    rejects: &Arc<Rejects>,
    progress: &Arc<ImportProgress>,
    txs: &[Sender],
) -> Result<()> {
    let delimiter = options.delimiter.unwrap_or(match format {
        Format::Tsv => b'\t',
        Format::Tbl => b'|',
        _ => b',',
    });
    let header =
        !matches!(format, Format::Tbl | Format::CopyText) && options.header.unwrap_or(true);
    let zone: Tz = match options.time_zone {
        Some(z) => z,
        None => crate::catalog::UTC.parse()?,
    };
    let file = File::open(path)
        .map_err(|e| TableError::Import(format!("cannot open {}: {e}", path.display())))?;
    let counted = CountingReader {
        inner: BufReader::with_capacity(1 << 20, file),
        progress: progress.clone(),
    };
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(header)
        .flexible(true)
        .quoting(matches!(format, Format::Csv | Format::CopyText))
        .from_reader(counted);
    let threads = options.threads.max(1);
    let (chunk_tx, chunk_rx) = std::sync::mpsc::sync_channel::<Chunk>(threads * 2);
    // Parsed chunks come back empty of meaning but with their records' buffers, so the
    // reader reads into them instead of allocating a record per line.
    let (spare_tx, spare_rx) = std::sync::mpsc::sync_channel::<Chunk>(threads * 3 + 2);
    let chunk_rx = Arc::new(Mutex::new(chunk_rx));
    let failed: Arc<Mutex<Option<TableError>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        for i in 0..threads {
            let chunk_rx = chunk_rx.clone();
            let failed = failed.clone();
            let stop = stop.clone();
            // Each parser feeds its own partition.
            let tx = txs[i % txs.len()].clone();
            let spare_tx = spare_tx.clone();
            scope.spawn(move || {
                loop {
                    let chunk = { chunk_rx.lock().recv() };
                    let Ok(chunk) = chunk else { break };
                    let parsed = parse_chunk(def, path, format, &chunk, rejects, zone);
                    // The chunk's records go back to the reader, to be read into again.
                    let _ = spare_tx.try_send(chunk);
                    match parsed {
                        Ok(batch) => {
                            progress
                                .rows_parsed
                                .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                            if batch.num_rows() > 0 && tx.blocking_send(Ok(batch)).is_err() {
                                stop.store(true, Ordering::Relaxed);
                                break;
                            }
                        }
                        Err(e) => {
                            failed.lock().get_or_insert(e);
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            });
        }
        let fresh = || Chunk {
            lines: Vec::with_capacity(CHUNK_RECORDS),
            records: Vec::with_capacity(CHUNK_RECORDS),
            used: 0,
        };
        let mut chunk = fresh();
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if chunk.used == chunk.records.len() {
                chunk.records.push(csv::ByteRecord::new());
            }
            match reader.read_byte_record(&mut chunk.records[chunk.used]) {
                Ok(true) => {
                    let line = chunk.records[chunk.used].position().map_or(0, |p| p.line());
                    chunk.lines.push(line);
                    chunk.used += 1;
                    if chunk.used == CHUNK_RECORDS {
                        let mut next = spare_rx.try_recv().unwrap_or_else(|_| fresh());
                        next.lines.clear();
                        next.used = 0;
                        let full = std::mem::replace(&mut chunk, next);
                        if chunk_tx.send(full).is_err() {
                            break;
                        }
                    }
                }
                Ok(false) => break,
                Err(e) => {
                    let line = e.position().map_or(0, |p| p.line());
                    failed.lock().get_or_insert(TableError::Import(format!(
                        "{}:{line}: cannot read: {e}",
                        path.display()
                    )));
                    break;
                }
            }
        }
        if chunk.used > 0 {
            let _ = chunk_tx.send(chunk);
        }
        drop(chunk_tx);
    });
    match failed.lock().take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct CountingReader<R> {
    inner: R,
    progress: Arc<ImportProgress>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress
            .bytes_read
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

mod fields;
pub(crate) use fields::decode_all_types;

use fields::parse_chunk;
