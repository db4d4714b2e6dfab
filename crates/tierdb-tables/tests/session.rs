//! The transaction rules a session keeps for every front end (`SqlSession`'s rules 1-4):
//! implicit transactions of a batch, aborting on any failure (planning, running, streaming
//! rows, or being dropped mid-statement), and the warnings of BEGIN/COMMIT misuse.

#![allow(clippy::unwrap_used)]

use crate::common;

use futures::StreamExt;
use tierdb_tables::sql::{Notice, Outcome, SqlSession, StatementKind};

async fn count(s: &SqlSession, table: &str) -> usize {
    let r = s
        .sql(&format!("SELECT * FROM {table}"))
        .await
        .unwrap()
        .remove(0);
    r.rows()
}

fn stmt(sql: &str) -> datafusion::sql::parser::Statement {
    tierdb_tables::sql::parse(sql).unwrap().remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_and_commit_misuse_leave_warnings_not_errors() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql("COMMIT").await.unwrap();
    assert_eq!(
        s.take_notices(),
        [Notice {
            code: "25P01",
            message: "there is no transaction in progress".into(),
            detail: None,
        }]
    );
    s.sql("BEGIN").await.unwrap();
    assert!(s.take_notices().is_empty());
    s.sql("BEGIN").await.unwrap();
    assert_eq!(s.take_notices()[0].code, "25001");
    s.sql("ROLLBACK").await.unwrap();
    s.sql("ROLLBACK").await.unwrap();
    assert_eq!(s.take_notices()[0].code, "25P01");
    assert!(s.take_notices().is_empty(), "taken once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_implicit_transaction() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql("CREATE TABLE t (x INT NOT NULL)").await.unwrap();
    let kinds = [StatementKind::Write, StatementKind::Write];
    let batch = s.begin_batch(&kinds);
    assert!(s.in_transaction());
    s.execute(stmt("INSERT INTO t VALUES (1)")).await.unwrap();
    assert!(s.execute(stmt("INSERT INTO t VALUES ('x')")).await.is_err());
    s.end_batch(batch, false).await.unwrap();
    assert!(!s.in_transaction() && !s.is_aborted());
    assert_eq!(
        count(&s, "t").await,
        0,
        "nothing of a failed batch is committed"
    );
    // A batch with its own BEGIN is not implicit; a single statement neither.
    let batch = s.begin_batch(&[StatementKind::Begin, StatementKind::Write]);
    assert!(!s.in_transaction());
    s.end_batch(batch, true).await.unwrap();
    let batch = s.begin_batch(&[StatementKind::Write]);
    assert!(!s.in_transaction());
    s.end_batch(batch, true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_abandoned_statement_aborts_the_transaction() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql("CREATE TABLE t (x INT NOT NULL)").await.unwrap();

    // Planning fails.
    s.sql("BEGIN").await.unwrap();
    assert!(s.plan(&stmt("SELECT nope FROM t")).await.is_err());
    assert!(s.is_aborted());
    let e25 = s.sql("SELECT 1").await.unwrap_err();
    assert_eq!(e25.sqlstate(), "25P02");
    assert_eq!(
        s.sql("COMMIT").await.unwrap()[0].command.as_deref(),
        Some("ROLLBACK")
    );

    // The statement is dropped before it finishes (a timeout, a cancel).
    s.sql("BEGIN").await.unwrap();
    {
        let run = s.execute_outcome(stmt("INSERT INTO t VALUES (1)"), None);
        drop(run); // never polled: dropped all the same
    }
    assert!(
        !s.is_aborted(),
        "an unpolled future did no work and is not a failure"
    );
    // Mid-way for sure: waiting for a row lock another session holds.
    let other = e.new_session();
    other
        .sql("CREATE TABLE r (id INT NOT NULL, PRIMARY KEY (id)); INSERT INTO r VALUES (1)")
        .await
        .unwrap();
    other.sql("BEGIN").await.unwrap();
    other.sql("DELETE FROM r WHERE id = 1").await.unwrap();
    let run = Box::pin(s.execute_outcome(stmt("DELETE FROM r WHERE id = 1"), None));
    let mut run = run;
    assert!(futures::poll!(&mut run).is_pending());
    drop(run);
    assert!(
        s.is_aborted(),
        "a statement dropped mid-way aborts the transaction"
    );
    s.sql("ROLLBACK").await.unwrap();
    other.sql("ROLLBACK").await.unwrap();

    // Its rows fail while they stream: integer overflow in the third row.
    s.sql("BEGIN").await.unwrap();
    s.sql("INSERT INTO t VALUES (1), (2), (2147483647)")
        .await
        .unwrap();
    let Outcome::Rows(rows) = s
        .execute_outcome(stmt("SELECT x + x FROM t"), None)
        .await
        .unwrap()
    else {
        panic!("rows expected")
    };
    assert!(!s.is_aborted());
    let mut stream = rows.execute_stream().await.unwrap();
    let mut failed = false;
    while let Some(b) = stream.next().await {
        failed |= b.is_err();
    }
    assert!(failed, "the overflow fails the stream");
    assert!(s.is_aborted(), "a failed row stream aborts the transaction");
    s.sql("ROLLBACK").await.unwrap();
    assert_eq!(count(&s, "t").await, 0);

    // Work a front end guards (binding parameters, a COPY's data) fails.
    s.sql("BEGIN").await.unwrap();
    let r: Result<(), &str> = s.guarded(async { Err("bad parameter") }).await;
    assert!(r.is_err() && s.is_aborted());
    s.sql("ROLLBACK").await.unwrap();
}

/// The column types a client is told (RowDescription from `Rows::schema`, Describe from
/// `described_schema` at Parse) are the types of the rows that follow. Type coercion
/// changed them after planning: `sum(CASE WHEN … THEN int_col ELSE 0 END)` was described as
/// BIGINT and computed as NUMERIC, and every client failed to read it (TPC-DS Q21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn described_column_types_are_the_types_of_the_rows() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql(
        "CREATE TABLE t (a INT, b INT, c BIGINT, d DECIMAL(7,2), f DOUBLE);
         INSERT INTO t VALUES (1, 2, 3, 1.50, 0.5), (-1, 5, 6, 2.25, 1.5), (NULL, NULL, NULL, NULL, NULL)",
    )
    .await
    .unwrap();
    let queries = [
        "SELECT sum(CASE WHEN a > 0 THEN b ELSE 0 END) FROM t",
        "SELECT * FROM (SELECT sum(CASE WHEN a > 0 THEN b ELSE 0 END) s, sum(b) s2 FROM t GROUP BY a) x \
         WHERE (CASE WHEN s > 0 THEN s2 / s ELSE NULL END) BETWEEN 0.5 AND 3",
        "SELECT (SELECT sum(c) FROM t), (SELECT sum(a) FROM t)",
        "SELECT sum(c) + 1, sum(a) * 2, avg(d), sum(d), coalesce(a, c) FROM t GROUP BY a, c",
        "SELECT CASE WHEN a > 0 THEN c ELSE d END, a + c, b * 1.5, f + a FROM t",
        "SELECT a FROM t UNION ALL SELECT c FROM t",
        "SELECT sum(x) FROM (SELECT CASE WHEN a IS NULL THEN 0 ELSE a END x FROM t) y",
    ];
    for q in queries {
        let prepared = s.plan(&stmt(q)).await.unwrap().unwrap();
        let described = s.described_schema(&prepared);
        let Outcome::Rows(rows) = s.execute_outcome(stmt(q), None).await.unwrap() else {
            panic!("{q}: no rows");
        };
        let told = rows.schema().as_arrow().clone();
        let batches = rows.collect().await.unwrap();
        let types = |schema: &datafusion::arrow::datatypes::Schema| {
            schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect::<Vec<_>>()
        };
        for b in &batches {
            assert_eq!(types(&told), types(&b.schema()), "RowDescription of {q}");
            assert_eq!(
                types(described.as_arrow()),
                types(&b.schema()),
                "Describe of {q}"
            );
        }
        assert!(!batches.is_empty(), "{q}");
    }
    // PostgreSQL's types for sum: BIGINT over INT, NUMERIC over BIGINT, however often the
    // plan is analyzed (it is twice: once to describe it, once to run it).
    let mut types = Vec::new();
    for q in [
        "SELECT sum(a) s1, sum(c) s2, sum(DISTINCT b) s3, (SELECT sum(b) FROM t) s4 FROM t",
        "SELECT sum(a) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM \
         (SELECT row_number() OVER () id, a FROM t) x",
    ] {
        let r = s.sql(q).await.unwrap().remove(0);
        types.extend(
            r.batches[0]
                .schema()
                .fields()
                .iter()
                .map(|f| f.data_type().to_string()),
        );
    }
    assert_eq!(
        types,
        ["Int64", "Decimal128(38, 0)", "Int64", "Int64", "Int64"]
    );
}

