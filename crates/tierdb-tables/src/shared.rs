//! Repeated subplans computed once: a CTE or view that a query reads twice (TPC-H Q15's
//! `revenue`, once joined with `supplier` and once under `max(total_revenue)`) is planned
//! by DataFusion as two copies of the same aggregate, each scanning and grouping the
//! table again. PostgreSQL computes a CTE once and reads its stored rows as often as the
//! query names it; [`share_repeated`] does the same for every repeated subplan that pays.
//!
//! After the optimizer, before the physical planner (`sql::LocalPlanner`), equal subtrees
//! of the query (its subqueries included) are found; each occurrence of a repeated one is
//! wrapped in a [`SharedNode`] with the id of its class. The physical planner makes a
//! [`SharedExec`] of each, and the occurrences of one class share one [`Shared`]: the
//! first occurrence to run computes the subplan and keeps its batches, the others wait
//! for them and read them.
//!
//! Invariants:
//!
//! 1. Only *equal* subtrees share: the same logical plan (operators, expressions, columns)
//!    over the same table sources (the same provider objects, so the same snapshot), with
//!    no volatile function, no subquery expression and only relational operators whose
//!    result is a function of their inputs (projections, filters, aggregates, windows,
//!    sorts, joins, unions, aliases, limits, DISTINCT, scans, VALUES). Nothing in a query
//!    with a recursive CTE shares (its work table changes between iterations).
//! 2. A subtree shares only if it does work worth keeping: it holds an aggregate, a
//!    window or a DISTINCT over a table scan. A bare scan is never buffered in memory.
//! 3. The kept batches are charged to the query's memory pool. If the pool refuses them,
//!    the class is *unshared*: the occurrence computing it streams what it kept and the
//!    rest, and every other occurrence computes its own copy, as without this module.
//! 4. The batches live as long as the plan, and belong to one execution: a plan made
//!    fresh for another execution (`reset_state`: kept plans, recursive terms) gets a
//!    fresh, empty state per node.
//! 5. Nothing above a [`SharedExec`] pushes filters, projections or limits into it: all
//!    occurrences must read the same rows.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, Result, Statistics};
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildStats, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    StatisticsArgs, execute_stream,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};

/// Whether a session shares repeated subplans (a `SessionConfig` extension, read by
/// `sql::LocalPlanner`; off with `--no-shared-subplans` and in sessions with workers,
/// whose plans are sent to other processes).
#[derive(Debug, Clone, Copy)]
pub struct ShareSubplans(pub bool);

/// What identifies a class of equal subtrees (invariant 1): the plan, and the addresses of
/// its scans' table sources in visiting order.
#[derive(PartialEq, Eq, Hash)]
struct Key(LogicalPlan, Vec<usize>);

