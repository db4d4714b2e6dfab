//! Rewrites of the catalog queries that ask about keys, indexes and defaults (`keys.rs`
//! builds the tables they read), and the one function they need that DataFusion lacks.
//! Pure functions on statements: tested without a socket.
//!
//! 1. `pg_get_indexdef(x[, n, pretty])` and `pg_get_constraintdef(x[, pretty])` become a
//!    lookup of `pg_catalog.tierdb_definitions` by oid and column number (0: the whole
//!    definition), wrapped in parentheses so datafusion-pg-catalog's rule that answers
//!    a correlated subquery selected as a column with NULL leaves it alone; the lookup
//!    table's columns have names of their own, so an unqualified `oid` in `x` still means
//!    the outer query's.
//! 2. `pg_get_expr(e, rel[, pretty])` is `e`: defaults are kept as SQL text (`keys.rs`
//!    rule 5), and tierdb has no index expressions, predicates or partition bounds (NULL
//!    or empty, answered as they are).
//! 3. A scalar subquery selected as a column that reads `pg_attrdef` (psql's `\d`, SQLAlchemy
//!    and pgjdbc's `getColumns` look a column's default up so) is kept from that rule too;
//!    since the rule runs as the query is parsed, `parse.rs` runs this one first
//!    ([`default_lookups`]), and its condition on the outer row's `atthasdef` is dropped
//!    ([`no_atthasdef`]).
//! 4. `information_schema._pg_expandarray(a)` (pgjdbc's `getPrimaryKeys`, `getIndexInfo`,
//!    `getBestRowIdentifier`), a set-returning function of `(x, n)` rows, becomes
//!    `unnest(tierdb_expandarray(a))`: [`expandarray`] makes the list of `{x, n}`
//!    structs that `unnest` turns into rows.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int32Builder, ListBuilder, StructBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectName, Query, SelectItem, SetExpr,
    Statement, VisitMut, VisitorMut, visit_expressions_mut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// The name of [`expandarray`].
pub(crate) const EXPANDARRAY: &str = "tierdb_expandarray";

/// All of this module's rewrites, before datafusion-pg-catalog's.
pub(crate) fn rewrite(stmt: &mut Statement) {
    definition_lookups(stmt);
    default_lookups(stmt);
    expandarray_calls(stmt);
}

fn last_name(name: &ObjectName) -> Option<String> {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_lowercase())
}