/// Each session's stop flag is the one its planning rules read, and its own: raising one
/// session's (as a statement timeout does) fails that session's planning at the next rule
/// and leaves another session's alone (invariant 1 of `interrupt.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_interrupt_stops_its_own_sessions_planning_only() {
    use tierdb_tables::interrupt::Interrupt;
    let (e, _) = common::engine(1000).await;
    let (a, b) = (e.new_session(), e.new_session());
    a.sql("CREATE TABLE i (k INT NOT NULL)").await.unwrap();
    a.interrupt().raise();
    let seen = |s: &SqlSession| {
        Interrupt::of(s.context().state().config_options())
            .unwrap()
            .raised()
    };
    assert!(seen(&a) && !seen(&b));
    // Planning of a query (rows are planned when they are asked for) fails on `a`'s flag.
    let Outcome::Rows(rows) = a
        .execute_outcome(stmt("SELECT k FROM i"), None)
        .await
        .unwrap()
    else {
        panic!("a query answers rows");
    };
    a.interrupt().raise(); // the statement's start cleared it; a timeout raises it now
    let err = rows.collect().await.unwrap_err();
    assert!(err.to_string().contains("interrupted"), "{err}");
    assert_eq!(count(&b, "i").await, 0);
    // The next statement of `a` starts with the flag cleared.
    assert_eq!(count(&a, "i").await, 0);
}

