//! The scan of a row table ([`RowScanExec`]): reads key ranges, points or index entries
//! through one reader, in key order.
//!
//! A scan is *bound* once it knows what it reads: the values of its filters, so the keys
//! they allow (`exact.rs`, `provider::access`), and its reader (a KV snapshot with the
//! transaction's writes over it). A scan planned for a kept physical plan
//! (`sql/plancache.rs`, invariant 6) is *unbound*: it holds the filters as planned, their
//! parameters still in them, and every execution runs a copy of the plan bound to its own
//! parameter values and to the transaction of that moment ([`bind_kept`]).
//!
//! Invariants:
//!
//! 1. An unbound scan never reads: executing one fails; it does not return no rows or
//!    every row.
//! 2. A scan's reader is made when the scan is bound: when the plan is made, for a plan
//!    run once; at each execution, for a kept plan. Either way it reads one snapshot per
//!    statement (READ COMMITTED) or the transaction's (REPEATABLE READ), as `scan()` did.
//! 3. A bound copy of a kept plan is made of fresh nodes (`reset_state`): nothing one
//!    execution leaves in an operator (a hash table, a sort's dynamic filter, metrics)
//!    is seen by the next.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{ArrayRef, BinaryArray, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::prelude::SessionConfig;
use futures::StreamExt;

use super::exact::Within;
use super::provider::{Access, access};
use super::{RowReader, format};
use crate::catalog::TableDef;
use crate::error::Result;
use crate::tables::Tables;

/// Rows decoded per batch of a scan.
const BATCH_ROWS: usize = 4096;

/// What a scan reads: known (bound), or known at each execution of a kept plan.
#[derive(Debug, Clone)]
pub(crate) enum ScanInput {
    Bound {
        access: Access,
        /// The keys the exact filters allow (`exact.rs`, invariant 2).
        within: Within,
        reader: Arc<RowReader>,
    },
    Unbound {
        tables: Arc<Tables>,
        /// The filters pushed into the scan, their parameters unbound.
        filters: Vec<Expr>,
    },
}

impl ScanInput {
    /// The scan of `def` under `filters` (their values bound), reading in the transaction
    /// `config`'s session is in (invariant 2).
    pub(crate) fn bind(
        tables: &Tables,
        def: &TableDef,
        filters: &[Expr],
        config: &SessionConfig,
    ) -> Result<ScanInput> {
        let within = super::exact::within(def, filters)?;
        let access = match within {
            Within::Nothing => Access::Ranges(Vec::new()),
            _ => access(def, filters),
        };
        let tx = crate::txn::current(config);
        let snapshot = match &tx {
            Some(t) => t.snapshot(tables)?.map(|s| s.kv.clone()),
            None => None,
        };
        let reader = {
            let rows = tx.as_ref().map(|t| t.rows.lock());
            RowReader::new(tables, def, rows.as_deref(), snapshot)?
        };
        Ok(ScanInput::Bound {
            access,
            within,
            reader: Arc::new(reader),
        })
    }
}

/// Set on the configuration a plan to be kept is made under: its row scans stay unbound
/// even where their filters have no parameter (invariant 2).
#[derive(Debug, Default)]
pub(crate) struct DeferScans;

/// Whether scans planned under `config` stay unbound ([`DeferScans`]).
pub(crate) fn defers(config: &SessionConfig) -> bool {
    config.get_extension::<DeferScans>().is_some()
}

/// Whether `e` holds a parameter (`$1`).
pub(crate) fn has_placeholder(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .unwrap_or(true)
}

/// The scan of a row table: reads its input's keys through one reader, in key order.
#[derive(Debug, Clone)]
pub(crate) struct RowScanExec {
    def: TableDef,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    input: ScanInput,
    limit: Option<usize>,
    with_key: bool,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for RowReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowReader").finish_non_exhaustive()
    }
}

impl RowScanExec {
    pub(crate) fn new(
        def: TableDef,
        schema: SchemaRef,
        projected: SchemaRef,
        projection: Option<Vec<usize>>,
        input: ScanInput,
        limit: Option<usize>,
        with_key: bool,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(projected),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        RowScanExec {
            def,
            schema,
            projection,
            input,
            limit,
            with_key,
            properties,
        }
    }
}

/// A copy of the kept physical plan `plan` for one execution: its row scans bound to
/// `values` and to the transaction `config`'s session is in, every other node fresh
/// (invariants 2 and 3).
pub(crate) fn bind_kept(
    plan: &Arc<dyn ExecutionPlan>,
    values: &ParamValues,
    config: &SessionConfig,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    Arc::clone(plan)
        .transform_up(|node| {
            let Some(scan) = node.downcast_ref::<RowScanExec>() else {
                return Ok(Transformed::yes(node.reset_state()?));
            };
            let ScanInput::Unbound { tables, filters } = &scan.input else {
                return Ok(Transformed::no(node));
            };
            let bound = filters
                .iter()
                .map(|f| {
                    f.clone()
                        .transform_up(|e| match e {
                            Expr::Placeholder(Placeholder { id, .. }) => {
                                let (value, metadata) =
                                    values.get_placeholders_with_values(&id)?.into_inner();
                                Ok(Transformed::yes(Expr::Literal(value, metadata)))
                            }
                            other => Ok(Transformed::no(other)),
                        })
                        .map(|t| t.data)
                })
                .collect::<DfResult<Vec<_>>>()?;
            let input = ScanInput::bind(tables.as_ref(), &scan.def, &bound, config)?;
            Ok(Transformed::yes(Arc::new(RowScanExec {
                input,
                ..scan.clone()
            }) as Arc<dyn ExecutionPlan>))
        })
        .map(|t| t.data)
}

