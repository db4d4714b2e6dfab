//! Query strings into statements: PostgreSQL's syntax with the rewrites that map it onto
//! DataFusion (datafusion-pg-catalog's), then tierdb's own (CREATE TABLE … ORDER BY).
//! Pure functions: tested without a socket.

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use pgwire::error::PgWireResult;

use crate::errors::{table_error, user_error};

/// Splits a query string into statements: PostgreSQL's syntax first (with the
/// rewrites that map it onto DataFusion), then tierdb's own (CREATE TABLE … ORDER BY,
/// PARTITION BY), whose syntax errors are the ones reported.
pub(crate) fn parse(
    parser: &PostgresCompatibilityParser,
    sql: &str,
) -> PgWireResult<Vec<Statement>> {
    // pgwire decodes a query string lossily: an invalid UTF-8 byte arrives as U+FFFD.
    // Running it would store or compare other bytes than the client sent, so refuse
    // (PostgreSQL: 22021). A U+FFFD the client really wrote is refused too: it cannot
    // be told apart here.
    if sql.contains('\u{FFFD}') {
        return Err(user_error(
            "22021",
            "invalid byte sequence for encoding \"UTF8\" in the query string (or the \
             replacement character U+FFFD, which tierdb cannot tell apart from one); send \
             the query as UTF-8"
                .into(),
        ));
    }
    let sql = &search_path_schemas(sql);
    let sql = &copy_booleans(sql);
    let sql = &vacuum(sql);
    let mut statements = parse_unrepaired(parser, sql)?;
    for s in &mut statements {
        tierdb_tables::parsefix::repair(s);
    }
    Ok(statements)
}

/// Grafana (and other tools) expand `current_setting('search_path')` into its schemas with
/// a function in FROM (`string_to_array(…) s`), which DataFusion cannot plan; its
/// datafusion-pg-catalog blacklist entry answers it with no schema at all, so Grafana
/// listed no tables. tierdb's search path is `"$user", public` and no schema is named
/// after a user: the expansion is `SELECT 'public'`. Matched on the query with its white
/// space collapsed; other queries are returned as they are.
fn search_path_schemas(sql: &str) -> std::borrow::Cow<'_, str> {
    const EXPANSION: &str = "SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END \
        FROM generate_series( array_lower(string_to_array(current_setting('search_path'),','),1), \
        array_upper(string_to_array(current_setting('search_path'),','),1) ) as i, \
        string_to_array(current_setting('search_path'),',') s";
    if !sql.contains("current_setting('search_path')") {
        return sql.into();
    }
    let collapse = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("( ", "(")
            .replace(" )", ")")
    };
    let query = collapse(sql);
    let pattern = collapse(EXPANSION);
    let lower = query.to_lowercase();
    match lower.find(&pattern.to_lowercase()) {
        Some(at) => {
            let mut out = query.clone();
            out.replace_range(at..at + pattern.len(), "SELECT 'public'");
            out.into()
        }
        None => sql.into(),
    }
}

/// COPY's boolean options may be written `on` and `off` (pgbench -i sends `with (freeze
/// on)`), which the SQL parser does not read: they become `true` and `false`. Only COPY
/// statements are touched.
fn copy_booleans(sql: &str) -> std::borrow::Cow<'_, str> {
    let lower = sql.to_lowercase();
    if !lower.trim_start().starts_with("copy") {
        return sql.into();
    }
    let mut out = sql.to_string();
    for option in ["freeze", "header"] {
        for (word, value) in [(" on", " true"), (" off", " false")] {
            let pattern = format!("{option}{word}");
            while let Some(at) = out.to_lowercase().find(&pattern) {
                let after = out[at + pattern.len()..].chars().next();
                if after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    break;
                }
                out.replace_range(at + option.len()..at + pattern.len(), value);
            }
        }
    }
    out.into()
}

/// PostgreSQL's `VACUUM [FULL | FREEZE | VERBOSE | ANALYZE] [table, …]` (pgbench -i sends
/// `vacuum analyze pgbench_branches`), which the SQL parser reads only bare: tierdb's
/// VACUUM (deleting the files no table references any more) is database-wide, so the
/// options and tables are dropped. One statement only; anything else is returned as is.
fn vacuum(sql: &str) -> std::borrow::Cow<'_, str> {
    let t = sql.trim().trim_end_matches(';');
    let mut words = t.split_whitespace();
    let first = words.next().unwrap_or("");
    if !first.eq_ignore_ascii_case("vacuum") || t.contains(';') || t.contains('(') {
        return sql.into();
    }
    "VACUUM".into()
}