/// Temporary tables (`sql/temp.rs` invariants 1 and 2): one session's are not another's,
/// and one that would go past the query memory pool fails with 53200, leaving the table as
/// it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporary_tables_are_the_sessions_own_and_within_the_memory_pool() {
    let (e, _) = common::engine(1000).await;
    let a = e.new_session();
    let b = e.new_session();
    a.sql("CREATE TEMP TABLE t AS SELECT 1 AS x").await.unwrap();
    assert_eq!(count(&a, "t").await, 1);
    let err = b.sql("SELECT * FROM t").await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    b.sql("CREATE TEMP TABLE t AS SELECT 2 AS x UNION ALL SELECT 3")
        .await
        .unwrap();
    assert_eq!((count(&a, "t").await, count(&b, "t").await), (1, 2));
    // The engine's pool is 256 MiB (common::engine): 40 M BIGINTs are 320 MB.
    let err = a
        .sql("INSERT INTO t SELECT CAST(value AS INT) FROM generate_series(1, 80000000)")
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate(), "53200", "{err}");
    assert_eq!(count(&a, "t").await, 1, "nothing was added");
    a.sql("INSERT INTO t VALUES (7)").await.unwrap();
    assert_eq!(count(&a, "t").await, 2, "the reservation was given back");
    drop(a);
    let c = e.new_session();
    assert!(
        c.sql("SELECT * FROM t").await.is_err(),
        "gone with its session"
    );
}

