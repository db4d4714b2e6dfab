//! A table's row-id view: its columns, plus each row's segment and its position in it.
//!
//! UPDATE and DELETE plan the query of `target.rs` over this view, so each row the query
//! returns says which stored row it is. A row's id is (index of its segment in the list
//! the scan took, position of the row in that segment's file).
//!
//! Invariants:
//!
//! 1. A segment is read whole, in file order, in one stream: no predicate, no limit and
//!    no dynamic filter reaches the Parquet reader (the reader sits inside a
//!    [`PartitionStream`], where no physical optimizer can push anything into it), so the
//!    n-th row read is the n-th row of the file. Filters prune whole segments only (the
//!    extent map), and stay above the scan.
//! 2. A stream that ends with a row count other than the catalog's for its segment fails
//!    the statement: the ids would not name the rows the rewrite reads.
//! 3. The segment list is taken once per statement ([`RowIdTable::segments`]); the rewrite
//!    reads the same list (by the same index), with the same stream, so ids agree.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;

use super::target::{ROW_COLUMN, SEGMENT_COLUMN};
use crate::catalog::SegmentMeta;
use crate::provider::TierTable;

/// The row-id view of one table (see the module doc).
#[derive(Debug)]
pub(crate) struct RowIdTable {
    table: TierTable,
    schema: SchemaRef,
    /// The segment list the scan took (invariant 3).
    segments: Mutex<Option<Arc<Vec<SegmentMeta>>>>,
}

impl RowIdTable {
    pub(crate) fn new(table: TierTable) -> Self {
        let base = table.def().schema();
        let mut fields: Vec<Arc<Field>> = base.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            SEGMENT_COLUMN,
            DataType::UInt32,
            false,
        )));
        fields.push(Arc::new(Field::new(ROW_COLUMN, DataType::UInt64, false)));
        RowIdTable {
            table,
            schema: Arc::new(Schema::new(fields)),
            segments: Mutex::new(None),
        }
    }

    pub(crate) fn table(&self) -> &TierTable {
        &self.table
    }

    /// The segments the scan read, by the index its rows name; `None` if it never ran (the
    /// optimizer found the query empty).
    pub(crate) fn segments(&self) -> Option<Arc<Vec<SegmentMeta>>> {
        self.segments.lock().clone()
    }

    /// The segment list of this statement: taken at the first scan, the same after.
    async fn take_segments(&self, state: &dyn Session) -> crate::Result<Arc<Vec<SegmentMeta>>> {
        if let Some(s) = &*self.segments.lock() {
            return Ok(s.clone());
        }
        let visible = Arc::new(self.table.visible(state).await?);
        Ok(self.segments.lock().get_or_insert_with(|| visible).clone())
    }
}

#[async_trait]
impl TableProvider for RowIdTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Used to skip whole segments only; every row is still filtered above the scan.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let segments = self.take_segments(state).await?;
        let base = self.table.def().schema();
        let columns = base.fields().len();
        // Only filters on the table's own columns can consult the extent map.
        let usable: Vec<Expr> = filters
            .iter()
            .filter(|f| {
                f.column_refs()
                    .iter()
                    .all(|c| c.name != SEGMENT_COLUMN && c.name != ROW_COLUMN)
            })
            .cloned()
            .collect();
        let df_schema = DFSchema::try_from(base.clone())?;
        let predicate = conjunction(usable)
            .map(|p| state.create_physical_expr(p, &df_schema))
            .transpose()?;
        let keep = self.table.prune(predicate.as_ref(), &segments);
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..columns + 2).collect(),
        };
        let read: Vec<usize> = projection
            .iter()
            .copied()
            .filter(|&i| i < columns)
            .collect();
        let layout: Vec<Slot> = projection
            .iter()
            .map(|&i| match i {
                i if i < columns => Slot::Column(read.iter().position(|&r| r == i).unwrap_or(0)),
                i if i == columns => Slot::Segment,
                _ => Slot::Row,
            })
            .collect();
        let out = Arc::new(self.schema.project(&projection)?);
        let mut partitions: Vec<Arc<dyn PartitionStream>> = Vec::new();
        let kept = segments
            .iter()
            .zip(&keep)
            .enumerate()
            .filter(|(_, (_, k))| **k);
        for (index, (seg, _)) in kept {
            let exec = self
                .table
                .segments_exec(state, vec![seg], 1, Some(&read), None, None)?;
            partitions.push(Arc::new(SegmentRows {
                exec,
                segment: seg.clone(),
                index: u32::try_from(index).map_err(|_| {
                    DataFusionError::Execution("more than 2^32 segments in one table".into())
                })?,
                layout: layout.clone(),
                schema: out.clone(),
                drop: None,
            }));
        }
        if partitions.is_empty() {
            return Ok(Arc::new(EmptyExec::new(out)));
        }
        Ok(Arc::new(StreamingTableExec::try_new(
            out,
            partitions,
            None,
            Vec::new(),
            false,
            None,
        )?))
    }
}

