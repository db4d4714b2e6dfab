//! A prepared statement's plan, kept for its next executions.
//!
//! A prepared statement is planned again at every Execute, so that it reads the tables as
//! they are then; for a short statement on row tables (sysbench's range selects, its
//! UPDATE, DELETE and INSERT) that SQL-to-plan translation was a sixth of the server's CPU.
//! [`PlanCache`] keeps the plan made from the statement (its parameters still unbound: the
//! optimizer and the physical planner still run per execution, so `now()` is the
//! execution's) while nothing it depends on can have changed.
//!
//! A query (no write) whose expressions are all immutable keeps its *optimized* plan as
//! well: DataFusion's analyzer and optimizer run once, with the parameters unbound, and
//! each execution binds the values into that plan and makes only its physical plan
//! (invariant 5). Together they were a seventh of the server's CPU under sysbench's range
//! selects.
//!
//! Invariants:
//!
//! 1. A plan is kept only if everything it reads is a row table (or a primary-key
//!    lookup of one): their providers hold the table's definition only and take the
//!    transaction's snapshot when the plan runs. A columnar table's provider holds the
//!    segments of the moment it was looked up, a catalog or sequence relation its rows of
//!    then, a temporary table its session's data: plans reading them are never kept.
//! 2. A kept plan is used only while [`Tables::ddl_generation`] is the one read *before*
//!    the plan was made: any table, view, sequence or schema definition committed since
//!    (by any session of this process) makes the next execution plan again. Only the writer
//!    changes definitions, so only the writer keeps plans (a replica never does).
//! 3. A kept plan is used only while the session's settings are the ones it was made under
//!    ([`SqlSession::settings_changed`]: SET, RESET, DISCARD) and the session has no
//!    temporary table (one created later could hide a stored table of the same name).
//! 4. A kept plan belongs to one session's prepared statement (the protocol runs one
//!    execution of a connection at a time) and to one [`Tables`]: a reopened catalog never
//!    uses the plans made over the one before.
//! 5. An optimized plan is kept only for a query whose every parameter has a type, and
//!    whose expressions are immutable: no `now()`, `random()`, `nextval()`,
//!    `current_setting()` (the optimizer folds stable functions to the moment it runs), no
//!    session variable. It is the same plan with the parameters unbound: an execution
//!    binds its values into it and reads the same rows the freshly optimized plan would
//!    (only simplifications the values would have allowed are missed). A plan the
//!    optimizer refuses with its parameters unbound is kept unoptimized.
//! 6. Such a plan also keeps its *physical* plan where one can be made with the
//!    parameters unbound: DataFusion's physical planner refuses a parameter anywhere but
//!    in the filters a row table's scan answers itself, and those scans are planned
//!    unbound (`rows/scan.rs`). Each execution runs a copy of it with its scans bound to
//!    the execution's values and transaction, every other node made fresh, under the
//!    task context made with it (the session's settings and transaction slot, which
//!    invariant 3 holds still). Not in a session whose queries go to workers: their
//!    plans are the distributed planner's.

use std::sync::{Arc, Weak};

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, ParamValues, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore, Volatility,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::parser::Statement as DfStatement;

use super::{SqlSession, StatementKind};
use crate::error::Result;
use crate::tables::Tables;

/// The plan of one prepared statement, kept while it holds (see the module doc).
#[derive(Debug, Default)]
pub struct PlanCache(parking_lot::Mutex<Option<Kept>>);

#[derive(Debug)]
struct Kept {
    /// The catalog it was made over (invariant 4).
    tables: Weak<Tables>,
    /// `Tables::ddl_generation` read before planning (invariant 2).
    ddl: u64,
    /// The session's settings generation (invariant 3).
    settings: u64,
    plan: LogicalPlan,
    /// The plan analyzed and optimized, its parameters unbound (invariant 5).
    optimized: Optimization,
}

#[derive(Debug)]
enum Optimization {
    /// Not tried yet: the statement's first execution plans as any other.
    NotYet,
    /// Not a query, not immutable, or refused by the optimizer unbound.
    No,
    /// Wrapped in an [`OptimizedPlan`] (the session makes its physical plan only) or in a
    /// [`KeptPhysical`] (it binds and runs it: invariant 6).
    Yes(LogicalPlan),
}

