//! PostgreSQL's system views as PostgreSQL defines them: queries over the catalog tables
//! (`pg_class`, `pg_namespace`, `pg_attribute`, `pg_index`, `pg_sequence`, …) put in place
//! of the relation wherever a statement names one. The catalog they read is
//! datafusion-pg-catalog's with tierdb's rows in it (declared types, keys, indexes,
//! sequences, views: `declared.rs`, `keys.rs`, `sequences.rs`): no second catalog.
//!
//! | relation | why it is replaced |
//! |---|---|
//! | `information_schema.columns` | DataFusion's names Arrow types (`Utf8`, `Int32`) and has 15 of PostgreSQL's 44 columns: dbt's `get_columns_in_relation`, Grafana, Metabase and DBeaver read `data_type`, `udt_name`, `character_maximum_length` |
//! | `information_schema.views` | DataFusion's has other columns (`definition`, no `view_definition`) and lists every table |
//! | `information_schema.sequences` | absent |
//! | `information_schema.table_constraints`, `key_column_usage` | absent (TypeORM, Prisma, Metabase, DBeaver and schema-diff tools read a table's keys from them) |
//! | `pg_tables` | datafusion-pg-catalog's lists views as tables, names `hasindexes` `hasindex` and shows no table as having an index (dbt lists relations from `pg_tables` and `pg_views`) |
//! | `pg_views` | datafusion-pg-catalog's is empty |
//! | `pg_indexes` | absent (psql users, Grafana, ORMs' index introspection) |
//! | `pg_sequences` | absent |
//!
//! DataFusion answers `information_schema` names itself before any catalog is asked, and
//! `pg_catalog`'s relations are datafusion-pg-catalog's, so the server replaces the
//! relation in the statement by its query (the statement then reads `pg_catalog` and gets
//! the catalog rewrites, `catalogsql.rs`).
//!
//! Invariants:
//! 1. Only a relation named as in the table (any case, quoted or not; the `pg_catalog.`
//!    ones also unqualified, since PostgreSQL searches `pg_catalog` first) is replaced,
//!    keeping its alias (else it is named as the relation, so `pg_tables.tablename` still
//!    resolves).
//! 2. Every column has PostgreSQL's type class (text, integer, bigint or boolean) even when
//!    NULL for all rows, so a client decodes it as it would PostgreSQL's.
//! 3. No query names a replaced relation, so one pass replaces everything.
//! 4. What tierdb does not keep is answered as PostgreSQL answers an object without it:
//!    no tablespace (NULL), no rules, triggers or row security (false), views not
//!    updatable (`NO`: tierdb's views are read-only). `pg_sequences.last_value` is NULL,
//!    as PostgreSQL shows it to a role without the privilege: the value is per process
//!    here (`SELECT last_value FROM <sequence>` reads it).

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

/// PostgreSQL 15's `information_schema.views` (invariant 4: not updatable).
const INFO_VIEWS: &str = "\
SELECT CAST(current_database() AS VARCHAR) AS table_catalog, \
 CAST(n.nspname AS VARCHAR) AS table_schema, \
 CAST(c.relname AS VARCHAR) AS table_name, \
 CAST(d.definition AS VARCHAR) AS view_definition, \
 CAST('NONE' AS VARCHAR) AS check_option, \
 CAST('NO' AS VARCHAR) AS is_updatable, \
 CAST('NO' AS VARCHAR) AS is_insertable_into, \
 CAST('NO' AS VARCHAR) AS is_trigger_updatable, \
 CAST('NO' AS VARCHAR) AS is_trigger_deletable, \
 CAST('NO' AS VARCHAR) AS is_trigger_insertable_into \
FROM pg_catalog.pg_class c \
 JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
 LEFT JOIN pg_catalog.tierdb_viewdefs d ON d.oid = c.oid \
WHERE c.relkind = 'v' AND NOT pg_is_other_temp_schema(n.oid)";

