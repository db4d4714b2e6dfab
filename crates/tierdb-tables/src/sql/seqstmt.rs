//! `ALTER SEQUENCE`, which the SQL parser does not read: pg_dump writes
//! `ALTER SEQUENCE public.t_id_seq OWNED BY public.t.id;` for every SERIAL column, and
//! applications reset sequences with `ALTER SEQUENCE s RESTART [WITH n]`.
//!
//! Before parsing, such a statement becomes `CALL tierdb_alter_sequence('<name>',
//! '<the rest>')` ([`rewrite`]; the statement's tokens, so quoted names and strings
//! survive), which [`run`] carries out as a DDL statement (tag `ALTER SEQUENCE`):
//!
//! | clause                          | effect                                            |
//! |---------------------------------|---------------------------------------------------|
//! | `OWNED BY t.c`                  | the sequence is dropped with table `t` and is listed as `t.c`'s in `pg_depend` |
//! | `OWNED BY NONE`                 | owned by no table                                 |
//! | `RESTART` / `RESTART [WITH] n`  | the next `nextval` returns START / `n`            |
//!
//! Any other clause is refused with 0A000, naming what is supported.
//!
//! `CREATE SEQUENCE`'s options are put in the one order the parser reads them (INCREMENT,
//! MINVALUE, MAXVALUE, START, CACHE, CYCLE, OWNED BY): PostgreSQL takes them in any order,
//! and pg_dump writes START first.

use std::borrow::Cow;

use datafusion::sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectName, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use crate::error::{Result, TableError};
use crate::tables::Tables;

/// The procedure an ALTER SEQUENCE becomes.
pub const PROCEDURE: &str = "tierdb_alter_sequence";

/// `sql` with each ALTER SEQUENCE statement as a CALL of [`PROCEDURE`] (module doc);
/// other statements as they are.
pub fn rewrite(sql: &str) -> Cow<'_, str> {
    let lower = sql.to_ascii_lowercase();
    if ![
        "sequence",
        "schema",
        "view",
        "storage",
        "compression",
        "statistics",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        return sql.into();
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return sql.into();
    };
    let mut statements: Vec<Vec<Token>> = vec![Vec::new()];
    for t in tokens {
        let end = t == Token::SemiColon;
        if let Some(last) = statements.last_mut() {
            last.push(t);
        }
        if end {
            statements.push(Vec::new());
        }
    }
    let mut changed = false;
    let mut out = String::with_capacity(sql.len());
    for s in &statements {
        match super::setschema_stmt::as_call(s)
            .or_else(|| super::setschema_stmt::view_rename(s))
            .or_else(|| super::colstorage_stmt::as_call(s))
            .or_else(|| as_call(s))
            .or_else(|| reordered(s))
        {
            Some(text) => {
                changed = true;
                out.push_str(&text);
            }
            None => s.iter().for_each(|t| out.push_str(&t.to_string())),
        }
    }
    if changed { out.into() } else { sql.into() }
}

pub(super) fn is_space(t: &Token) -> bool {
    matches!(t, Token::Whitespace(_))
}

pub(super) fn keyword(t: &Token, k: Keyword) -> bool {
    matches!(t, Token::Word(w) if w.keyword == k)
}

