//! Rewrites of catalog queries (those reading `pg_catalog` tables), around
//! datafusion-pg-catalog's own: the SQL pg_dump, psql and BI tools send that DataFusion
//! cannot plan as written, mapped onto what it can, each for the catalog's tables only
//! (never applied to queries of user tables). Pure functions: tested without a socket.

use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;

/// `stmt` (a catalog query) with tierdb's rewrites before and after datafusion-pg-catalog's.
pub(crate) fn rewrite(parser: &PostgresCompatibilityParser, mut s: Statement) -> Statement {
    hoist_case_subqueries(&mut s);
    char_casts_as_text(&mut s);
    name_subscripts(&mut s);
    no_options(&mut s);
    array_subqueries(&mut s);
    array_literal_comparisons(&mut s);
    rowless_subqueries(&mut s);
    crate::keysql::rewrite(&mut s);
    let mut s = parser.rewrite(s);
    // After datafusion-pg-catalog's rules, which answer a correlated subquery selected as
    // a column with NULL: these are correlated, and answered.
    view_definition_lookups(&mut s);
    crate::comments::description_lookups(&mut s);
    regproc_names(&mut s);
    unique_literal_columns(&mut s);
    acl_text(&mut s);
    aggregate_scalar_subqueries(&mut s);
    qualify_added_tables(&mut s);
    s
}