/// DDL inside a transaction is undone by ROLLBACK (rule 2), stored tables' as temporary
/// ones', with no warning (`tests/ddl_rollback.rs` covers every kind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_in_a_transaction_is_undone_by_rollback() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql("BEGIN").await.unwrap();
    s.sql("CREATE TABLE d (x INT)").await.unwrap();
    s.sql("CREATE TEMP TABLE tt (x INT)").await.unwrap();
    assert!(s.take_notices().is_empty());
    assert_eq!(count(&s, "d").await, 0);
    s.sql("ROLLBACK").await.unwrap();
    assert!(s.sql("SELECT * FROM d").await.is_err(), "d is gone");
    assert!(s.sql("SELECT * FROM tt").await.is_err(), "tt is gone");
    assert!(s.take_notices().is_empty());
}

/// SET NOT NULL on a row table reads every committed row; a transaction that wrote a row
/// before the change (a NULL the ALTER could not see) cannot commit it after (40001).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_not_null_on_a_row_table_holds_for_rows_not_yet_committed() {
    let (e, _) = common::engine(1000).await;
    let a = e.new_session();
    let b = e.new_session();
    a.sql("CREATE TABLE r (id INT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    a.sql("INSERT INTO r VALUES (1, NULL), (2, 2)")
        .await
        .unwrap();
    let refused = a.sql("ALTER TABLE r ALTER COLUMN v SET NOT NULL").await;
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("contains null values"),
        "a committed NULL is found"
    );
    a.sql("UPDATE r SET v = 1 WHERE id = 1").await.unwrap();
    b.sql("BEGIN").await.unwrap();
    b.sql("INSERT INTO r VALUES (3, NULL)").await.unwrap();
    a.sql("ALTER TABLE r ALTER COLUMN v SET NOT NULL")
        .await
        .unwrap();
    let err = b.sql("COMMIT").await.unwrap_err();
    assert_eq!(err.sqlstate(), "40001", "{err}");
    assert_eq!(count(&a, "r").await, 2, "the NULL row was not committed");
    let err = a.sql("INSERT INTO r VALUES (4, NULL)").await.unwrap_err();
    assert_eq!(err.sqlstate(), "23502", "{err}");
}

/// `plancache.rs`: a prepared statement over a row table is planned once and its plan kept;
/// a definition committed by any session, or a change of this session's settings, makes it
/// plan again; a plan over a columnar table is never kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_plans_are_kept_until_a_definition_or_setting_changes() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    let other = e.new_session();
    s.sql("CREATE TABLE r (id INT PRIMARY KEY, n INT)")
        .await
        .unwrap();
    s.sql("CREATE TABLE c (id INT, n INT)").await.unwrap();
    let range = stmt("SELECT n FROM r WHERE id BETWEEN $1 AND $2");
    let cache = tierdb_tables::sql::PlanCache::default();
    let misses = |s: &SqlSession| s.plan_cache_stats().1;
    let hits = |s: &SqlSession| s.plan_cache_stats().0;
    for _ in 0..3 {
        assert!(s.plan_prepared(&range, &cache).await.unwrap().is_some());
    }
    assert_eq!((hits(&s), misses(&s)), (2, 1), "planned once, then kept");
    other.sql("ALTER TABLE r ADD COLUMN m INT").await.unwrap();
    s.plan_prepared(&range, &cache).await.unwrap();
    s.plan_prepared(&range, &cache).await.unwrap();
    assert_eq!(
        (hits(&s), misses(&s)),
        (3, 2),
        "planned again after ALTER TABLE"
    );
    s.settings_changed();
    s.plan_prepared(&range, &cache).await.unwrap();
    assert_eq!((hits(&s), misses(&s)), (3, 3), "planned again after SET");
    let columnar = stmt("SELECT n FROM c WHERE id BETWEEN $1 AND $2");
    let cache = tierdb_tables::sql::PlanCache::default();
    s.plan_prepared(&columnar, &cache).await.unwrap();
    s.plan_prepared(&columnar, &cache).await.unwrap();
    assert_eq!(
        (hits(&s), misses(&s)),
        (3, 5),
        "a columnar table's plan is never kept"
    );
}