/// A session's counts of prepared executions that used a kept plan and that planned.
#[derive(Debug, Default)]
pub(crate) struct PlanCacheStats {
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
    /// Hits whose plan was optimized already (invariant 5).
    optimized: std::sync::atomic::AtomicU64,
    /// Of those, hits whose physical plan was kept too (invariant 6).
    physical: std::sync::atomic::AtomicU64,
}

impl SqlSession {
    /// [`SqlSession::plan`] of a prepared statement, through its cache: the kept plan if
    /// it still holds, else a new one, kept if it may be (see the module doc).
    pub async fn plan_prepared(
        &self,
        stmt: &DfStatement,
        cache: &PlanCache,
    ) -> Result<Option<LogicalPlan>> {
        use std::sync::atomic::Ordering;
        let key = self.plan_key();
        let hit = key.and_then(|key| {
            let kept = cache.0.lock();
            kept.as_ref()
                .filter(|k| {
                    k.ddl == key.0
                        && k.settings == key.1
                        && Weak::ptr_eq(&k.tables, &Arc::downgrade(&self.tables))
                })
                .map(|k| match &k.optimized {
                    Optimization::Yes(p) => (p.clone(), true),
                    Optimization::NotYet => (k.plan.clone(), false),
                    Optimization::No => (k.plan.clone(), true),
                })
        });
        if let Some((plan, settled)) = hit {
            self.guarded(async { self.refuse_if_aborted(StatementKind::of(stmt)) })
                .await?;
            self.plan_cache.hits.fetch_add(1, Ordering::Relaxed);
            if settled {
                self.count_optimized(&plan);
                return Ok(Some(plan));
            }
            // The second execution: the statement is run again, so its optimized plan
            // is worth keeping (invariant 5).
            let optimized = self.optimized_for_keeping(&plan).await;
            let mut kept = cache.0.lock();
            if let Some(k) = kept.as_mut()
                && matches!(k.optimized, Optimization::NotYet)
            {
                k.optimized = match &optimized {
                    Some(p) => Optimization::Yes(p.clone()),
                    None => Optimization::No,
                };
            }
            if let Some(p) = &optimized {
                self.count_optimized(p);
            }
            return Ok(Some(optimized.unwrap_or(plan)));
        }
        let plan = self.plan(stmt).await?;
        self.plan_cache.misses.fetch_add(1, Ordering::Relaxed);
        if let (Some(key), Some(p)) = (key, &plan)
            && keepable(p)
        {
            *cache.0.lock() = Some(Kept {
                tables: Arc::downgrade(&self.tables),
                ddl: key.0,
                settings: key.1,
                plan: p.clone(),
                optimized: Optimization::NotYet,
            });
        } else {
            *cache.0.lock() = None;
        }
        Ok(plan)
    }

    /// The generations a plan made now is valid for, read before planning; `None` where
    /// no plan may be kept (a replica, a session with temporary tables).
    fn plan_key(&self) -> Option<(u64, u64)> {
        if self.tables.is_read_only() || !self.temp.is_empty() {
            return None;
        }
        Some((
            self.tables.ddl_generation(),
            self.settings.load(std::sync::atomic::Ordering::Acquire),
        ))
    }

