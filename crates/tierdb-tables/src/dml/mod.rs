//! UPDATE and DELETE: copy-on-write at segment granularity, of exactly the rows a query
//! names.
//!
//! A statement runs in three steps:
//!
//! 1. **Which rows** (`target.rs`, `rowid.rs`): the statement becomes a query over the
//!    target table's row-id view, planned and run by DataFusion like any query, so every
//!    WHERE it can plan (subqueries with IN, EXISTS, scalar subqueries, correlated ones,
//!    joins through USING / FROM) decides the rows, and nothing else does. Each result row
//!    names a stored row by (segment, position); UPDATE's rows also carry the new values,
//!    cast to the column types. A row named twice (UPDATE … FROM with several matches) is
//!    changed once, with the first values seen, as PostgreSQL does.
//! 2. **Rewrite** (here): each segment with a named row is read again, whole and in file
//!    order (the same stream as in step 1, so positions agree), without the named rows;
//!    UPDATE adds their new versions and sorts the segment again by the table's ingest
//!    order. A segment whose every row is deleted is dropped without being read.
//! 3. **Commit**: the new segments and the removal of the old ones go in one atomic catalog
//!    commit, or into the session's transaction; a reader sees the table before or after,
//!    never half of it. A concurrent commit that rewrote one of the same segments first
//!    makes this one fail with 40001, nothing committed (`Tables::commit_writes`). The old
//!    files are retired, not deleted: readers that planned before the commit may still be
//!    reading them (VACUUM deletes them later).
//!
//! Nothing is written before step 1 has finished without error, and a failure in step 2
//! deletes what it wrote: a failed statement changes nothing.
//!
//! DataFusion's own DML path (`TableProvider::delete_from` / `update`, which receive only
//! the filters it could lift off the plan and drop subqueries and joins) is never used:
//! [`crate::provider::TierTable`] refuses it.

mod rowid;
mod target;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, UInt32Array, UInt64Array};
use datafusion::arrow::compute::{self, cast, take_record_batch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::Column;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::{TableProvider, source_as_provider};
use datafusion::execution::context::SessionState;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use futures::StreamExt;

pub(crate) use rowid::RowIdTable;
use target::{DmlKind, DmlTarget};
pub(crate) use target::{ROWS_PREFIX, is_update_or_delete};

use crate::catalog::{SegmentMeta, TableDef};
use crate::error::{Result, TableError};
use crate::tables::{PendingWrite, Tables};
use crate::write::{sorted_plan, write_plan, write_stream};

/// The command tag's verb of an UPDATE or DELETE.
/// The table an UPDATE or DELETE names, as the catalog knows it (`None` for any other
/// statement, or one it cannot read).
pub(crate) fn target_table(stmt: &DfStatement) -> Option<String> {
    DmlTarget::parse(stmt).ok().flatten().map(|t| t.table)
}

pub(crate) fn verb(stmt: &DfStatement) -> &'static str {
    match DmlTarget::parse(stmt) {
        Ok(Some(t)) if t.kind == DmlKind::Update => "UPDATE",
        _ => "DELETE",
    }
}

/// The query naming the rows `stmt` changes (step 1), parameters (`$1`…) still in it.
pub(crate) async fn plan(
    state: &SessionState,
    tables: &Tables,
    stmt: &DfStatement,
) -> Result<LogicalPlan> {
    let target = DmlTarget::parse(stmt)?
        .ok_or_else(|| TableError::Schema("not an UPDATE or DELETE".into()))?;
    let def = tables.require(&target.table).await?;
    let columns: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
    let ids: &[&str] = if def.is_row_table() {
        &[crate::rows::provider::KEY_COLUMN]
    } else {
        &[target::SEGMENT_COLUMN, target::ROW_COLUMN]
    };
    let select = DfStatement::Statement(Box::new(target.select_with_ids(&columns, ids)?));
    crate::guard::check(&select)?;
    // Integer literals typed as PostgreSQL types them (`k + 1` stays integer), as queries.
    let mut plan = crate::literals::int4_literals(state.statement_to_plan(select).await?)?;
    if def.is_row_table()
        && let Some(equalities) = target.key_equalities()
    {
        plan = crate::rows::fastdml::shorten(plan, &def, &equalities)?;
    }
    match target.kind {
        DmlKind::Delete if !target.returning => Ok(plan),
        _ => typed(plan, &def, ids.len()),
    }
}