/// `plancache.rs` invariant 5: from its second execution a prepared query over row tables
/// runs its kept optimized plan (the parameters bound into it) and reads the rows as they
/// are at each execution; a query calling `now()` or `random()` is never kept optimized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_queries_keep_their_optimized_plan_and_read_fresh_rows() {
    use datafusion::common::{ParamValues, ScalarValue};
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    let other = e.new_session();
    s.sql("CREATE TABLE r (id INT PRIMARY KEY, n INT)")
        .await
        .unwrap();
    s.sql("INSERT INTO r VALUES (1, 10), (2, 20), (3, 30)")
        .await
        .unwrap();
    let sum = stmt("SELECT sum(n) FROM r WHERE id BETWEEN $1 AND $2");
    let cache = tierdb_tables::sql::PlanCache::default();
    let run = |lo: i32, hi: Option<i32>| {
        let (s, sum, cache) = (&s, &sum, &cache);
        async move {
            let plan = s.plan_prepared(sum, cache).await.unwrap().unwrap();
            let values =
                ParamValues::from(vec![ScalarValue::Int32(Some(lo)), ScalarValue::Int32(hi)]);
            let bound = plan.replace_params_with_values(&values).unwrap();
            let Outcome::Rows(rows) = s.execute_outcome(sum.clone(), Some(bound)).await.unwrap()
            else {
                panic!("rows expected")
            };
            let batches = rows.collect().await.unwrap();
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string()
        }
    };
    assert!(run(1, Some(2)).await.contains("| 30 "));
    assert_eq!(s.plan_cache_optimized(), 0, "the first execution plans");
    assert!(run(2, Some(3)).await.contains("| 50 "));
    assert!(run(1, Some(3)).await.contains("| 60 "));
    assert_eq!(
        s.plan_cache_optimized(),
        2,
        "then the optimized plan is kept"
    );
    other.sql("INSERT INTO r VALUES (4, 40)").await.unwrap();
    assert!(
        run(1, Some(4)).await.contains("| 100 "),
        "rows as they are now"
    );
    assert!(
        !run(1, None).await.contains('0'),
        "NULL bound: no row, sum NULL"
    );
    assert_eq!(s.plan_cache_optimized(), 4);
    for sql in [
        "SELECT n FROM r WHERE id = $1 AND now() > '2000-01-01'::timestamptz",
        "SELECT n FROM r WHERE id > $1 AND random() < 2",
    ] {
        let q = stmt(sql);
        let cache = tierdb_tables::sql::PlanCache::default();
        for _ in 0..3 {
            let plan = s.plan_prepared(&q, &cache).await.unwrap().unwrap();
            assert!(plan.display().to_string() != "KeptOptimized", "{sql}");
        }
        assert_eq!(s.plan_cache_optimized(), 4, "not kept optimized: {sql}");
    }
}

/// DROP … CASCADE names the views it took with it, in PostgreSQL's words (checked with
/// psql against PostgreSQL 15): one view in the message, more as a count with a DETAIL
/// line each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_cascade_names_the_views_it_took() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql(
        "CREATE TABLE dt (a INT); CREATE VIEW dv AS SELECT a FROM dt; \
         CREATE VIEW dv2 AS SELECT a FROM dv; CREATE TABLE lone (a INT)",
    )
    .await
    .unwrap();
    s.sql("DROP TABLE lone CASCADE").await.unwrap();
    assert!(s.take_notices().is_empty(), "no view read it");
    s.sql("DROP TABLE dt CASCADE").await.unwrap();
    assert_eq!(
        s.take_notices(),
        [Notice {
            code: "00000",
            message: "drop cascades to 2 other objects".into(),
            detail: Some("drop cascades to view dv\ndrop cascades to view dv2".into()),
        }]
    );
    s.sql(
        "CREATE TABLE dt (a INT); CREATE VIEW dv AS SELECT a FROM dt; \
         CREATE VIEW dv2 AS SELECT a FROM dv",
    )
    .await
    .unwrap();
    s.sql("DROP VIEW dv CASCADE").await.unwrap();
    let n = s.take_notices();
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].message, "drop cascades to view dv2");
    assert_eq!(n[0].detail, None);
    assert_eq!(n[0].severity(), "NOTICE");
}

