//! The write path shared by bulk import and INSERT: sort by the table's ingest order
//! (`parsort.rs`; spilling to disk beyond the memory limit), cut into segments at the segment size and at
//! partition-key changes, upload, then one atomic catalog commit.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::compute::{cast, partition};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;
use tokio::task::JoinSet;

use crate::catalog::{ColumnType, SegmentMeta, TableDef};
use crate::error::{Result, TableError};
use crate::segment::{encode_segment, segment_path, upload};
use crate::tables::Tables;

/// Uploads in flight at once while writing.
const UPLOADS_IN_FLIGHT: usize = 4;

/// `plan` sorted by the table's partition key then sort key, into one partition: on every
/// core in memory, or, beyond the memory pool, by DataFusion's spilling sort (`parsort.rs`).
pub fn sorted_plan(def: &TableDef, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let order = def.ingest_order();
    let schema = plan.schema();
    let mut exprs = Vec::with_capacity(order.len());
    for c in &order {
        exprs.push(PhysicalSortExpr {
            expr: col(c, &schema)?,
            options: SortOptions {
                descending: false,
                nulls_first: true,
            },
        });
    }
    let Some(ordering) = LexOrdering::new(exprs) else {
        return Ok(plan);
    };
    Ok(Arc::new(crate::parsort::ParallelSortExec::new(
        ordering, plan,
    )))
}

/// Runs `plan` (all partitions merged) and writes its rows as segments of `def`; commits
/// nothing. On error every segment already uploaded is deleted again.
pub async fn write_plan(
    tables: &Tables,
    def: &TableDef,
    plan: Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
    on_rows: &(dyn Fn(u64) + Send + Sync),
) -> Result<Vec<SegmentMeta>> {
    let plan: Arc<dyn ExecutionPlan> = if plan.properties().output_partitioning().partition_count()
        > 1
    {
        Arc::new(datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec::new(plan))
    } else {
        plan
    };
    let stream = plan.execute(0, ctx)?;
    write_stream(tables, def, stream, on_rows).await
}

/// Writes `stream`'s rows (already in ingest order) as segments of `def`; commits nothing.
/// On error every segment already uploaded is deleted again.
pub async fn write_stream(
    tables: &Tables,
    def: &TableDef,
    stream: SendableRecordBatchStream,
    on_rows: &(dyn Fn(u64) + Send + Sync),
) -> Result<Vec<SegmentMeta>> {
    let mut w = SegmentWriter {
        tables,
        def,
        schema: def.schema(),
        pending: Vec::new(),
        pending_rows: 0,
        uploads: JoinSet::new(),
        done: Vec::new(),
    };
    match w.run(stream, on_rows).await {
        Ok(()) => Ok(w.done),
        Err(e) => {
            // Whatever is still uploading finishes first, so its file can be deleted too.
            while let Some(r) = w.uploads.join_next().await {
                if let Ok(Ok(seg)) = r {
                    w.done.push(seg);
                }
            }
            tables.discard(&w.done).await;
            Err(e)
        }
    }
}

/// Cuts the sorted stream into segments; each full segment is encoded (Parquet, on a
/// blocking thread) and uploaded while the next one fills, several at once: encoding is
/// most of a write's CPU, and one thread encoding behind the sort was the bottleneck.
struct SegmentWriter<'a> {
    tables: &'a Tables,
    def: &'a TableDef,
    schema: SchemaRef,
    /// The rows of the segment being filled (batches as they came, not copied).
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    uploads: JoinSet<Result<SegmentMeta>>,
    done: Vec<SegmentMeta>,
}

/// Segments being encoded or uploaded at once: every core encodes, and uploads of
/// finished segments overlap (each in flight holds its rows in memory).
fn segments_in_flight() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(UPLOADS_IN_FLIGHT)
}

