use super::*;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

fn parse(sql: &str) -> Statement {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .unwrap()
        .parse_statement()
        .unwrap()
}

fn names(sql: &str) -> Vec<Option<String>> {
    of_statement(&parse(sql)).unwrap().front
}

// The names PostgreSQL 15 gives these (python/tests/test_types.py checks more on the wire).
#[test]
fn expressions_are_named_as_postgresql_names_them() {
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        names(
            "SELECT count(*), 1 + 1, 'a'::text, '{}'::jsonb::text, CAST(b AS bigint), \
             coalesce(b, 0), CASE WHEN b > 0 THEN 1 END, CASE WHEN b > 0 THEN 1 ELSE b END, \
             1::integer, x.y, b, \"Q\"(1), (SELECT max(v) FROM t), EXISTS (SELECT 1), \
             date '2024-01-01', interval '1 day', 2.5::double precision, b AS named, \
             EXISTS (SELECT 1)::int, \"B\" \
             FROM x"
        ),
        vec![
            s("count"),
            s("?column?"),
            s("text"),
            s("text"),
            s("b"),
            s("coalesce"),
            s("case"),
            s("b"),
            s("int4"),
            s("y"),
            s("b"),
            s("Q"),
            s("max"),
            s("exists"),
            s("date"),
            s("interval"),
            s("float8"),
            None,
            s("exists"),
            s("B"),
        ]
    );
    // A UNION is named by its first branch.
    assert_eq!(names("SELECT 1 UNION SELECT 2 AS x"), vec![s("?column?")]);
    // Casts to UUID and JSONB as the parser rewrites them.
    assert_eq!(
        names("SELECT tierdb_jsonb('{}'), tierdb_uuid(u), tierdb_json(tierdb_jsonb(j)) FROM t"),
        vec![s("jsonb"), s("u"), s("j")]
    );
}

#[test]
fn repeated_result_names_are_aliased_apart() {
    let mut stmt = DfStatement::Statement(Box::new(parse(
        "SELECT i, CAST(i AS bigint), count(*) AS i_2, i FROM t UNION SELECT 1, 2, 3, 4",
    )));
    assert!(unique_result_names(&mut stmt));
    assert_eq!(
        stmt.to_string(),
        "SELECT i AS \"i\", CAST(i AS BIGINT) AS \"i_3\", count(*) AS i_2, i AS \"i_4\" FROM t \
         UNION SELECT 1 AS \"?column?\", 2 AS \"?column?_2\", 3 AS \"?column?_3\", \
         4 AS \"?column?_4\""
    );
    let mut stmt = DfStatement::Statement(Box::new(parse("INSERT INTO t VALUES (1)")));
    assert!(!unique_result_names(&mut stmt));
    // Inside: only the SELECT that repeats a name.
    let mut stmt = DfStatement::Statement(Box::new(parse(
        "INSERT INTO t SELECT c, c FROM (SELECT a AS c, b FROM s) x",
    )));
    assert!(unique_result_names(&mut stmt));
    assert_eq!(
        stmt.to_string(),
        "INSERT INTO t SELECT c AS \"c\", c AS \"c_2\" FROM (SELECT a AS c, b FROM s) x"
    );
}
