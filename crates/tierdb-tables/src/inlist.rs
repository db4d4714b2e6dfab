//! IN-lists written out before DataFusion's simplifier sees them, where its list algebra
//! is wrong in SQL's three-valued logic.
//!
//! The simplifier rewrites `x NOT IN (A) OR x NOT IN (B)` to `x NOT IN (A ∩ B)` (and
//! `x IN (A) AND x NOT IN (B)` to `x IN (A \ B)`): with `x` NULL, or a NULL in a list, the
//! left side is NULL where the right side is TRUE or FALSE, so `DELETE … WHERE (c NOT IN
//! (20, 17, NULL) OR c NOT IN (7, 41)) AND …` deleted a row whose `c` is NULL
//! (found by `python/sqlcheck`, seed 1124). Those rules only match two `InList` nodes.
//! This analyzer rule writes every negated IN-list, and every IN-list holding a NULL, as
//! the comparisons SQL defines it by (`x NOT IN (a, b)` is `x <> a AND x <> b`, `x IN (a,
//! NULL)` is `x = a OR x = NULL`): exactly the same answers, and nothing for those rules to
//! match. The simplifier's own rules make IN-lists again only of non-NULL equalities
//! (`x = 1 OR x = 2`), where its algebra is right. Lists longer than [`MAX_ITEMS`] are left
//! alone (a known limit: such a negated list combined with another under OR can still be
//! simplified wrongly).

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// The longest list written out.
pub const MAX_ITEMS: usize = 64;

#[derive(Debug, Default)]
pub struct NullSafeInLists;

impl AnalyzerRule for NullSafeInLists {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| node.map_expressions(|e| e.transform_up(rewrite)))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tierdb_null_safe_in_lists"
    }
}

fn is_null(e: &Expr) -> bool {
    matches!(e, Expr::Literal(v, _) if v.is_null())
}

fn rewrite(e: Expr) -> Result<Transformed<Expr>> {
    let Expr::InList(InList {
        expr,
        list,
        negated,
    }) = e
    else {
        return Ok(Transformed::no(e));
    };
    let unsafe_shape = negated || list.iter().any(is_null);
    if !unsafe_shape || list.is_empty() || list.len() > MAX_ITEMS {
        return Ok(Transformed::no(Expr::InList(InList {
            expr,
            list,
            negated,
        })));
    }
    let mut items = list.into_iter();
    let first = items.next().expect("a non-empty list");
    let cmp = |v: Expr| {
        if negated {
            expr.as_ref().clone().not_eq(v)
        } else {
            expr.as_ref().clone().eq(v)
        }
    };
    let out = items.fold(cmp(first), |acc, v| {
        if negated {
            acc.and(cmp(v))
        } else {
            acc.or(cmp(v))
        }
    });
    Ok(Transformed::yes(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn rewritten(e: Expr) -> String {
        rewrite(e).unwrap().data.to_string()
    }

    #[test]
    fn only_negated_or_null_holding_lists_are_written_out() {
        assert_eq!(
            rewritten(col("c").in_list(vec![lit(1), lit(2)], true)),
            "c != Int32(1) AND c != Int32(2)"
        );
        assert_eq!(
            rewritten(col("c").in_list(
                vec![
                    lit(1),
                    Expr::Literal(datafusion::common::ScalarValue::Int32(None), None)
                ],
                false
            )),
            "c = Int32(1) OR c = Int32(NULL)"
        );
        assert_eq!(
            rewritten(col("c").in_list(vec![lit(1), lit(2)], false)),
            "c IN ([Int32(1), Int32(2)])"
        );
    }
}
