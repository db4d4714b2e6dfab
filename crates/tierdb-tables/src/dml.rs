//! UPDATE and DELETE: copy-on-write at segment granularity.
//!
//! The extent map picks the segments that may hold affected rows; each is scanned once for
//! the predicate's columns to count its matches, and only segments with a match are
//! rewritten (DELETE: the rows that do not match; UPDATE: every row, the matching ones with
//! their new values, sorted again by the table's ingest order and cut at partition-key
//! changes by the shared write path). The new segments and the removal of the old ones go
//! in one atomic catalog commit, or into the session's transaction; a reader sees the
//! table before or after, never half of it. The old files are retired, not deleted:
//! readers that planned before the commit may still be reading them (VACUUM deletes them
//! later).

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::Session;
use datafusion::common::{Column, DFSchema};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, cast, when};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use futures::StreamExt;

use crate::catalog::SegmentMeta;
use crate::error::TableError;
use crate::provider::TierTable;
use crate::tables::PendingWrite;
use crate::write::{sorted_plan, write_plan};

/// Deletes (`assignments` = `None`) or updates the rows of `table` matching every filter;
/// returns how many rows that was.
pub(crate) async fn rewrite(
    table: &TierTable,
    state: &dyn Session,
    filters: Vec<Expr>,
    assignments: Option<Vec<(String, Expr)>>,
) -> DfResult<u64> {
    let def = table.def().clone();
    let tables = table.tables().clone();
    if tables.is_read_only() {
        return Err(external(TableError::ReadOnly {
            db: tables.name().to_string(),
        }));
    }
    let schema = def.schema();
    let df_schema = DFSchema::try_from(schema.clone())?;
    let predicate = conjunction(filters.into_iter().map(unnormalize_col));
    let assignments = match assignments {
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for (name, value) in list {
                let Some(i) = def.column_index(&name) else {
                    return Err(external(TableError::Schema(format!(
                        "column {name} of table {} does not exist",
                        def.name
                    ))));
                };
                out.push((i, unnormalize_col(value)));
            }
            Some(out)
        }
        None => None,
    };
    let physical = predicate
        .clone()
        .map(|p| state.create_physical_expr(p, &df_schema))
        .transpose()?;
    let segments = table.visible(state);
    let candidates = table.prune(physical.as_ref(), &segments);
    let ctx = state.task_ctx();
    let mut affected = 0u64;
    let mut removed = Vec::new();
    let mut written: Vec<SegmentMeta> = Vec::new();
    for (seg, _) in segments.iter().zip(&candidates).filter(|(_, c)| **c) {
        let matches = match &predicate {
            None => seg.rows,
            Some(p) => count_matches(table, state, seg, p).await?,
        };
        if matches == 0 {
            continue;
        }
        affected += matches;
        let scan = table.segments_exec(state, vec![seg], 1, None, None, None)?;
        let plan: Arc<dyn ExecutionPlan> = match (&assignments, &predicate) {
            // DELETE without WHERE: the segment goes, nothing replaces it.
            (None, None) => {
                removed.push(seg.clone());
                continue;
            }
            // DELETE: keep the rows where the predicate is false or NULL; they stay sorted.
            (None, Some(p)) => {
                let keep = datafusion::logical_expr::not(p.clone()).or(p.clone().is_null());
                Arc::new(FilterExec::try_new(
                    state.create_physical_expr(keep, &df_schema)?,
                    scan,
                )?)
            }
            (Some(list), p) => {
                let mut exprs = Vec::with_capacity(def.columns.len());
                for (i, c) in def.columns.iter().enumerate() {
                    let old = Expr::Column(Column::new_unqualified(&c.name));
                    let e = match list.iter().rev().find(|(j, _)| *j == i) {
                        Some((_, v)) => {
                            let new = cast(v.clone(), c.ty.arrow());
                            match p {
                                Some(p) => when(p.clone(), new).otherwise(old)?,
                                None => new,
                            }
                        }
                        None => old,
                    };
                    exprs.push((state.create_physical_expr(e, &df_schema)?, c.name.clone()));
                }
                sorted_plan(&def, Arc::new(ProjectionExec::try_new(exprs, scan)?))?
            }
        };
        match write_plan(&tables, &def, plan, ctx.clone(), &|_| {}).await {
            Ok(segs) => written.extend(segs),
            Err(e) => {
                tables.discard(&written).await;
                return Err(external(e));
            }
        }
        removed.push(seg.clone());
    }
    if removed.is_empty() {
        return Ok(affected);
    }
    let write = PendingWrite {
        table: def,
        segments: written,
        replace: false,
        removed,
    };
    match crate::txn::current(state.config()) {
        Some(tx) => tx.push(write),
        // On failure commit_writes deletes the new files if nothing was committed.
        None => {
            tables.commit_writes(vec![write]).await.map_err(external)?;
        }
    }
    Ok(affected)
}

/// Rows of `seg` for which `predicate` is true, reading only the columns it uses.
async fn count_matches(
    table: &TierTable,
    state: &dyn Session,
    seg: &SegmentMeta,
    predicate: &Expr,
) -> DfResult<u64> {
    let schema = table.def().schema();
    let mut used: Vec<usize> = predicate
        .column_refs()
        .iter()
        .filter_map(|c| schema.index_of(&c.name).ok())
        .collect();
    used.sort_unstable();
    used.dedup();
    let projected = DFSchema::try_from(Arc::new(schema.project(&used)?))?;
    let filter = state.create_physical_expr(predicate.clone(), &projected)?;
    let scan = table.segments_exec(state, vec![seg], 1, Some(&used), None, None)?;
    let plan = FilterExec::try_new(filter, scan)?;
    let mut stream = plan.execute(0, state.task_ctx())?;
    let mut n = 0u64;
    while let Some(batch) = stream.next().await {
        n += batch?.num_rows() as u64;
    }
    Ok(n)
}

/// The plan DataFusion runs for a DML statement whose work is done: one `count` row.
pub(crate) fn count_exec(n: u64) -> DfResult<Arc<dyn ExecutionPlan>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(vec![n]))])?;
    Ok(MemorySourceConfig::try_new_exec(
        &[vec![batch]],
        schema,
        None,
    )?)
}

fn external(e: TableError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
