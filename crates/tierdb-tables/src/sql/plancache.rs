//! A prepared statement's plan, kept for its next executions.
//!
//! A prepared statement is planned again at every Execute, so that it reads the tables as
//! they are then; for a short statement on row tables (sysbench's range selects, its
//! UPDATE, DELETE and INSERT) that SQL-to-plan translation was a sixth of the server's CPU.
//! [`PlanCache`] keeps the plan made from the statement (its parameters still unbound: the
//! optimizer and the physical planner still run per execution, so `now()` is the
//! execution's) while nothing it depends on can have changed.
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

use std::sync::{Arc, Weak};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::LogicalPlan;
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
}

/// A session's counts of prepared executions that used a kept plan and that planned.
#[derive(Debug, Default)]
pub(crate) struct PlanCacheStats {
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
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
                .map(|k| k.plan.clone())
        });
        if let Some(plan) = hit {
            self.guarded(async { self.refuse_if_aborted(StatementKind::of(stmt)) })
                .await?;
            self.plan_cache.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(plan));
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

fn is_row_table(source: &Arc<dyn datafusion::logical_expr::TableSource>) -> bool {
    source_as_provider(source).is_ok_and(|p| {
        p.downcast_ref::<crate::rows::provider::RowTable>()
            .is_some()
    })
}
