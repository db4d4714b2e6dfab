//! PostgreSQL's `character(n)` semantics for CHAR(n) columns, which tierdb stores padded
//! with spaces to `n` characters (catalog.rs): trailing spaces are insignificant.
//!
//! Without this rule `cd_education_status = 'Primary'` over a CHAR(20) column compared
//! `'Primary             '` with `'Primary'` and matched nothing: TPC-DS answered empty
//! where PostgreSQL and DuckDB find rows. PostgreSQL's rules, and how each is kept:
//!
//! | where a CHAR(n) value is used | PostgreSQL | here |
//! |---|---|---|
//! | compared with a string literal (`=`, `<>`, `<`, `IN (…)`) | `bpchareq`: trailing spaces ignored | the literal is padded to `n` when the plan is analyzed: same answers, and the comparison stays a column against a literal (pruning, pushdown) |
//! | compared with a CHAR(n) column of the same `n` | `bpchareq` | unchanged: both are padded alike |
//! | compared with anything else | cast to text, which strips trailing spaces | `rtrim(col)` |
//! | a function argument, `\|\|`, CAST, CASE | cast to text | `rtrim(col)` |
//! | LIKE, regular expressions | the padded value (`bpcharlike`) | unchanged |
//! | selected, grouped, sorted, aggregated | the padded value | unchanged |
//!
//! A CHAR(n) column is known by its field's [`DECLARED_TYPE`] metadata, which DataFusion
//! carries through projections and subqueries with the column.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunction, InList, Like, Sort, WindowFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

use crate::catalog::DECLARED_TYPE;

#[derive(Debug, Default)]
pub struct CharSemantics;

impl AnalyzerRule for CharSemantics {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(rewrite_node)
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tierdb_char_semantics"
    }
}

fn rewrite_node(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // Columns are resolved against the node's inputs (all of them: a join's two sides).
    let mut schema = DFSchema::empty();
    let inputs = node.inputs();
    if inputs.is_empty() {
        return Ok(Transformed::no(node));
    }
    for input in inputs {
        schema.merge(input.schema());
    }
    let keeps_bare = matches!(
        node,
        LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_) | LogicalPlan::Sort(_)
    );
    // Output columns keep their names (`sum(CASE WHEN d = 'Sunday' …)` stays that even with
    // the literal padded): the nodes above refer to them by name.
    let names = NamePreserver::new(&node);
    let rewritten = node.map_expressions(|e| {
        if keeps_bare && is_bare(&e) {
            return Ok(Transformed::no(e));
        }
        let name = names.save(&e);
        Ok(Transformed::yes(name.restore(fix(e, &schema)?)))
    })?;
    // Re-derive the schema: a rewritten expression can have another type or name.
    Ok(Transformed::yes(rewritten.data.recompute_schema()?))
}

/// A column, possibly renamed: its padded value is what PostgreSQL shows.
fn is_bare(e: &Expr) -> bool {
    match e {
        // ROLLUP, CUBE, GROUPING SETS: of columns, as grouping keys.
        Expr::Column(_) | Expr::GroupingSet(_) => true,
        Expr::Alias(a) => is_bare(&a.expr),
        _ => false,
    }
}