/// UPDATE's query with the new values cast to the column types; a bare parameter
/// (`SET c = $1`) takes its column's type, as in DataFusion's own UPDATE planning.
fn typed(plan: LogicalPlan, def: &TableDef, ids: usize) -> Result<LogicalPlan> {
    let plan = match plan {
        LogicalPlan::Projection(p) => {
            let mut exprs = p.expr.clone();
            for (e, c) in exprs.iter_mut().skip(ids).zip(&def.columns) {
                if let Expr::Alias(a) = e
                    && let Expr::Placeholder(ph) = a.expr.as_mut()
                    && ph.field.is_none()
                {
                    ph.field = Some(Arc::new(Field::new(&c.name, c.ty.arrow(), true)));
                }
            }
            LogicalPlan::Projection(Projection::try_new(exprs, p.input.clone())?)
        }
        other => other,
    };
    let schema = plan.schema().clone();
    let mut exprs = Vec::with_capacity(def.columns.len() + ids);
    for i in 0..ids {
        exprs.push(Expr::Column(Column::from(schema.qualified_field(i))));
    }
    let fields = def.schema();
    for (i, c) in def.columns.iter().enumerate() {
        let mut e = Expr::Column(Column::from(schema.qualified_field(i + ids)));
        // A CHAR(n) value into a TEXT or VARCHAR column loses its trailing spaces.
        if crate::bpchar::unpadded_into(fields.field(i), &plan, i + ids) {
            e = datafusion::functions::string::expr_fn::rtrim(vec![e]);
        }
        exprs.push(e.cast_to(&c.ty.arrow(), &schema)?.alias(&c.name));
    }
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(plan),
    )?))
}

/// Runs an UPDATE or DELETE whose query `plan` came from [`plan`] (parameters bound), in
/// `ctx` (this process alone: the row-id view cannot run on a worker). Returns how many
/// rows it changed.
pub(crate) async fn execute(
    ctx: &SessionContext,
    tables: &Arc<Tables>,
    stmt: &DfStatement,
    plan: LogicalPlan,
) -> Result<u64> {
    if tables.is_read_only() {
        return Err(TableError::ReadOnly {
            db: tables.name().to_string(),
        });
    }
    let kind = match DmlTarget::parse(stmt)? {
        Some(t) => t.kind,
        None => return Err(TableError::Schema("not an UPDATE or DELETE".into())),
    };
    if let Some(def) = row_target(&plan)? {
        let update = kind == DmlKind::Update;
        let (n, _) = crate::rows::dml::execute(ctx, tables, &def, update, false, plan).await?;
        return Ok(n);
    }
    let (n, _) = rewrite_segments(ctx, tables, kind, plan, false).await?;
    Ok(n)
}

