//! `ALTER TABLE|VIEW [IF EXISTS] [ONLY] name SET SCHEMA s`, which the SQL parser does not
//! read: before parsing (with `seqstmt.rs`'s rewrite of ALTER SEQUENCE, which reads
//! `ALTER SEQUENCE … SET SCHEMA s` itself) it becomes `CALL tierdb_set_schema('<table|view>',
//! '<name>', '<schema>', '<if exists>')` with the name and schema as written, carried out
//! by [`crate::tables::Tables::set_schema`] (`setschema.rs`).
//!
//! `ALTER VIEW [IF EXISTS] name RENAME TO new`, which the parser does not read either
//! (it reads only `ALTER VIEW … AS`), becomes `ALTER TABLE …` ([`view_rename`]), which
//! renames a view as PostgreSQL's does.

use datafusion::sql::sqlparser::ast::{AlterSchema, AlterSchemaOperation, Function};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::SqlSession;
use super::namespaces::schema_ident;
use super::seqstmt::{call_strings, call_text, is_space, keyword};
use crate::error::{Result, TableError};
use crate::setschema::RelationKind;

/// The procedure such a statement becomes.
pub const PROCEDURE: &str = "tierdb_set_schema";

/// The CALL text of one `ALTER TABLE|VIEW … SET SCHEMA` statement's tokens; `None` for
/// other statements.
pub(super) fn as_call(tokens: &[Token]) -> Option<String> {
    let solid: Vec<&Token> = tokens
        .iter()
        .filter(|t| !is_space(t) && **t != Token::SemiColon)
        .collect();
    let [alter, kind, rest @ ..] = solid.as_slice() else {
        return None;
    };
    if !keyword(alter, Keyword::ALTER) {
        return None;
    }
    let kind = if keyword(kind, Keyword::TABLE) {
        "table"
    } else if keyword(kind, Keyword::VIEW) {
        "view"
    } else {
        return None;
    };
    let (if_exists, rest) = if_exists_only(rest);
    // name (word (. word)*) SET SCHEMA word
    let [name @ .., set, schema_kw, schema] = rest else {
        return None;
    };
    if !keyword(set, Keyword::SET)
        || !keyword(schema_kw, Keyword::SCHEMA)
        || !matches!(schema, Token::Word(_))
        || !dotted_name(name)
    {
        return None;
    }
    let name: String = name.iter().map(|t| t.to_string()).collect();
    let if_exists = if if_exists { "if exists" } else { "" };
    Some(call_text(
        tokens,
        PROCEDURE,
        &[kind, &name, &schema.to_string(), if_exists],
    ))
}

/// `[IF EXISTS] [ONLY] …` after `ALTER TABLE`: whether IF EXISTS was written, and the rest.
pub(super) fn if_exists_only<'a>(rest: &'a [&'a Token]) -> (bool, &'a [&'a Token]) {
    let mut rest = rest;
    let mut if_exists = false;
    if let [i, e, tail @ ..] = rest
        && keyword(i, Keyword::IF)
        && keyword(e, Keyword::EXISTS)
    {
        if_exists = true;
        rest = tail;
    }
    if let [only, tail @ ..] = rest
        && keyword(only, Keyword::ONLY)
    {
        rest = tail;
    }
    (if_exists, rest)
}

/// Whether `name` is a relation's name: words joined by periods (`s.t`).
pub(super) fn dotted_name(name: &[&Token]) -> bool {
    name.len() % 2 == 1
        && name.iter().enumerate().all(|(i, t)| {
            if i % 2 == 0 {
                matches!(t, Token::Word(_))
            } else {
                **t == Token::Period
            }
        })
}

/// The text of an `ALTER VIEW [IF EXISTS] name RENAME TO new` statement's tokens as
/// `ALTER TABLE …`; `None` for other statements.
pub(super) fn view_rename(tokens: &[Token]) -> Option<String> {
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_space(&tokens[i]) && tokens[i] != Token::SemiColon)
        .collect();
    let at = |k: usize| solid.get(k).map(|&i| &tokens[i]);
    if !at(0).is_some_and(|t| keyword(t, Keyword::ALTER))
        || !at(1).is_some_and(|t| keyword(t, Keyword::VIEW))
    {
        return None;
    }
    let n = solid.len();
    let renames = n >= 5
        && at(n - 3).is_some_and(|t| keyword(t, Keyword::RENAME))
        && at(n - 2).is_some_and(|t| keyword(t, Keyword::TO))
        && at(n - 1).is_some_and(|t| matches!(t, Token::Word(_)));
    if !renames {
        return None;
    }
    let view = solid[1];
    Some(
        tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i == view {
                    "TABLE".to_string()
                } else {
                    t.to_string()
                }
            })
            .collect(),
    )
}