/// The text of a CREATE SEQUENCE statement's tokens with its options in the parser's
/// order (module doc); `None` for other statements, or when they are in order.
fn reordered(tokens: &[Token]) -> Option<String> {
    // Non-space tokens by position.
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_space(&tokens[i]))
        .collect();
    let at = |k: usize| solid.get(k).map(|&i| &tokens[i]);
    if !at(0).is_some_and(|t| keyword(t, Keyword::CREATE)) {
        return None;
    }
    let mut k = 1;
    if at(k).is_some_and(|t| keyword(t, Keyword::TEMPORARY) || keyword(t, Keyword::TEMP)) {
        k += 1;
    }
    if !at(k).is_some_and(|t| keyword(t, Keyword::SEQUENCE)) {
        return None;
    }
    k += 1;
    if at(k).is_some_and(|t| keyword(t, Keyword::IF)) {
        k += 3;
    }
    // The name: words joined by periods.
    k += 1;
    while at(k) == Some(&Token::Period) {
        k += 2;
    }
    if at(k).is_some_and(|t| keyword(t, Keyword::AS)) {
        k += 2;
    }
    let head_end = solid.get(k).copied().unwrap_or(tokens.len());
    let rank = |t: &Token| match t {
        Token::Word(w) => match w.keyword {
            Keyword::INCREMENT => Some(0),
            Keyword::MINVALUE => Some(1),
            Keyword::MAXVALUE => Some(2),
            Keyword::START => Some(3),
            Keyword::CACHE => Some(4),
            Keyword::CYCLE => Some(5),
            Keyword::OWNED => Some(6),
            _ => None,
        },
        _ => None,
    };
    let mut clauses: Vec<(u8, Vec<&Token>)> = Vec::new();
    let mut after_no = false;
    for t in &tokens[head_end..] {
        if is_space(t) || *t == Token::SemiColon {
            if let Some((_, c)) = clauses.last_mut()
                && is_space(t)
            {
                c.push(t);
            }
            continue;
        }
        let starts = if after_no {
            None
        } else if keyword(t, Keyword::NO) {
            // `NO MINVALUE`: the clause of the word after it.
            let next = tokens[..]
                .iter()
                .skip_while(|x| !std::ptr::eq(*x, t))
                .skip(1)
                .find(|x| !is_space(x));
            next.and_then(rank)
        } else {
            rank(t)
        };
        after_no = keyword(t, Keyword::NO);
        match (starts, clauses.last_mut()) {
            (Some(r), _) => clauses.push((r, vec![t])),
            (None, Some((_, c))) => c.push(t),
            (None, None) => return None,
        }
    }
    let ranks: Vec<u8> = clauses.iter().map(|(r, _)| *r).collect();
    if ranks.windows(2).all(|w| w[0] <= w[1]) {
        return None;
    }
    clauses.sort_by_key(|(r, _)| *r);
    let mut out: String = tokens[..head_end].iter().map(|t| t.to_string()).collect();
    for (_, c) in &clauses {
        let text: String = c.iter().map(|t| t.to_string()).collect();
        out = format!("{} {}", out.trim_end(), text.trim());
    }
    if tokens.last() == Some(&Token::SemiColon) {
        out.push(';');
    }
    Some(out)
}

/// The CALL text of one ALTER SEQUENCE statement's tokens; `None` for other statements.
fn as_call(tokens: &[Token]) -> Option<String> {
    let words: Vec<(usize, &Token)> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !is_space(t) && !matches!(t, Token::Whitespace(Whitespace::Newline)))
        .collect();
    let [(_, a), (_, s), rest @ ..] = words.as_slice() else {
        return None;
    };
    if !keyword(a, Keyword::ALTER) || !keyword(s, Keyword::SEQUENCE) {
        return None;
    }
    // The name: its tokens up to the first word that is not part of it.
    let mut at = 0;
    if rest.len() >= 2 && keyword(rest[0].1, Keyword::IF) && keyword(rest[1].1, Keyword::EXISTS) {
        at = 2;
    }
    let name_start = rest.get(at)?.0;
    let mut name_end = name_start;
    let mut expect_part = true;
    for (i, t) in &rest[at..] {
        match t {
            Token::Word(_) if expect_part => {
                name_end = i + 1;
                expect_part = false;
            }
            Token::Period if !expect_part => expect_part = true,
            _ => break,
        }
    }
    let text = |from: usize, to: usize| -> String {
        tokens[from..to]
            .iter()
            .filter(|t| **t != Token::SemiColon)
            .map(|t| t.to_string())
            .collect::<String>()
            .trim()
            .to_string()
    };
    let name = text(name_start, name_end);
    let clause = text(name_end, tokens.len());
    Some(call_text(tokens, PROCEDURE, &[&name, &clause]))
}

