//! `ALTER TABLE [IF EXISTS] [ONLY] t ALTER [COLUMN] c SET STORAGE|COMPRESSION|STATISTICS x`,
//! which the SQL parser does not read: pg_dump of a PostgreSQL database writes `… SET
//! STORAGE MAIN` for every column whose storage differs from its type's, and a restore
//! with `ON_ERROR_STOP` stopped there. These say how PostgreSQL stores or samples a column
//! (TOAST, compression, planner statistics); tierdb's Parquet segments and row entries have
//! no such setting, so the statement checks that the table and column exist and is
//! accepted with a notice, changing nothing.
//!
//! Before parsing (with `seqstmt.rs`'s rewrites) it becomes `CALL
//! tierdb_column_storage('<table>', '<column>', '<setting>', '<if exists>')`, the names as
//! written, carried out by [`SqlSession::column_storage_call`].

use datafusion::sql::sqlparser::ast::Function;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::SqlSession;
use super::seqstmt::{call_strings, call_text, is_space, keyword};
use crate::error::{Result, TableError};

/// The procedure such a statement becomes.
pub const PROCEDURE: &str = "tierdb_column_storage";

/// The CALL text of one such statement's tokens; `None` for other statements.
pub(super) fn as_call(tokens: &[Token]) -> Option<String> {
    let solid: Vec<&Token> = tokens
        .iter()
        .filter(|t| !is_space(t) && **t != Token::SemiColon)
        .collect();
    let [alter, table, rest @ ..] = solid.as_slice() else {
        return None;
    };
    if !keyword(alter, Keyword::ALTER) || !keyword(table, Keyword::TABLE) {
        return None;
    }
    let (if_exists, rest) = super::setschema_stmt::if_exists_only(rest);
    // name (. name)* ALTER [COLUMN] column SET (STORAGE|COMPRESSION|STATISTICS) value
    let name_len = rest
        .iter()
        .position(|t| keyword(t, Keyword::ALTER))
        .filter(|n| n % 2 == 1)?;
    let (name, tail) = rest.split_at(name_len);
    let tail = match tail {
        [_, c, tail @ ..] if keyword(c, Keyword::COLUMN) => tail,
        [_, tail @ ..] => tail,
        [] => return None,
    };
    let [column, set, setting, value] = tail else {
        return None;
    };
    let named = super::setschema_stmt::dotted_name(name);
    let setting_ok = [Keyword::STORAGE, Keyword::COMPRESSION, Keyword::STATISTICS]
        .into_iter()
        .any(|k| keyword(setting, k));
    if !named
        || !matches!(column, Token::Word(_))
        || !keyword(set, Keyword::SET)
        || !setting_ok
        || !matches!(value, Token::Word(_) | Token::Number(..))
    {
        return None;
    }
    let name: String = name.iter().map(|t| t.to_string()).collect();
    let setting = format!("{setting} {value}").to_uppercase();
    let if_exists = if if_exists { "if exists" } else { "" };
    Some(call_text(
        tokens,
        PROCEDURE,
        &[&name, &column.to_string(), &setting, if_exists],
    ))
}

/// (table, column, setting, if exists) of a CALL of [`PROCEDURE`]; `None` for other calls.
pub fn call_arguments(f: &Function) -> Option<(String, String, String, bool)> {
    let [t, c, s, e] = call_strings(f, PROCEDURE)?.try_into().ok()?;
    Some((t, c, s, !e.is_empty()))
}

impl SqlSession {
    /// Checks that the table and column exist and says the setting changes nothing.
    pub(super) async fn column_storage_call(&self, f: &Function) -> Result<&'static str> {
        let (name, column, setting, if_exists) = call_arguments(f)
            .ok_or_else(|| TableError::Unsupported(format!("{f} is not a SET STORAGE")))?;
        let parser = || Parser::new(&PostgreSqlDialect {});
        let object = parser()
            .try_with_sql(&name)
            .and_then(|mut p| p.parse_object_name(false))
            .map_err(|_| TableError::NoTable(name.clone()))?;
        let column = parser()
            .try_with_sql(&column)
            .and_then(|mut p| p.parse_identifier())
            .map(|id| super::ident_name(&id))
            .map_err(|_| TableError::NoTable(name.clone()))?;
        let relation = self.resolve_relation(&object).await?;
        let Some(def) = self.tables.table(&relation).await? else {
            if if_exists {
                self.notice(
                    "00000",
                    &format!("relation \"{name}\" does not exist, skipping"),
                );
                return Ok("ALTER TABLE");
            }
            return Err(TableError::NoTable(name));
        };
        if !def.columns.iter().any(|c| c.name == column) {
            return Err(TableError::Column {
                code: "42703",
                message: format!(
                    "column \"{column}\" of relation \"{}\" does not exist",
                    def.name
                ),
            });
        }
        self.notice(
            "01000",
            &format!(
                "SET {setting} on column \"{column}\" is ignored: tierdb stores columns in \
                 Parquet segments and row entries, which have no such setting"
            ),
        );
        Ok("ALTER TABLE")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn call(sql: &str) -> Option<String> {
        as_call(
            &Tokenizer::new(&PostgreSqlDialect {}, sql)
                .tokenize()
                .unwrap(),
        )
    }

    #[test]
    fn pg_dumps_column_settings_become_calls() {
        assert_eq!(
            call("ALTER TABLE ONLY public.customers ALTER COLUMN name SET STORAGE MAIN;")
                .as_deref(),
            Some("CALL tierdb_column_storage('public.customers', 'name', 'STORAGE MAIN', '');")
        );
        assert_eq!(
            call("alter table if exists t alter \"Col\" set statistics 100").as_deref(),
            Some("CALL tierdb_column_storage('t', '\"Col\"', 'STATISTICS 100', 'if exists')")
        );
        assert_eq!(
            call("ALTER TABLE t ALTER COLUMN c SET COMPRESSION lz4").as_deref(),
            Some("CALL tierdb_column_storage('t', 'c', 'COMPRESSION LZ4', '')")
        );
        for other in [
            "ALTER TABLE t ALTER COLUMN c SET NOT NULL",
            "ALTER TABLE t ALTER COLUMN c SET DEFAULT 1",
            "ALTER TABLE t SET SCHEMA s",
            "ALTER TABLE t ALTER COLUMN c SET STORAGE",
            "SELECT 1",
        ] {
            assert_eq!(call(other), None, "{other}");
        }
    }
}
