//! Integer literals typed as PostgreSQL types them: a literal that fits in 32 bits is an
//! `integer` (int4), a larger one `bigint`. DataFusion makes every integer literal Int64,
//! so `SELECT 1` reached clients as int8 (node-postgres then returns the string "1") and
//! `2147483647 + 1` did not fail as it does in PostgreSQL.
//!
//! Applied to a statement's plan as soon as it is planned (`SqlSession`), before type
//! coercion, so coercion widens the literal where the other operand is wider (`bigint_col
//! + 1` is bigint), and so the plan's schema, which clients are told, is the one its rows
//! have (as an analyzer rule it would change the rows' types after the schema was read). Left alone: LIMIT and OFFSET
//! (DataFusion wants them Int64) and the arguments of aggregate and window functions
//! (some, such as `lag`'s offset, must be Int64 literals).

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// `plan` with its integer literals typed as PostgreSQL types them.
pub fn int4_literals(plan: LogicalPlan) -> Result<LogicalPlan> {
    Int4Literals.analyze(plan, &ConfigOptions::default())
}

#[derive(Debug, Default)]
pub struct Int4Literals;

impl AnalyzerRule for Int4Literals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // A recursive query's terms must keep the types they were planned with: its work
        // table's columns have the anchor's types as planned (int8 for a literal), and a
        // narrowed anchor or recursive term no longer matches them. Such a query keeps
        // DataFusion's int8 literals.
        let mut recursive = false;
        plan.apply_with_subqueries(|n| {
            recursive = matches!(n, LogicalPlan::RecursiveQuery(_));
            Ok(if recursive {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        if recursive {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| {
            // VALUES rows are cast to their column types anyway (INSERT … VALUES).
            if matches!(node, LogicalPlan::Limit(_) | LogicalPlan::Values(_)) {
                return Ok(Transformed::no(node));
            }
            // Columns keep their names (parents refer to them by name), as DataFusion's
            // own type coercion keeps them.
            let names = NamePreserver::new(&node);
            let t = node.map_expressions(|e| {
                let saved = names.save(&e);
                narrow(e).map(|t| t.update_data(|e| saved.restore(e)))
            })?;
            if !t.transformed {
                return Ok(t);
            }
            t.data.recompute_schema().map(Transformed::yes)
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tierdb_int4_literals"
    }
}

/// `e` with its Int64 literals that fit in 32 bits made Int32, outside aggregate and
/// window function arguments.
fn narrow(e: Expr) -> Result<Transformed<Expr>> {
    e.transform_down(|e| match e {
        Expr::AggregateFunction(_) | Expr::WindowFunction(_) => {
            Ok(Transformed::new(e, false, TreeNodeRecursion::Jump))
        }
        Expr::Literal(ScalarValue::Int64(Some(v)), meta) => match i32::try_from(v) {
            Ok(v) => Ok(Transformed::yes(Expr::Literal(
                ScalarValue::Int32(Some(v)),
                meta,
            ))),
            Err(_) => Ok(Transformed::no(Expr::Literal(
                ScalarValue::Int64(Some(v)),
                meta,
            ))),
        },
        other => Ok(Transformed::no(other)),
    })
}