/// `CALL procedure('arg', …)` in place of the statement of `tokens`: each argument a quoted
/// string, the white space before the statement (after the previous one's semicolon) and
/// its semicolon kept.
pub(super) fn call_text(tokens: &[Token], procedure: &str, args: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let lead: String = tokens
        .iter()
        .take_while(|t| is_space(t))
        .map(|t| t.to_string())
        .collect();
    let end = if tokens.last() == Some(&Token::SemiColon) {
        ";"
    } else {
        ""
    };
    let args: Vec<String> = args.iter().map(|a| quote(a)).collect();
    format!("{lead}CALL {procedure}({}){end}", args.join(", "))
}

/// The name and clause of a CALL of [`PROCEDURE`]; `None` for other calls.
pub fn call_arguments(f: &Function) -> Option<(String, String)> {
    match call_strings(f, PROCEDURE)?.as_slice() {
        [n, c] => Some((n.clone(), c.clone())),
        _ => None,
    }
}

/// The arguments of a CALL of `procedure` that [`call_text`] wrote, all strings; `None`
/// for a call of another procedure or with another argument.
pub(super) fn call_strings(f: &Function, procedure: &str) -> Option<Vec<String>> {
    if !f.name.to_string().eq_ignore_ascii_case(procedure) {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))) => match &v.value {
                Value::SingleQuotedString(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// What an ALTER SEQUENCE asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// `(table, column)`, or none.
    OwnedBy(Option<(String, String)>),
    /// The next value; `None`: START.
    Restart(Option<i64>),
    /// SET SCHEMA: the schema's name.
    SetSchema(String),
}

fn unsupported(clause: &str) -> TableError {
    TableError::Column {
        code: "0A000",
        message: format!(
            "ALTER SEQUENCE … {clause} is not supported: tierdb alters a sequence with \
             OWNED BY table.column | NONE, RESTART [WITH n] (setval changes its value) and \
             SET SCHEMA s"
        ),
    }
}

/// Reads `clause` (module doc).
pub(crate) fn change(clause: &str) -> Result<Change> {
    let dialect = PostgreSqlDialect {};
    let mut p = Parser::new(&dialect)
        .try_with_sql(clause)
        .map_err(|_| unsupported(clause))?;
    let change = if p.parse_keywords(&[Keyword::OWNED, Keyword::BY]) {
        if p.parse_keyword(Keyword::NONE) {
            Change::OwnedBy(None)
        } else {
            let name: ObjectName = p
                .parse_object_name(false)
                .map_err(|_| unsupported(clause))?;
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(super::ident_name))
                .collect();
            match parts.as_slice() {
                [t, c] => Change::OwnedBy(Some((t.clone(), c.clone()))),
                [s, t, c] => Change::OwnedBy(Some((super::qualified(s, t), c.clone()))),
                _ => {
                    return Err(TableError::Column {
                        code: "42P01",
                        message: format!(
                            "ALTER SEQUENCE … OWNED BY {name}: name a column as table.column"
                        ),
                    });
                }
            }
        }
    } else if p.parse_keywords(&[Keyword::SET, Keyword::SCHEMA]) {
        match p.parse_identifier() {
            Ok(id) => Change::SetSchema(super::ident_name(&id)),
            Err(_) => return Err(unsupported(clause)),
        }
    } else if p.parse_keyword(Keyword::RESTART) {
        let _ = p.parse_keyword(Keyword::WITH);
        if p.peek_token().token == Token::EOF {
            Change::Restart(None)
        } else {
            let negative = p.consume_token(&Token::Minus);
            let n = match p.next_token().token {
                Token::Number(n, _) => n.parse::<i64>().map_err(|_| unsupported(clause))?,
                _ => return Err(unsupported(clause)),
            };
            Change::Restart(Some(if negative { -n } else { n }))
        }
    } else {
        return Err(unsupported(clause));
    };
    if p.peek_token().token != Token::EOF {
        return Err(unsupported(clause));
    }
    Ok(change)
}