/// `plan` with every repeated subtree that pays (invariants 1 and 2) wrapped in a
/// [`SharedNode`]; the plan as it was when nothing repeats.
pub fn share_repeated(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut recursive = false;
    plan.apply_with_subqueries(|n| {
        recursive |= matches!(n, LogicalPlan::RecursiveQuery(_));
        Ok(TreeNodeRecursion::Continue)
    })?;
    if recursive {
        return Ok(plan);
    }
    // How often each eligible subtree occurs, anywhere.
    let mut seen: HashMap<Key, usize> = HashMap::new();
    plan.apply_with_subqueries(|n| {
        if let Some(k) = key(n)? {
            *seen.entry(k).or_default() += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if !seen.values().any(|&n| n > 1) {
        return Ok(plan);
    }
    // The outermost occurrences of repeated subtrees (nothing inside one is shared on its
    // own): a class is shared if it has two of them.
    let mut outer: HashMap<Key, usize> = HashMap::new();
    plan.apply_with_subqueries(|n| match key(n)? {
        Some(k) if seen.get(&k).is_some_and(|&c| c > 1) => {
            *outer.entry(k).or_default() += 1;
            Ok(TreeNodeRecursion::Jump)
        }
        _ => Ok(TreeNodeRecursion::Continue),
    })?;
    let mut ids: HashMap<Key, (usize, usize)> = HashMap::new();
    for (k, readers) in outer {
        if readers > 1 {
            let id = ids.len();
            ids.insert(k, (id, readers));
        }
    }
    if ids.is_empty() {
        return Ok(plan);
    }
    plan.transform_down_with_subqueries(|n| {
        let Some(&(id, readers)) = key(&n)?.and_then(|k| ids.get(&k)) else {
            return Ok(Transformed::no(n));
        };
        let node = SharedNode {
            id,
            readers,
            input: n,
        };
        Ok(Transformed::new(
            LogicalPlan::Extension(Extension {
                node: Arc::new(node),
            }),
            true,
            TreeNodeRecursion::Jump,
        ))
    })
    .map(|t| t.data)
}

/// The class of `plan` if it may be shared at all (invariants 1 and 2).
fn key(plan: &LogicalPlan) -> Result<Option<Key>> {
    let (mut sources, mut work, mut ok) = (Vec::new(), false, true);
    plan.apply(|n| {
        use LogicalPlan as P;
        match n {
            P::TableScan(s) => sources.push(Arc::as_ptr(&s.source) as *const () as usize),
            P::Aggregate(_) | P::Window(_) | P::Distinct(_) => work = true,
            P::Projection(_)
            | P::Filter(_)
            | P::Sort(_)
            | P::Join(_)
            | P::Union(_)
            | P::SubqueryAlias(_)
            | P::Limit(_)
            | P::Values(_)
            | P::EmptyRelation(_) => {}
            _ => ok = false,
        }
        n.apply_expressions(|e| {
            ok &= !e.is_volatile()
                && !e.exists(|e| {
                    Ok(matches!(
                        e,
                        Expr::ScalarSubquery(_)
                            | Expr::Exists(_)
                            | Expr::InSubquery(_)
                            | Expr::SetComparison(_)
                            | Expr::OuterReferenceColumn(..)
                    ))
                })?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })?;
    Ok((ok && work && !sources.is_empty()).then(|| Key(plan.clone(), sources)))
}

/// One occurrence of a repeated subplan: class `id`, read by `readers` occurrences.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct SharedNode {
    id: usize,
    readers: usize,
    input: LogicalPlan,
}

impl UserDefinedLogicalNodeCore for SharedNode {
    fn name(&self) -> &str {
        "Shared"
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

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Shared: subplan={} readers={}", self.id, self.readers)
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let input = inputs
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal("a shared subplan has one input".into()))?;
        Ok(SharedNode {
            input,
            ..self.clone()
        })
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// Plans the [`SharedNode`]s of one query: the occurrences of a class get one [`Shared`].
/// Made fresh for each physical plan.
#[derive(Debug, Default)]
pub struct SharedPlanner {
    classes: parking_lot::Mutex<HashMap<usize, Arc<Shared>>>,
}

#[async_trait]
impl ExtensionPlanner for SharedPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn Session,
        _planning: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<SharedNode>() else {
            return Ok(None);
        };
        let [input] = physical_inputs else {
            return Err(DataFusionError::Internal(
                "a shared subplan has one input".into(),
            ));
        };
        let shared = self
            .classes
            .lock()
            .entry(node.id)
            .or_insert_with(|| Arc::new(Shared::new(node.id, node.readers)))
            .clone();
        Ok(Some(Arc::new(SharedExec::new(input.clone(), shared))))
    }
}

/// What the occurrences of one class share.
#[derive(Debug)]
pub struct Shared {
    id: usize,
    readers: usize,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Not computed yet (or its computation was dropped before it finished).
    Pending,
    /// Computed: every occurrence reads these.
    Done {
        batches: Arc<Vec<RecordBatch>>,
        _charged: MemoryReservation,
    },
    /// The memory pool refused the batches (invariant 3): each occurrence computes its own.
    Unshared,
}

impl Shared {
    fn new(id: usize, readers: usize) -> Self {
        Shared {
            id,
            readers,
            state: tokio::sync::Mutex::new(State::Pending),
        }
    }

    /// The rows of the subplan, for one occurrence whose physical plan is `input`.
    async fn read(
        &self,
        input: Arc<dyn ExecutionPlan>,
        ctx: Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Done { batches, .. } => return Ok(replay(batches.clone())),
            State::Unshared => {
                drop(state);
                return Ok(execute_stream(input, ctx)?.boxed());
            }
            State::Pending => {}
        }
        let charged = MemoryConsumer::new(format!("SharedExec[subplan={}]", self.id))
            .register(ctx.memory_pool());
        let mut rows = execute_stream(input, ctx)?;
        let mut kept = Vec::new();
        while let Some(batch) = rows.next().await {
            let batch = batch?;
            if charged.try_grow(batch.get_array_memory_size()).is_err() {
                *state = State::Unshared;
                drop(charged);
                kept.push(batch);
                return Ok(stream::iter(kept.into_iter().map(Ok)).chain(rows).boxed());
            }
            kept.push(batch);
        }
        let batches = Arc::new(kept);
        *state = State::Done {
            batches: batches.clone(),
            _charged: charged,
        };
        Ok(replay(batches))
    }
}

fn replay(batches: Arc<Vec<RecordBatch>>) -> BoxStream<'static, Result<RecordBatch>> {
    stream::iter((0..batches.len()).map(move |i| Ok(batches[i].clone()))).boxed()
}

/// One occurrence of a shared subplan: one partition, the subplan's rows.
#[derive(Debug)]
pub struct SharedExec {
    input: Arc<dyn ExecutionPlan>,
    shared: Arc<Shared>,
    properties: Arc<PlanProperties>,
}

impl SharedExec {
    fn new(input: Arc<dyn ExecutionPlan>, shared: Arc<Shared>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        SharedExec {
            input,
            shared,
            properties,
        }
    }
}

impl DisplayAs for SharedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SharedExec: subplan={}, computed once for {} readers",
            self.shared.id, self.shared.readers
        )
    }
}

