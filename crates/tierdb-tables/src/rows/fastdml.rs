//! The short path of single-row writes on row tables: `UPDATE t SET … WHERE <every primary
//! key column> = <literal or $n>`, `DELETE FROM t WHERE <the same>` and `INSERT INTO t …
//! VALUES …` (the statements of sysbench's write mix and of pgbench's tpcb-like script),
//! run without DataFusion's optimizer passes, physical planner or streams.
//!
//! 1. UPDATE and DELETE keep the query `dml::plan` builds (the key, then every column's new
//!    value: DataFusion's SQL planner types the SET expressions and binds parameters as for
//!    any UPDATE), but its filtered scan of the key view becomes one [`Lookup`] of the key
//!    the WHERE pins ([`shorten`]). [`run`] reads that row (one KV read) and computes the
//!    projections above it on it with physical expressions, after the session's analyzer
//!    (type coercion, PostgreSQL's checked arithmetic) and the expression simplifier
//!    (`now()` is the statement's start time). The rows it names go through the same
//!    locking, re-reading and writing as any other UPDATE or DELETE (`dml.rs`).
//! 2. INSERT … VALUES into a row table ([`insert`]): the VALUES rows and the projection
//!    DataFusion plans over them (casts, column defaults) are computed the same way and
//!    handed to the same insert as INSERT's sink uses.
//!
//! A statement of any other shape (a subquery, a join, FROM/USING, a WHERE on anything
//! but the key, INSERT … SELECT) takes the general path, which gives the same answer.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::Schema;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::config::ConfigOptions;
use datafusion::datasource::source_as_provider;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::dml::{DmlStatement, InsertOp, WriteOp};
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, LogicalPlan, Projection, Values};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::create_physical_expr;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Expr as SqlExpr;

use super::fast::{self, Lookup};
use super::provider::RowTable;
use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::tables::Tables;
use crate::txn::Transaction;

/// `plan`, the query naming the rows of an UPDATE or DELETE of row table `def` (as
/// `dml::plan` has it from the SQL planner, before typing), with its filtered scan of the
/// key view replaced by a [`Lookup`] when `equalities` (the whole WHERE) pin one key and
/// nothing above the scan needs more than the row; else `plan` as it was.
pub(crate) fn shorten(
    plan: LogicalPlan,
    def: &TableDef,
    equalities: &[(String, SqlExpr)],
) -> Result<LogicalPlan> {
    Ok(shortened(&plan, def, equalities)?.unwrap_or(plan))
}

fn shortened(
    plan: &LogicalPlan,
    def: &TableDef,
    equalities: &[(String, SqlExpr)],
) -> Result<Option<LogicalPlan>> {
    match plan {
        LogicalPlan::Projection(p) if p.expr.iter().all(row_local) => {
            let Some(input) = shortened(&p.input, def, equalities)? else {
                return Ok(None);
            };
            Ok(Some(LogicalPlan::Projection(
                Projection::try_new_with_schema(p.expr.clone(), Arc::new(input), p.schema.clone())?,
            )))
        }
        LogicalPlan::Filter(f) if is_key_view(&f.input) => {
            fast::key_view_lookup(def, equalities, f.input.schema().clone())
        }
        _ => Ok(None),
    }
}

/// Whether `e` can be computed from one row alone (no subquery, aggregate or window).
fn row_local(e: &Expr) -> bool {
    !e.exists(|e| {
        Ok(matches!(
            e,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::SetComparison(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::AggregateFunction(_)
                | Expr::WindowFunction(_)
                | Expr::Unnest(_)
                | Expr::GroupingSet(_)
        ))
    })
    .unwrap_or(true)
}

/// Whether `plan` is a scan of a row table's key view (under its alias).
fn is_key_view(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::SubqueryAlias(a) => is_key_view(&a.input),
        LogicalPlan::TableScan(scan) => {
            scan.filters.is_empty()
                && scan.fetch.is_none()
                && source_as_provider(&scan.source)
                    .is_ok_and(|p| p.downcast_ref::<RowTable>().is_some_and(RowTable::has_key))
        }
        _ => false,
    }
}

/// The projections of a shortened plan, outermost first, and its lookup; `None` for any
/// other plan.
fn parts(plan: &LogicalPlan) -> Option<(Vec<&Projection>, &Lookup)> {
    let mut projections = Vec::new();
    let mut node = plan;
    loop {
        match node {
            LogicalPlan::Projection(p) => {
                projections.push(p);
                node = &p.input;
            }
            other => return fast::as_lookup(other).map(|l| (projections, l)),
        }
    }
}

/// The row table a shortened plan changes, if `plan` is one.
pub(crate) fn target(plan: &LogicalPlan) -> Option<&TableDef> {
    parts(plan).map(|(_, l)| l.def())
}

/// The rows a shortened plan (its parameters bound) names: none or one, computed as the
/// module doc says; `None` if `plan` is not a shortened plan.
pub(crate) async fn run(
    ctx: &SessionContext,
    tables: &Tables,
    plan: &LogicalPlan,
    tx: Option<&Arc<Transaction>>,
) -> Result<Option<Vec<RecordBatch>>> {
    if parts(plan).is_none() {
        return Ok(None); // checked before the session state is read
    }
    let (plan, now) = {
        let state = ctx.state_ref();
        let state = state.read();
        (crate::sql::analyzed(&state, plan.clone())?, Now::of(&state))
    };
    let Some((projections, lookup)) = parts(&plan) else {
        return Ok(None); // the analyzer changed its shape: the general path runs it
    };
    let (_, mut batches) = fast::run(tables, lookup, tx).await?;
    let Some(mut batch) = batches.pop() else {
        return Ok(Some(Vec::new()));
    };
    for p in projections.iter().rev() {
        batch = project(&now, &p.expr, p.input.schema(), &p.schema, &batch)?;
    }
    Ok(Some(vec![batch]))
}

