//! Rows put in a table's ingest order on every core (what `import`, `INSERT … SELECT`,
//! UPDATE/DELETE rewrites, MERGE and ALTER write through, `write::sorted_plan`).
//!
//! DataFusion's plan for this is a `SortExec` per input partition and a
//! `SortPreservingMergeExec` over them: the final merge runs on one thread, and the sorted
//! import of SSB SF 10 used 1.6 of 2 cores behind it (docs/benchmarks.md). Here, while the
//! rows fit the query's memory pool:
//!
//! ```text
//!   partitions ──(one task each)──> kept batches ──> sort columns as Arrow rows (per batch, all cores)
//!        ──> (8-byte key prefix, batch, row) entries, sorted by rayon's parallel sort
//!        ──> output gathered in chunks of OUTPUT_ROWS, several chunks at once, sent in order
//! ```
//!
//! Arrow's row format compares as bytes, so the first 8 bytes of a row, zero-padded and
//! read big-endian, order rows as the full rows do wherever they differ; only equal prefixes
//! compare the full rows (never when every row fits in 8 bytes: a date, an integer key).
//! There is no merge on one thread; every step runs on all cores.
//!
//! Invariants:
//! 1. The output holds every input row exactly once, in the ordering; rows with equal keys
//!    come in an unspecified order (as from `SortExec`).
//! 2. Every kept batch, the rows and the entries are charged to one reservation of the
//!    query's memory pool before they are kept. A refusal hands everything read so far, and
//!    the rest of every partition, to one `SortExec`, which spills: no row is lost or read
//!    twice, and a pool too small still sorts.
//! 3. An error from any input partition ends the output with that error, and the tasks
//!    reading the other partitions are stopped.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::interleave_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, PhysicalSortExpr,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    ChildStats, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    StatisticsArgs,
};
use futures::{StreamExt, TryStreamExt, stream};
use rayon::prelude::*;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Rows per output batch: large enough that gathering one is worth a task, small enough
/// that several are in flight without holding much memory.
const OUTPUT_ROWS: usize = 64 * 1024;

/// Bytes an entry of the sort takes.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

/// One row to sort: its key's first 8 bytes, then where it is. Field order is the order
/// `Ord` compares in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    prefix: u64,
    batch: u32,
    row: u32,
}

/// Whether [`ParallelSortExec`] sorts in memory (a session setting,
/// `EngineOptions::parallel_sort`, on when absent); `false` runs DataFusion's per-partition
/// sort and merge instead, for an A/B in one process.
#[derive(Debug, Clone, Copy)]
pub struct ParallelSort(pub bool);

/// Sorts its input's partitions into one partition (see the module doc).
#[derive(Debug)]
pub struct ParallelSortExec {
    input: Arc<dyn ExecutionPlan>,
    ordering: LexOrdering,
    properties: Arc<PlanProperties>,
}

impl ParallelSortExec {
    pub fn new(ordering: LexOrdering, input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new_with_orderings(input.schema(), [ordering.clone()]),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        ParallelSortExec {
            input,
            ordering,
            properties,
        }
    }
}

impl DisplayAs for ParallelSortExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParallelSortExec: expr=[{}]", self.ordering)
    }
}

impl ExecutionPlan for ParallelSortExec {
    fn name(&self) -> &str {
        "ParallelSortExec"
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        for e in self.ordering.iter() {
            if f(&e.expr)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("a sort has one input".into()))?;
        Ok(Arc::new(ParallelSortExec::new(
            self.ordering.clone(),
            input,
        )))
    }

    fn child_stats_requests(&self, _partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(None)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        // One partition: all of the input's rows.
        Ok(input_stats[0].clone())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ParallelSortExec has one partition, not {partition}"
            )));
        }
        let (input, ordering) = (self.input.clone(), self.ordering.clone());
        let on = context
            .session_config()
            .get_extension::<ParallelSort>()
            .is_none_or(|p| p.0);
        if !on {
            let sort = SortExec::new(ordering.clone(), input).with_preserve_partitioning(true);
            return SortPreservingMergeExec::new(ordering, Arc::new(sort)).execute(0, context);
        }
        let rows = stream::once(sort(input, ordering, context)).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), rows)))
    }
}