/// Where each output column of a segment stream comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slot {
    /// The n-th column the segment scan read.
    Column(usize),
    Segment,
    Row,
}

/// The rows of one segment, in file order, as a partition of a [`StreamingTableExec`].
#[derive(Debug)]
pub(crate) struct SegmentRows {
    /// A one-partition scan of the whole segment (no predicate, no limit).
    pub exec: Arc<dyn ExecutionPlan>,
    pub segment: SegmentMeta,
    pub index: u32,
    pub layout: Vec<Slot>,
    pub schema: SchemaRef,
    /// Positions (sorted, distinct) of rows to leave out: the rewrite's matches.
    pub drop: Option<Arc<Vec<u64>>>,
}

impl PartitionStream for SegmentRows {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        Box::pin(OrdinalStream {
            inner: self.exec.execute(0, ctx),
            schema: self.schema.clone(),
            layout: self.layout.clone(),
            index: self.index,
            segment: self.segment.clone(),
            offset: 0,
            drop: self.drop.clone(),
            next_drop: 0,
            done: false,
        })
    }
}

fn unreachable_err() -> DataFusionError {
    DataFusionError::Internal("segment stream".into())
}

/// Numbers the rows of one segment scan (invariant 2) and lays out the output columns.
struct OrdinalStream {
    inner: DfResult<SendableRecordBatchStream>,
    schema: SchemaRef,
    layout: Vec<Slot>,
    index: u32,
    segment: SegmentMeta,
    offset: u64,
    drop: Option<Arc<Vec<u64>>>,
    /// Index into `drop` of the first position not yet passed.
    next_drop: usize,
    done: bool,
}

impl OrdinalStream {
    fn shape(&mut self, batch: RecordBatch) -> DfResult<RecordBatch> {
        let n = batch.num_rows();
        let start = self.offset;
        self.offset += n as u64;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.layout.len());
        for (slot, field) in self.layout.iter().zip(self.schema.fields()) {
            let a: ArrayRef = match slot {
                Slot::Column(i) => {
                    let a = batch.column(*i).clone();
                    if a.data_type() == field.data_type() {
                        a
                    } else {
                        cast(&a, field.data_type())?
                    }
                }
                Slot::Segment => Arc::new(UInt32Array::from(vec![self.index; n])),
                Slot::Row => Arc::new(UInt64Array::from_iter_values(start..start + n as u64)),
            };
            columns.push(a);
        }
        let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
        let out = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        let Some(drop) = &self.drop else {
            return Ok(out);
        };
        // Leave out the rows whose positions are in `drop` (sorted).
        let end = start + n as u64;
        let first = self.next_drop;
        while self.next_drop < drop.len() && drop[self.next_drop] < end {
            self.next_drop += 1;
        }
        if first == self.next_drop {
            return Ok(out);
        }
        let mut keep = vec![true; n];
        for &p in &drop[first..self.next_drop] {
            if let Some(k) = keep.get_mut((p - start) as usize) {
                *k = false;
            }
        }
        Ok(filter_record_batch(&out, &BooleanArray::from(keep))?)
    }

    fn check_count(&self) -> DfResult<()> {
        if self.offset == self.segment.rows {
            return Ok(());
        }
        Err(DataFusionError::External(Box::new(
            crate::error::TableError::Segment {
                path: self.segment.path.clone(),
                reason: format!(
                    "read {} rows, the catalog says {}; nothing was changed",
                    self.offset, self.segment.rows
                ),
            },
        )))
    }
}

impl Stream for OrdinalStream {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = match &mut self.inner {
            Ok(s) => s.poll_next_unpin(cx),
            Err(_) => {
                self.done = true;
                let e = std::mem::replace(&mut self.inner, Err(unreachable_err()));
                return Poll::Ready(e.err().map(Err));
            }
        };
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(batch))) => Poll::Ready(Some(self.shape(batch))),
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.done = true;
                match self.check_count() {
                    Ok(()) => Poll::Ready(None),
                    Err(e) => Poll::Ready(Some(Err(e))),
                }
            }
        }
    }
}

impl RecordBatchStream for OrdinalStream {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