/// PostgreSQL 15's `information_schema.sequences`: `_pg_numeric_precision` of the
/// sequence's type, its bounds and increment as text.
const INFO_SEQUENCES: &str = "\
SELECT CAST(current_database() AS VARCHAR) AS sequence_catalog, \
 CAST(n.nspname AS VARCHAR) AS sequence_schema, \
 CAST(c.relname AS VARCHAR) AS sequence_name, \
 CAST(format_type(s.seqtypid, NULL) AS VARCHAR) AS data_type, \
 CAST(CASE s.seqtypid WHEN 21 THEN 16 WHEN 23 THEN 32 ELSE 64 END AS INT) AS numeric_precision, \
 CAST(2 AS INT) AS numeric_precision_radix, \
 CAST(0 AS INT) AS numeric_scale, \
 CAST(CAST(s.seqstart AS BIGINT) AS VARCHAR) AS start_value, \
 CAST(CAST(s.seqmin AS BIGINT) AS VARCHAR) AS minimum_value, \
 CAST(CAST(s.seqmax AS BIGINT) AS VARCHAR) AS maximum_value, \
 CAST(CAST(s.seqincrement AS BIGINT) AS VARCHAR) AS increment, \
 CAST(CASE WHEN s.seqcycle THEN 'YES' ELSE 'NO' END AS VARCHAR) AS cycle_option \
FROM pg_catalog.pg_sequence s \
 JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid \
 JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
WHERE c.relkind = 'S'";

/// PostgreSQL 15's `information_schema.table_constraints`: the PRIMARY KEY and UNIQUE
/// constraints of `pg_constraint`, and a CHECK per NOT NULL column named as PostgreSQL
/// names it (`<schema oid>_<table oid>_<column number>_not_null`). tierdb has no
/// deferrable constraints and enforces every one it keeps.
const TABLE_CONSTRAINTS: &str = "\
SELECT CAST(current_database() AS VARCHAR) AS constraint_catalog, \
 CAST(u.nspname AS VARCHAR) AS constraint_schema, \
 CAST(u.conname AS VARCHAR) AS constraint_name, \
 CAST(current_database() AS VARCHAR) AS table_catalog, \
 CAST(u.nspname AS VARCHAR) AS table_schema, \
 CAST(u.relname AS VARCHAR) AS table_name, \
 CAST(CASE u.contype WHEN 'c' THEN 'CHECK' WHEN 'f' THEN 'FOREIGN KEY' \
   WHEN 'p' THEN 'PRIMARY KEY' WHEN 'u' THEN 'UNIQUE' END AS VARCHAR) AS constraint_type, \
 CAST('NO' AS VARCHAR) AS is_deferrable, \
 CAST('NO' AS VARCHAR) AS initially_deferred, \
 CAST('YES' AS VARCHAR) AS enforced, \
 CAST(CASE WHEN u.contype = 'u' THEN 'YES' END AS VARCHAR) AS nulls_distinct \
FROM (\
 SELECT n.nspname, k.conname, c.relname, k.contype \
 FROM pg_catalog.pg_constraint k \
  JOIN pg_catalog.pg_class c ON c.oid = k.conrelid \
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
 WHERE k.contype IN ('c', 'f', 'p', 'u') AND c.relkind IN ('r', 'p') \
  AND NOT pg_is_other_temp_schema(n.oid) \
 UNION ALL \
 SELECT n.nspname, \
  CAST(n.oid AS VARCHAR) || '_' || CAST(c.oid AS VARCHAR) || '_' \
   || CAST(a.attnum AS VARCHAR) || '_not_null', \
  c.relname, 'c' \
 FROM pg_catalog.pg_attribute a \
  JOIN pg_catalog.pg_class c ON a.attrelid = c.oid \
  JOIN pg_catalog.pg_namespace n ON c.relnamespace = n.oid \
 WHERE a.attnotnull AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p') \
  AND NOT pg_is_other_temp_schema(n.oid)) u";