impl ExecutionPlan for SharedExec {
    fn name(&self) -> &str {
        "SharedExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
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
            .map_err(|_| DataFusionError::Internal("a shared subplan has one input".into()))?;
        // The same class: occurrences rewritten by the physical optimizer still share.
        Ok(Arc::new(SharedExec::new(input, self.shared.clone())))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        // Invariant 4: another execution never reads this one's batches.
        let fresh = Arc::new(Shared::new(self.shared.id, self.shared.readers));
        Ok(Arc::new(SharedExec::new(self.input.clone(), fresh)))
    }

    fn child_stats_requests(&self, _partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(None)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        // One partition: all of the subplan's rows.
        Ok(input_stats[0].clone())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SharedExec has one partition, not {partition}"
            )));
        }
        let (shared, input) = (self.shared.clone(), self.input.clone());
        let rows = stream::once(async move { shared.read(input, context).await }).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), rows)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::physical_plan::collect;

    use super::*;

    /// Two occurrences of one class over `batches` batches of 1,000 numbers, run in a pool
    /// of `pool` bytes: what each read, and the class's state after.
    async fn run_two(
        batches: usize,
        pool: usize,
    ) -> (Vec<RecordBatch>, Vec<RecordBatch>, Arc<Shared>) {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let data: Vec<RecordBatch> = (0..batches as i64)
            .map(|b| {
                let col = Int64Array::from_iter_values(b * 1000..(b + 1) * 1000);
                RecordBatch::try_new(schema.clone(), vec![Arc::new(col)]).unwrap()
            })
            .collect();
        let input = MemorySourceConfig::try_new_exec(&[data], schema, None).unwrap();
        let shared = Arc::new(Shared::new(0, 2));
        let a = Arc::new(SharedExec::new(input.clone(), shared.clone()));
        let b = Arc::new(SharedExec::new(input, shared.clone()));
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(GreedyMemoryPool::new(pool)))
            .build_arc()
            .unwrap();
        let ctx = Arc::new(TaskContext::default().with_runtime(runtime));
        let first = collect(a, ctx.clone()).await.unwrap();
        let second = collect(b, ctx).await.unwrap();
        (first, second, shared)
    }

    fn numbers(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..col.len()).map(|i| col.value(i)).collect::<Vec<_>>()
            })
            .collect()
    }

    #[tokio::test]
    async fn the_second_occurrence_reads_the_batches_the_first_computed() {
        let (first, second, shared) = run_two(5, 64 << 20).await;
        let expected: Vec<i64> = (0..5000).collect();
        assert_eq!(numbers(&first), expected);
        assert_eq!(numbers(&second), expected);
        // The very arrays the first occurrence kept, not a second computation's.
        for (a, b) in first.iter().zip(&second) {
            assert_eq!(
                a.column(0).to_data().buffers()[0].as_ptr(),
                b.column(0).to_data().buffers()[0].as_ptr()
            );
        }
        assert!(matches!(*shared.state.lock().await, State::Done { .. }));
    }

    /// Invariant 3: a pool too small for the batches unshares the class; both still read
    /// every row.
    #[tokio::test]
    async fn a_pool_too_small_for_the_batches_leaves_each_occurrence_its_own_copy() {
        let (first, second, shared) = run_two(5, 20_000).await;
        let expected: Vec<i64> = (0..5000).collect();
        assert_eq!(numbers(&first), expected);
        assert_eq!(numbers(&second), expected);
        assert!(matches!(*shared.state.lock().await, State::Unshared));
    }

    /// Invariant 4: a node made fresh for another execution shares nothing with this one.
    #[tokio::test]
    async fn a_reset_node_starts_empty() {
        let (_, _, shared) = run_two(1, 64 << 20).await;
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let input = MemorySourceConfig::try_new_exec(&[vec![]], schema, None).unwrap();
        let node = Arc::new(SharedExec::new(input, shared.clone()));
        let fresh = node.reset_state().unwrap();
        let fresh = fresh.downcast_ref::<SharedExec>().unwrap();
        assert!(!Arc::ptr_eq(&fresh.shared, &shared));
        assert!(matches!(*fresh.shared.state.lock().await, State::Pending));
    }
}
