//! Semi-join reduction of grouped aggregates: what DuckDB's delim join does for correlated
//! subqueries. DataFusion decorrelates `l_quantity < (SELECT avg(l_quantity) FROM lineitem
//! WHERE l_partkey = p_partkey)` (TPC-H Q17; also Q2 and Q20) into an aggregate over *all*
//! of lineitem grouped by `l_partkey`, joined with the few parts that qualify: 200,000
//! groups built to keep 2,000. This rule filters the aggregate's input by the keys the
//! other side of the join can hold, so only the groups that can match are built:
//!
//! ```text
//! Join: p.k = agg.k                         Join: p.k = agg.k
//!   <outer side, keys from Filter(part)>      <outer side, keys from Filter(part)>
//!   Aggregate: group by l.k           =>      Aggregate: group by l.k
//!     Scan lineitem                             RightSemi Join: __tierdb_reduce = l.k
//!                                                 Projection: part.k AS __tierdb_reduce
//!                                                   Filter(part)      (a copy)
//!                                                 Scan lineitem
//! ```
//!
//! The semi join builds its hash table on the few keys (its left input) and streams the
//! large input through it; the keys also become a dynamic filter on that input's scan.
//!
//! ## Why the answer cannot change
//!
//! 1. The join is an equi-join with `NULL` never equal (`NullEqualsNothing`): an inner
//!    join (the aggregate on either side), a left semi join with the aggregate on its right
//!    or a right semi join with it on its left. A row of the aggregate side whose key `v`
//!    is not among the other side's keys joins nothing and adds nothing to the output.
//! 2. The keys used are a *superset* of the other side's non-null key values: found by
//!    following the key column down through nodes whose output values of it are a subset of
//!    their input's (projections of a plain column, aliases, filters, sorts, limits, the
//!    owning side of any join, an aggregate's group column) and across an equi-join
//!    condition of an inner join or a semi join's kept side (its values are also the other
//!    input's). The copy taken is a subtree that is deterministic (no volatile function).
//! 3. Between the join and the aggregate there are only row-wise nodes (projections of the
//!    column, filters, aliases, sorts without a limit), and the key is a plain group column
//!    of an aggregate without grouping sets: filtering the aggregate's input by `key IN
//!    keys` drops whole groups, those whose key is not in the set (and the `NULL` group),
//!    and leaves every other group's rows, hence its aggregates, exactly as they were.
//! 4. The filter goes below the aggregate through nodes where dropping rows by the group
//!    column drops exactly the groups' rows: filters, projections of the column, aliases,
//!    sorts without a limit, either side of an inner join, the preserved side of a left or
//!    right join, the kept side of a semi or anti join.
//!
//! It is applied when it pays: the keys come from a filtered scan of a tierdb table, and
//! the estimate of its rows (as the join reordering estimates them) is below a quarter of
//! the rows of the table the filter lands on. An aggregate already reduced (a right semi
//! join on its group column over `__tierdb_reduce`) is left alone, so later optimizer
//! passes do not stack filters.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, Result};
use datafusion::logical_expr::{
    Aggregate, Expr, Join, JoinConstraint, JoinType, LogicalPlan, LogicalPlanBuilder,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

use crate::joinorder::{Cardinalities, estimate};

/// The name of the key column of the semi join this rule adds; marks an aggregate as
/// already reduced.
pub const REDUCE_KEY: &str = "__tierdb_reduce";

/// The keys' estimated rows must be below the reduced table's rows divided by this.
const MIN_GAIN: f64 = 4.0;

#[derive(Debug, Default)]
pub struct SemiJoinReduction {
    cards: Arc<Cardinalities>,
}

impl SemiJoinReduction {
    pub fn new(cards: Arc<Cardinalities>) -> Self {
        SemiJoinReduction { cards }
    }
}

impl OptimizerRule for SemiJoinReduction {
    fn name(&self) -> &str {
        "tierdb_semi_join_reduction"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Join(join) = &plan else {
            return Ok(Transformed::no(plan));
        };
        if join.null_equality != NullEquality::NullEqualsNothing || join.null_aware {
            return Ok(Transformed::no(plan));
        }
        // Which side may hold the aggregate (rule 1).
        let sides: &[bool] = match join.join_type {
            JoinType::Inner => &[true, false],
            JoinType::LeftSemi => &[false],
            JoinType::RightSemi => &[true],
            _ => &[],
        };
        for &agg_left in sides {
            for (l, r) in &join.on {
                let (x, y) = if agg_left { (l, r) } else { (r, l) };
                let (Expr::Column(x), Expr::Column(y)) = (x, y) else {
                    continue;
                };
                let (x_side, y_side) = if agg_left {
                    (&join.left, &join.right)
                } else {
                    (&join.right, &join.left)
                };
                if let Some(reduced) = self.reduce(x_side, x, y_side, y)? {
                    let mut rebuilt: Join = join.clone();
                    if agg_left {
                        rebuilt.left = Arc::new(reduced);
                    } else {
                        rebuilt.right = Arc::new(reduced);
                    }
                    return Ok(Transformed::yes(LogicalPlan::Join(rebuilt)));
                }
            }
        }
        Ok(Transformed::no(plan))
    }
}

impl SemiJoinReduction {
    /// `x_side` with the aggregate that `x` comes from reduced by the keys of `y` in
    /// `y_side`; `None` when the rule does not apply or would not pay.
    fn reduce(
        &self,
        x_side: &LogicalPlan,
        x: &Column,
        y_side: &LogicalPlan,
        y: &Column,
    ) -> Result<Option<LogicalPlan>> {
        // Cheap checks first: is there an aggregate group column behind `x` at all?
        if !reaches_group_column(x_side, x) {
            return Ok(None);
        }
        let mut candidates = Vec::new();
        key_sources(y_side, y, &mut candidates, 0);
        let best = candidates
            .into_iter()
            .filter_map(|(plan, col)| {
                let (rows, selectivity) = estimate(&plan, &self.cards);
                known_table(&plan).then_some((rows * selectivity, plan, col))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((key_rows, keys, key_col)) = best else {
            return Ok(None);
        };
        if keys.exists(|n| Ok(n.expressions().iter().any(Expr::is_volatile)))? {
            return Ok(None);
        }
        let keys = LogicalPlanBuilder::from(keys)
            .project(vec![Expr::Column(key_col).alias(REDUCE_KEY)])?
            .build()?;
        let mut outcome = Outcome::NotFound;
        let reduced = to_aggregate(x_side, x, &keys, key_rows, &mut outcome)?;
        Ok(match outcome {
            Outcome::Reduced => reduced,
            Outcome::NotFound | Outcome::Declined => None,
        })
    }
}

/// What [`to_aggregate`] did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    NotFound,
    /// Found, but already reduced, of another type, or not worth it.
    Declined,
    Reduced,
}

/// The plain column an expression is (through aliases), if it is one.
fn as_column(e: &Expr) -> Option<&Column> {
    match e {
        Expr::Column(c) => Some(c),
        Expr::Alias(a) => as_column(&a.expr),
        _ => None,
    }
}

/// The input column a projection's output column `col` passes through unchanged.
fn through_projection(p: &datafusion::logical_expr::Projection, col: &Column) -> Option<Column> {
    let i = p.schema.maybe_index_of_column(col)?;
    as_column(p.expr.get(i)?).cloned()
}

/// The input column an alias's output column `col` is (by position).
fn through_alias(a: &datafusion::logical_expr::SubqueryAlias, col: &Column) -> Option<Column> {
    let i = a.schema.maybe_index_of_column(col)?;
    let input = a.input.schema();
    (i < input.fields().len()).then(|| Column::from(input.qualified_field(i)))
}

/// The input column of an aggregate's output column `col`, if it is a plain group column
/// of an aggregate without grouping sets.
fn through_group(a: &Aggregate, col: &Column) -> Option<Column> {
    if a.group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return None;
    }
    let i = a.schema.maybe_index_of_column(col)?;
    as_column(a.group_expr.get(i)?).cloned()
}

/// Whether `col` of `plan` is, through row-wise nodes only (rule 3), a group column of an
/// aggregate.
fn reaches_group_column(plan: &LogicalPlan, col: &Column) -> bool {
    match plan {
        LogicalPlan::Aggregate(a) => through_group(a, col).is_some(),
        LogicalPlan::Projection(p) => {
            through_projection(p, col).is_some_and(|c| reaches_group_column(&p.input, &c))
        }
        LogicalPlan::SubqueryAlias(a) => {
            through_alias(a, col).is_some_and(|c| reaches_group_column(&a.input, &c))
        }
        LogicalPlan::Filter(f) => reaches_group_column(&f.input, col),
        LogicalPlan::Sort(s) if s.fetch.is_none() => reaches_group_column(&s.input, col),
        _ => false,
    }
}

/// `plan` with the aggregate behind `col` reduced by `keys` (rules 3 and 4); `outcome`
/// says whether it was.
fn to_aggregate(
    plan: &LogicalPlan,
    col: &Column,
    keys: &LogicalPlan,
    key_rows: f64,
    outcome: &mut Outcome,
) -> Result<Option<LogicalPlan>> {
    let child = match plan {
        LogicalPlan::Aggregate(a) => {
            let Some(g) = through_group(a, col) else {
                return Ok(None);
            };
            let Some(input) = below_aggregate(&a.input, &g, keys, key_rows, outcome)? else {
                return Ok(None);
            };
            return Ok(Some(LogicalPlan::Aggregate(Aggregate::try_new(
                Arc::new(input),
                a.group_expr.clone(),
                a.aggr_expr.clone(),
            )?)));
        }
        LogicalPlan::Projection(p) => through_projection(p, col).map(|c| (&p.input, c)),
        LogicalPlan::SubqueryAlias(a) => through_alias(a, col).map(|c| (&a.input, c)),
        LogicalPlan::Filter(f) => Some((&f.input, col.clone())),
        LogicalPlan::Sort(s) if s.fetch.is_none() => Some((&s.input, col.clone())),
        _ => None,
    };
    let Some((input, c)) = child else {
        return Ok(None);
    };
    let Some(new_input) = to_aggregate(input, &c, keys, key_rows, outcome)? else {
        return Ok(None);
    };
    Ok(Some(
        plan.with_new_exprs(plan.expressions(), vec![new_input])?,
    ))
}

/// `plan` (an aggregate's input) with the rows whose `col` is not among `keys` filtered
/// out as far down as rule 4 allows.
fn below_aggregate(
    plan: &LogicalPlan,
    col: &Column,
    keys: &LogicalPlan,
    key_rows: f64,
    outcome: &mut Outcome,
) -> Result<Option<LogicalPlan>> {
    let one_input = |input: &LogicalPlan, c: &Column, outcome: &mut Outcome| {
        below_aggregate(input, c, keys, key_rows, outcome)?
            .map(|i| plan.with_new_exprs(plan.expressions(), vec![i]))
            .transpose()
    };
    match plan {
        LogicalPlan::Filter(f) => one_input(&f.input, col, outcome),
        LogicalPlan::Sort(s) if s.fetch.is_none() => one_input(&s.input, col, outcome),
        LogicalPlan::Projection(p) => match through_projection(p, col) {
            Some(c) => one_input(&p.input, &c, outcome),
            None => semi_join(plan, col, keys, key_rows, outcome),
        },
        LogicalPlan::SubqueryAlias(a) => match through_alias(a, col) {
            Some(c) => one_input(&a.input, &c, outcome),
            None => semi_join(plan, col, keys, key_rows, outcome),
        },
        LogicalPlan::Join(j) => {
            if j.join_type == JoinType::RightSemi
                && j.left
                    .schema()
                    .field_names()
                    .iter()
                    .any(|n| n == REDUCE_KEY)
            {
                *outcome = Outcome::Declined;
                return Ok(None);
            }
            let on_left = j.left.schema().has_column(col);
            let on_right = j.right.schema().has_column(col);
            let down_left = on_left
                && matches!(
                    j.join_type,
                    JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
                );
            let down_right = on_right
                && matches!(
                    j.join_type,
                    JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
                );
            let (side, is_left) = if down_left {
                (&j.left, true)
            } else if down_right {
                (&j.right, false)
            } else {
                return semi_join(plan, col, keys, key_rows, outcome);
            };
            let Some(new_side) = below_aggregate(side, col, keys, key_rows, outcome)? else {
                return Ok(None);
            };
            let mut rebuilt = j.clone();
            if is_left {
                rebuilt.left = Arc::new(new_side);
            } else {
                rebuilt.right = Arc::new(new_side);
            }
            Ok(Some(LogicalPlan::Join(rebuilt)))
        }
        _ => semi_join(plan, col, keys, key_rows, outcome),
    }
}

/// `RightSemi Join: keys.__tierdb_reduce = plan.col` over `plan`, if `plan` scans a tierdb
/// table enough larger than the keys and the types agree.
fn semi_join(
    plan: &LogicalPlan,
    col: &Column,
    keys: &LogicalPlan,
    key_rows: f64,
    outcome: &mut Outcome,
) -> Result<Option<LogicalPlan>> {
    *outcome = Outcome::Declined;
    let Some(rows) = table_rows(plan) else {
        return Ok(None);
    };
    if key_rows * MIN_GAIN >= rows as f64 {
        return Ok(None);
    }
    let key_type = keys.schema().field(0).data_type();
    let Ok((_, field)) = plan.schema().qualified_field_from_column(col) else {
        return Ok(None);
    };
    if field.data_type() != key_type {
        return Ok(None);
    }
    let join = Join::try_new(
        Arc::new(keys.clone()),
        Arc::new(plan.clone()),
        vec![(
            Expr::Column(Column::from_name(REDUCE_KEY)),
            Expr::Column(col.clone()),
        )],
        None,
        JoinType::RightSemi,
        JoinConstraint::On,
        NullEquality::NullEqualsNothing,
        false,
    )?;
    *outcome = Outcome::Reduced;
    Ok(Some(LogicalPlan::Join(join)))
}

/// Subtrees of `plan` whose values of their column are a superset of `col`'s non-null
/// values in `plan`'s output and that filter rows (rule 2): a filter, or a scan with
/// filters pushed into it.
fn key_sources(
    plan: &LogicalPlan,
    col: &Column,
    out: &mut Vec<(LogicalPlan, Column)>,
    depth: usize,
) {
    // Plans are shallow; the bound only guards against pathological nesting.
    if depth > 64 {
        return;
    }
    let down = |p: &LogicalPlan, c: &Column, out: &mut Vec<_>| key_sources(p, c, out, depth + 1);
    match plan {
        // The filter's subtree is a candidate; so are those below it (the filter may sit
        // over a join, whose inputs are scans the estimates know).
        LogicalPlan::Filter(f) => {
            out.push((plan.clone(), col.clone()));
            down(&f.input, col, out);
        }
        LogicalPlan::TableScan(s) if !s.filters.is_empty() => out.push((plan.clone(), col.clone())),
        LogicalPlan::Projection(p) => {
            if let Some(c) = through_projection(p, col) {
                down(&p.input, &c, out);
            }
        }
        LogicalPlan::SubqueryAlias(a) => {
            if let Some(c) = through_alias(a, col) {
                down(&a.input, &c, out);
            }
        }
        LogicalPlan::Aggregate(a) => {
            if let Some(c) = through_group(a, col) {
                down(&a.input, &c, out);
            }
        }
        LogicalPlan::Sort(s) => down(&s.input, col, out),
        LogicalPlan::Limit(l) => down(&l.input, col, out),
        LogicalPlan::Distinct(d) => down(d.input(), col, out),
        LogicalPlan::Join(j) => {
            let on_left = j.left.schema().has_column(col);
            let (own, other) = if on_left {
                (&j.left, &j.right)
            } else {
                (&j.right, &j.left)
            };
            // A column's values in a join's output are its input's (or NULL).
            down(own, col, out);
            // Every output row matched the other input on the join keys.
            let matched = j.null_equality == NullEquality::NullEqualsNothing
                && match j.join_type {
                    JoinType::Inner => true,
                    JoinType::LeftSemi => on_left,
                    JoinType::RightSemi => !on_left,
                    _ => false,
                };
            if matched {
                for (l, r) in &j.on {
                    let (mine, theirs) = if on_left { (l, r) } else { (r, l) };
                    if let (Some(m), Some(t)) = (as_column(mine), as_column(theirs))
                        && m == col
                        && plan_has(other, t)
                    {
                        down(other, t, out);
                    }
                }
            }
        }
        _ => {}
    }
}

fn plan_has(plan: &LogicalPlan, col: &Column) -> bool {
    plan.schema().has_column(col)
}

/// Rows of the tierdb table `plan` scans through filters, projections and aliases.
fn table_rows(plan: &LogicalPlan) -> Option<u64> {
    crate::joinorder::scanned_rows(plan)
}

fn known_table(plan: &LogicalPlan) -> bool {
    table_rows(plan).is_some()
}