/// DROP SCHEMA … CASCADE names what it took as PostgreSQL 15 does (the strings psql
/// printed from it for the same statements): the schema's tables, views and sequences
/// (not a SERIAL column's, which goes with its table; not an index), and a view of
/// another schema that read one of them; `IF EXISTS` of a missing schema or view skips
/// with a notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_schema_cascade_names_what_it_took() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql(
        "CREATE SCHEMA s; CREATE TABLE s.t (id SERIAL PRIMARY KEY, v INT); \
         CREATE INDEX ti ON s.t (v); CREATE SEQUENCE s.q; CREATE VIEW s.v AS SELECT * FROM s.t; \
         CREATE TABLE s.u (a INT); CREATE VIEW pv AS SELECT * FROM s.u",
    )
    .await
    .unwrap();
    s.sql("DROP SCHEMA s CASCADE").await.unwrap();
    let n = s.take_notices();
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].message, "drop cascades to 5 other objects");
    // PostgreSQL lists them in its dependency order (t, q, v, u, pv); tierdb in creation
    // order, with ties by kind: the same lines.
    let mut lines: Vec<&str> = n[0].detail.as_deref().unwrap().lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "drop cascades to sequence s.q",
            "drop cascades to table s.t",
            "drop cascades to table s.u",
            "drop cascades to view pv",
            "drop cascades to view s.v",
        ]
    );
    s.sql("CREATE SCHEMA s; CREATE TABLE s.t (id INT); DROP SCHEMA s CASCADE")
        .await
        .unwrap();
    let n = s.take_notices();
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].message, "drop cascades to table s.t");
    assert_eq!(n[0].detail, None);
    s.sql("CREATE SCHEMA s; DROP SCHEMA s CASCADE")
        .await
        .unwrap();
    assert!(s.take_notices().is_empty());
    s.sql("DROP SCHEMA IF EXISTS s; DROP VIEW IF EXISTS nov")
        .await
        .unwrap();
    let n: Vec<String> = s.take_notices().into_iter().map(|n| n.message).collect();
    assert_eq!(
        n,
        [
            "schema \"s\" does not exist, skipping",
            "view \"nov\" does not exist, skipping"
        ]
    );
}

/// Every IF [NOT] EXISTS that skips says so, with the message psql printed from
/// PostgreSQL 15 for the same statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_exists_skips_say_so() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql(
        "CREATE TABLE ct (k INT PRIMARY KEY, a INT); CREATE SEQUENCE cs; CREATE INDEX ci ON ct (a)",
    )
    .await
    .unwrap();
    s.take_notices();
    for (sql, said) in [
        (
            "DROP SEQUENCE IF EXISTS nos",
            "sequence \"nos\" does not exist, skipping",
        ),
        (
            "DROP INDEX IF EXISTS noi",
            "index \"noi\" does not exist, skipping",
        ),
        (
            "ALTER TABLE IF EXISTS nt ADD COLUMN a INT",
            "relation \"nt\" does not exist, skipping",
        ),
        (
            "CREATE TABLE IF NOT EXISTS ct (a INT)",
            "relation \"ct\" already exists, skipping",
        ),
        (
            "CREATE INDEX IF NOT EXISTS ci ON ct (a)",
            "relation \"ci\" already exists, skipping",
        ),
        (
            "CREATE SEQUENCE IF NOT EXISTS cs",
            "relation \"cs\" already exists, skipping",
        ),
        (
            "ALTER TABLE ct ADD COLUMN IF NOT EXISTS a INT",
            "column \"a\" of relation \"ct\" already exists, skipping",
        ),
        (
            "ALTER TABLE ct DROP COLUMN IF EXISTS zz",
            "column \"zz\" of relation \"ct\" does not exist, skipping",
        ),
    ] {
        s.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let n: Vec<String> = s.take_notices().into_iter().map(|n| n.message).collect();
        assert_eq!(n, [said], "{sql}");
    }
}

