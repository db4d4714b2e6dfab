//! `SET` and `SHOW`: the settings datafusion-postgres's hook keeps, and tierdb's own
//! (`server_version`, `tierdb.role`, `tierdb.replica_lag`).

use std::sync::Arc;
use std::time::Duration;

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse, Response};
use pgwire::api::{ClientInfo, Type};
use pgwire::error::PgWireResult;

use crate::SERVER_VERSION;
use crate::errors::table_error;

/// Where datafusion-postgres's `SET statement_timeout` hook keeps the timeout.
const METADATA_STATEMENT_TIMEOUT: &str = "statement_timeout_ms";

pub(crate) fn statement_timeout<C: ClientInfo>(client: &C) -> Option<Duration> {
    client
        .metadata()
        .get(METADATA_STATEMENT_TIMEOUT)
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

pub(crate) fn is_set_or_show(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Set(_)
            | Statement::ShowVariable { .. }
            | Statement::ShowStatus { .. }
            | Statement::ShowCatalogs { .. }
    )
}

/// The schemas `SET search_path TO …` names, if `stmt` is that statement (lower-cased
/// unless quoted; `"$user"` and empty names left out).
pub(crate) fn search_path(stmt: &Statement) -> Option<Vec<String>> {
    use datafusion::sql::sqlparser::ast::{Expr, Set, Value};
    let Statement::Set(Set::SingleAssignment {
        variable, values, ..
    }) = stmt
    else {
        return None;
    };
    if !variable.to_string().eq_ignore_ascii_case("search_path") {
        return None;
    }
    let mut out = Vec::new();
    for v in values {
        let names: Vec<String> = match v {
            Expr::Identifier(i) => vec![tierdb_tables::sql::ident_name(i)],
            Expr::Value(v) => match &v.value {
                // `SET search_path = 'a, b'` (one string listing them).
                Value::SingleQuotedString(s) => s
                    .split(',')
                    .map(|p| {
                        let p = p.trim();
                        match p.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
                            Some(q) => q.to_string(),
                            None => p.to_lowercase(),
                        }
                    })
                    .collect(),
                _ => vec![],
            },
            other => vec![other.to_string()],
        };
        out.extend(names.into_iter().filter(|n| !n.is_empty() && n != "$user"));
    }
    Some(out)
}

/// `SET search_path`'s value as `SHOW search_path` and `current_setting` give it back: the
/// names as written, separated by `, `.
pub(crate) fn search_path_text(stmt: &Statement) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{Expr, Set, Value};
    let Statement::Set(Set::SingleAssignment { values, .. }) = stmt else {
        return None;
    };
    search_path(stmt)?;
    let parts: Vec<String> = values
        .iter()
        .map(|v| match v {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            other => other.to_string(),
        })
        .collect();
    Some(parts.join(", "))
}

/// `RESET x` (pg_dump's `RESET search_path` after it looked tables up by pattern): the
/// settings tierdb only records for SHOW go back to nothing to undo, so it is accepted.
/// The session's time zone would have to go back to the client's, which the server does
/// not keep apart: `RESET TimeZone` and `RESET ALL` are refused, saying what to do.
pub(crate) fn reset(
    what: &datafusion::sql::sqlparser::ast::Reset,
) -> pgwire::error::PgWireResult<&'static str> {
    use datafusion::sql::sqlparser::ast::Reset;
    let refused = match what {
        Reset::ALL => true,
        Reset::ConfigurationParameter(name) => {
            let n = name.to_string().to_lowercase();
            n == "timezone" || n == "time zone"
        }
    };
    if refused {
        return Err(crate::errors::user_error(
            "0A000",
            "RESET of the time zone is not supported by tierdb: SET TIME ZONE to the zone \
             wanted"
                .into(),
        ));
    }
    Ok("RESET")
}

/// Whether RESET `what` sets `search_path` back to its default.
pub(crate) fn resets_search_path(what: &datafusion::sql::sqlparser::ast::Reset) -> bool {
    matches!(what, datafusion::sql::sqlparser::ast::Reset::ConfigurationParameter(n)
        if n.to_string().eq_ignore_ascii_case("search_path"))
}