/// Steps 1-3 on a columnar table: how many rows changed, and with `returning` those rows
/// (the table's columns, stored form: UPDATE's new values, DELETE's as they were), in the
/// order the query named them.
async fn rewrite_segments(
    ctx: &SessionContext,
    tables: &Arc<Tables>,
    kind: DmlKind,
    plan: LogicalPlan,
    returning: bool,
) -> Result<(u64, Option<RecordBatch>)> {
    let provider = rowid_provider(&plan)?;
    let view = provider
        .downcast_ref::<RowIdTable>()
        .ok_or_else(|| TableError::Schema("the DML query lost its target".into()))?;
    let def = view.table().def().clone();
    // No segment merge of this table commits while this runs (merge.rs invariant 2).
    let _merges_wait = crate::merge::DmlGuard::acquire(tables.merge_state(), &def.name).await;
    // Step 1: which rows.
    let df = ctx.execute_logical_plan(plan).await?;
    let stream = crate::interrupt::off_task(df.execute_stream()).await?;
    let memory = MemoryConsumer::new(format!("{} of {}", dml_verb(kind), def.name))
        .register(&ctx.runtime_env().memory_pool);
    let mut named = Named::collect(stream, &def, kind, returning, memory).await?;
    let empty = returning.then(|| RecordBatch::new_empty(def.schema()));
    let Some(segments) = view.segments() else {
        return Ok((0, empty)); // the query never scanned: no row qualifies
    };
    if named.count == 0 {
        return Ok((0, empty));
    }
    // Step 2: rewrite each segment with a named row.
    let state = ctx.state();
    let task = ctx.task_ctx();
    let mut written: Vec<SegmentMeta> = Vec::new();
    let mut removed = Vec::new();
    for (index, positions) in std::mem::take(&mut named.positions) {
        let Some(seg) = segments.get(index as usize) else {
            tables.discard(&written).await;
            return Err(TableError::Schema(format!(
                "the DML query named segment {index} of {}",
                segments.len()
            )));
        };
        let new_rows = named.rows.remove(&index).unwrap_or_default();
        if kind == DmlKind::Delete && positions.len() as u64 == seg.rows {
            removed.push(seg.clone()); // every row goes: nothing to read
            continue;
        }
        let r = rewrite(
            view,
            &state,
            task.clone(),
            tables,
            seg,
            index,
            positions,
            new_rows,
        )
        .await;
        match r {
            Ok(segs) => written.extend(segs),
            Err(e) => {
                tables.discard(&written).await;
                return Err(e);
            }
        }
        removed.push(seg.clone());
    }
    // The rows as the table declares them: NOT NULL holds (DELETE's rows are stored ones,
    // UPDATE's new ones passed the write's check above).
    let returned = if returning {
        // Stored form: CHAR(n) padded, as the rewrite wrote them.
        let rows = compute::concat_batches(&nullable(&def), &named.returned)
            .map_err(TableError::from)
            .and_then(|rows| crate::write::conform(rows, &def, &def.schema()));
        match rows {
            Ok(rows) => Some(rows),
            Err(e) => {
                tables.discard(&written).await;
                return Err(e);
            }
        }
    } else {
        None
    };
    // Step 3: commit.
    let write = PendingWrite {
        table: def,
        segments: written,
        replace: false,
        removed,
    };
    match crate::txn::current(state.config()) {
        Some(tx) => {
            tables.merge_state().claim(&write);
            tx.push(write)
        }
        // On failure commit_writes deletes the new files if nothing was committed.
        None => {
            tierdb_store::testpoint::pause_at("dml-commit");
            tables.commit_writes(vec![write]).await?;
            tierdb_store::testpoint::pause_at("dml-committed");
        }
    }
    Ok((named.count, returned))
}

/// The row table `plan` (an UPDATE's or DELETE's query) changes, if it is one.
fn row_target(plan: &LogicalPlan) -> Result<Option<TableDef>> {
    if let Some(def) = crate::rows::fastdml::target(plan) {
        return Ok(Some(def.clone()));
    }
    let provider = rowid_provider(plan)?;
    Ok(provider
        .downcast_ref::<crate::rows::provider::RowTable>()
        .map(|rows| rows.def().clone()))
}