fn expr(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

fn plain_args(args: &FunctionArguments) -> Option<Vec<&Expr>> {
    let FunctionArguments::List(list) = args else {
        return None;
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

/// The functions of rules 1 and 2.
const LOOKED_UP: [&str; 3] = ["pg_get_indexdef", "pg_get_constraintdef", "pg_get_expr"];

/// Rules 1 and 2. A call selected without an alias is named after its function, as
/// PostgreSQL names it (psql selects two such calls, which DataFusion would name alike).
fn definition_lookups(stmt: &mut Statement) {
    struct Named;
    impl VisitorMut for Named {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(Expr::Function(f)) = item
                        && let Some(name) = last_name(&f.name)
                        && LOOKED_UP.contains(&name.as_str())
                    {
                        let expr = Expr::Function(f.clone());
                        *item = SelectItem::ExprWithAlias {
                            expr,
                            alias: datafusion::sql::sqlparser::ast::Ident::new(name),
                        };
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Named);
    let _ = visit_expressions_mut(stmt, |e| {
        let Expr::Function(f) = e else {
            return ControlFlow::<()>::Continue(());
        };
        let Some(args) = plain_args(&f.args) else {
            return ControlFlow::Continue(());
        };
        let replacement = match (last_name(&f.name).as_deref(), args.as_slice()) {
            (Some("pg_get_indexdef"), [x]) | (Some("pg_get_constraintdef"), [x, ..]) => {
                lookup(x, "0")
            }
            (Some("pg_get_indexdef"), [x, n, ..]) => lookup(x, &n.to_string()),
            (Some("pg_get_expr"), [x, _, ..]) => Some(Expr::Nested(Box::new((*x).clone()))),
            _ => None,
        };
        if let Some(r) = replacement {
            *e = r;
        }
        ControlFlow::Continue(())
    });
}

fn lookup(oid: &Expr, n: &str) -> Option<Expr> {
    expr(&format!(
        "((SELECT tierdb_definition FROM pg_catalog.{} WHERE tierdb_def_oid = ({oid}) AND \
         tierdb_def_n = ({n})))",
        crate::keys::DEFINITIONS
    ))
}

/// Rule 3. It must run before datafusion-pg-catalog's rules, which run as a query is
/// parsed and would answer the lookups with NULL first (`parse.rs` runs it so).
pub(crate) fn default_lookups(stmt: &mut Statement) {
    struct Keep;
    impl VisitorMut for Keep {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) =
                        item
                    else {
                        continue;
                    };
                    if let Expr::Subquery(q) = e
                        && reads(q, "pg_attrdef")
                    {
                        if let SetExpr::Select(inner) = q.body.as_mut()
                            && let Some(w) = inner.selection.as_mut()
                        {
                            no_atthasdef(w);
                        }
                        *e = Expr::Nested(Box::new(e.clone()));
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Keep);
}

/// The conjuncts of `w` that are the outer column `atthasdef` become TRUE: DataFusion
/// cannot decorrelate a subquery with a condition on the outer row alone, and a column
/// has a row in `pg_attrdef` exactly when its `atthasdef` is true (`declared.rs`), so the
/// lookup finds the same rows without it.
fn no_atthasdef(w: &mut Expr) {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Value};
    match w {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            no_atthasdef(left);
            no_atthasdef(right);
        }
        Expr::Nested(inner) => no_atthasdef(inner),
        Expr::Identifier(i) if i.value.eq_ignore_ascii_case("atthasdef") => {
            *w = Expr::Value(Value::Boolean(true).into());
        }
        Expr::CompoundIdentifier(parts)
            if parts
                .last()
                .is_some_and(|i| i.value.eq_ignore_ascii_case("atthasdef")) =>
        {
            *w = Expr::Value(Value::Boolean(true).into());
        }
        _ => {}
    }
}

fn reads(q: &Query, table: &str) -> bool {
    datafusion::sql::sqlparser::ast::visit_relations(q, |n| {
        if last_name(n).as_deref() == Some(table) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// Rule 4; and a field of a composite value, `(e).f`, which DataFusion's planner takes
/// only after a column name, becomes `get_field(e, 'f')`.
fn expandarray_calls(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::AccessExpr;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && last_name(&f.name).as_deref() == Some("_pg_expandarray")
            && let Some([a]) = plain_args(&f.args).as_deref()
            && let Some(call) = expr(&format!("unnest({EXPANDARRAY}({a}))"))
        {
            *e = call;
        } else if let Expr::CompoundFieldAccess { root, access_chain } = e
            && let Expr::Nested(value) = root.as_ref()
            && let [AccessExpr::Dot(Expr::Identifier(field))] = access_chain.as_slice()
            && let Some(call) = expr(&format!(
                "get_field({value}, '{}')",
                field.value.to_lowercase().replace('\'', "''")
            ))
        {
            *e = call;
        }
        ControlFlow::<()>::Continue(())
    });
}

fn pair_fields() -> Fields {
    Fields::from(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("n", DataType::Int32, false),
    ])
}

/// `tierdb_expandarray(a)`: the elements of `a` (an `int2vector` as text, `1 2`, or a list
/// of integers) as a list of `{x: element, n: its position from 1}`, what
/// `information_schema._pg_expandarray` returns as rows.
pub(crate) fn expandarray() -> ScalarUDF {
    let out = DataType::List(Arc::new(Field::new_list_field(
        DataType::Struct(pair_fields()),
        true,
    )));
    create_udf(
        EXPANDARRAY,
        vec![DataType::Utf8],
        out,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            Ok(ColumnarValue::Array(expand(&arrays[0])?))
        }),
    )
}

