//! `information_schema.columns` as PostgreSQL defines it: a view over the catalog
//! (`pg_attribute`, `pg_class`, `pg_namespace`, `pg_type`, `pg_attrdef`), with
//! PostgreSQL's 44 columns and its type names (`character varying`, `integer`,
//! `timestamp with time zone`), lengths, precisions and `udt_name`s.
//!
//! DataFusion's own `information_schema.columns` names Arrow types (`Utf8`, `Int32`) and
//! has 15 of the columns, so tools that read `data_type`, `udt_name` or
//! `character_maximum_length` (dbt's `get_columns_in_relation`, Grafana, Metabase,
//! DBeaver) saw other answers than PostgreSQL's. DataFusion answers `information_schema`
//! names itself before any catalog is asked, so the server replaces the relation in the
//! statement by this query (then the statement reads `pg_catalog` and gets the catalog
//! rewrites, `catalogsql.rs`). The catalog it reads is datafusion-pg-catalog's, with
//! tierdb's declared types and typmods (`declared.rs`): no second catalog.
//!
//! Invariants:
//! 1. Only a relation named `information_schema.columns` (any case, quoted or not) is
//!    replaced, keeping its alias (else it is named `columns`, as before).
//! 2. Every column has PostgreSQL's type class (text or integer) even when NULL for all
//!    rows, so a client decodes it as it would PostgreSQL's.

use datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, Statement, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// PostgreSQL 15's `information_schema.columns`, over the catalog tables. The numbers are
/// PostgreSQL's: `_pg_char_max_length` (typmod − 4 of varchar and bpchar),
/// `_pg_char_octet_length` (4 bytes a character in UTF-8; 1 GiB without a length),
/// `_pg_numeric_precision` and `_scale` (bits of the binary types; numeric's typmod − 4
/// split into precision << 16 | scale), `_pg_datetime_precision` (6 unless declared).
const COLUMNS: &str = "\
SELECT CAST(current_database() AS VARCHAR) AS table_catalog, \
 CAST(n.nspname AS VARCHAR) AS table_schema, \
 CAST(c.relname AS VARCHAR) AS table_name, \
 CAST(a.attname AS VARCHAR) AS column_name, \
 CAST(a.attnum AS INT) AS ordinal_position, \
 CAST(pg_get_expr(ad.adbin, ad.adrelid) AS VARCHAR) AS column_default, \
 CAST(CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END AS VARCHAR) AS is_nullable, \
 CAST(format_type(a.atttypid, NULL) AS VARCHAR) AS data_type, \
 CAST(CASE WHEN t.typname IN ('varchar', 'bpchar') AND a.atttypmod >= 4 \
   THEN a.atttypmod - 4 END AS INT) AS character_maximum_length, \
 CAST(CASE WHEN t.typname IN ('varchar', 'bpchar', 'text') THEN \
   CASE WHEN a.atttypmod >= 4 THEN (a.atttypmod - 4) * 4 ELSE 1073741824 END END AS INT) \
   AS character_octet_length, \
 CAST(CASE t.typname WHEN 'int2' THEN 16 WHEN 'int4' THEN 32 WHEN 'int8' THEN 64 \
   WHEN 'float4' THEN 24 WHEN 'float8' THEN 53 \
   WHEN 'numeric' THEN CASE WHEN a.atttypmod >= 4 THEN (a.atttypmod - 4) / 65536 END \
   END AS INT) AS numeric_precision, \
 CAST(CASE WHEN t.typname IN ('int2', 'int4', 'int8', 'float4', 'float8') THEN 2 \
   WHEN t.typname = 'numeric' THEN 10 END AS INT) AS numeric_precision_radix, \
 CAST(CASE WHEN t.typname IN ('int2', 'int4', 'int8') THEN 0 \
   WHEN t.typname = 'numeric' THEN CASE WHEN a.atttypmod >= 4 THEN (a.atttypmod - 4) % 65536 END \
   END AS INT) AS numeric_scale, \
 CAST(CASE WHEN t.typname = 'date' THEN 0 \
   WHEN t.typname IN ('time', 'timetz', 'timestamp', 'timestamptz', 'interval') THEN \
   CASE WHEN a.atttypmod < 0 THEN 6 ELSE a.atttypmod END END AS INT) AS datetime_precision, \
 CAST(NULL AS VARCHAR) AS interval_type, \
 CAST(NULL AS INT) AS interval_precision, \
 CAST(NULL AS VARCHAR) AS character_set_catalog, \
 CAST(NULL AS VARCHAR) AS character_set_schema, \
 CAST(NULL AS VARCHAR) AS character_set_name, \
 CAST(NULL AS VARCHAR) AS collation_catalog, \
 CAST(NULL AS VARCHAR) AS collation_schema, \
 CAST(NULL AS VARCHAR) AS collation_name, \
 CAST(NULL AS VARCHAR) AS domain_catalog, \
 CAST(NULL AS VARCHAR) AS domain_schema, \
 CAST(NULL AS VARCHAR) AS domain_name, \
 CAST(current_database() AS VARCHAR) AS udt_catalog, \
 CAST('pg_catalog' AS VARCHAR) AS udt_schema, \
 CAST(t.typname AS VARCHAR) AS udt_name, \
 CAST(NULL AS VARCHAR) AS scope_catalog, \
 CAST(NULL AS VARCHAR) AS scope_schema, \
 CAST(NULL AS VARCHAR) AS scope_name, \
 CAST(NULL AS INT) AS maximum_cardinality, \
 CAST(CAST(a.attnum AS VARCHAR) AS VARCHAR) AS dtd_identifier, \
 CAST('NO' AS VARCHAR) AS is_self_referencing, \
 CAST('NO' AS VARCHAR) AS is_identity, \
 CAST(NULL AS VARCHAR) AS identity_generation, \
 CAST(NULL AS VARCHAR) AS identity_start, \
 CAST(NULL AS VARCHAR) AS identity_increment, \
 CAST(NULL AS VARCHAR) AS identity_maximum, \
 CAST(NULL AS VARCHAR) AS identity_minimum, \
 CAST('NO' AS VARCHAR) AS identity_cycle, \
 CAST('NEVER' AS VARCHAR) AS is_generated, \
 CAST(NULL AS VARCHAR) AS generation_expression, \
 CAST(CASE WHEN c.relkind IN ('r', 'p') THEN 'YES' ELSE 'NO' END AS VARCHAR) AS is_updatable \
FROM pg_catalog.pg_attribute a \
 JOIN pg_catalog.pg_class c ON a.attrelid = c.oid \
 JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
 JOIN pg_catalog.pg_type t ON a.atttypid = t.oid \
 LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum \
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'v', 'f', 'p')";

