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
    let sql = &qualified_operators(sql);
    let sql = &tierdb_tables::sql::rewrite_alter_sequence(sql);
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

/// `OPERATOR(pg_catalog.=)` and the like (pg_dump's and psql's queries for name patterns:
/// `c.relkind OPERATOR(pg_catalog.=) ANY (array[…])`) become the bare operator: an operator
/// of pg_catalog is the built-in one, and the SQL parser does not read the qualified form
/// before ANY. Text in quotes and comments is left alone; so is any other schema's operator.
fn qualified_operators(sql: &str) -> std::borrow::Cow<'_, str> {
    const PREFIX: &str = "operator(pg_catalog.";
    if !sql.to_lowercase().contains(PREFIX) {
        return sql.into();
    }
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        // Quoted text and identifiers, and comments, are copied whole (to the end of the
        // string when unterminated: the parser then reports it).
        let rest = &sql[i..];
        let end = match c {
            b'\'' | b'"' => Some(rest[1..].find(c as char).map_or(sql.len(), |n| i + n + 2)),
            b'-' if rest.starts_with("--") => Some(rest.find('\n').map_or(sql.len(), |n| i + n)),
            b'/' if rest.starts_with("/*") => {
                Some(rest[2..].find("*/").map_or(sql.len(), |n| i + n + 4))
            }
            _ => None,
        };
        if let Some(end) = end {
            out.push_str(&sql[i..end]);
            i = end;
            continue;
        }
        let word_start = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if word_start
            && rest.len() > PREFIX.len()
            && rest.is_char_boundary(PREFIX.len())
            && rest[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
            && let Some(close) = rest[PREFIX.len()..].find(')')
        {
            let op = &rest[PREFIX.len()..PREFIX.len() + close];
            if !op.is_empty() && op.bytes().all(|b| b"+-*/<>=~!@#%^&|`?".contains(&b)) {
                out.push(' ');
                out.push_str(op);
                out.push(' ');
                i += PREFIX.len() + close + 1;
                continue;
            }
        }
        let ch = rest.chars().next().unwrap_or_default();
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out.into()
}

/// Whether `sql` may call a sequence function with a `regclass` name (pg_dump's and psql's
/// `nextval('s'::regclass)`).
fn names_sequence_as_regclass(sql: &str) -> bool {
    let lower = sql.to_lowercase();
    lower.contains("regclass")
        && ["nextval", "currval", "setval"]
            .iter()
            .any(|f| lower.contains(f))
}

/// `sql` parsed as datafusion-pg-catalog's parser parses it, but with `first` applied to
/// each statement before its rules, which run as a query is parsed: one would answer
/// `pg_attrdef` lookups with NULL (`keysql.rs` rule 3), another make a sequence's
/// `regclass` name a subquery on `pg_class` (`tierdb_tables::parsefix` rule 2) before any
/// later rewrite saw them. `None` where PostgreSQL's syntax does not parse it.
/// `SELECT current_user, current_catalog`: datafusion-pg-catalog's rules call them
/// `session_user` and `current_database()` (the same values), which DataFusion then names
/// the columns; PostgreSQL names them `current_user` and `current_catalog` (DataGrip's and
/// JDBC tools' startup queries read them by name). Unaliased items of a top-level SELECT
/// get those names as aliases before the rules run.
fn name_special_registers(s: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, FunctionArguments, Ident, SelectItem, SetExpr};
    let Statement::Query(q) = s else {
        return;
    };
    let SetExpr::Select(select) = q.body.as_mut() else {
        return;
    };
    for item in &mut select.projection {
        let SelectItem::UnnamedExpr(Expr::Function(f)) = item else {
            continue;
        };
        let name = f.name.to_string().to_ascii_lowercase();
        if matches!(f.args, FunctionArguments::None)
            && matches!(name.as_str(), "current_user" | "current_catalog")
        {
            *item = SelectItem::ExprWithAlias {
                expr: Expr::Function(f.clone()),
                alias: Ident::new(name),
            };
        }
    }
}

fn parsed_before_rules(
    parser: &PostgresCompatibilityParser,
    sql: &str,
    first: &dyn Fn(&mut Statement),
) -> Option<Vec<Statement>> {
    use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    Some(
        statements
            .into_iter()
            .map(|mut s| {
                first(&mut s);
                parser.rewrite(s)
            })
            .collect(),
    )
}