/// PostgreSQL 15's `information_schema.key_column_usage`: a row per column of each
/// PRIMARY KEY, UNIQUE and FOREIGN KEY constraint, numbered by its place in the key
/// (`conkey`), as ORMs and schema tools read a table's keys.
const KEY_COLUMN_USAGE: &str = "\
SELECT CAST(current_database() AS VARCHAR) AS constraint_catalog, \
 CAST(n.nspname AS VARCHAR) AS constraint_schema, \
 CAST(k.conname AS VARCHAR) AS constraint_name, \
 CAST(current_database() AS VARCHAR) AS table_catalog, \
 CAST(n.nspname AS VARCHAR) AS table_schema, \
 CAST(c.relname AS VARCHAR) AS table_name, \
 CAST(a.attname AS VARCHAR) AS column_name, \
 CAST(array_position(k.conkey, a.attnum) AS INT) AS ordinal_position, \
 CAST(NULL AS INT) AS position_in_unique_constraint \
FROM pg_catalog.pg_constraint k \
 JOIN pg_catalog.pg_class c ON c.oid = k.conrelid \
 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
 JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND array_has(k.conkey, a.attnum) \
WHERE k.contype IN ('p', 'u', 'f') AND c.relkind IN ('r', 'p') \
 AND NOT pg_is_other_temp_schema(n.oid)";

/// PostgreSQL 15's `pg_tables`: tables (`r`, `p`), not views.
const PG_TABLES: &str = "\
SELECT CAST(n.nspname AS VARCHAR) AS schemaname, \
 CAST(c.relname AS VARCHAR) AS tablename, \
 CAST(pg_get_userbyid(c.relowner) AS VARCHAR) AS tableowner, \
 CAST(NULL AS VARCHAR) AS tablespace, \
 CAST(c.relhasindex AS BOOLEAN) AS hasindexes, \
 CAST(false AS BOOLEAN) AS hasrules, \
 CAST(false AS BOOLEAN) AS hastriggers, \
 CAST(false AS BOOLEAN) AS rowsecurity \
FROM pg_catalog.pg_class c \
 LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE c.relkind IN ('r', 'p')";

/// PostgreSQL 15's `pg_views`.
const PG_VIEWS: &str = "\
SELECT CAST(n.nspname AS VARCHAR) AS schemaname, \
 CAST(c.relname AS VARCHAR) AS viewname, \
 CAST(pg_get_userbyid(c.relowner) AS VARCHAR) AS viewowner, \
 CAST(d.definition AS VARCHAR) AS definition \
FROM pg_catalog.pg_class c \
 LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
 LEFT JOIN pg_catalog.tierdb_viewdefs d ON d.oid = c.oid \
WHERE c.relkind = 'v'";

/// PostgreSQL 15's `pg_indexes`: each index with its table and `pg_get_indexdef`.
const PG_INDEXES: &str = "\
SELECT CAST(n.nspname AS VARCHAR) AS schemaname, \
 CAST(c.relname AS VARCHAR) AS tablename, \
 CAST(i.relname AS VARCHAR) AS indexname, \
 CAST(NULL AS VARCHAR) AS tablespace, \
 CAST(pg_get_indexdef(i.oid) AS VARCHAR) AS indexdef \
FROM pg_catalog.pg_index x \
 JOIN pg_catalog.pg_class c ON c.oid = x.indrelid \
 JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
 LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE c.relkind IN ('r', 'm', 'p') AND i.relkind IN ('i', 'I')";

/// PostgreSQL 15's `pg_sequences` (invariant 4 for `last_value`).
const PG_SEQUENCES: &str = "\
SELECT CAST(n.nspname AS VARCHAR) AS schemaname, \
 CAST(c.relname AS VARCHAR) AS sequencename, \
 CAST(pg_get_userbyid(c.relowner) AS VARCHAR) AS sequenceowner, \
 CAST(format_type(s.seqtypid, NULL) AS VARCHAR) AS data_type, \
 CAST(s.seqstart AS BIGINT) AS start_value, \
 CAST(s.seqmin AS BIGINT) AS min_value, \
 CAST(s.seqmax AS BIGINT) AS max_value, \
 CAST(s.seqincrement AS BIGINT) AS increment_by, \
 CAST(s.seqcycle AS BOOLEAN) AS cycle, \
 CAST(s.seqcache AS BIGINT) AS cache_size, \
 CAST(NULL AS BIGINT) AS last_value \
FROM pg_catalog.pg_sequence s \
 JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid \
 LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE c.relkind = 'S'";

