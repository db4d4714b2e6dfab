//! Join reordering. DataFusion joins in FROM-clause order; for a star schema that means the
//! fact table meets its dimensions in whatever order the query names them, and the large
//! intermediate results of unselective joins come first. This rule flattens a tree of inner
//! equi-joins and rebuilds it left-deep: the largest input (the fact table, by catalog row
//! counts) first, then, among the inputs connected to what is joined so far, the most
//! selective first (estimated from the filters on it), the smaller table on ties. Each new
//! input goes on the build (left) side of its hash join, the fact rows on the probe side:
//! the classic star join, where every dimension's hash table is built before the fact
//! table streams through them and its keys prune the fact scan (dynamic filters).
//!
//! Selectivity is estimated per conjunct: `col = literal` 0.1, `IN (n values)` 0.1·n,
//! `LIKE` 0.25, a range or BETWEEN 0.5, an OR the sum of its sides, anything else 0.5.
//! DataFusion's physical JoinSelection still picks each join's build side from statistics.
//!
//! Those guesses tie often (every `=` is 0.1: SSB's Q2.x joined supplier, 1 in 5 rows,
//! before part, 1 in 25). Dimension tables are small, so before a query with a join of
//! three or more inputs runs, [`unmeasured`] names the filtered inputs over tables of at
//! most [`MEASURED_ROWS`] rows whose count is not known yet; the session counts their rows
//! (running the filtered scan) and keeps the counts in [`Cardinalities`], keyed by the
//! table's snapshot and the filters, so the rule orders by measured selectivity, and a
//! repeated query measures nothing.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, NullEquality, Result};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Expr, Join, JoinConstraint, JoinType, LogicalPlan, LogicalPlanBuilder, Operator,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

use crate::provider::TierTable;

/// Inputs over tables of at most this many rows are measured (dimensions; never the fact
/// table, which is the largest input and joined first anyway).
pub const MEASURED_ROWS: u64 = 8 << 20;

/// Measured row counts of filtered table scans, by [`leaf_key`]: the table, its snapshot
/// (committed segments) and the filters. A changed table has a new snapshot, so a count is
/// never used for other rows than those it counted.
#[derive(Debug, Default)]
pub struct Cardinalities {
    counts: parking_lot::Mutex<HashMap<String, u64>>,
}

impl Cardinalities {
    /// Entries kept before the map is emptied (each is a few hundred bytes).
    const CAP: usize = 4096;

    pub fn get(&self, key: &str) -> Option<u64> {
        self.counts.lock().get(key).copied()
    }

    pub fn insert(&self, key: String, rows: u64) {
        let mut counts = self.counts.lock();
        if counts.len() >= Self::CAP {
            counts.clear();
        }
        counts.insert(key, rows);
    }
}

#[derive(Debug, Default)]
pub struct JoinReorder {
    cards: Arc<Cardinalities>,
}

impl JoinReorder {
    pub fn new(cards: Arc<Cardinalities>) -> Self {
        JoinReorder { cards }
    }
}

impl OptimizerRule for JoinReorder {
    fn name(&self) -> &str {
        "tierdb_join_reorder"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if !is_reorderable(&plan) {
            return Ok(Transformed::no(plan));
        }
        let mut leaves = Vec::new();
        let mut edges = Vec::new();
        flatten(&plan, &mut leaves, &mut edges);
        if leaves.len() < 2 {
            return Ok(Transformed::no(plan));
        }
        // Each side of each condition must belong to exactly one input.
        let mut pairs = Vec::with_capacity(edges.len());
        for (l, r) in &edges {
            match (owner(&leaves, l), owner(&leaves, r)) {
                (Some(a), Some(b)) if a != b => pairs.push((a, b, l.clone(), r.clone())),
                _ => return Ok(Transformed::no(plan)),
            }
        }
        let info: Vec<Input> = leaves
            .iter()
            .map(|l| {
                let (rows, selectivity) = estimate(l, &self.cards);
                Input {
                    rows,
                    selectivity,
                    name: tie_breaker(l),
                }
            })
            .collect();
        let Some(order) = choose_order(&info, &pairs) else {
            return Ok(Transformed::no(plan));
        };
        // Already built by this rule: the last input joined is the leftmost leaf.
        if order.iter().copied().eq((0..leaves.len()).rev()) {
            return Ok(Transformed::no(plan));
        }
        // Rebuild left-deep in the chosen order, then restore the original column order.
        let mut joined: HashSet<usize> = HashSet::new();
        let mut builder = LogicalPlanBuilder::from(leaves[order[0]].clone());
        joined.insert(order[0]);
        for &next in &order[1..] {
            let mut lk = Vec::new();
            let mut rk = Vec::new();
            for (a, b, ea, eb) in &pairs {
                if *a == next && joined.contains(b) {
                    lk.push(eb.clone());
                    rk.push(ea.clone());
                } else if *b == next && joined.contains(a) {
                    lk.push(ea.clone());
                    rk.push(eb.clone());
                }
            }
            // The new input on the left: hash joins build on their left, so each
            // (filtered, small) dimension becomes a hash table the fact rows stream through,
            // and its keys become a dynamic filter on the fact table's scan.
            builder = LogicalPlanBuilder::from(leaves[next].clone()).join_with_expr_keys(
                builder.build()?,
                JoinType::Inner,
                (rk, lk),
                None,
            )?;
            joined.insert(next);
        }
        let columns = plan
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect::<Vec<_>>();
        let rebuilt = builder.project(columns)?.build()?;
        Ok(Transformed::yes(rebuilt))
    }
}