fn parse_unrepaired(
    parser: &PostgresCompatibilityParser,
    sql: &str,
) -> PgWireResult<Vec<Statement>> {
    if let Ok(mut statements) = parser.parse(sql) {
        if sql.contains("pg_") {
            for s in &mut statements {
                crate::systemcols::rewrite(s);
            }
        }
        if !sql.contains("pg_catalog") && !statements.iter().any(reads_catalog) {
            return Ok(statements);
        }
        return Ok(statements
            .into_iter()
            .map(|mut s| {
                hoist_case_subqueries(&mut s);
                char_casts_as_text(&mut s);
                name_subscripts(&mut s);
                no_options(&mut s);
                array_subqueries(&mut s);
                array_literal_comparisons(&mut s);
                rowless_subqueries(&mut s);
                view_definition_lookups(&mut s);
                let mut s = parser.rewrite(s);
                aggregate_scalar_subqueries(&mut s);
                qualify_added_tables(&mut s);
                s
            })
            .collect());
    }
    let statements = tierdb_tables::sql::parse(sql).map_err(|e| table_error(&e))?;
    statements
        .into_iter()
        .map(|s| match s {
            DfStatement::Statement(s) => Ok(parser.rewrite(*s)),
            other => Err(user_error(
                "0A000",
                format!("{other} is not supported by tierdb serve"),
            )),
        })
        .collect()
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
/// view (`declared.rs`).
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
fn reads_catalog(stmt: &Statement) -> bool {
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

/// The highest `$n` in a query string: how many parameters the client binds (rewrites of
/// catalog queries can drop some of them from the plan).
pub(crate) fn declared_parameters(sql: &str) -> usize {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map(|tokens| {
            tokens
                .iter()
                .filter_map(|t| match t {
                    Token::Placeholder(p) => p.strip_prefix('$')?.parse::<usize>().ok(),
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::sqlstate;

    fn parse_str(sql: &str) -> PgWireResult<Vec<Statement>> {
        parse(&PostgresCompatibilityParser::new(), sql)
    }

    #[test]
    fn splits_statements_and_reads_tierdb_syntax() {
        let s = parse_str("SELECT 1; SELECT 2;").expect("parses");
        assert_eq!(s.len(), 2);
        // tierdb's CREATE TABLE … ORDER BY is not PostgreSQL's: the second parser takes it.
        let s = parse_str("CREATE TABLE t (a INT NOT NULL) ORDER BY (a)").expect("parses");
        assert!(matches!(&s[..], [Statement::CreateTable(_)]), "{s:?}");
        assert!(parse_str("").expect("parses").is_empty());
    }

    #[test]
    fn a_syntax_error_is_42601() {
        let e = parse_str("SELEC 1").expect_err("not SQL");
        assert_eq!(sqlstate(&e), "42601");
    }

    #[test]
    fn a_lossily_decoded_query_is_refused() {
        let e = parse_str("SELECT 'a\u{FFFD}b'").expect_err("refused");
        assert_eq!(sqlstate(&e), "22021");
    }

    #[test]
    fn is_distinct_from_keeps_postgresql_precedence() {
        // sqlparser reads the right side of IS DISTINCT FROM as `b AND c`; parsefix repairs it.
        use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr};
        let s = parse_str("SELECT a IS DISTINCT FROM b AND c FROM t").expect("parses");
        let Statement::Query(q) = &s[0] else {
            panic!("{s:?}")
        };
        let SetExpr::Select(sel) = q.body.as_ref() else {
            panic!("{q:?}")
        };
        let SelectItem::UnnamedExpr(e) = &sel.projection[0] else {
            panic!("{sel:?}")
        };
        assert!(
            matches!(e, Expr::BinaryOp { left, .. } if matches!(left.as_ref(), Expr::IsDistinctFrom(..))),
            "{e:?}"
        );
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
    fn grafanas_search_path_expansion_is_public() {
        let grafana = "SELECT quote_ident(table_name) FROM information_schema.tables WHERE \
            quote_ident(table_schema) IN (SELECT\n            CASE WHEN trim(s[i]) = '\"$user\"' \
            THEN user ELSE trim(s[i]) END\n        FROM\n            generate_series(\n         \
            array_lower(string_to_array(current_setting('search_path'),','),1),\n     \
            array_upper(string_to_array(current_setting('search_path'),','),1)\n            ) as i,\n \
            string_to_array(current_setting('search_path'),',') s)";
        let out = search_path_schemas(grafana);
        assert!(out.ends_with("IN (SELECT 'public')"), "{out}");
        assert_eq!(search_path_schemas("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn copy_takes_on_and_off_as_booleans() {
        assert_eq!(
            copy_booleans("copy t from stdin with (freeze on)"),
            "copy t from stdin with (freeze true)"
        );
        assert_eq!(
            copy_booleans("COPY t FROM STDIN (FORMAT csv, HEADER off)"),
            "COPY t FROM STDIN (FORMAT csv, HEADER false)"
        );
        assert_eq!(copy_booleans("SELECT 'freeze on'"), "SELECT 'freeze on'");
        assert!(parse_str("copy t from stdin with (freeze on)").is_ok());
    }

    #[test]
    fn vacuum_of_tables_is_the_database_vacuum() {
        assert_eq!(vacuum("vacuum analyze pgbench_branches"), "VACUUM");
        assert_eq!(vacuum("VACUUM;"), "VACUUM");
        assert_eq!(vacuum("SELECT 1; vacuum t"), "SELECT 1; vacuum t");
        assert!(parse_str("vacuum analyze pgbench_branches").is_ok());
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

    #[test]
    fn declared_parameters_is_the_highest_placeholder() {
        assert_eq!(declared_parameters("SELECT $1, $3"), 3);
        assert_eq!(declared_parameters("SELECT '$5'"), 0);
        assert_eq!(declared_parameters("SELECT 1"), 0);
    }
}