/// [`execute`] of an UPDATE or DELETE … RETURNING: how many rows it changed, and those rows (the table's columns, stored form):
/// UPDATE's new values, DELETE's rows as they were.
pub(crate) async fn execute_returning(
    ctx: &SessionContext,
    tables: &Arc<Tables>,
    stmt: &DfStatement,
    plan: LogicalPlan,
) -> Result<(u64, RecordBatch)> {
    if tables.is_read_only() {
        return Err(TableError::ReadOnly {
            db: tables.name().to_string(),
        });
    }
    let update = match DmlTarget::parse(stmt)? {
        Some(t) => t.kind == DmlKind::Update,
        None => return Err(TableError::Schema("not an UPDATE or DELETE".into())),
    };
    let (n, rows) = match row_target(&plan)? {
        Some(def) => {
            let (n, rows) =
                crate::rows::dml::execute(ctx, tables, &def, update, true, plan).await?;
            (
                n,
                rows.unwrap_or_else(|| RecordBatch::new_empty(def.schema())),
            )
        }
        None => {
            let kind = if update {
                DmlKind::Update
            } else {
                DmlKind::Delete
            };
            let (n, rows) = rewrite_segments(ctx, tables, kind, plan, true).await?;
            let rows = rows.ok_or_else(|| TableError::Schema("RETURNING lost its rows".into()))?;
            (n, rows)
        }
    };
    Ok((n, rows))
}

/// The row-id view the query reads (the one scan of the reserved name).
fn rowid_provider(plan: &LogicalPlan) -> Result<Arc<dyn TableProvider>> {
    let mut found = None;
    plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(p) = source_as_provider(&scan.source)
            && (p.downcast_ref::<RowIdTable>().is_some()
                || p.downcast_ref::<crate::rows::provider::RowTable>()
                    .is_some_and(|r| r.has_key()))
        {
            found = Some(p);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    found.ok_or_else(|| TableError::Schema("the DML query lost its target".into()))
}

/// The rows step 1 named.
struct Named {
    /// Per segment index: the named positions, sorted and distinct.
    positions: BTreeMap<u32, Vec<u64>>,
    /// UPDATE, per segment index: the new versions of its named rows (table columns).
    rows: BTreeMap<u32, Vec<RecordBatch>>,
    /// With RETURNING: every named row once (table columns: UPDATE's new values, DELETE's
    /// as read), in the order the query named them.
    returned: Vec<RecordBatch>,
    count: u64,
    /// Held until the statement ends: the rows above stay in memory until then.
    _memory: MemoryReservation,
}

impl Named {
    /// `memory` accounts what is held (ids, and UPDATE's new rows) in the session's memory
    /// pool: past its limit the statement fails (53200) before anything is written.
    async fn collect(
        mut stream: SendableRecordBatchStream,
        def: &TableDef,
        kind: DmlKind,
        returning: bool,
        memory: MemoryReservation,
    ) -> Result<Self> {
        let schema = nullable(def);
        let mut seen: HashSet<(u32, u64)> = HashSet::new();
        let mut positions: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut rows: BTreeMap<u32, Vec<RecordBatch>> = BTreeMap::new();
        let mut returned = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let (Some(segs), Some(pos)) = (
                batch.column(0).as_any().downcast_ref::<UInt32Array>(),
                batch.column(1).as_any().downcast_ref::<UInt64Array>(),
            ) else {
                return Err(TableError::Schema("the DML query lost its row ids".into()));
            };
            // Per segment, the rows of this batch that name a row not named before.
            let mut firsts: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            let mut in_order: Vec<u32> = Vec::new();
            // Ids: a set entry and a position each (about 40 bytes).
            memory
                .try_grow(batch.num_rows() * 40)
                .map_err(|e| too_big(e, def))?;
            for i in 0..batch.num_rows() {
                let (s, p) = (segs.value(i), pos.value(i));
                if seen.insert((s, p)) {
                    positions.entry(s).or_default().push(p);
                    firsts.entry(s).or_default().push(i as u32);
                    in_order.push(i as u32);
                }
            }
            if returning {
                let values = batch.project(&(2..batch.num_columns()).collect::<Vec<_>>())?;
                let taken = conform(
                    take_record_batch(&values, &UInt32Array::from(in_order))?,
                    &schema,
                )?;
                memory
                    .try_grow(taken.get_array_memory_size())
                    .map_err(|e| too_big(e, def))?;
                returned.push(taken);
            }
            if kind == DmlKind::Update {
                let values = batch.project(&(2..batch.num_columns()).collect::<Vec<_>>())?;
                for (s, idx) in firsts {
                    let taken = conform(
                        take_record_batch(&values, &UInt32Array::from(idx))?,
                        &schema,
                    )?;
                    memory
                        .try_grow(taken.get_array_memory_size())
                        .map_err(|e| too_big(e, def))?;
                    rows.entry(s).or_default().push(taken);
                }
            }
        }
        for p in positions.values_mut() {
            p.sort_unstable();
        }
        Ok(Named {
            positions,
            rows,
            returned,
            count: seen.len() as u64,
            _memory: memory,
        })
    }
}