/// An inner equi-join with nothing else attached.
fn is_reorderable(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Join(Join {
            join_type: JoinType::Inner,
            filter: None,
            join_constraint: JoinConstraint::On,
            null_equality: NullEquality::NullEqualsNothing,
            null_aware: false,
            ..
        })
    )
}

fn flatten(plan: &LogicalPlan, leaves: &mut Vec<LogicalPlan>, edges: &mut Vec<(Expr, Expr)>) {
    match plan {
        LogicalPlan::Join(j) if is_reorderable(plan) => {
            flatten(&j.left, leaves, edges);
            flatten(&j.right, leaves, edges);
            edges.extend(j.on.iter().cloned());
        }
        // A projection that only passes columns through (pruning) does not stop the join
        // tree; the rebuilt tree is projected to the original columns at the top.
        LogicalPlan::Projection(p)
            if is_reorderable(&p.input) && p.expr.iter().all(|e| matches!(e, Expr::Column(_))) =>
        {
            flatten(&p.input, leaves, edges);
        }
        other => leaves.push(other.clone()),
    }
}

/// The input whose output has every column of `e`.
fn owner(leaves: &[LogicalPlan], e: &Expr) -> Option<usize> {
    let cols: HashSet<&Column> = e.column_refs();
    if cols.is_empty() {
        return None;
    }
    let mut found = None;
    for (i, leaf) in leaves.iter().enumerate() {
        let schema = leaf.schema();
        if cols.iter().all(|c| schema.has_column(c)) {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    found
}

/// What the order is chosen by, for one join input.
struct Input {
    rows: f64,
    selectivity: f64,
    /// Decides ties, so that the order depends on the inputs and not on where they stand:
    /// the rebuilt tree lists them in another order, and an order that flipped on ties
    /// made the rule rebuild its own output without end (TPC-DS Q44: two identical
    /// subqueries joined with the same table twice grew the planner to 20 GB).
    name: String,
}

/// The qualified output columns of a join input: distinct for distinct inputs of one join
/// (the same table twice has two aliases).
fn tie_breaker(plan: &LogicalPlan) -> String {
    plan.schema()
        .columns()
        .iter()
        .map(|c| c.flat_name())
        .collect::<Vec<_>>()
        .join(",")
}

/// The greedy order: the largest input, then repeatedly the connected input with the
/// fewest estimated rows relative to its size (most selective), smaller size on ties, then
/// the name. `None` if the inputs are not all connected. A function of the inputs as a set:
/// the same inputs in any positions give the same sequence of inputs.
fn choose_order(info: &[Input], pairs: &[(usize, usize, Expr, Expr)]) -> Option<Vec<usize>> {
    let n = info.len();
    let first = (0..n).max_by(|&a, &b| {
        info[a]
            .rows
            .total_cmp(&info[b].rows)
            .then_with(|| info[b].name.cmp(&info[a].name))
    })?;
    let mut order = vec![first];
    let mut joined: HashSet<usize> = HashSet::from([first]);
    while order.len() < n {
        let next = (0..n)
            .filter(|i| !joined.contains(i))
            .filter(|&i| {
                pairs.iter().any(|(a, b, _, _)| {
                    (*a == i && joined.contains(b)) || (*b == i && joined.contains(a))
                })
            })
            .min_by(|&a, &b| {
                info[a]
                    .selectivity
                    .total_cmp(&info[b].selectivity)
                    .then(info[a].rows.total_cmp(&info[b].rows))
                    .then_with(|| info[a].name.cmp(&info[b].name))
            })?;
        order.push(next);
        joined.insert(next);
    }
    Some(order)
}

/// (rows of the underlying table, selectivity of the filters above it: measured if
/// [`Cardinalities`] has the count, otherwise estimated).
pub(crate) fn estimate(plan: &LogicalPlan, cards: &Cardinalities) -> (f64, f64) {
    let leaf = Leaf::of(plan);
    let rows = leaf.table.as_ref().map(|t| t.rows() as f64);
    if let (Some(key), Some(total)) = (leaf.key(), rows)
        && let Some(n) = cards.get(&key)
    {
        return (total, n as f64 / total.max(1.0));
    }
    let mut selectivity = 1.0;
    for e in &leaf.filters {
        for c in split_conjunction(e) {
            selectivity *= conjunct_selectivity(c);
        }
    }
    (rows.unwrap_or(1e6), selectivity)
}

/// Rows of the tierdb table `plan` scans, through filters, projections and aliases.
pub(crate) fn scanned_rows(plan: &LogicalPlan) -> Option<u64> {
    Leaf::of(plan).table.map(|t| t.rows)
}

/// What a join input scans: a tierdb table's name, snapshot and rows.
struct Scanned {
    name: String,
    snapshot: u64,
    rows: u64,
}

impl Scanned {
    fn rows(&self) -> u64 {
        self.rows
    }
}

/// A join input: the tierdb table it scans (if it is a scan) and the filters on it.
struct Leaf<'a> {
    table: Option<Scanned>,
    filters: Vec<&'a Expr>,
}

impl<'a> Leaf<'a> {
    fn of(plan: &'a LogicalPlan) -> Self {
        let mut leaf = Leaf {
            table: None,
            filters: Vec::new(),
        };
        collect(plan, &mut leaf.table, &mut leaf.filters);
        leaf
    }

    /// The key of its count in [`Cardinalities`]: `None` unless it is a filtered scan.
    fn key(&self) -> Option<String> {
        let table = self.table.as_ref()?;
        if self.filters.is_empty() {
            return None;
        }
        let mut conjuncts: Vec<String> = self
            .filters
            .iter()
            .flat_map(|e| split_conjunction(e))
            .map(|c| c.to_string())
            .collect();
        conjuncts.sort();
        conjuncts.dedup();
        Some(format!(
            "{}@{:016x}: {}",
            table.name,
            table.snapshot,
            conjuncts.join(" AND ")
        ))
    }
}

/// The inputs of the inner-join trees of `plan` (three inputs or more) worth measuring:
/// filtered scans of tables of at most [`MEASURED_ROWS`] rows, not the largest input, whose
/// count `cards` does not hold. Each with its key and the input's plan (to count its rows).
pub fn unmeasured(plan: &LogicalPlan, cards: &Cardinalities) -> Vec<(String, LogicalPlan)> {
    let mut found: Vec<(String, LogicalPlan)> = Vec::new();
    let _ = plan.apply(|node| {
        if !is_reorderable(node) {
            return Ok(TreeNodeRecursion::Continue);
        }
        let mut leaves = Vec::new();
        let mut edges = Vec::new();
        flatten(node, &mut leaves, &mut edges);
        if leaves.len() >= 3 {
            let largest = leaves
                .iter()
                .map(|l| Leaf::of(l).table.map_or(0, |t| t.rows))
                .max()
                .unwrap_or(0);
            for l in &leaves {
                let leaf = Leaf::of(l);
                let Some(rows) = leaf.table.as_ref().map(|t| t.rows) else {
                    continue;
                };
                if rows > MEASURED_ROWS || rows >= largest {
                    continue;
                }
                if let Some(key) = leaf.key()
                    && cards.get(&key).is_none()
                    && !found.iter().any(|(k, _)| *k == key)
                {
                    found.push((key, l.clone()));
                }
            }
        }
        // The leaves were visited; joins nested inside them (subqueries) are not measured.
        Ok(TreeNodeRecursion::Jump)
    });
    found
}

fn collect<'a>(plan: &'a LogicalPlan, table: &mut Option<Scanned>, filters: &mut Vec<&'a Expr>) {
    match plan {
        LogicalPlan::TableScan(scan) => {
            if let Ok(provider) = source_as_provider(&scan.source)
                && let Some(t) = (provider.as_ref() as &dyn Any).downcast_ref::<TierTable>()
            {
                *table = Some(Scanned {
                    name: t.def().name.clone(),
                    snapshot: t.snapshot_id(),
                    rows: t.rows(),
                });
            }
            // Inexact pushed filters also stay in a Filter above: count them once.
            if filters.is_empty() {
                filters.extend(scan.filters.iter());
            }
        }
        LogicalPlan::Filter(f) => {
            filters.push(&f.predicate);
            collect(&f.input, table, &mut Vec::new());
        }
        LogicalPlan::Projection(p) => collect(&p.input, table, filters),
        LogicalPlan::SubqueryAlias(s) => collect(&s.input, table, filters),
        _ => {}
    }
}

fn conjunct_selectivity(e: &Expr) -> f64 {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::Eq if is_literal(left) || is_literal(right) => 0.1,
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => 0.5,
            Operator::Or => (conjunct_selectivity(left) + conjunct_selectivity(right)).min(1.0),
            Operator::And => conjunct_selectivity(left) * conjunct_selectivity(right),
            _ => 0.5,
        },
        Expr::InList(l) if !l.negated => (0.1 * l.list.len() as f64).min(1.0),
        Expr::Between(b) if !b.negated => 0.5,
        Expr::Like(l) if !l.negated => 0.25,
        _ => 0.5,
    }
}

fn is_literal(e: &Expr) -> bool {
    matches!(e, Expr::Literal(..)) || matches!(e, Expr::Cast(c) if is_literal(&c.expr))
}
