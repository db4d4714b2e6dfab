//! Constraint violations (SQLSTATE class 23) with the fields PostgreSQL sends beside the
//! message: DETAIL, and the schema, table, column and constraint names. Drivers and ORMs
//! read those fields rather than the message (Ecto maps a unique violation to a changeset
//! error by `constraint`, node-postgres and psycopg expose `detail` and `constraint_name`),
//! so they must be separate fields on the wire, not words in the message.
//!
//! Invariants:
//!
//! 1. `message` is PostgreSQL's primary message, word for word; `detail` is its DETAIL line.
//! 2. Names are unqualified, as PostgreSQL sends them: a table `s.t` is schema `s`, table
//!    `t`; its primary key is `t_pkey`.
//! 3. Where the error is only printed (the `tierdb sql` CLI, logs), its text is the message
//!    and the detail together ([`std::fmt::Display`]), so nothing is lost there either.

use datafusion::common::ScalarValue;

use crate::catalog::TableDef;
use crate::sql::split_qualified;

/// One violated constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// 23505 unique_violation, 23502 not_null_violation.
    pub code: &'static str,
    pub message: String,
    pub detail: Option<String>,
    pub schema: String,
    pub table: String,
    pub column: Option<String>,
    pub constraint: Option<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{}: {d}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A key (primary or of a unique index named `constraint`) that another row already has:
/// 23505 with PostgreSQL's DETAIL `Key (a, b)=(1, x) already exists.`.
pub fn unique(
    def: &TableDef,
    constraint: &str,
    columns: &[&str],
    values: &[&ScalarValue],
) -> Violation {
    let (schema, table) = split_qualified(&def.name);
    // An index in schema `s` is named `s.i` in the catalog; PostgreSQL names it `i`.
    let constraint = split_qualified(constraint).1;
    let values: Vec<String> = values.iter().map(|v| key_text(v)).collect();
    Violation {
        code: "23505",
        message: format!("duplicate key value violates unique constraint \"{constraint}\""),
        detail: Some(format!(
            "Key ({})=({}) already exists.",
            columns.join(", "),
            values.join(", ")
        )),
        schema: schema.to_string(),
        table: table.to_string(),
        column: None,
        constraint: Some(constraint.to_string()),
    }
}

/// The name PostgreSQL gives a table's primary key: `<table>_pkey`, without the schema.
pub fn primary_key_name(def: &TableDef) -> String {
    format!("{}_pkey", split_qualified(&def.name).1)
}

/// NULL written into NOT NULL `column`: 23502.
pub fn not_null(def: &TableDef, column: &str) -> Violation {
    let (schema, table) = split_qualified(&def.name);
    Violation {
        code: "23502",
        message: format!(
            "null value in column \"{column}\" of relation \"{table}\" violates not-null \
             constraint"
        ),
        detail: None,
        schema: schema.to_string(),
        table: table.to_string(),
        column: Some(column.to_string()),
        constraint: None,
    }
}

/// A key value as PostgreSQL prints it in DETAIL: the value's text, `null` for NULL; an
/// unconstrained NUMERIC's without the fraction's trailing zeros, as the server shows it.
fn key_text(v: &ScalarValue) -> String {
    match v {
        _ if v.is_null() => "null".into(),
        ScalarValue::Decimal256(_, crate::catalog::MAX_NUMERIC_PRECISION, s) if *s > 0 => {
            let t = v.to_string();
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ColumnDef, ColumnType};

    fn def(name: &str) -> TableDef {
        TableDef {
            id: 1,
            name: name.into(),
            columns: vec![ColumnDef {
                name: "id".into(),
                ty: ColumnType::Int32,
                nullable: false,
            }],
            sort_key: vec![],
            partition_key: None,
            created_ms: 0,
            dropped: vec![],
            primary_key: vec!["id".into()],
            defaults: vec![],
            indexes: vec![],
            comments: Default::default(),
            missing: Vec::new(),
        }
    }

    #[test]
    fn unique_violations_are_postgresqls_message_and_detail() {
        let d = def("app.users");
        let v = unique(
            &d,
            &primary_key_name(&d),
            &["id", "email"],
            &[&ScalarValue::Int32(Some(7)), &ScalarValue::Utf8(None)],
        );
        assert_eq!(
            v.message,
            "duplicate key value violates unique constraint \"users_pkey\""
        );
        assert_eq!(
            v.detail.as_deref(),
            Some("Key (id, email)=(7, null) already exists.")
        );
        assert_eq!((v.schema.as_str(), v.table.as_str()), ("app", "users"));
        let wide = |n: i64| {
            let n = datafusion::arrow::datatypes::i256::from_i128(i128::from(n) * 10i128.pow(18));
            ScalarValue::Decimal256(Some(n), 76, 20)
        };
        assert_eq!(key_text(&wide(150)), "1.5");
        assert_eq!(key_text(&wide(-300)), "-3");
        assert_eq!(v.constraint.as_deref(), Some("users_pkey"));
        assert_eq!(
            v.to_string(),
            "duplicate key value violates unique constraint \"users_pkey\": \
             Key (id, email)=(7, null) already exists."
        );
    }

    #[test]
    fn not_null_violations_name_the_column_and_the_unqualified_table() {
        let v = not_null(&def("t"), "id");
        assert_eq!(
            v.message,
            "null value in column \"id\" of relation \"t\" violates not-null constraint"
        );
        assert_eq!(v.schema, "public");
        assert_eq!(v.column.as_deref(), Some("id"));
        assert_eq!(v.to_string(), v.message);
    }
}