/// The name of a `SHOW` statement's variable, lower case (`tierdb.role`).
pub(crate) fn shown_variable(stmt: &Statement) -> Option<String> {
    let Statement::ShowVariable { variable } = stmt else {
        return None;
    };
    Some(
        variable
            .iter()
            .map(|v| v.value.to_lowercase())
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// The column a `SHOW` answers in, named as PostgreSQL names it: the setting's own
/// spelling (`SHOW TRANSACTION ISOLATION LEVEL` → `transaction_isolation`, `SHOW time zone`
/// → `TimeZone`), else the name shown.
pub(crate) fn shown_column(stmt: &Statement) -> Option<String> {
    let name = shown_variable(stmt)?;
    Some(
        match name.as_str() {
            "transaction.isolation.level" => "transaction_isolation",
            "time.zone" | "timezone" => "TimeZone",
            "datestyle" => "DateStyle",
            "intervalstyle" => "IntervalStyle",
            other => other,
        }
        .to_string(),
    )
}

/// `SHOW server_version` answers what the startup parameters said.
pub(crate) fn show_server_version(stmt: &Statement) -> Option<PgWireResult<Response>> {
    let name = shown_variable(stmt)?;
    let value = match name.as_str() {
        "server_version" => SERVER_VERSION.to_string(),
        "server_version_num" => crate::SERVER_VERSION_NUM.to_string(),
        _ => return None,
    };
    Some(Ok(one_value(name, value)))
}

/// `SHOW tierdb.role` (writer or replica) and `SHOW tierdb.replica_lag`: how old the newest
/// commit this server sees is (on a replica, an upper bound of how far behind its writer
/// it is; it also grows while the writer commits nothing, as PostgreSQL's
/// `now() - pg_last_xact_replay_timestamp()` does).
pub(crate) async fn show_replica(
    stmt: &Statement,
    tables: &tierdb_tables::Tables,
) -> Option<PgWireResult<Response>> {
    let name = shown_variable(stmt)?;
    let value = match name.as_str() {
        "tierdb.role" => if tables.is_read_only() {
            "replica"
        } else {
            "writer"
        }
        .to_string(),
        "tierdb.replica_lag" => match tables.last_commit_ms().await {
            Err(e) => return Some(Err(table_error(&e))),
            Ok(_) if !tables.is_read_only() => "0 (this server is the writer)".to_string(),
            Ok(None) => "unknown (no commit seen yet)".to_string(),
            Ok(Some(ms)) => {
                let age = tierdb_kv::lease::now_ms().saturating_sub(ms);
                format!(
                    "{:.3} s (since the newest commit this replica sees)",
                    age as f64 / 1e3
                )
            }
        },
        _ => return None,
    };
    Some(Ok(one_value(name, value)))
}

/// `SHOW transaction_isolation` (also `transaction isolation level`) and
/// `default_transaction_isolation`: the session's levels.
pub(crate) fn show_isolation(
    stmt: &Statement,
    session: &tierdb_tables::sql::SqlSession,
) -> Option<PgWireResult<Response>> {
    let name = shown_variable(stmt)?;
    let value = match name.as_str() {
        "transaction_isolation" | "transaction.isolation.level" => session.isolation(),
        "default_transaction_isolation" => session.default_isolation(),
        _ => return None,
    };
    Some(Ok(one_value(
        shown_column(stmt).unwrap_or(name),
        value.name().to_string(),
    )))
}

/// A one-row, one-column text answer named `name`.
fn one_value(name: String, value: String) -> Response {
    let fields = Arc::new(vec![
        FieldInfo::new(name, None, None, Type::TEXT, FieldFormat::Text).with_type_size(-1),
    ]);
    let mut encoder = pgwire::api::results::DataRowEncoder::new(fields.clone());
    let row = encoder
        .encode_field(&Some(value))
        .map(|()| encoder.take_row());
    Response::Query(QueryResponse::new(fields, futures::stream::iter(vec![row])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Reset};

    #[test]
    fn shown_columns_are_named_as_postgresql_names_them() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let column = |sql: &str| {
            let s = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parse");
            shown_column(&s[0])
        };
        assert_eq!(
            column("SHOW TRANSACTION ISOLATION LEVEL").as_deref(),
            Some("transaction_isolation")
        );
        assert_eq!(column("SHOW timezone").as_deref(), Some("TimeZone"));
        assert_eq!(column("SHOW search_path").as_deref(), Some("search_path"));
        assert_eq!(column("SELECT 1"), None);
    }

    #[test]
    fn reset_is_accepted_except_for_the_time_zone() {
        let param = |n: &str| Reset::ConfigurationParameter(ObjectName::from(vec![Ident::new(n)]));
        assert_eq!(reset(&param("search_path")).ok(), Some("RESET"));
        assert!(reset(&param("TimeZone")).is_err());
        assert!(reset(&Reset::ALL).is_err());
    }

    #[test]
    fn a_search_paths_schemas_and_text() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let path = |sql: &str| {
            let s = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parse");
            search_path(&s[0])
        };
        assert_eq!(
            path("SET search_path TO An, \"$user\", public"),
            Some(vec!["an".to_string(), "public".to_string()])
        );
        assert_eq!(path("SET search_path = ''"), Some(vec![]));
        assert_eq!(
            path("SET search_path = 'x, \"Y\"'"),
            Some(vec!["x".to_string(), "Y".to_string()])
        );
        assert_eq!(path("SET TIME ZONE 'UTC'"), None);
        let text = |sql: &str| {
            let s = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parse");
            search_path_text(&s[0])
        };
        assert_eq!(
            text("SET search_path TO An, \"$user\", public").as_deref(),
            Some("An, \"$user\", public")
        );
        assert_eq!(text("SET search_path = 'x, y'").as_deref(), Some("x, y"));
        assert_eq!(text("SET TIME ZONE 'UTC'"), None);
    }
}