/// `n` if `e` is a column declared CHAR(n).
fn char_len(e: &Expr, schema: &DFSchema) -> Option<usize> {
    let declared = match e {
        Expr::Column(c) => {
            let (_, field) = schema.qualified_field_from_column(c).ok()?;
            field.metadata().get(DECLARED_TYPE)?.clone()
        }
        // A correlated subquery's reference to its outer query's column.
        Expr::OuterReferenceColumn(field, _) => field.metadata().get(DECLARED_TYPE)?.clone(),
        _ => return None,
    };
    declared
        .strip_prefix("CHAR(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

/// `s` without trailing spaces, padded to `n` characters; `None` if longer than `n` (no
/// CHAR(n) value equals it).
fn padded(s: &str, n: usize) -> Option<String> {
    let t = s.trim_end_matches(' ');
    let len = t.chars().count();
    (len <= n).then(|| format!("{t}{}", " ".repeat(n - len)))
}

/// A string literal padded to `n`, in its own string type; `None` if `e` is not a string
/// literal or is longer than `n`.
fn padded_literal(e: &Expr, n: usize) -> Option<Expr> {
    let Expr::Literal(v, meta) = e else {
        return None;
    };
    let v = match v {
        ScalarValue::Utf8(Some(s)) => ScalarValue::Utf8(Some(padded(s, n)?)),
        ScalarValue::Utf8View(Some(s)) => ScalarValue::Utf8View(Some(padded(s, n)?)),
        ScalarValue::LargeUtf8(Some(s)) => ScalarValue::LargeUtf8(Some(padded(s, n)?)),
        ScalarValue::Utf8(None) | ScalarValue::Utf8View(None) | ScalarValue::LargeUtf8(None) => {
            v.clone()
        }
        _ => return None,
    };
    Some(Expr::Literal(v, meta.clone()))
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// `e` where its value is used as text: a CHAR(n) column loses its trailing spaces.
fn value(e: Expr, schema: &DFSchema) -> Result<Expr> {
    if char_len(&e, schema).is_some() {
        return Ok(datafusion::functions::string::expr_fn::rtrim(vec![e]));
    }
    fix(e, schema)
}

/// `e` with PostgreSQL's CHAR(n) rules applied inside it (see the module's table).
fn fix(e: Expr, schema: &DFSchema) -> Result<Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => {
            let (l, r) = (char_len(&left, schema), char_len(&right, schema));
            let (left, right) = match (l, r) {
                (Some(n), Some(m)) if n == m => (*left, *right),
                (Some(n), None) if padded_literal(&right, n).is_some() => {
                    let right = padded_literal(&right, n).expect("checked");
                    (*left, right)
                }
                (None, Some(m)) if padded_literal(&left, m).is_some() => {
                    let left = padded_literal(&left, m).expect("checked");
                    (left, *right)
                }
                _ => (value(*left, schema)?, value(*right, schema)?),
            };
            Ok(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(left),
                op,
                Box::new(right),
            )))
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            if let Some(n) = char_len(&expr, schema) {
                let padded: Option<Vec<Expr>> = list.iter().map(|v| padded_literal(v, n)).collect();
                if let Some(list) = padded {
                    return Ok(Expr::InList(InList::new(expr, list, negated)));
                }
            }
            let list = list
                .into_iter()
                .map(|v| value(v, schema))
                .collect::<Result<Vec<_>>>()?;
            Ok(Expr::InList(InList::new(
                Box::new(value(*expr, schema)?),
                list,
                negated,
            )))
        }
        // Pattern matching sees the padded value (PostgreSQL's bpcharlike).
        Expr::Like(Like {
            negated,
            expr,
            pattern,
            escape_char,
            case_insensitive,
        }) => {
            let expr = if char_len(&expr, schema).is_some() {
                *expr
            } else {
                fix(*expr, schema)?
            };
            Ok(Expr::Like(Like::new(
                negated,
                Box::new(expr),
                Box::new(value(*pattern, schema)?),
                escape_char,
                case_insensitive,
            )))
        }
        // An aggregate or window function of a column keeps its padded value (min(c) is a
        // CHAR(n) value); anything computed in its arguments follows the rules.
        Expr::AggregateFunction(mut f) => {
            f.params.args = bare_or_fixed(f.params.args, schema)?;
            f.params.filter = f
                .params
                .filter
                .map(|e| fix(*e, schema).map(Box::new))
                .transpose()?;
            f.params.order_by = sorts(f.params.order_by, schema)?;
            Ok(Expr::AggregateFunction(AggregateFunction { ..f }))
        }
        Expr::WindowFunction(mut w) => {
            let p = &mut w.params;
            p.args = bare_or_fixed(std::mem::take(&mut p.args), schema)?;
            p.partition_by = bare_or_fixed(std::mem::take(&mut p.partition_by), schema)?;
            p.order_by = sorts(std::mem::take(&mut p.order_by), schema)?;
            Ok(Expr::WindowFunction(Box::new(WindowFunction { ..*w })))
        }
        Expr::Alias(mut a) => {
            a.expr = Box::new(fix(*a.expr, schema)?);
            Ok(Expr::Alias(a))
        }
        Expr::Column(_)
        | Expr::OuterReferenceColumn(..)
        | Expr::Literal(..)
        | Expr::GroupingSet(_) => Ok(e),
        // Subqueries are plans of their own (rewritten as nodes); everything else uses its
        // operands as text.
        other => other
            .map_children(|c| {
                let out = if matches!(
                    c,
                    Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                ) {
                    c
                } else {
                    value(c, schema)?
                };
                Ok(Transformed::new(out, true, TreeNodeRecursion::Jump))
            })
            .map(|t| t.data),
    }
}