/// Carries out `ALTER SEQUENCE name clause`.
pub(crate) async fn run(tables: &Tables, name: &str, clause: &str) -> Result<()> {
    let dialect = PostgreSqlDialect {};
    let seq_name = Parser::new(&dialect)
        .try_with_sql(name)
        .and_then(|mut p| p.parse_object_name(false))
        .ok()
        .and_then(|n| super::relation_name(&n))
        .ok_or_else(|| TableError::Column {
            code: "42P01",
            message: format!("relation \"{name}\" does not exist"),
        })?;
    match change(clause)? {
        Change::OwnedBy(owner) => tables.set_sequence_owner(&seq_name, owner).await,
        Change::SetSchema(schema) => tables
            .set_schema(
                crate::setschema::RelationKind::Sequence,
                &seq_name,
                &schema,
                false,
            )
            .await
            .map(|_| ()),
        Change::Restart(value) => {
            let def = tables
                .sequence(&seq_name)
                .await?
                .ok_or_else(|| TableError::Column {
                    code: "42P01",
                    message: format!("relation \"{seq_name}\" does not exist"),
                })?;
            tables
                .setval(&seq_name, value.unwrap_or(def.start), false)
                .await
                .map(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alter_sequence_becomes_a_call_and_other_statements_stay() {
        assert_eq!(
            rewrite("ALTER SEQUENCE public.t_id_seq OWNED BY public.t.id;"),
            "CALL tierdb_alter_sequence('public.t_id_seq', 'OWNED BY public.t.id');"
        );
        assert_eq!(
            rewrite("alter sequence \"S\" restart with 5"),
            "CALL tierdb_alter_sequence('\"S\"', 'restart with 5')"
        );
        assert_eq!(
            rewrite("SELECT 1; ALTER SEQUENCE IF EXISTS s OWNED BY NONE; SELECT 'sequence'"),
            "SELECT 1; CALL tierdb_alter_sequence('s', 'OWNED BY NONE'); SELECT 'sequence'"
        );
        let plain = "CREATE SEQUENCE s INCREMENT BY 2 START WITH 3";
        assert!(matches!(rewrite(plain), Cow::Borrowed(_)));
    }

    #[test]
    fn create_sequence_options_are_put_in_the_parsers_order() {
        // pg_dump 15's text.
        assert_eq!(
            rewrite(
                "CREATE SEQUENCE public.t_id_seq\n    AS integer\n    START WITH 1\n    \
                 INCREMENT BY 1\n    NO MINVALUE\n    NO MAXVALUE\n    CACHE 1;"
            ),
            "CREATE SEQUENCE public.t_id_seq\n    AS integer INCREMENT BY 1 NO MINVALUE \
             NO MAXVALUE START WITH 1 CACHE 1;"
        );
        assert_eq!(
            rewrite("create sequence start cycle start 5 maxvalue 9"),
            "create sequence start maxvalue 9 start 5 cycle"
        );
    }

    #[test]
    fn clauses_are_read_or_refused() {
        assert_eq!(
            change("OWNED BY public.t.id").unwrap(),
            Change::OwnedBy(Some(("t".into(), "id".into())))
        );
        assert_eq!(
            change("OWNED BY \"T\".\"Id\"").unwrap(),
            Change::OwnedBy(Some(("T".into(), "Id".into())))
        );
        assert_eq!(change("owned by none").unwrap(), Change::OwnedBy(None));
        assert_eq!(change("RESTART").unwrap(), Change::Restart(None));
        assert_eq!(
            change("RESTART WITH -4").unwrap(),
            Change::Restart(Some(-4))
        );
        assert_eq!(change("restart 9").unwrap(), Change::Restart(Some(9)));
        for bad in [
            "INCREMENT BY 2",
            "OWNED BY t",
            "RESTART WITH x",
            "RESTART 1 CYCLE",
        ] {
            assert!(change(bad).is_err(), "{bad}");
        }
    }
}
