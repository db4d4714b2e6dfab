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

use std::sync::{Arc, Weak};

use datafusion::common::DFSchemaRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore, Volatility,
};
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
    /// Wrapped in an [`OptimizedPlan`]: the session makes its physical plan only.
    Yes(LogicalPlan),
}

/// A session's counts of prepared executions that used a kept plan and that planned.
#[derive(Debug, Default)]
pub(crate) struct PlanCacheStats {
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
    /// Hits whose plan was optimized already (invariant 5).
    optimized: std::sync::atomic::AtomicU64,
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
                if as_optimized(&plan).is_some() {
                    self.plan_cache.optimized.fetch_add(1, Ordering::Relaxed);
                }
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
            if optimized.is_some() {
                self.plan_cache.optimized.fetch_add(1, Ordering::Relaxed);
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

    /// `plan` analyzed and optimized with its parameters unbound, marked for
    /// [`SqlSession`]'s execution, if it may be kept so (invariant 5).
    async fn optimized_for_keeping(&self, plan: &LogicalPlan) -> Option<LogicalPlan> {
        if !immutable_query(plan) {
            return None;
        }
        self.measure_join_inputs(plan).await;
        let ctx = self.exec_ctx();
        let (state, unbound) = (ctx.state(), plan.clone());
        match crate::interrupt::off_task(async move { state.optimize(&unbound) }).await {
            Ok(optimized) => Some(LogicalPlan::Extension(Extension {
                node: Arc::new(OptimizedPlan { input: optimized }),
            })),
            Err(e) => {
                tracing::debug!("a prepared query's plan is kept unoptimized: {e}");
                None
            }
        }
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

fn is_row_table(source: &Arc<dyn datafusion::logical_expr::TableSource>) -> bool {
    source_as_provider(source).is_ok_and(|p| {
        p.downcast_ref::<crate::rows::provider::RowTable>()
            .is_some()
    })
}