fn bare_or_fixed(args: Vec<Expr>, schema: &DFSchema) -> Result<Vec<Expr>> {
    args.into_iter()
        .map(|a| if is_bare(&a) { Ok(a) } else { fix(a, schema) })
        .collect()
}

fn sorts(order: Vec<Sort>, schema: &DFSchema) -> Result<Vec<Sort>> {
    order
        .into_iter()
        .map(|mut s| {
            if !is_bare(&s.expr) {
                s.expr = fix(s.expr, schema)?;
            }
            Ok(s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::{col, lit};
    use std::collections::HashMap;

    fn schema() -> DFSchema {
        let char_field = |name: &str, n: u32| {
            Field::new(name, DataType::Utf8, true).with_metadata(HashMap::from([(
                DECLARED_TYPE.to_string(),
                format!("CHAR({n})"),
            )]))
        };
        let s = Schema::new(vec![
            char_field("c", 5),
            char_field("d", 5),
            char_field("e", 3),
            Field::new("v", DataType::Utf8, true),
        ]);
        DFSchema::try_from(s).unwrap()
    }

    fn fixed(e: Expr) -> String {
        fix(e, &schema()).unwrap().to_string()
    }

    #[test]
    fn literals_compared_with_char_columns_are_padded() {
        assert_eq!(fixed(col("c").eq(lit("ab"))), r#"c = Utf8("ab   ")"#);
        assert_eq!(fixed(lit("ab  ").lt(col("c"))), r#"Utf8("ab   ") < c"#);
        assert_eq!(
            fixed(col("c").in_list(vec![lit("a"), lit("bcd")], true)),
            r#"c NOT IN ([Utf8("a    "), Utf8("bcd  ")])"#
        );
        // Longer than n: no CHAR(5) value equals it; compared as text, it matches nothing.
        assert_eq!(
            fixed(col("c").eq(lit("abcdef"))),
            r#"rtrim(c) = Utf8("abcdef")"#
        );
    }

    #[test]
    fn text_uses_of_char_columns_lose_trailing_spaces() {
        assert_eq!(fixed(col("c").eq(col("d"))), "c = d");
        assert_eq!(fixed(col("c").eq(col("e"))), "rtrim(c) = rtrim(e)");
        assert_eq!(fixed(col("c").eq(col("v"))), "rtrim(c) = v");
        assert_eq!(
            fixed(datafusion::functions::string::expr_fn::upper(col("c"))),
            "upper(rtrim(c))"
        );
        // Patterns see the padded value, as PostgreSQL's bpcharlike does.
        assert_eq!(fixed(col("c").like(lit("ab%"))), r#"c LIKE Utf8("ab%")"#);
        assert_eq!(fixed(col("v").eq(lit("ab"))), r#"v = Utf8("ab")"#);
    }
}