/// What reading the input left: every batch kept, or, when the pool refused one, the
/// batches kept so far and the unread rest of each partition.
enum Read {
    All(Vec<RecordBatch>),
    Over {
        kept: Vec<RecordBatch>,
        rest: Vec<SendableRecordBatchStream>,
    },
}

async fn sort(
    input: Arc<dyn ExecutionPlan>,
    ordering: LexOrdering,
    ctx: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    let schema = input.schema();
    let reservation = MemoryConsumer::new("ParallelSortExec")
        .with_can_spill(true)
        .register(ctx.memory_pool());
    let batches = match read_all(&input, &ctx, &reservation).await? {
        Read::All(batches) => batches,
        Read::Over { kept, rest } => {
            drop(reservation);
            return spilling_sort(schema, ordering, kept, rest, ctx);
        }
    };
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows == 0 {
        return Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream::empty(),
        )));
    }
    if u32::try_from(batches.len()).is_err()
        || batches.iter().any(|b| u32::try_from(b.num_rows()).is_err())
    {
        drop(reservation);
        return spilling_sort(schema, ordering, batches, Vec::new(), ctx);
    }
    let keys: Vec<PhysicalSortExpr> = ordering.iter().cloned().collect();
    let fields = keys
        .iter()
        .map(|k| {
            Ok(SortField::new_with_options(
                k.expr.data_type(&schema)?,
                k.options,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let converter = RowConverter::new(fields)?;
    let sorted = tokio::task::spawn_blocking(move || {
        match sorted_entries(&batches, &keys, &converter, &reservation)? {
            Some(order) => Ok::<_, DataFusionError>(Ok((batches, order, reservation))),
            None => Ok(Err(batches)),
        }
    })
    .await
    .map_err(|e| DataFusionError::External(Box::new(e)))??;
    match sorted {
        Ok((batches, order, reservation)) => Ok(gather(schema, batches, order, reservation)),
        // The reservation is gone with the closure: the spilling sort charges its own.
        Err(batches) => spilling_sort(schema, ordering, batches, Vec::new(), ctx),
    }
}

/// Reads every partition at once (one task each), keeping each batch the pool accepts.
async fn read_all(
    input: &Arc<dyn ExecutionPlan>,
    ctx: &Arc<TaskContext>,
    reservation: &MemoryReservation,
) -> Result<Read> {
    let partitions = input.properties().output_partitioning().partition_count();
    let (tx, mut rx) = mpsc::channel::<Result<RecordBatch>>(partitions.max(1) * 2);
    // Each task hands back its stream when the channel closes under it (the pool refused
    // a batch), with the item it could not send. It stops waiting for its next item then
    // too: the partitions may be fed by one thread (an import's reader) that is blocked
    // on another, full partition, and a stream's `next` is cancel-safe.
    type Unsent = Option<(SendableRecordBatchStream, Option<Result<RecordBatch>>)>;
    let mut tasks: JoinSet<Unsent> = JoinSet::new();
    for p in 0..partitions {
        let mut stream = input.execute(p, ctx.clone())?;
        let tx = tx.clone();
        tasks.spawn(async move {
            loop {
                let item = tokio::select! {
                    biased;
                    () = tx.closed() => return Some((stream, None)),
                    item = stream.next() => item,
                };
                let item = item?;
                if let Err(mpsc::error::SendError(item)) = tx.send(item).await {
                    return Some((stream, Some(item)));
                }
            }
        });
    }
    drop(tx);
    let mut kept = Vec::new();
    let mut over = false;
    // Invariant 3: an error returns here, and dropping `tasks` stops the others.
    while let Some(item) = rx.recv().await {
        let batch = item?;
        if batch.num_rows() == 0 {
            continue;
        }
        if !over && reservation.try_grow(batch.get_array_memory_size()).is_err() {
            // Invariant 2: no further sends; what is queued is still received below.
            over = true;
            rx.close();
        }
        kept.push(batch);
    }
    let mut rest = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let done = done.map_err(|e| DataFusionError::External(Box::new(e)))?;
        if let Some((stream, unsent)) = done {
            kept.extend(unsent.transpose()?);
            rest.push(stream);
        }
    }
    Ok(if over {
        Read::Over { kept, rest }
    } else {
        Read::All(kept)
    })
}

/// The entries of every row of `batches`, sorted by the ordering.
fn sorted_entries(
    batches: &[RecordBatch],
    keys: &[PhysicalSortExpr],
    converter: &RowConverter,
    reservation: &MemoryReservation,
) -> Result<Option<Vec<Entry>>> {
    let rows: Vec<Rows> = batches
        .par_iter()
        .map(|b| {
            let columns = keys
                .iter()
                .map(|k| k.expr.evaluate(b)?.into_array(b.num_rows()))
                .collect::<Result<Vec<_>>>()?;
            Ok(converter.convert_columns(&columns)?)
        })
        .collect::<Result<Vec<_>>>()?;
    // Invariant 2: the rows and the entries.
    let total: usize = rows.iter().map(|r| r.num_rows()).sum();
    let row_bytes = rows.iter().map(Rows::size).sum::<usize>();
    if reservation
        .try_grow(row_bytes + total * ENTRY_BYTES)
        .is_err()
    {
        return Ok(None);
    }
    // One vector, each batch filling its own slice of it.
    let mut entries = vec![
        Entry {
            prefix: 0,
            batch: 0,
            row: 0
        };
        total
    ];
    let mut slices = Vec::with_capacity(rows.len());
    let mut rest = entries.as_mut_slice();
    for r in &rows {
        let (head, tail) = rest.split_at_mut(r.num_rows());
        slices.push(head);
        rest = tail;
    }
    let all_short = slices
        .into_par_iter()
        .zip(rows.par_iter())
        .enumerate()
        .map(|(b, (slice, r))| {
            let mut short = true;
            for (i, e) in slice.iter_mut().enumerate() {
                let row = r.row(i);
                let bytes = row.as_ref();
                short &= bytes.len() <= 8;
                *e = Entry {
                    prefix: prefix(bytes),
                    batch: b as u32,
                    row: i as u32,
                };
            }
            short
        })
        .reduce(|| true, |a, b| a && b);
    if all_short {
        // The prefix is the whole key.
        entries.par_sort_unstable();
    } else {
        entries.par_sort_unstable_by(|a, b| {
            a.prefix
                .cmp(&b.prefix)
                .then_with(|| {
                    rows[a.batch as usize]
                        .row(a.row as usize)
                        .cmp(&rows[b.batch as usize].row(b.row as usize))
                })
                .then_with(|| (a.batch, a.row).cmp(&(b.batch, b.row)))
        });
    }
    drop(rows);
    reservation.shrink(row_bytes);
    Ok(Some(entries))
}

/// The first 8 bytes of a row, zero-padded, as a big-endian number: orders rows as their
/// bytes do wherever two prefixes differ.
fn prefix(bytes: &[u8]) -> u64 {
    let mut p = [0u8; 8];
    let n = bytes.len().min(8);
    p[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(p)
}

/// The sorted rows as batches of [`OUTPUT_ROWS`], gathered several at once on the blocking
/// pool and sent in order.
fn gather(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    order: Vec<Entry>,
    reservation: MemoryReservation,
) -> SendableRecordBatchStream {
    let in_flight = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (tx, rx) = mpsc::channel::<Result<RecordBatch>>(in_flight);
    tokio::task::spawn_blocking(move || {
        let _reservation = reservation;
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        for group in order.chunks(OUTPUT_ROWS * in_flight) {
            let chunks: Vec<Result<RecordBatch>> = group
                .par_chunks(OUTPUT_ROWS)
                .map(|chunk| {
                    let indices: Vec<(usize, usize)> = chunk
                        .iter()
                        .map(|e| (e.batch as usize, e.row as usize))
                        .collect();
                    Ok(interleave_record_batch(&refs, &indices)?)
                })
                .collect();
            for c in chunks {
                let failed = c.is_err();
                if tx.blocking_send(c).is_err() || failed {
                    return;
                }
            }
        }
    });
    let rows = stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, rows))
}

/// DataFusion's sort, which spills: the batches already read, then the rest of every
/// partition (read as they come), as one input of one `SortExec`. One sorter has the whole
/// pool: per-partition sorters and a merge over them need memory the pool, already full
/// once this runs, may not give (measured: small pools failed with ResourcesExhausted).
fn spilling_sort(
    schema: SchemaRef,
    ordering: LexOrdering,
    kept: Vec<RecordBatch>,
    rest: Vec<SendableRecordBatchStream>,
    ctx: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    let rows = stream::iter(kept.into_iter().map(Ok)).chain(stream::select_all(rest));
    let input: Arc<dyn PartitionStream> = Arc::new(OneShot::new(
        schema.clone(),
        Box::pin(RecordBatchStreamAdapter::new(schema.clone(), rows)),
    ));
    let input = Arc::new(StreamingTableExec::try_new(
        schema,
        vec![input],
        None,
        Vec::new(),
        false,
        None,
    )?);
    SortExec::new(ordering, input).execute(0, ctx)
}

/// A partition that is a stream already running: it can be executed once.
struct OneShot {
    schema: SchemaRef,
    stream: parking_lot::Mutex<Option<SendableRecordBatchStream>>,
}

impl OneShot {
    fn new(schema: SchemaRef, stream: SendableRecordBatchStream) -> Self {
        OneShot {
            schema,
            stream: parking_lot::Mutex::new(Some(stream)),
        }
    }
}

impl fmt::Debug for OneShot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OneShot").finish_non_exhaustive()
    }
}