/// `ARRAY(SELECT … FROM pg_options_to_table(x) …)` (pg_dump lists the options of foreign
/// data wrappers, servers, user mappings and foreign tables that way) and `ARRAY(SELECT …
/// FROM unnest(x) …)` (an event trigger's tags) are a NULL list in catalog queries:
/// tierdb has none of those objects, and DataFusion cannot run a table function over a
/// column of the outer query.
fn no_options(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, visit_expressions_mut};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && f.name.to_string().eq_ignore_ascii_case("array")
            && ["pg_options_to_table(", "from unnest("]
                .iter()
                .any(|t| f.to_string().to_lowercase().contains(t))
            && let Ok(empty) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql("CAST(NULL AS TEXT[])")
                .and_then(|mut p| p.parse_expr())
        {
            *e = empty;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `pg_get_viewdef(x[, pretty])` (pg_dump, psql's `\d+` of a view) becomes `(SELECT
/// definition FROM pg_catalog.tierdb_viewdefs WHERE oid = x)`: the stored query of the
/// view (`declared.rs`); `pg_table_size(x)` and the other size functions `(SELECT bytes
/// FROM pg_catalog.tierdb_sizes WHERE oid = x)` (`sizes.rs`).
fn view_definition_lookups(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        Expr, FunctionArg, FunctionArgExpr, FunctionArguments, visit_expressions_mut,
    };
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && f.name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_get_viewdef"))
            && let FunctionArguments::List(list) = &f.args
            && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(view))) = list.args.first()
            && let Ok(lookup) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!(
                    "(SELECT definition FROM pg_catalog.{} WHERE oid = {view})",
                    crate::declared::VIEW_DEFINITIONS
                ))
                .and_then(|mut p| p.parse_expr())
        {
            *e = lookup;
        } else if let Expr::Function(f) = e
            && f.name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| {
                crate::sizes::SIZE_FUNCTIONS
                    .iter()
                    .any(|n| i.value.eq_ignore_ascii_case(n))
            })
            && let FunctionArguments::List(list) = &f.args
            && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(rel))] = list.args.as_slice()
            && let Ok(lookup) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!(
                    "(SELECT bytes FROM pg_catalog.{} WHERE oid = {rel})",
                    crate::sizes::SIZES
                ))
                .and_then(|mut p| p.parse_expr())
        {
            // pg_table_size(x) and the other size functions (`sizes.rs`).
            *e = lookup;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// A SELECT that inner-joins a catalog table of a feature tierdb lacks
/// (`pgcatalog::FEATURES_ABSENT`: pg_dump's policy and trigger queries) returns no rows,
/// so what its columns would compute does not matter: a column holding a subquery, which
/// DataFusion may not be able to plan (a correlated one in a CASE branch), becomes NULL.
fn rowless_subqueries(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        Expr, JoinOperator, Query, SelectItem, SetExpr, TableFactor, Value, VisitMut, VisitorMut,
        visit_expressions,
    };
    fn absent(factor: &TableFactor) -> bool {
        let TableFactor::Table { name, .. } = factor else {
            return false;
        };
        let last = name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_lowercase());
        last.is_some_and(|t| crate::pgcatalog::FEATURES_ABSENT.contains(&t.as_str()))
    }
    struct Rowless;
    impl VisitorMut for Rowless {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> std::ops::ControlFlow<()> {
            let SetExpr::Select(select) = query.body.as_mut() else {
                return std::ops::ControlFlow::Continue(());
            };
            let empty = select.from.len() == 1
                && select.from.iter().any(|t| {
                    absent(&t.relation)
                        || t.joins.iter().any(|j| {
                            matches!(
                                j.join_operator,
                                JoinOperator::Join(_) | JoinOperator::Inner(_)
                            ) && absent(&j.relation)
                        })
                });
            if !empty {
                return std::ops::ControlFlow::Continue(());
            }
            for item in &mut select.projection {
                let (expr, name) = match item {
                    SelectItem::UnnamedExpr(e) => (e.clone(), None),
                    SelectItem::ExprWithAlias { expr, alias } => {
                        (expr.clone(), Some(alias.clone()))
                    }
                    _ => continue,
                };
                let has_subquery = visit_expressions(&expr, |e| {
                    if matches!(
                        e,
                        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. }
                    ) {
                        std::ops::ControlFlow::Break(())
                    } else {
                        std::ops::ControlFlow::Continue(())
                    }
                })
                .is_break();
                if has_subquery {
                    let null = Expr::value(Value::Null);
                    *item = match name {
                        Some(alias) => SelectItem::ExprWithAlias { expr: null, alias },
                        None => SelectItem::UnnamedExpr(null),
                    };
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Rowless);
}

/// A column compared with an array written as text (pg_dump: `pol.polroles = '{0}'`)
/// is compared with that array: `ARRAY[0]` (elements that are numbers stay numbers).
fn array_literal_comparisons(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, Value, visit_expressions_mut};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let as_array = |e: &Expr| -> Option<Expr> {
        let Expr::Value(v) = e else { return None };
        let Value::SingleQuotedString(text) = &v.value else {
            return None;
        };
        let inner = text.strip_prefix('{')?.strip_suffix('}')?;
        let items: Vec<String> = inner
            .split(',')
            .filter(|i| !i.is_empty())
            .map(|i| {
                let i = i.trim().trim_matches('"');
                if i.parse::<i64>().is_ok() {
                    i.to_string()
                } else {
                    format!("'{}'", i.replace('\'', "''"))
                }
            })
            .collect();
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&format!("ARRAY[{}]", items.join(", ")))
            .and_then(|mut p| p.parse_expr())
            .ok()
    };
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::BinaryOp { left, op, right } = e
            && matches!(op, BinaryOperator::Eq | BinaryOperator::NotEq)
            && matches!(
                left.as_ref(),
                Expr::Identifier(_) | Expr::CompoundIdentifier(_)
            )
            && let Some(array) = as_array(right)
        {
            **right = array;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `ARRAY(SELECT e FROM … [ORDER BY o])`, which DataFusion does not have, becomes
/// `(SELECT array_agg(e [ORDER BY o]) FROM …)` in catalog queries (pg_dump: a policy's
/// roles). For no rows it is NULL where PostgreSQL has an empty array.
fn array_subqueries(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        Expr, FunctionArguments, SelectItem, SetExpr, visit_expressions_mut,
    };
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && f.name.to_string().eq_ignore_ascii_case("array")
            && let FunctionArguments::Subquery(q) = &f.args
        {
            let mut q = q.clone();
            let order = q
                .order_by
                .take()
                .map(|o| format!(" {o}"))
                .unwrap_or_default();
            if let SetExpr::Select(select) = q.body.as_mut()
                && let [
                    SelectItem::UnnamedExpr(item) | SelectItem::ExprWithAlias { expr: item, .. },
                ] = select.projection.as_mut_slice()
                && let Ok(agg) = Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&format!("array_agg({item}{order})"))
                    .and_then(|mut p| p.parse_expr())
            {
                *item = agg;
                *e = Expr::Subquery(q);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// PostgreSQL's `name` type (the catalogs' `typname`, `relname`, …) can be subscripted
/// as an array of characters from 0 (pg_dump: `typname[0] = '_'`); in
/// datafusion-pg-catalog's tables they are text, so `x[n]` on a column named `…name`
/// becomes `substr(x, n + 1, 1)`.
fn name_subscripts(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{AccessExpr, Expr, Subscript, visit_expressions_mut};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::CompoundFieldAccess { root, access_chain } = e
            && let [AccessExpr::Subscript(Subscript::Index { index })] = access_chain.as_slice()
            && let Ok(n) = index.to_string().parse::<i64>()
            && let Some(column) = match root.as_ref() {
                Expr::Identifier(i) => Some(&i.value),
                Expr::CompoundIdentifier(parts) => parts.last().map(|i| &i.value),
                _ => None,
            }
            && column.to_lowercase().ends_with("name")
            && let Ok(substr) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!("substr({root}, {}, 1)", n + 1))
                .and_then(|mut p| p.parse_expr())
        {
            *e = substr;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// Whether `stmt` reads a catalog table by its bare name (`FROM pg_type`, as pg_dump
/// writes it): a relation named `pg_…` without a schema, or in `pg_catalog`.
pub(crate) fn reads_catalog(stmt: &Statement) -> bool {
    use datafusion::sql::sqlparser::ast::visit_relations;
    visit_relations(stmt, |name| {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
            .collect();
        let catalog = match parts.as_slice() {
            [t] => t.starts_with("pg_"),
            [schema, _] => schema == "pg_catalog",
            _ => false,
        };
        if catalog {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
    .is_break()
}

/// PostgreSQL's one-byte `"char"` (the type of catalog columns such as `relkind`, which
/// pg_dump casts literals to: `'r'::"char"`) is text in datafusion-pg-catalog's tables:
/// casts to it become casts to TEXT; so do casts to `regproc`, which those tables keep as
/// the function's name. Casts to `oid` in catalog queries become TRY_CAST.
fn char_casts_as_text(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        DataType, Expr, Query, SelectItem, SetExpr, VisitMut, VisitorMut, visit_expressions_mut,
    };
    // A column selected as `x::oid` is named `x` (PostgreSQL's name, which pg_dump looks
    // up); a TRY_CAST would be named after itself, so it gets that name as its alias.
    struct NameOidCasts;
    impl VisitorMut for NameOidCasts {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> std::ops::ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(e) = item
                        && let Expr::Cast {
                            expr, data_type, ..
                        } = &*e
                        && data_type.to_string().eq_ignore_ascii_case("oid")
                        && let Some(name) = match expr.as_ref() {
                            Expr::Identifier(i) => Some(i.clone()),
                            Expr::CompoundIdentifier(parts) => parts.last().cloned(),
                            _ => None,
                        }
                    {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: name,
                        };
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut NameOidCasts);
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Cast { data_type, .. } = e
            && let DataType::Custom(name, args) = data_type
            && args.is_empty()
            && matches!(
                name.to_string().to_lowercase().as_str(),
                "\"char\"" | "regproc" | "pg_catalog.regproc"
            )
        {
            *data_type = DataType::Text;
        }
        // `regproc::oid` (pg_dump: `oprcode::oid`): datafusion-pg-catalog keeps a regproc
        // as the function's name, which has no oid there; NULL rather than a failed query.
        if let Expr::Cast {
            kind, data_type, ..
        } = e
            && let DataType::Custom(name, args) = data_type
            && args.is_empty()
            && name.to_string().eq_ignore_ascii_case("oid")
        {
            *kind = datafusion::sql::sqlparser::ast::CastKind::TryCast;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// Catalog queries (SQLAlchemy's, BI tools') select some columns as `CASE WHEN c THEN
/// (correlated subquery) END`, which DataFusion cannot run. datafusion-pg-catalog's rules
/// already answer a correlated subquery selected as a column with NULL (tierdb has no
/// column defaults, identity columns, sequences or collations, which is what those
/// subqueries look up); this moves `c` into the subquery's WHERE, `(SELECT … WHERE (w) AND
/// (c))`, NULL when `c` is not true either way, so those rules apply to it as well.
fn hoist_case_subqueries(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, SetExpr, visit_expressions_mut};
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Case {
            operand: None,
            conditions,
            else_result,
            ..
        } = e
            && conditions.len() == 1
            && else_result.as_deref().is_none_or(|r| {
                matches!(r, Expr::Value(v) if v.value == datafusion::sql::sqlparser::ast::Value::Null)
            })
            && let Expr::Subquery(q) = &conditions[0].result
            && let SetExpr::Select(_) = q.body.as_ref()
        {
            let when = conditions.remove(0);
            let Expr::Subquery(mut q) = when.result else {
                return std::ops::ControlFlow::<()>::Continue(());
            };
            if let SetExpr::Select(sel) = q.body.as_mut() {
                let cond = Expr::Nested(Box::new(when.condition));
                sel.selection = Some(match sel.selection.take() {
                    Some(w) => Expr::BinaryOp {
                        left: Box::new(Expr::Nested(Box::new(w))),
                        op: datafusion::sql::sqlparser::ast::BinaryOperator::And,
                        right: Box::new(cond),
                    },
                    None => cond,
                });
            }
            *e = Expr::Subquery(q);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// Unnamed constant columns of a SELECT that repeat (pgjdbc's getProcedures selects `NULL,
/// NULL, NULL` for its reserved columns) are named `?column?`, `?column?2`…: PostgreSQL
/// names each `?column?`, DataFusion wants the names of a projection unique.
fn unique_literal_columns(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, Ident, SelectItem, SetExpr, VisitMut, VisitorMut};
    struct Names;
    impl VisitorMut for Names {
        type Break = ();
        fn pre_visit_query(
            &mut self,
            q: &mut datafusion::sql::sqlparser::ast::Query,
        ) -> std::ops::ControlFlow<()> {
            if let SetExpr::Select(sel) = q.body.as_mut() {
                let mut seen = std::collections::HashSet::new();
                let mut n = 0;
                for item in sel.projection.iter_mut() {
                    if let SelectItem::UnnamedExpr(e @ Expr::Value(_)) = item
                        && !seen.insert(e.to_string())
                    {
                        n += 1;
                        let alias = Ident::with_quote('"', format!("?column?{}", n + 1));
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias,
                        };
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Names);
}

/// `array_to_string(x.nspacl, sep)` (psql's `\dn+`, `\l+`): datafusion-pg-catalog keeps
/// ACL columns as text, which `array_to_string` refuses; the text is the answer.
fn acl_text(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        CastKind, DataType as SqlType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
        visit_expressions_mut,
    };
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Function(f) = e
            && f.name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("array_to_string"))
            && let FunctionArguments::List(list) = &f.args
            && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = list.args.first()
            && match first {
                Expr::Identifier(i) => Some(i),
                Expr::CompoundIdentifier(parts) => parts.last(),
                _ => None,
            }
            .is_some_and(|i| i.value.ends_with("acl"))
        {
            *e = Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(first.clone()),
                data_type: SqlType::Text,
                array: false,
                format: None,
            };
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `'name'::regproc` is the function's name in tierdb's catalog: datafusion-pg-catalog
/// turns it into `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'name')`, but keeps
/// the regproc columns it is compared with (`pg_type.typinput`) as names, and the
/// comparison failed ("Cannot cast string 'boolin' to Int32": pgjdbc's getTypeInfo and
/// getVersionColumns). The lookup becomes the name itself, without its schema.
fn regproc_names(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, Value, visit_expressions_mut};
    const LOOKUP: &str = "SELECT oid FROM pg_catalog.pg_proc WHERE proname = '";
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Subquery(q) = e {
            let text = q.to_string();
            if let Some(name) = text.strip_prefix(LOOKUP).and_then(|t| t.strip_suffix('\''))
                && !name.contains('\'')
            {
                let name = name.strip_prefix("pg_catalog.").unwrap_or(name);
                *e = Expr::Value(Value::SingleQuotedString(name.to_string()).into());
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// A scalar subquery of a catalog query (pg_dump's `(SELECT ftserver FROM
/// pg_foreign_table WHERE ftrelid = c.oid)`) looks one row up by its key; DataFusion runs
/// a correlated one only when it is aggregated. Its one column `e` becomes `max(e)`: the
/// same value for zero rows (NULL) and one row. Only in queries of `pg_catalog`, whose
/// lookups are by unique oid (where two rows would make PostgreSQL fail, this answers one).
fn aggregate_scalar_subqueries(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, visit_expressions_mut};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Subquery(q) = e
            && q.limit_clause.is_none()
            && let SetExpr::Select(sel) = q.body.as_mut()
            && sel.projection.len() == 1
            && sel.distinct.is_none()
            && sel.having.is_none()
            && matches!(
                &sel.group_by,
                datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(g, _) if g.is_empty()
            )
        {
            let (inner, alias) = match &sel.projection[0] {
                SelectItem::UnnamedExpr(x) => (x, None),
                SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.clone())),
                _ => return std::ops::ControlFlow::<()>::Continue(()),
            };
            if matches!(inner, Expr::Function(_)) {
                return std::ops::ControlFlow::<()>::Continue(()); // an aggregate, perhaps
            }
            let Ok(wrapped) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!("max({inner})"))
                .and_then(|mut p| p.parse_expr())
            else {
                return std::ops::ControlFlow::<()>::Continue(());
            };
            sel.projection[0] = match alias {
                Some(alias) => SelectItem::ExprWithAlias {
                    expr: wrapped,
                    alias,
                },
                None => SelectItem::UnnamedExpr(wrapped),
            };
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// The catalog tables tierdb adds (`pgcatalog.rs` rule 5) named without `pg_catalog.`
/// are qualified with it, as datafusion-pg-catalog does for its own tables.
fn qualify_added_tables(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart};
    let _ = datafusion::sql::sqlparser::ast::visit_relations_mut(stmt, |name: &mut ObjectName| {
        if let [ObjectNamePart::Identifier(ident)] = name.0.as_slice()
            && crate::pgcatalog::ADDED_TABLES
                .iter()
                .any(|(t, _)| t.eq_ignore_ascii_case(&ident.value))
        {
            let table = ident.clone();
            *name = ObjectName(vec![
                ObjectNamePart::Identifier(Ident::new("pg_catalog")),
                ObjectNamePart::Identifier(table),
            ]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgwire::error::PgWireResult;

    fn parse(parser: &PostgresCompatibilityParser, sql: &str) -> PgWireResult<Vec<Statement>> {
        crate::parse::parse(parser, sql)
    }

    fn parse_str(sql: &str) -> PgWireResult<Vec<Statement>> {
        parse(&PostgresCompatibilityParser::new(), sql)
    }

    #[test]
    fn case_subquery_conditions_move_into_the_subquery() {
        let mut s =
            parse_str("SELECT CASE WHEN c.x THEN (SELECT d FROM attrdef WHERE e) END FROM t c")
                .expect("parses")
                .remove(0);
        hoist_case_subqueries(&mut s);
        let text = s.to_string();
        assert!(!text.contains("CASE"), "{text}");
        assert!(text.contains("WHERE (e) AND (c.x)"), "{text}");
    }

    #[test]
    fn quoted_char_casts_in_catalog_queries_are_text() {
        let parser = PostgresCompatibilityParser::new();
        let s = parse(
            &parser,
            "SELECT 'r'::\"char\" FROM pg_catalog.pg_class WHERE relkind = 'S'::\"char\"",
        )
        .expect("parses");
        let text = s[0].to_string();
        assert!(!text.contains("\"char\""), "{text}");
        let bare = parse(&parser, "SELECT ' '::\"char\" FROM pg_type").expect("parses");
        assert!(!bare[0].to_string().contains("\"char\""), "{}", bare[0]);
        let sub = parse(&parser, "SELECT typname[0] = '_' FROM pg_type").expect("parses");
        let sub = sub[0].to_string().to_lowercase();
        assert!(sub.contains("substr(typname, 1, 1)"), "{sub}");
        let proc =
            parse(&parser, "SELECT amhandler::pg_catalog.regproc FROM pg_am").expect("parses");
        assert!(proc[0].to_string().contains("::TEXT"), "{}", proc[0]);
        let options = parse(
            &parser,
            "SELECT array_to_string(ARRAY(SELECT option_name FROM pg_options_to_table(fdwoptions)), ',') FROM pg_foreign_data_wrapper",
        )
        .expect("parses");
        assert!(
            !options[0].to_string().contains("pg_options_to_table"),
            "{}",
            options[0]
        );
        let agg = parse(
            &parser,
            "SELECT ARRAY(SELECT rolname FROM pg_roles WHERE oid = 1 ORDER BY rolname) FROM pg_class",
        )
        .expect("parses");
        let agg = agg[0].to_string().to_lowercase();
        assert!(
            agg.contains("(select array_agg(rolname order by rolname) from"),
            "{agg}"
        );
        let rowless = parse(
            &parser,
            "SELECT pol.oid, CASE WHEN pol.polroles = '{0}' THEN NULL ELSE (SELECT rolname FROM \
             pg_roles WHERE oid = pol.polrelid) END AS polroles FROM unnest('{1}'::oid[]) AS \
             src(t) JOIN pg_catalog.pg_policy pol ON (src.t = pol.polrelid)",
        )
        .expect("parses");
        let rowless = rowless[0].to_string();
        assert!(
            rowless.contains("pol.oid, NULL AS polroles FROM"),
            "{rowless}"
        );
        let cmp = parse(
            &parser,
            "SELECT polname FROM pg_policy WHERE polroles = '{0}'",
        )
        .expect("parses");
        assert!(
            cmp[0].to_string().contains("polroles = ARRAY[0]"),
            "{}",
            cmp[0]
        );
        let named = parse(&parser, "SELECT prsstart::oid FROM pg_ts_parser").expect("parses");
        assert!(
            named[0]
                .to_string()
                .ends_with("AS prsstart FROM pg_catalog.pg_ts_parser"),
            "{}",
            named[0]
        );
        let oid = parse(&parser, "SELECT oprcode::oid FROM pg_operator").expect("parses");
        assert!(
            oid[0].to_string().to_uppercase().contains("TRY_CAST"),
            "{}",
            oid[0]
        );
        assert!(
            text.contains("CAST('r' AS TEXT)") || text.contains("'r'::TEXT"),
            "{text}"
        );
    }

    #[test]
    fn repeated_constant_columns_get_names_of_their_own() {
        let parser = PostgresCompatibilityParser::new();
        let s = parse(
            &parser,
            "SELECT NULL AS a, p.proname, NULL, NULL, NULL FROM pg_catalog.pg_proc p",
        )
        .expect("parses");
        let text = s[0].to_string();
        assert!(
            text.contains("NULL, NULL AS \"?column?2\", NULL AS \"?column?3\""),
            "{text}"
        );
    }

    #[test]
    fn acl_columns_are_their_text() {
        let parser = PostgresCompatibilityParser::new();
        let s = parse(
            &parser,
            "SELECT pg_catalog.array_to_string(n.nspacl, E'\\n') AS p FROM pg_catalog.pg_namespace n",
        )
        .expect("parses");
        let text = s[0].to_string();
        assert!(text.contains("CAST(n.nspacl AS TEXT) AS p"), "{text}");
    }

    #[test]
    fn regproc_literals_are_function_names() {
        let parser = PostgresCompatibilityParser::new();
        let s = parse(
            &parser,
            "SELECT typname FROM pg_catalog.pg_type WHERE typinput = 'pg_catalog.array_in'::regproc",
        )
        .expect("parses");
        let text = s[0].to_string();
        assert!(text.contains("typinput = 'array_in'"), "{text}");
    }

    #[test]
    fn scalar_subqueries_of_catalog_queries_are_aggregated() {
        let s = parse_str(
            "SELECT CASE WHEN c.relkind = 'f' THEN (SELECT ftserver FROM pg_catalog.pg_foreign_table \
             WHERE ftrelid = c.oid) ELSE 0 END FROM pg_catalog.pg_class c",
        )
        .expect("parses");
        let text = s[0].to_string();
        assert!(text.contains("SELECT max(ftserver)"), "{text}");
        // Elsewhere a scalar subquery is left as written.
        let s = parse_str("SELECT (SELECT v FROM t WHERE t.k = u.k) FROM u").expect("parses");
        assert!(!s[0].to_string().contains("max("), "{}", s[0]);
    }
}