/// Replaces every `information_schema.columns` in `stmt` (invariant 1); whether it did.
pub(crate) fn rewrite(stmt: &mut Statement) -> bool {
    struct Replace(bool);
    impl VisitorMut for Replace {
        type Break = ();
        fn pre_visit_table_factor(
            &mut self,
            factor: &mut TableFactor,
        ) -> std::ops::ControlFlow<()> {
            if let TableFactor::Table { name, alias, .. } = factor
                && is_columns(name)
                && let Some(subquery) = columns_query()
            {
                let alias = alias.take().unwrap_or(TableAlias {
                    explicit: true,
                    name: Ident::new("columns"),
                    columns: vec![],
                    at: None,
                });
                *factor = TableFactor::Derived {
                    lateral: false,
                    subquery: Box::new(subquery),
                    alias: Some(alias),
                    sample: None,
                };
                self.0 = true;
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut v = Replace(false);
    let _ = stmt.visit(&mut v);
    v.0
}

fn is_columns(name: &ObjectName) -> bool {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
        .collect();
    matches!(parts.as_slice(), [s, t] if s == "information_schema" && t == "columns")
}

fn columns_query() -> Option<datafusion::sql::sqlparser::ast::Query> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(COLUMNS)
        .and_then(|mut p| p.parse_query())
        .ok()
        .map(|q| *q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Statement {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_statement()
            .unwrap()
    }

    #[test]
    fn the_view_parses() {
        assert!(columns_query().is_some());
    }

    #[test]
    fn information_schema_columns_becomes_the_view_keeping_its_alias() {
        let mut s = parse(
            "SELECT column_name, data_type FROM information_schema.columns \
             WHERE table_name = 't' ORDER BY ordinal_position",
        );
        assert!(rewrite(&mut s));
        let text = s.to_string();
        assert!(text.contains("pg_catalog.pg_attribute"), "{text}");
        assert!(
            text.contains(") AS columns WHERE table_name = 't'"),
            "{text}"
        );
        let mut s = parse("SELECT c.udt_name FROM INFORMATION_SCHEMA.\"columns\" c");
        assert!(rewrite(&mut s));
        assert!(s.to_string().contains(") AS c"), "{s}");
    }

    #[test]
    fn other_relations_stay() {
        for sql in [
            "SELECT * FROM information_schema.tables",
            "SELECT * FROM columns",
            "SELECT * FROM public.columns",
        ] {
            let mut s = parse(sql);
            assert!(!rewrite(&mut s), "{sql}");
            assert_eq!(s.to_string(), sql);
        }
    }
}