impl SegmentWriter<'_> {
    async fn run(
        &mut self,
        mut stream: SendableRecordBatchStream,
        on_rows: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<()> {
        let part = self
            .def
            .partition_key
            .as_ref()
            .and_then(|k| self.def.column_index(k));
        let mut last_part: Option<datafusion::common::ScalarValue> = None;
        while let Some(batch) = stream.next().await {
            let batch = conform(batch?, self.def, &self.schema)?;
            on_rows(batch.num_rows() as u64);
            // Runs of one partition-key value (the stream is sorted by it).
            let runs = match part {
                Some(i) => partition(std::slice::from_ref(batch.column(i)))?.ranges(),
                None => std::iter::once(0..batch.num_rows()).collect(),
            };
            for run in runs {
                let piece = batch.slice(run.start, run.len());
                if let Some(i) = part {
                    let v = datafusion::common::ScalarValue::try_from_array(piece.column(i), 0)?;
                    if last_part.as_ref().is_some_and(|p| *p != v) {
                        self.close_segment().await?;
                    }
                    last_part = Some(v);
                }
                self.append(piece).await?;
            }
        }
        self.close_segment().await?;
        while let Some(r) = self.uploads.join_next().await {
            self.done.push(joined(r)?);
        }
        Ok(())
    }

    async fn append(&mut self, mut piece: RecordBatch) -> Result<()> {
        let limit = self.tables.segment_options.segment_rows.max(1);
        while piece.num_rows() > 0 {
            let take = (limit - self.pending_rows).min(piece.num_rows());
            self.pending.push(piece.slice(0, take));
            self.pending_rows += take;
            piece = piece.slice(take, piece.num_rows() - take);
            if self.pending_rows >= limit {
                self.close_segment().await?;
            }
        }
        Ok(())
    }

    async fn close_segment(&mut self) -> Result<()> {
        let batches = std::mem::take(&mut self.pending);
        let rows = std::mem::replace(&mut self.pending_rows, 0);
        if rows == 0 {
            return Ok(());
        }
        while self.uploads.len() >= segments_in_flight() {
            if let Some(r) = self.uploads.join_next().await {
                self.done.push(joined(r)?);
            }
        }
        let store = self.tables.store().clone();
        let path = segment_path(self.tables.root(), self.def.id);
        let def = self.def.clone();
        let schema = self.schema.clone();
        let options = self.tables.segment_options.clone();
        // Not yet in the catalog: VACUUM must leave it alone until it is committed or
        // discarded.
        self.tables.note_writing(path.as_ref());
        self.uploads.spawn(async move {
            let encoded = tokio::task::spawn_blocking(move || {
                encode_segment(&def, schema, &options, &batches)
            })
            .await
            .map_err(|e| TableError::Import(format!("segment encoding task failed: {e}")))?;
            let (bytes, stats) = encoded?;
            upload(&store, path, bytes, rows, stats).await
        });
        Ok(())
    }
}

fn joined(
    r: std::result::Result<Result<SegmentMeta>, tokio::task::JoinError>,
) -> Result<SegmentMeta> {
    r.map_err(|e| TableError::Import(format!("segment upload task failed: {e}")))?
}

/// `batch` with the table's exact schema: same-named columns cast where the types differ
/// (e.g. string views from a scan), NOT NULL checked (by the schema), VARCHAR(n) and
/// CHAR(n) lengths enforced (22001) and CHAR(n) padded with spaces, UUID, JSON and JSONB
/// values checked (22P02) and canonical (`pgtext.rs`).
pub(crate) fn conform(
    batch: RecordBatch,
    def: &TableDef,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(TableError::Schema(format!(
            "{} columns given, the table has {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for ((array, field), c) in batch
        .columns()
        .iter()
        .zip(schema.fields())
        .zip(&def.columns)
    {
        let array = if array.data_type() == field.data_type() {
            array.clone()
        } else {
            cast(array, field.data_type())?
        };
        if !c.nullable && array.null_count() > 0 {
            return Err(TableError::Violation(Box::new(crate::violation::not_null(
                def, &c.name,
            ))));
        }
        columns.push(match c.ty {
            ColumnType::Varchar { len } => check_length(array, &c.name, c.ty, len, false)?,
            ColumnType::Char { len } => check_length(array, &c.name, c.ty, len, true)?,
            ColumnType::Uuid | ColumnType::Json | ColumnType::Jsonb => {
                crate::pgtext::conform(array, c.ty)?
            }
            _ => array,
        });
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| TableError::Schema(e.to_string()))
}

/// A text column's values checked against the declared length; `pad`ded to it (CHAR(n)).
/// Trailing spaces past the length are cut, as PostgreSQL does; other characters fail.
fn check_length(
    array: ArrayRef,
    column: &str,
    ty: ColumnType,
    len: u32,
    pad: bool,
) -> Result<ArrayRef> {
    use datafusion::arrow::array::{Array, AsArray, StringBuilder};
    let strings = array.as_string::<i32>();
    let len = len as usize;
    let fits = |v: &str| v.chars().count() <= len;
    if !pad && strings.iter().flatten().all(fits) {
        return Ok(array);
    }
    let mut out = StringBuilder::with_capacity(strings.len(), strings.value_data().len());
    for v in strings.iter() {
        let Some(v) = v else {
            out.append_null();
            continue;
        };
        let n = v.chars().count();
        if n > len {
            let kept: String = v.chars().take(len).collect();
            if !v[kept.len()..].chars().all(|ch| ch == ' ') {
                return Err(TableError::ValueTooLong {
                    column: column.to_string(),
                    ty: ty.sql(),
                });
            }
            out.append_value(kept);
        } else if pad && n < len {
            out.append_value(format!("{v}{}", " ".repeat(len - n)));
        } else {
            out.append_value(v);
        }
    }
    Ok(std::sync::Arc::new(out.finish()))
}