/// ADD COLUMN … NOT NULL on a table with rows fails with 23502 as in PostgreSQL, for a
/// row table too (it was taken, and every later read of the table failed: "Column 'b' is
/// declared as non-nullable but contains null values"); on an empty table it is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_not_null_column_to_a_table_with_rows_is_refused() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql("CREATE TABLE an (k INT PRIMARY KEY, a INT); CREATE TABLE cn (a INT); CREATE TABLE en (k INT PRIMARY KEY)")
        .await
        .unwrap();
    s.sql("INSERT INTO an VALUES (1, 1); INSERT INTO cn VALUES (1)")
        .await
        .unwrap();
    for t in ["an", "cn"] {
        let err = s
            .sql(&format!("ALTER TABLE {t} ADD COLUMN b INT NOT NULL"))
            .await
            .unwrap_err();
        assert_eq!(err.sqlstate(), "23502", "{t}: {err}");
        assert!(
            err.to_string().contains(&format!(
                "column \"b\" of relation \"{t}\" contains null values"
            )),
            "{err}"
        );
        assert_eq!(
            s.sql(&format!("SELECT count(*) FROM {t}"))
                .await
                .unwrap()
                .len(),
            1,
            "{t} still reads"
        );
    }
    s.sql("ALTER TABLE en ADD COLUMN b INT NOT NULL; INSERT INTO en VALUES (1, 2)")
        .await
        .unwrap();
}