    /// Notes that the session's settings changed (SET, RESET, DISCARD): plans kept under
    /// the old ones are made again (invariant 3).
    pub fn settings_changed(&self) {
        self.settings
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn count_optimized(&self, plan: &LogicalPlan) {
        use std::sync::atomic::Ordering;
        if as_kept_physical(plan).is_some() {
            self.plan_cache.optimized.fetch_add(1, Ordering::Relaxed);
            self.plan_cache.physical.fetch_add(1, Ordering::Relaxed);
        } else if as_optimized(plan).is_some() {
            self.plan_cache.optimized.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `plan` analyzed and optimized with its parameters unbound, marked for
    /// [`SqlSession`]'s execution, if it may be kept so (invariant 5); with its physical
    /// plan where that can be kept too (invariant 6).
    async fn optimized_for_keeping(&self, plan: &LogicalPlan) -> Option<LogicalPlan> {
        if !immutable_query(plan) {
            return None;
        }
        self.measure_join_inputs(plan).await;
        let ctx = self.exec_ctx();
        let (state, unbound) = (ctx.state(), plan.clone());
        let physical_too = !self.distributed;
        let made = crate::interrupt::off_task(async move {
            let optimized = state.optimize(&unbound)?;
            let kept = match physical_too {
                true => KeptPhysical::make(state, &optimized).await,
                false => None,
            };
            Ok::<_, datafusion::error::DataFusionError>((optimized, kept))
        })
        .await;
        match made {
            Ok((_, Some(kept))) => Some(LogicalPlan::Extension(Extension {
                node: Arc::new(kept),
            })),
            Ok((optimized, None)) => Some(LogicalPlan::Extension(Extension {
                node: Arc::new(OptimizedPlan { input: optimized }),
            })),
            Err(e) => {
                tracing::debug!("a prepared query's plan is kept unoptimized: {e}");
                None
            }
        }
    }

    /// How many prepared executions ran a kept physical plan (invariant 6).
    pub fn plan_cache_physical(&self) -> u64 {
        self.plan_cache
            .physical
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many prepared executions used a kept plan optimized already (invariant 5).
    pub fn plan_cache_optimized(&self) -> u64 {
        self.plan_cache
            .optimized
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many prepared executions used a kept plan, and how many planned.
    pub fn plan_cache_stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (
            self.plan_cache.hits.load(Ordering::Relaxed),
            self.plan_cache.misses.load(Ordering::Relaxed),
        )
    }
}

/// Whether `plan` reads row tables only (invariant 1), subqueries included.
fn keepable(plan: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|node| {
        let fine = match node {
            LogicalPlan::TableScan(scan) => is_row_table(&scan.source),
            LogicalPlan::Dml(dml) => is_row_table(&dml.target),
            LogicalPlan::Extension(_) => crate::rows::fast::as_lookup(node).is_some(),
            LogicalPlan::Ddl(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::DescribeTable(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_) => false,
            _ => true,
        };
        if fine {
            Ok(TreeNodeRecursion::Continue)
        } else {
            ok = false;
            Ok(TreeNodeRecursion::Stop)
        }
    });
    ok
}

/// Whether `plan` is a query (no write) whose parameters all have types and whose
/// expressions are all immutable, subqueries included (invariant 5).
fn immutable_query(plan: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|node| {
        if matches!(node, LogicalPlan::Dml(_) | LogicalPlan::Extension(_)) {
            ok = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                let fine = match e {
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    Expr::ScalarVariable(..) => false,
                    Expr::Placeholder(p) => p.field.is_some(),
                    _ => true,
                };
                ok &= fine;
                Ok(if fine {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            })
        })?;
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

/// A kept plan that is analyzed and optimized already (invariant 5): the session makes
/// only its physical plan. Its parameters are bound through it as through any plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub(crate) struct OptimizedPlan {
    input: LogicalPlan,
}

impl UserDefinedLogicalNodeCore for OptimizedPlan {
    fn name(&self) -> &str {
        "KeptOptimized"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "KeptOptimized")
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(OptimizedPlan {
            input: inputs.swap_remove(0),
        })
    }
}

/// The optimized plan `plan` is, if it is a kept one (invariant 5).
pub(crate) fn as_optimized(plan: &LogicalPlan) -> Option<&LogicalPlan> {
    match plan {
        LogicalPlan::Extension(Extension { node }) => node
            .as_any()
            .downcast_ref::<OptimizedPlan>()
            .map(|o| &o.input),
        _ => None,
    }
}

/// A kept plan whose physical plan is kept too (invariant 6): the session binds a copy of
/// it to the execution's values and runs it. Its expressions are its parameters, so the
/// protocol infers and binds them as for any plan; its input is not a child (binding
/// values into it would only cost).
#[derive(Debug, Clone)]
pub(crate) struct KeptPhysical {
    /// The optimized plan, its parameters unbound: the columns, their origins.
    logical: LogicalPlan,
    physical: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
    /// One per parameter, in the order of their numbers: the parameter, and once bound
    /// its value.
    params: Vec<Expr>,
    /// Their numbers (`$n`).
    numbers: Vec<usize>,
}

impl KeptPhysical {
    /// The kept physical plan of `optimized` (made under `state` with its row scans
    /// unbound), if every row scan in it is unbound and nothing else holds a parameter.
    async fn make(state: SessionState, optimized: &LogicalPlan) -> Option<KeptPhysical> {
        let task = state.task_ctx();
        let mut planning = state;
        planning
            .config_mut()
            .set_extension(Arc::new(crate::rows::scan::DeferScans));
        let physical = match planning
            .query_planner()
            .create_physical_plan(optimized, &planning)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("a prepared query keeps no physical plan: {e}");
                return None;
            }
        };
        if !crate::rows::scan::all_scans_unbound(&physical) {
            return None;
        }
        let mut ids: Vec<(usize, String, Option<DataType>)> = optimized
            .get_parameter_types()
            .ok()?
            .into_iter()
            .map(|(id, ty)| {
                let n = id
                    .strip_prefix('$')?
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 1)?;
                Some((n, id, ty))
            })
            .collect::<Option<_>>()?;
        ids.sort();
        let numbers = ids.iter().map(|(n, _, _)| *n).collect();
        let params = ids
            .into_iter()
            .map(|(_, id, ty)| {
                let field = ty.map(|t| Arc::new(Field::new("", t, true)));
                Expr::Placeholder(Placeholder::new_with_field(id, field))
            })
            .collect();
        Some(KeptPhysical {
            logical: optimized.clone(),
            physical,
            task,
            params,
            numbers,
        })
    }