/// The replaced relations (invariant 1): schema, name, whether the name alone also
/// names it, its query.
const VIEWS: [(&str, &str, bool, &str); 9] = [
    ("information_schema", "columns", false, COLUMNS),
    (
        "information_schema",
        "table_constraints",
        false,
        TABLE_CONSTRAINTS,
    ),
    (
        "information_schema",
        "key_column_usage",
        false,
        KEY_COLUMN_USAGE,
    ),
    ("information_schema", "views", false, INFO_VIEWS),
    ("information_schema", "sequences", false, INFO_SEQUENCES),
    ("pg_catalog", "pg_tables", true, PG_TABLES),
    ("pg_catalog", "pg_views", true, PG_VIEWS),
    ("pg_catalog", "pg_indexes", true, PG_INDEXES),
    ("pg_catalog", "pg_sequences", true, PG_SEQUENCES),
];

/// Whether `sql` may name a replaced relation (a cheap test before parsing the rewrite).
pub(crate) fn may_name(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    lower.contains("information_schema")
        || VIEWS
            .iter()
            .any(|(_, name, bare, _)| *bare && lower.contains(name))
}

/// Replaces every relation of [`VIEWS`] in `stmt` by its query (invariant 1); whether it
/// did.
pub(crate) fn rewrite(stmt: &mut Statement) -> bool {
    struct Replace(bool);
    impl VisitorMut for Replace {
        type Break = ();
        fn pre_visit_table_factor(
            &mut self,
            factor: &mut TableFactor,
        ) -> std::ops::ControlFlow<()> {
            if let TableFactor::Table { name, alias, .. } = factor
                && let Some(relation) = replaced(name)
                && let Some(subquery) = query(VIEWS[relation].3)
            {
                let alias = alias.take().unwrap_or(TableAlias {
                    explicit: true,
                    name: Ident::new(VIEWS[relation].1),
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

/// The index in [`VIEWS`] of the relation `name` names, if it is one of them.
fn replaced(name: &ObjectName) -> Option<usize> {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.to_lowercase()))
        .collect();
    if parts.len() != name.0.len() {
        return None;
    }
    VIEWS
        .iter()
        .position(|(schema, relation, bare, _)| match parts.as_slice() {
            [s, t] => s == schema && t == relation,
            [t] => *bare && t == relation,
            _ => false,
        })
}

fn query(sql: &str) -> Option<datafusion::sql::sqlparser::ast::Query> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
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
    fn every_view_parses_and_names_no_replaced_relation() {
        for (schema, name, _, sql) in VIEWS {
            let q = query(sql).unwrap_or_else(|| panic!("{schema}.{name} does not parse"));
            // Invariant 3.
            let mut s = Statement::Query(Box::new(q));
            assert!(
                !rewrite(&mut s),
                "{schema}.{name} names a replaced relation"
            );
        }
    }

    #[test]
    fn catalog_views_are_replaced_qualified_or_not() {
        for sql in [
            "SELECT indexname FROM pg_indexes WHERE tablename = 't'",
            "SELECT indexname FROM pg_catalog.pg_indexes WHERE tablename = 't'",
            "SELECT indexname FROM PG_CATALOG.\"pg_indexes\"",
        ] {
            let mut s = parse(sql);
            assert!(rewrite(&mut s), "{sql}");
            let text = s.to_string();
            assert!(text.contains("pg_catalog.pg_index x"), "{text}");
            assert!(text.contains(") AS pg_indexes"), "{text}");
        }
        let mut s = parse("SELECT t.tablename FROM pg_tables t JOIN pg_views v ON true");
        assert!(rewrite(&mut s));
        let text = s.to_string();
        assert!(text.contains(") t JOIN ("), "{text}");
        assert!(text.contains("relkind = 'v') v ON true"), "{text}");
        assert!(may_name("select * from PG_SEQUENCES"));
        assert!(!may_name("select * from pg_class"));
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
            "SELECT * FROM public.pg_indexes",
            "SELECT * FROM views",
            "SELECT * FROM db.pg_catalog.pg_tables",
        ] {
            let mut s = parse(sql);
            assert!(!rewrite(&mut s), "{sql}");
            assert_eq!(s.to_string(), sql);
        }
    }
}