fn parse_unrepaired(
    parser: &PostgresCompatibilityParser,
    sql: &str,
) -> PgWireResult<Vec<Statement>> {
    let (attrdef, sequence, catalog) = (
        sql.contains("pg_attrdef"),
        names_sequence_as_regclass(sql),
        crate::systemcols::names_catalog_regclass(sql),
    );
    let lower = sql.to_ascii_lowercase();
    let registers = lower.contains("current_user") || lower.contains("current_catalog");
    let first = |s: &mut Statement| {
        if registers {
            name_special_registers(s);
        }
        if catalog {
            crate::systemcols::catalog_regclass(s);
        }
        if attrdef {
            crate::keysql::default_lookups(s);
        } else if sequence {
            tierdb_tables::parsefix::repair(s);
        }
    };
    let parsed = if attrdef || sequence || catalog || registers {
        parsed_before_rules(parser, sql, &first).ok_or(())
    } else {
        Err(())
    }
    .or_else(|()| parser.parse(sql));
    if let Ok(mut statements) = parsed {
        if sql.contains("pg_") {
            for s in &mut statements {
                crate::systemcols::rewrite(s);
            }
        }
        // PostgreSQL's system views, queries over pg_catalog (sysviews.rs).
        let mut system_views = false;
        if crate::sysviews::may_name(sql) {
            for s in &mut statements {
                system_views |= crate::sysviews::rewrite(s);
            }
        }
        if !system_views
            && !sql.contains("pg_catalog")
            && !sql.contains("_description(")
            && !statements.iter().any(crate::catalogsql::reads_catalog)
        {
            return Ok(statements);
        }
        return Ok(statements
            .into_iter()
            .map(|s| crate::catalogsql::rewrite(parser, s))
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

    #[test]
    fn a_sequence_named_as_a_regclass_stays_a_name() {
        let s = parse_str("CREATE TABLE t (id INT DEFAULT nextval('public.t_id_seq'::regclass))")
            .expect("parses");
        assert_eq!(
            s[0].to_string(),
            "CREATE TABLE t (id INT DEFAULT nextval('public.t_id_seq'))"
        );
        let s = parse_str("SELECT pg_catalog.setval('public.t_id_seq', 3, true)").expect("parses");
        assert!(
            s[0].to_string()
                .contains("setval('public.t_id_seq', 3, true)")
        );
    }

    #[test]
    fn special_registers_keep_postgresqls_column_names() {
        let s = parse_str("select current_database(), CURRENT_USER, current_catalog, user AS u")
            .expect("parses");
        assert_eq!(
            s[0].to_string(),
            "SELECT current_database(), session_user AS current_user, current_database() AS \
             current_catalog, user AS u"
        );
    }

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
    fn pg_catalog_operators_are_the_bare_operators() {
        let q = "WHERE c.relkind OPERATOR(pg_catalog.=) ANY (array['r']) \
                 AND c.relname operator(pg_catalog.~) '^(t1)$'";
        assert_eq!(
            qualified_operators(q),
            "WHERE c.relkind  =  ANY (array['r']) AND c.relname  ~  '^(t1)$'"
        );
        // Quoted text, comments and other schemas' operators stay.
        for kept in [
            "SELECT 'OPERATOR(pg_catalog.=)'",
            "SELECT 1 -- OPERATOR(pg_catalog.=)",
            "SELECT a OPERATOR(myschema.=) b",
            "SELECT \"OPERATOR(pg_catalog.=)\" FROM t",
        ] {
            assert_eq!(qualified_operators(kept), kept);
        }
        assert!(
            parse_str("SELECT 1 WHERE 'r' OPERATOR(pg_catalog.=) ANY (array['r', 'v'])").is_ok()
        );
    }

    #[test]
    fn vacuum_of_tables_is_the_database_vacuum() {
        assert_eq!(vacuum("vacuum analyze pgbench_branches"), "VACUUM");
        assert_eq!(vacuum("VACUUM;"), "VACUUM");
        assert_eq!(vacuum("SELECT 1; vacuum t"), "SELECT 1; vacuum t");
        assert!(parse_str("vacuum analyze pgbench_branches").is_ok());
    }

    #[test]
    fn declared_parameters_is_the_highest_placeholder() {
        assert_eq!(declared_parameters("SELECT $1, $3"), 3);
        assert_eq!(declared_parameters("SELECT '$5'"), 0);
        assert_eq!(declared_parameters("SELECT 1"), 0);
    }
}