fn dml_verb(kind: DmlKind) -> &'static str {
    match kind {
        DmlKind::Update => "UPDATE",
        DmlKind::Delete => "DELETE",
    }
}

/// The memory pool refused more: name the statement and what to do (the SQLSTATE stays
/// DataFusion's ResourcesExhausted, 53200).
fn too_big(e: datafusion::error::DataFusionError, def: &TableDef) -> TableError {
    TableError::DataFusion(e.context(format!(
        "the rows this statement changes in {} do not fit the memory limit (--memory); \
         change them in smaller ranges (WHERE …) or raise the limit; nothing was changed",
        def.name
    )))
}

/// The table's schema with every column nullable: what rows are carried as until the write
/// path checks NOT NULL (`write::conform`, which names the column).
fn nullable(def: &TableDef) -> SchemaRef {
    let schema = def.schema();
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// `batch` (a table's columns) with the table's types, every column nullable.
pub(crate) fn conform_nullable(batch: RecordBatch, def: &TableDef) -> Result<RecordBatch> {
    conform(batch, &nullable(def))
}

/// `batch`'s columns with `schema`'s types.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (a, f) in batch.columns().iter().zip(schema.fields()) {
        columns.push(if a.data_type() == f.data_type() {
            a.clone()
        } else {
            cast(a, f.data_type())?
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Step 2 for one segment: its rows without those at `positions`, plus (UPDATE) `new_rows`,
/// written as new segments (not committed).
#[allow(clippy::too_many_arguments)]
async fn rewrite(
    view: &RowIdTable,
    state: &SessionState,
    task: Arc<TaskContext>,
    tables: &Tables,
    seg: &SegmentMeta,
    index: u32,
    positions: Vec<u64>,
    new_rows: Vec<RecordBatch>,
) -> Result<Vec<SegmentMeta>> {
    let def = view.table().def();
    let schema = nullable(def);
    let all: Vec<usize> = (0..def.columns.len()).collect();
    let exec = view
        .table()
        .segments_exec(state, vec![seg], 1, Some(&all), None, None)?;
    let kept = rowid::SegmentRows {
        exec,
        segment: seg.clone(),
        index,
        layout: all.iter().map(|&i| rowid::Slot::Column(i)).collect(),
        schema: schema.clone(),
        drop: Some(Arc::new(positions)),
    };
    if new_rows.is_empty() {
        // DELETE: the rows left keep their order.
        return write_stream(tables, def, kept.execute(task), &|_| {}).await;
    }
    let parts: Vec<Arc<dyn PartitionStream>> = vec![
        Arc::new(kept),
        Arc::new(Batches {
            schema: schema.clone(),
            batches: new_rows,
        }),
    ];
    let plan: Arc<dyn ExecutionPlan> = Arc::new(StreamingTableExec::try_new(
        schema,
        parts,
        None,
        Vec::new(),
        false,
        None,
    )?);
    write_plan(tables, def, sorted_plan(def, plan)?, task, &|_| {}).await
}

/// Rows already in memory, as a partition.
#[derive(Debug)]
struct Batches {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl PartitionStream for Batches {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let batches: Vec<_> = self.batches.iter().cloned().map(Ok).collect();
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        ))
    }
}