/// What computing a statement's expressions needs of the session state: its options and
/// the statement's own execution properties (`now()` is the statement's start time, as in
/// the state `SessionContext::state` hands out). Taken under the state's read lock: a
/// clone of the whole state (all its function maps) per statement was a twentieth of a
/// write's CPU (`docs/benchmarks.md`).
struct Now {
    options: Arc<ConfigOptions>,
    props: ExecutionProps,
}

impl Now {
    fn of(state: &SessionState) -> Now {
        let options = Arc::clone(state.config_options());
        let mut props = state.execution_props().clone();
        props.mark_start_execution(Arc::clone(&options));
        Now { options, props }
    }
}

/// `exprs` (over `input`) computed on `batch`, as a batch of schema `output`.
fn project(
    now: &Now,
    exprs: &[Expr],
    input: &DFSchemaRef,
    output: &DFSchemaRef,
    batch: &RecordBatch,
) -> Result<RecordBatch> {
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(input.clone())
            .with_config_options(Arc::clone(&now.options))
            .with_query_execution_start_time(now.props.query_execution_start_time)
            .build(),
    );
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(exprs.len());
    for e in exprs {
        let e = simplifier.simplify(e.clone())?;
        let physical = create_physical_expr(&e, input, &now.props, &Default::default())?;
        columns.push(physical.evaluate(batch)?.into_array(batch.num_rows())?);
    }
    let schema = Arc::new(output.as_arrow().clone());
    // As the projection's schema says (a VALUES row may be narrower than its column).
    for (c, f) in columns.iter_mut().zip(schema.fields()) {
        if c.data_type() != f.data_type() {
            *c = datafusion::arrow::compute::cast(c, f.data_type())?;
        }
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema, columns, &options,
    )?)
}

/// Runs `plan` if it is an INSERT … VALUES into a row table (its parameters bound), as the
/// module doc says; returns how many rows it inserted, or `None` for any other plan.
pub(crate) async fn insert(
    ctx: &SessionContext,
    tables: &Tables,
    plan: &LogicalPlan,
    tx: Option<&Arc<Transaction>>,
) -> Result<Option<u64>> {
    let LogicalPlan::Dml(DmlStatement {
        target,
        op: WriteOp::Insert(InsertOp::Append),
        input,
        ..
    }) = plan
    else {
        return Ok(None);
    };
    let Ok(provider) = source_as_provider(target) else {
        return Ok(None);
    };
    let Some(rows) = provider.downcast_ref::<RowTable>() else {
        return Ok(None);
    };
    if rows.has_key() || !values_below_projections(input) {
        return Ok(None);
    }
    if tables.is_read_only() {
        return Err(TableError::ReadOnly {
            db: tables.name().to_string(),
        });
    }
    // The whole statement analyzed: some rules rewrite an INSERT's rows for their target
    // (a CHAR(n) value into a TEXT column loses its padding, `bpchar.rs`).
    let (analyzed, now) = {
        let state = ctx.state_ref();
        let state = state.read();
        (crate::sql::analyzed(&state, plan.clone())?, Now::of(&state))
    };
    let LogicalPlan::Dml(analyzed) = analyzed else {
        return Ok(None);
    };
    let Some(batch) = values_batch(&now, &analyzed.input)? else {
        return Ok(None);
    };
    let def = rows.def();
    let schema = batch.schema();
    let stream = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
        schema,
        futures::stream::iter([Ok(batch)]),
    );
    let n = super::insert_stream(tables, def, Box::pin(stream), tx, &|_| {}).await?;
    Ok(Some(n))
}

fn values_below_projections(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(p) => {
            p.expr.iter().all(row_local) && values_below_projections(&p.input)
        }
        LogicalPlan::Values(v) => v.values.iter().flatten().all(row_local),
        _ => false,
    }
}

/// The rows of `plan` (projections over VALUES), computed; `None` for another shape.
fn values_batch(now: &Now, plan: &LogicalPlan) -> Result<Option<RecordBatch>> {
    match plan {
        LogicalPlan::Projection(p) => {
            let Some(input) = values_batch(now, &p.input)? else {
                return Ok(None);
            };
            Ok(Some(project(
                now,
                &p.expr,
                p.input.schema(),
                &p.schema,
                &input,
            )?))
        }
        LogicalPlan::Values(Values { schema, values }) => {
            // Each row's expressions over no columns, then the rows stacked per column.
            let none = Arc::new(DFSchema::empty());
            let one = RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                Vec::new(),
                &RecordBatchOptions::new().with_row_count(Some(1)),
            )?;
            let mut rows = Vec::with_capacity(values.len());
            for row in values {
                rows.push(project(now, row, &none, schema, &one)?);
            }
            let arrow = Arc::new(schema.as_arrow().clone());
            Ok(Some(datafusion::arrow::compute::concat_batches(
                &arrow, &rows,
            )?))
        }
        _ => Ok(None),
    }
}