fn expand(input: &ArrayRef) -> Result<ArrayRef> {
    let text = datafusion::arrow::compute::cast(input, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    let mut list = ListBuilder::new(StructBuilder::from_fields(pair_fields(), text.len()));
    for row in 0..text.len() {
        if text.is_null(row) {
            list.append(false);
            continue;
        }
        let items = text
            .value(row)
            .trim_matches(|c| c == '{' || c == '}')
            .split([' ', ','])
            .filter(|s| !s.is_empty());
        for (n, item) in (1..).zip(items) {
            let x: i32 = item.trim().parse().map_err(|_| {
                DataFusionError::Execution(format!(
                    "_pg_expandarray: {item:?} is not an integer (an int2vector or int array)"
                ))
            })?;
            let pair = list.values();
            pair.field_builder::<Int32Builder>(0)
                .ok_or_else(|| DataFusionError::Internal("x is an int4 builder".into()))?
                .append_value(x);
            pair.field_builder::<Int32Builder>(1)
                .ok_or_else(|| DataFusionError::Internal("n is an int4 builder".into()))?
                .append_value(n);
            pair.append(true);
        }
        list.append(true);
    }
    Ok(Arc::new(list.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        rewrite(&mut s);
        s.to_string()
    }

    #[test]
    fn definitions_are_looked_up_by_oid_and_column() {
        let text =
            rewritten("SELECT pg_catalog.pg_get_indexdef(i.indexrelid, 0, true) FROM pg_index i");
        assert!(
            text.contains("tierdb_def_oid = (i.indexrelid) AND tierdb_def_n = (0)"),
            "{text}"
        );
        let text = rewritten("SELECT pg_get_constraintdef(oid) AS condef FROM pg_constraint");
        assert!(
            text.contains("tierdb_def_oid = (oid) AND tierdb_def_n = (0)"),
            "{text}"
        );
        let text = rewritten("SELECT pg_get_indexdef(t.ci_oid, t.pos, false) FROM x t");
        assert!(text.contains("tierdb_def_n = (t.pos)"), "{text}");
        assert!(text.contains("((SELECT"), "kept from the NULL rule: {text}");
        let text = rewritten(
            "SELECT pg_get_indexdef(i.indexrelid, 0, true), pg_get_constraintdef(c.oid, true) \
             FROM pg_index i, pg_constraint c",
        );
        assert!(text.contains(") AS pg_get_indexdef,"), "{text}");
        assert!(text.contains(") AS pg_get_constraintdef FROM"), "{text}");
    }

    #[test]
    fn a_default_is_its_text_and_its_lookup_is_kept() {
        let text = rewritten(
            "SELECT a.attname, (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) FROM \
             pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND \
             a.atthasdef) FROM pg_catalog.pg_attribute a",
        );
        assert!(
            text.contains("((SELECT (d.adbin) AS pg_get_expr FROM"),
            "{text}"
        );
        assert!(text.contains("d.adnum = a.attnum AND true)"), "{text}");
    }

    #[test]
    fn expandarray_becomes_an_unnest() {
        let text = rewritten(
            "SELECT (information_schema._pg_expandarray(i.indkey)).n AS key_seq, \
             information_schema._pg_expandarray(i.indkey) AS keys FROM pg_index i \
             WHERE a.attnum = (i.keys).x",
        );
        assert!(text.contains("a.attnum = get_field(i.keys, 'x')"), "{text}");
        assert!(
            text.contains("get_field(unnest(tierdb_expandarray(i.indkey)), 'n') AS key_seq"),
            "{text}"
        );
        assert!(
            text.contains("unnest(tierdb_expandarray(i.indkey)) AS keys"),
            "{text}"
        );
    }

    #[test]
    fn expandarray_numbers_the_elements() {
        let input: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(vec![
            Some("3 1"),
            None,
            Some("{2}"),
            Some(""),
        ]));
        let out = expand(&input).expect("expands");
        let list = out.as_list::<i32>();
        assert_eq!(list.len(), 4);
        assert!(list.is_null(1));
        let first = list.value(0);
        let pairs = first.as_struct();
        let x = pairs
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let n = pairs
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        assert_eq!(
            (x.value(0), n.value(0), x.value(1), n.value(1)),
            (3, 1, 1, 2)
        );
        assert_eq!(list.value(2).len(), 1);
        assert_eq!(list.value(3).len(), 0);
        let bad: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(vec!["a b"]));
        assert!(expand(&bad).is_err());
    }
}