/// `plancache.rs` invariant 6: a prepared query over row tables keeps its physical plan,
/// and each execution binds a fresh copy to its values and transaction. Checked against the
/// same queries run unprepared (planned from their text, values written in) over random
/// ranges, as other sessions change the rows, inside a transaction that writes (its own
/// writes seen, then rolled back), and under REPEATABLE READ (its snapshot); a join
/// re-executed keeps no hash table from the execution before, a shared subplan no rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_physical_plans_answer_as_fresh_plans_do() {
    use datafusion::common::{ParamValues, ScalarValue};
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    let other = e.new_session();
    s.sql(
        "CREATE TABLE r (id INT PRIMARY KEY, k INT, c TEXT); \
         CREATE TABLE d (k INT PRIMARY KEY, name TEXT)",
    )
    .await
    .unwrap();
    let values: Vec<String> = (1..=200)
        .map(|i| format!("({i}, {}, 'c{}')", i % 7, (i * 37) % 101))
        .collect();
    s.sql(&format!("INSERT INTO r VALUES {}", values.join(", ")))
        .await
        .unwrap();
    s.sql("INSERT INTO d VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three')")
        .await
        .unwrap();
    let queries = [
        "SELECT c FROM r WHERE id BETWEEN $1 AND $2",
        "SELECT sum(k) FROM r WHERE id BETWEEN $1 AND $2",
        "SELECT c FROM r WHERE id BETWEEN $1 AND $2 ORDER BY c",
        "SELECT DISTINCT c FROM r WHERE id BETWEEN $1 AND $2 ORDER BY c",
        "SELECT d.name, count(*) FROM r JOIN d ON r.k = d.k WHERE r.id >= $1 AND r.id < $2 \
         GROUP BY d.name ORDER BY d.name",
        // A subplan read twice (`shared.rs`): each execution computes its own.
        "WITH t AS (SELECT k, count(*) AS n FROM r WHERE id BETWEEN $1 AND $2 GROUP BY k) \
         SELECT a.k, a.n, b.n FROM t a JOIN t b ON a.k = b.k",
    ];
    let text = |rows: &[datafusion::arrow::array::RecordBatch]| {
        let t = datafusion::arrow::util::pretty::pretty_format_batches(rows)
            .unwrap()
            .to_string();
        let mut lines: Vec<&str> = t.lines().collect();
        lines.sort(); // a query without ORDER BY has no order to compare
        lines.join("\n")
    };
    let caches: Vec<_> = queries
        .iter()
        .map(|_| tierdb_tables::sql::PlanCache::default())
        .collect();
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as i32
    };
    for round in 0..12 {
        match round {
            4 => {
                other.sql("DELETE FROM r WHERE id % 5 = 0").await.unwrap();
                other
                    .sql("INSERT INTO r VALUES (1000, 1, 'new')")
                    .await
                    .unwrap();
            }
            6 => {
                s.sql("BEGIN").await.unwrap();
                s.sql(
                    "INSERT INTO r VALUES (1001, 2, 'mine'); UPDATE r SET c = 'upd' WHERE id = 3",
                )
                .await
                .unwrap();
            }
            8 => {
                s.sql("ROLLBACK").await.unwrap();
                s.sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    .await
                    .unwrap();
                s.sql("SELECT count(*) FROM r").await.unwrap();
                other
                    .sql("UPDATE r SET c = 'later' WHERE id < 50")
                    .await
                    .unwrap();
            }
            10 => {
                s.sql("COMMIT").await.unwrap();
            }
            _ => {}
        }
        for (q, cache) in queries.iter().zip(&caches) {
            let (lo, hi) = match round {
                0 => (1, 1001),
                _ => {
                    let lo = next() % 220;
                    (lo, lo + next() % 60)
                }
            };
            let plan = s.plan_prepared(&stmt(q), cache).await.unwrap().unwrap();
            let bound = plan
                .replace_params_with_values(&ParamValues::from(vec![
                    ScalarValue::Int32(Some(lo)),
                    ScalarValue::Int32(Some(hi)),
                ]))
                .unwrap();
            let Outcome::Rows(rows) = s.execute_outcome(stmt(q), Some(bound)).await.unwrap() else {
                panic!("rows expected")
            };
            let kept = text(&rows.collect().await.unwrap());
            let sql = q
                .replace("$1", &lo.to_string())
                .replace("$2", &hi.to_string());
            let fresh = text(&s.sql(&sql).await.unwrap().remove(0).batches);
            assert_eq!(kept, fresh, "round {round}: {sql}");
        }
    }
    assert!(
        s.plan_cache_physical() >= 5 * 10,
        "from their second execution every query ran its kept physical plan: {}",
        s.plan_cache_physical()
    );
    // A parameter in a filter the scan does not answer (a non-key column): the physical
    // planner refuses it, so only the optimized plan is kept; the answer is still right.
    let q = "SELECT id FROM r WHERE k = $1 AND id < 20 ORDER BY id";
    let cache = tierdb_tables::sql::PlanCache::default();
    let before = s.plan_cache_physical();
    for k in [1, 2, 3] {
        let plan = s.plan_prepared(&stmt(q), &cache).await.unwrap().unwrap();
        let bound = plan
            .replace_params_with_values(&ParamValues::from(vec![ScalarValue::Int32(Some(k))]))
            .unwrap();
        let Outcome::Rows(rows) = s.execute_outcome(stmt(q), Some(bound)).await.unwrap() else {
            panic!("rows expected")
        };
        let sql = q.replace("$1", &k.to_string());
        let fresh = text(&s.sql(&sql).await.unwrap().remove(0).batches);
        assert_eq!(text(&rows.collect().await.unwrap()), fresh, "{sql}");
    }
    assert_eq!(
        s.plan_cache_physical(),
        before,
        "{q}: no kept physical plan"
    );
}
