use super::*;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use pgwire::api::Type;
use pgwire::api::results::FieldFormat;

fn names(sql: &str) -> Names {
    let stmt = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .unwrap()
        .parse_statement()
        .unwrap();
    for_client(&stmt).unwrap()
}

fn renamed(n: &Names, fields: &[&str]) -> Vec<String> {
    let fields = fields
        .iter()
        .map(|name| FieldInfo::new(name.to_string(), None, None, Type::INT4, FieldFormat::Text))
        .collect();
    n.apply(fields)
        .iter()
        .map(|f| f.name().to_string())
        .collect()
}

#[test]
fn a_wildcard_keeps_datafusions_names_and_the_rest_match_from_both_ends() {
    let n = names("SELECT count(*), *, 1 + 1 FROM t");
    assert_eq!(
        renamed(&n, &["count(*)", "a", "b", "Int64(1) + Int64(1)"]),
        ["count", "a", "b", "?column?"]
    );
}

#[test]
fn repeats_aliased_apart_for_datafusion_reach_the_client_as_postgresql_names_them() {
    let n = names("SELECT i, CAST(i AS bigint) FROM t");
    assert_eq!(renamed(&n, &["i", "i_2"]), ["i", "i"]);
}

#[test]
fn counts_that_cannot_match_rename_nothing() {
    let n = names("SELECT count(*), 1 + 1 FROM t");
    assert_eq!(renamed(&n, &["count(*)"]), ["count(*)"]);
}

#[test]
fn catalog_queries_are_named_as_postgresql_names_them() {
    let n = names("SELECT count(*), c.relname, max(relpages) AS m FROM pg_catalog.pg_class c");
    assert_eq!(
        renamed(&n, &["count(*)", "relname", "m"]),
        ["count", "relname", "m"]
    );
}