impl PartitionStream for OneShot {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        match self.stream.lock().take() {
            Some(s) => s,
            None => Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                stream::once(async {
                    Err(DataFusionError::Internal(
                        "a partition being sorted was read twice".into(),
                    ))
                }),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use datafusion::arrow::array::{Array, Int32Array, Int64Array, StringArray};
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::execution::memory_pool::FairSpillPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::collect;

    use super::*;

    /// SplitMix64, so a failure replays.
    struct Gen(u64);

    impl Gen {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % n
        }
    }

    type Row = (Option<i32>, Option<String>, i64);

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("id", DataType::Int64, false),
        ]))
    }

    /// `parts` partitions of at least `batches` random batches each: small keys with NULLs
    /// and repeats, strings of 0-20 bytes sharing prefixes (so 8-byte prefixes tie), a
    /// unique id per row.
    fn data(seed: u64, parts: usize, batches: u64) -> Vec<Vec<RecordBatch>> {
        let mut g = Gen(seed);
        let mut id = 0i64;
        (0..parts)
            .map(|_| {
                (0..batches + g.below(6))
                    .map(|_| {
                        let n = g.below(3000) as usize;
                        let mut k = Vec::with_capacity(n);
                        let mut s: Vec<Option<String>> = Vec::with_capacity(n);
                        let mut ids = Vec::with_capacity(n);
                        for _ in 0..n {
                            k.push((g.below(10) != 0).then(|| g.below(50) as i32 - 25));
                            s.push((g.below(8) != 0).then(|| {
                                let len = g.below(21) as usize;
                                (0..len)
                                    .map(|_| (b'a' + g.below(3) as u8) as char)
                                    .collect()
                            }));
                            ids.push(id);
                            id += 1;
                        }
                        RecordBatch::try_new(
                            schema(),
                            vec![
                                Arc::new(Int32Array::from(k)),
                                Arc::new(StringArray::from(s)),
                                Arc::new(Int64Array::from(ids)),
                            ],
                        )
                        .unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    fn rows(batches: &[RecordBatch]) -> Vec<Row> {
        let mut out = Vec::new();
        for b in batches {
            let k = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
            let s = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            let id = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
            for i in 0..b.num_rows() {
                out.push((
                    k.is_valid(i).then(|| k.value(i)),
                    s.is_valid(i).then(|| s.value(i).to_string()),
                    id.value(i),
                ));
            }
        }
        out
    }

    /// Sorts `parts` by (k, s), ascending with NULLs first (a table's ingest order), in a
    /// pool of `pool` bytes.
    async fn run(parts: &[Vec<RecordBatch>], pool: usize) -> Vec<RecordBatch> {
        assert!(pool >= POOL_FLOOR);
        let input = MemorySourceConfig::try_new_exec(parts, schema(), None).unwrap();
        let options = SortOptions {
            descending: false,
            nulls_first: true,
        };
        let ordering = LexOrdering::new(["k", "s"].map(|c| PhysicalSortExpr {
            expr: col(c, &schema()).unwrap(),
            options,
        }))
        .unwrap();
        collect(
            Arc::new(ParallelSortExec::new(ordering, input)),
            context(pool),
        )
        .await
        .unwrap()
    }

    /// The smallest pool the spilling sort is given here: room for a few batches of
    /// [`data`] and for its merge.
    const POOL_FLOOR: usize = 16 << 20;

    /// A task context with a pool of `pool` bytes, fair between spilling consumers as the
    /// engine's (`sql/mod.rs`), whose sorts reserve 1 MiB each for merging.
    fn context(pool: usize) -> Arc<TaskContext> {
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(pool)))
            .build_arc()
            .unwrap();
        let config =
            datafusion::prelude::SessionConfig::new().with_sort_spill_reservation_bytes(1 << 20);
        Arc::new(
            TaskContext::default()
                .with_session_config(config)
                .with_runtime(runtime),
        )
    }

    fn bytes(batches: &[RecordBatch]) -> usize {
        batches.iter().map(RecordBatch::get_array_memory_size).sum()
    }

    /// Invariant 1, against Rust's sort of the same rows: every row once, keys in order
    /// (`Option`'s order is NULLs first, as the ingest order).
    fn check(parts: &[Vec<RecordBatch>], out: &[RecordBatch]) {
        let got = rows(out);
        let keys: Vec<_> = got.iter().map(|r| (r.0, r.1.clone())).collect();
        let mut want = rows(&parts.concat());
        want.sort();
        let want_keys: Vec<_> = want.iter().map(|r| (r.0, r.1.clone())).collect();
        assert_eq!(keys, want_keys);
        let mut ids: Vec<i64> = got.iter().map(|r| r.2).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..want.len() as i64).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sorts_every_row_once_in_memory() {
        for seed in 0..20 {
            let parts = data(seed, 1 + (seed as usize % 4), 1);
            let out = run(&parts, 256 << 20).await;
            assert!(bytes(&parts.concat()) < 64 << 20);
            check(&parts, &out);
        }
    }

    /// Invariant 2: a pool that refuses part-way hands the rest to the spilling sort.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pool_too_small_still_sorts_every_row_once() {
        for seed in 100..102 {
            let parts = data(seed, 3, 300);
            // Smaller than the batches: the parallel sort cannot keep them all.
            assert!(bytes(&parts.concat()) > 2 * POOL_FLOOR);
            let out = run(&parts, POOL_FLOOR).await;
            check(&parts, &out);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_rows_sort_to_no_rows() {
        let out = run(&[vec![], vec![]], POOL_FLOOR).await;
        assert_eq!(out.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    }

    /// Invariant 2 with partitions fed by one thread, alternately, through channels of one
    /// batch (as an import's reader feeds its parsers' partitions): the switch to the
    /// spilling sort must not wait for a partition the thread cannot reach.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partitions_fed_by_one_thread_switch_to_the_spilling_sort() {
        let parts = data(42, 2, 450);
        let all: Vec<RecordBatch> = parts.concat();
        assert!(bytes(&all) > 2 * POOL_FLOOR);
        let (tx0, rx0) = mpsc::channel::<Result<RecordBatch>>(1);
        let (tx1, rx1) = mpsc::channel::<Result<RecordBatch>>(1);
        let feed = all.clone();
        let feeder = std::thread::spawn(move || {
            for (i, b) in feed.into_iter().enumerate() {
                let tx = if i % 2 == 0 { &tx0 } else { &tx1 };
                if tx.blocking_send(Ok(b)).is_err() {
                    return;
                }
            }
        });
        let partition = |rx: mpsc::Receiver<Result<RecordBatch>>| -> Arc<dyn PartitionStream> {
            let s = stream::unfold(rx, |mut rx| async move { Some((rx.recv().await?, rx)) });
            Arc::new(OneShot::new(
                schema(),
                Box::pin(RecordBatchStreamAdapter::new(schema(), s)),
            ))
        };
        let input = Arc::new(
            StreamingTableExec::try_new(
                schema(),
                vec![partition(rx0), partition(rx1)],
                None,
                Vec::new(),
                false,
                None,
            )
            .unwrap(),
        );
        let ordering = LexOrdering::new(["k", "s"].map(|c| PhysicalSortExpr {
            expr: col(c, &schema()).unwrap(),
            options: SortOptions {
                descending: false,
                nulls_first: true,
            },
        }))
        .unwrap();
        let sort = collect(
            Arc::new(ParallelSortExec::new(ordering, input)),
            context(POOL_FLOOR),
        );
        // A deadlock fails here instead of hanging the suite.
        let out = tokio::time::timeout(std::time::Duration::from_secs(300), sort)
            .await
            .expect("the sort finished")
            .unwrap();
        feeder.join().unwrap();
        check(&[all], &out);
    }

    /// Invariant 3: a partition's error is the sort's error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_error_in_one_partition_fails_the_sort() {
        let parts = data(7, 2, 1);
        let good = stream::iter(parts[0].clone().into_iter().map(Ok));
        let bad = stream::iter(parts[1].clone().into_iter().map(Ok)).chain(stream::once(async {
            Err(DataFusionError::Execution("bad row in partition 1".into()))
        }));
        let partitions: Vec<Arc<dyn PartitionStream>> = vec![
            Arc::new(OneShot::new(
                schema(),
                Box::pin(RecordBatchStreamAdapter::new(schema(), good)),
            )),
            Arc::new(OneShot::new(
                schema(),
                Box::pin(RecordBatchStreamAdapter::new(schema(), bad)),
            )),
        ];
        let input = Arc::new(
            StreamingTableExec::try_new(schema(), partitions, None, Vec::new(), false, None)
                .unwrap(),
        );
        let ordering = LexOrdering::new([PhysicalSortExpr {
            expr: col("k", &schema()).unwrap(),
            options: SortOptions::default(),
        }])
        .unwrap();
        let err = collect(
            Arc::new(ParallelSortExec::new(ordering, input)),
            Arc::new(TaskContext::default()),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("bad row in partition 1"), "{err}");
    }

    #[test]
    fn prefixes_order_as_the_bytes_do() {
        let cases: [&[u8]; 6] = [b"", b"\0", b"ab", b"ab\0", b"abcdefgh", b"abcdefghi"];
        for a in cases {
            for b in cases {
                if prefix(a) < prefix(b) {
                    assert!(a < b, "{a:?} {b:?}");
                }
            }
        }
    }
}