    /// The optimized plan it was made from.
    pub(crate) fn logical(&self) -> &LogicalPlan {
        &self.logical
    }

    /// A copy of the physical plan bound to the values bound into this node, and the
    /// task context to run it in.
    pub(crate) fn bound(&self) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
        // `$n` at place n - 1; a number the plan no longer holds is a NULL nothing reads.
        let last = self.numbers.last().copied().unwrap_or(0);
        let mut values = vec![ScalarAndMetadata::new(ScalarValue::Null, None); last];
        let mut ids = Vec::new();
        for (p, n) in self.params.iter().zip(&self.numbers) {
            // Binding names a value as the parameter it replaced (`Int32(7) AS $1`).
            let mut p = p;
            while let Expr::Alias(a) = p {
                p = &a.expr;
            }
            match p {
                Expr::Literal(v, meta) => {
                    values[n - 1] = ScalarAndMetadata::new(v.clone(), meta.clone())
                }
                Expr::Placeholder(p) => ids.push(p.id.clone()),
                other => {
                    return Err(datafusion::error::DataFusionError::Internal(format!(
                        "a kept plan's parameter is {other}, not a value"
                    ))
                    .into());
                }
            }
        }
        if let Some(id) = ids.first() {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "a kept plan ran with parameter {id} unbound"
            ))
            .into());
        }
        let values = ParamValues::List(values);
        let plan =
            crate::rows::scan::bind_kept(&self.physical, &values, self.task.session_config())?;
        Ok((plan, self.task.clone()))
    }
}

impl PartialEq for KeptPhysical {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.physical, &o.physical) && self.params == o.params
    }
}
impl Eq for KeptPhysical {}
impl std::hash::Hash for KeptPhysical {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.logical.hash(h);
        self.params.hash(h);
    }
}
impl PartialOrd for KeptPhysical {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        self.params.partial_cmp(&o.params)
    }
}

impl UserDefinedLogicalNodeCore for KeptPhysical {
    fn name(&self) -> &str {
        "KeptPhysical"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        self.logical.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        self.params.clone()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "KeptPhysical")
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        _inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(KeptPhysical {
            params: exprs,
            ..self.clone()
        })
    }
}

/// The kept physical plan `plan` is, if it is one (invariant 6).
pub(crate) fn as_kept_physical(plan: &LogicalPlan) -> Option<&KeptPhysical> {
    match plan {
        LogicalPlan::Extension(Extension { node }) => node.as_any().downcast_ref::<KeptPhysical>(),
        _ => None,
    }
}

fn is_row_table(source: &Arc<dyn datafusion::logical_expr::TableSource>) -> bool {
    source_as_provider(source).is_ok_and(|p| {
        p.downcast_ref::<crate::rows::provider::RowTable>()
            .is_some()
    })
}