/// Whether every row scan in `plan` is unbound, and there is one: a plan that may be
/// kept and bound again per execution (`sql/plancache.rs`, invariant 6).
pub(crate) fn all_scans_unbound(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let (mut unbound, mut bound) = (0, 0);
    let _ = plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<RowScanExec>() {
            match scan.input {
                ScanInput::Unbound { .. } => unbound += 1,
                ScanInput::Bound { .. } => bound += 1,
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    unbound > 0 && bound == 0
}

impl DisplayAs for RowScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RowScanExec: table={} (row store: KV engine), ",
            self.def.name
        )?;
        match &self.input {
            ScanInput::Bound { access, .. } => write!(f, "{}", access.describe())?,
            ScanInput::Unbound { .. } => write!(f, "keys bound at each execution")?,
        }
        if let Some(l) = self.limit {
            write!(f, ", fetch={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for RowScanExec {
    fn name(&self) -> &str {
        "RowScanExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let ScanInput::Bound {
            access,
            within,
            reader,
        } = &self.input
        else {
            // Invariant 1.
            return Err(DataFusionError::Internal(format!(
                "the scan of {} ran with its parameters unbound",
                self.def.name
            )));
        };
        let out_schema = self.properties.eq_properties.schema().clone();
        let scan = Scan {
            def: self.def.clone(),
            schema: self.schema.clone(),
            projection: self.projection.clone(),
            reader: reader.clone(),
            within: within.clone(),
            with_key: self.with_key,
            left: self.limit.unwrap_or(usize::MAX),
        };
        let stream = futures::stream::unfold(
            (scan, access.clone(), 0usize, None::<Bound<Bytes>>, false),
            |(scan, access, at, resume, done)| async move {
                if done {
                    return None;
                }
                match scan.next(&access, at, resume).await {
                    Ok(Some((batch, at, resume))) => {
                        Some((Ok(batch), (scan, access, at, resume, false)))
                    }
                    Ok(None) => None,
                    Err(e) => Some((
                        Err(DataFusionError::from(e)),
                        (scan, access, at, None, true),
                    )),
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            out_schema,
            stream.boxed(),
        )))
    }
}

struct Scan {
    def: TableDef,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    reader: Arc<RowReader>,
    within: Within,
    with_key: bool,
    left: usize,
}

impl Scan {
    /// The next batch: from range/point `at`, resuming a range at `resume`.
    async fn next(
        &self,
        access: &Access,
        mut at: usize,
        mut resume: Option<Bound<Bytes>>,
    ) -> Result<Option<(RecordBatch, usize, Option<Bound<Bytes>>)>> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut rows: Vec<(Bytes, Bytes)> = Vec::new();
        match access {
            Access::Points(points) => {
                while at < points.len() && rows.len() < BATCH_ROWS {
                    if !self.within.contains(&points[at]) {
                        at += 1;
                        continue;
                    }
                    if let Some(v) = self.reader.get(&points[at]).await? {
                        rows.push((points[at].clone(), v));
                    }
                    at += 1;
                }
            }
            Access::Index(_, prefixes) => {
                while at < prefixes.len() && rows.is_empty() {
                    let p = &prefixes[at];
                    let end = tierdb_kv::prefix_end(p).map_or(Bound::Unbounded, Bound::Excluded);
                    let start = resume.take().unwrap_or_else(|| Bound::Included(p.clone()));
                    let (page, next) = self.reader.scan((start, end), BATCH_ROWS).await?;
                    for (_, row_key) in page {
                        if !self.within.contains(&row_key) {
                            continue;
                        }
                        if let Some(v) = self.reader.get(&row_key).await? {
                            rows.push((row_key, v));
                        }
                    }
                    match next {
                        Some(r) => resume = Some(r),
                        None => at += 1,
                    }
                }
            }
            Access::Ranges(ranges) => {
                while at < ranges.len() && rows.is_empty() {
                    let (s, e) = &ranges[at];
                    let start = resume.take().unwrap_or_else(|| s.clone());
                    let (page, next) = self.reader.scan((start, e.clone()), BATCH_ROWS).await?;
                    rows = page;
                    rows.retain(|(k, _)| self.within.contains(k));
                    match next {
                        Some(r) => resume = Some(r),
                        None => at += 1,
                    }
                }
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let rows: Vec<(Bytes, Bytes)> = rows.into_iter().take(self.left).collect();
        let batch = self.decode(&rows)?;
        Ok(Some((batch, at, resume)))
    }

    fn decode(&self, rows: &[(Bytes, Bytes)]) -> Result<RecordBatch> {
        let decoded = rows
            .iter()
            .map(|(k, v)| format::decode_row(&self.def, k, v))
            .collect::<Result<Vec<_>>>()?;
        let table_schema = self.def.schema();
        let batch = format::to_batch(&self.def, &table_schema, decoded)?;
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        if self.with_key {
            columns.push(Arc::new(BinaryArray::from_iter_values(
                rows.iter().map(|(k, _)| k.as_ref()),
            )));
        }
        let full = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(match &self.projection {
            Some(p) => full.project(p)?,
            None => full,
        })
    }
}