/// What a CALL of [`PROCEDURE`] moves: (kind, name, schema, if exists), the names as
/// written; `None` for other calls.
pub fn call_arguments(f: &Function) -> Option<(RelationKind, String, String, bool)> {
    let [k, n, s, e] = call_strings(f, PROCEDURE)?.try_into().ok()?;
    let kind = match k.as_str() {
        "table" => RelationKind::Table,
        "view" => RelationKind::View,
        _ => return None,
    };
    Some((kind, n, s, !e.is_empty()))
}

impl SqlSession {
    /// `ALTER SCHEMA a RENAME TO b` (`OWNER TO` accepted: one role owns everything, and
    /// pg_dump writes it).
    pub(super) async fn alter_schema(&self, a: &AlterSchema) -> Result<&'static str> {
        let from = schema_ident(&a.name)?;
        for op in &a.operations {
            match op {
                AlterSchemaOperation::Rename { name } => {
                    let to = schema_ident(name)?;
                    if a.if_exists && self.tables.schema_def(&from).await?.is_none() {
                        self.notice(
                            "00000",
                            &format!("schema \"{from}\" does not exist, skipping"),
                        );
                        continue;
                    }
                    self.tables.rename_schema(&from, &to).await?;
                }
                AlterSchemaOperation::OwnerTo { .. } => {}
                other => {
                    return Err(TableError::Unsupported(format!(
                        "ALTER SCHEMA … {other}: tierdb alters a schema with RENAME TO"
                    )));
                }
            }
        }
        Ok("ALTER SCHEMA")
    }

    /// A CALL of [`PROCEDURE`]: the relation found by the session's search path.
    pub(super) async fn set_schema_call(&self, f: &Function) -> Result<&'static str> {
        let (kind, name, schema, if_exists) = call_arguments(f)
            .ok_or_else(|| TableError::Unsupported(format!("{f} is not a SET SCHEMA")))?;
        let parser = || Parser::new(&PostgreSqlDialect {});
        let object = parser()
            .try_with_sql(&name)
            .and_then(|mut p| p.parse_object_name(false))
            .map_err(|_| TableError::NoTable(name.clone()))?;
        let schema = parser()
            .try_with_sql(&schema)
            .and_then(|mut p| p.parse_identifier())
            .map(|id| super::ident_name(&id))
            .map_err(|_| TableError::Column {
                code: "3F000",
                message: format!("schema \"{schema}\" does not exist"),
            })?;
        let relation = self.resolve_relation(&object).await?;
        if !self
            .tables
            .set_schema(kind, &relation, &schema, if_exists)
            .await?
        {
            self.notice(
                "00000",
                &format!("relation \"{name}\" does not exist, skipping"),
            );
        }
        Ok(match kind {
            RelationKind::View => "ALTER VIEW",
            _ => "ALTER TABLE",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(sql: &str) -> Option<String> {
        let tokens = datafusion::sql::sqlparser::tokenizer::Tokenizer::new(
            &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
            sql,
        )
        .tokenize()
        .ok()?;
        as_call(&tokens)
    }

    #[test]
    fn set_schema_becomes_a_call_and_back() {
        assert_eq!(
            call("ALTER TABLE an.\"T x\" SET SCHEMA \"B\";").as_deref(),
            Some("CALL tierdb_set_schema('table', 'an.\"T x\"', '\"B\"', '');")
        );
        assert_eq!(
            call("alter view if exists only v set schema b").as_deref(),
            Some("CALL tierdb_set_schema('view', 'v', 'b', 'if exists')")
        );
        for other in [
            "ALTER TABLE t RENAME TO u",
            "ALTER TABLE t SET SCHEMA",
            "ALTER TABLE a b SET SCHEMA c",
            "ALTER SEQUENCE s SET SCHEMA c",
            "SELECT 1",
        ] {
            assert_eq!(call(other), None, "{other}");
        }
        let stmt = crate::sql::parse("ALTER TABLE t SET SCHEMA b").expect("parse");
        let datafusion::sql::parser::Statement::Statement(s) = &stmt[0] else {
            panic!("not a statement");
        };
        let datafusion::sql::sqlparser::ast::Statement::Call(f) = s.as_ref() else {
            panic!("not a CALL: {s}");
        };
        assert_eq!(
            call_arguments(f),
            Some((RelationKind::Table, "t".into(), "b".into(), false))
        );
    }

    #[test]
    fn alter_view_rename_becomes_alter_table() {
        let rewritten = |sql: &str| {
            let tokens = datafusion::sql::sqlparser::tokenizer::Tokenizer::new(
                &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
                sql,
            )
            .tokenize()
            .expect("tokens");
            view_rename(&tokens)
        };
        assert_eq!(
            rewritten("alter view if exists s.\"V\" rename to w;").as_deref(),
            Some("alter TABLE if exists s.\"V\" rename to w;")
        );
        for other in [
            "ALTER VIEW v AS SELECT 1",
            "ALTER VIEW v RENAME COLUMN a TO b",
            "ALTER TABLE t RENAME TO u",
            "ALTER VIEW v SET SCHEMA b",
        ] {
            assert_eq!(rewritten(other), None, "{other}");
        }
    }
}
