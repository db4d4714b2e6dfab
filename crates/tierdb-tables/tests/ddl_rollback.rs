//! DDL in a transaction block is undone by ROLLBACK (`ddlundo.rs`): every kind of catalog
//! change, savepoints, COMMIT keeping it, another session's change since left alone, and a
//! process that ended with the transaction open.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use tierdb_tables::SqlEngine;
use tierdb_tables::sql::SqlSession;

/// Everything the catalog defines, as text: tables with their columns, keys and indexes,
/// views with their queries, schemas, sequences.
async fn catalog(e: &SqlEngine) -> Vec<String> {
    let t = e.tables();
    let mut out = Vec::new();
    for d in t.tables().await.unwrap() {
        let cols: Vec<String> = d
            .columns
            .iter()
            .map(|c| format!("{} {:?} {}", c.name, c.ty, c.nullable))
            .collect();
        let indexes: Vec<&str> = d.indexes.iter().map(|i| i.name.as_str()).collect();
        out.push(format!(
            "table {} id {} ({}) key {:?} indexes {:?} comments {:?}",
            d.name,
            d.id,
            cols.join(", "),
            d.primary_key,
            indexes,
            d.comments
        ));
    }
    for v in t.views().await.unwrap() {
        out.push(format!("view {} as {}", v.name, v.query));
    }
    for s in t.schemas().await.unwrap() {
        out.push(format!("schema {}", s.name));
    }
    for s in t.sequences().await.unwrap() {
        out.push(format!("sequence {}", s.name));
    }
    out.sort();
    out
}

async fn rows(s: &SqlSession, sql: &str) -> Vec<Vec<String>> {
    let r = s.sql(sql).await.unwrap().remove(0);
    let mut out = Vec::new();
    for b in &r.batches {
        for i in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| datafusion::arrow::util::display::array_value_to_string(c, i).unwrap())
                    .collect(),
            );
        }
    }
    out
}

const SETUP: &str = "CREATE TABLE c (x INT, y TEXT); INSERT INTO c VALUES (1, 'a'), (2, 'b');
     CREATE TABLE r (k INT PRIMARY KEY, v TEXT); INSERT INTO r VALUES (1, 'one'), (2, 'two');
     CREATE VIEW cv AS SELECT x FROM c; CREATE SCHEMA s; CREATE SEQUENCE q";

/// Every kind of DDL between BEGIN and ROLLBACK leaves the catalog, and the rows, as they
/// were; nothing warns about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_undoes_every_kind_of_ddl() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql(SETUP).await.unwrap();
    let before = catalog(&e).await;
    s.sql("BEGIN").await.unwrap();
    for stmt in [
        "CREATE TABLE n (a INT)",
        "INSERT INTO n VALUES (5)",
        "CREATE TABLE n2 AS SELECT * FROM c",
        "ALTER TABLE c ADD COLUMN z INT",
        "COMMENT ON TABLE c IS 'hello'",
        "ALTER TABLE r RENAME COLUMN v TO vv",
        "CREATE INDEX rv ON r (vv)",
        "ALTER TABLE r RENAME TO r2",
        "CREATE VIEW nv AS SELECT * FROM r2",
        "DROP VIEW cv",
        "ALTER SCHEMA s RENAME TO s2",
        "CREATE SCHEMA s3",
        "CREATE TABLE s3.t (a INT)",
        "DROP SEQUENCE q",
        "CREATE SEQUENCE q2",
        "TRUNCATE c",
    ] {
        s.sql(stmt).await.unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    assert_ne!(catalog(&e).await, before);
    s.sql("ROLLBACK").await.unwrap();
    assert!(s.take_notices().is_empty(), "{:?}", s.take_notices());
    assert_eq!(catalog(&e).await, before);
    assert_eq!(
        rows(&s, "SELECT * FROM c ORDER BY x").await,
        [["1", "a"], ["2", "b"]]
    );
    assert_eq!(
        rows(&s, "SELECT * FROM r WHERE k = 2").await,
        [["2", "two"]]
    );
    assert_eq!(
        rows(&s, "SELECT * FROM cv ORDER BY x").await,
        [["1"], ["2"]]
    );

    // DROP of a row table and of a columnar one: their rows come back.
    s.sql("BEGIN; DROP TABLE r; DROP VIEW cv; DROP TABLE c")
        .await
        .unwrap();
    s.sql("ROLLBACK").await.unwrap();
    assert_eq!(catalog(&e).await, before);
    assert_eq!(rows(&s, "SELECT count(*) FROM r").await, [["2"]]);
    assert_eq!(rows(&s, "SELECT count(*) FROM c").await, [["2"]]);
}

/// ROLLBACK TO SAVEPOINT undoes the DDL since the savepoint and keeps the DDL before it;
/// COMMIT keeps what is left, and a later open does not undo it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoints_and_commit_keep_what_they_should() {
    let capacity = Arc::new(object_store::memory::InMemory::new());
    let with_a;
    {
        let e = common::engine_on(capacity.clone(), 1000).await;
        let s = e.new_session();
        s.sql("BEGIN; CREATE TABLE a (x INT); INSERT INTO a VALUES (1)")
            .await
            .unwrap();
        with_a = catalog(&e).await;
        s.sql("SAVEPOINT p; CREATE TABLE b (x INT); ALTER TABLE a ADD COLUMN y INT")
            .await
            .unwrap();
        s.sql("ROLLBACK TO SAVEPOINT p").await.unwrap();
        assert_eq!(catalog(&e).await, with_a);
        s.sql("COMMIT").await.unwrap();
        assert_eq!(rows(&s, "SELECT * FROM a").await, [["1"]]);
    }
    let e = common::engine_on(capacity, 1000).await;
    assert_eq!(
        catalog(&e).await,
        with_a,
        "the committed DDL survives a reopen"
    );
}

/// A definition another session changed after this transaction did is left as that
/// session made it, with a warning naming it; the rest is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_leaves_another_sessions_change_and_says_so() {
    let (e, _) = common::engine(1000).await;
    let a = e.new_session();
    let b = e.new_session();
    a.sql("CREATE TABLE t (x INT); CREATE TABLE u (x INT)")
        .await
        .unwrap();
    a.sql("BEGIN; ALTER TABLE t ADD COLUMN y INT; ALTER TABLE u ADD COLUMN y INT")
        .await
        .unwrap();
    b.sql("ALTER TABLE t ADD COLUMN z INT").await.unwrap();
    a.sql("ROLLBACK").await.unwrap();
    let notices = a.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].message.contains("table \"t\""), "{notices:?}");
    let cols = |name: &'static str| {
        let e = &e;
        async move {
            let d = e.tables().require(name).await.unwrap();
            d.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>()
        }
    };
    assert_eq!(cols("t").await, ["x", "y", "z"], "b's change stays");
    assert_eq!(cols("u").await, ["x"], "u is undone");
}

/// Another session cannot commit writes into a table whose creation is not committed
/// (`ddlundo.rs` invariant 7: the ROLLBACK would take them with it): 40001, nothing
/// written; undoing the creation leaves no segment or row naming a table that does not
/// exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn others_cannot_write_into_a_creation_not_yet_committed() {
    let (e, _) = common::engine(1000).await;
    let a = e.new_session();
    let b = e.new_session();
    a.sql("BEGIN; CREATE TABLE t (x INT); CREATE TABLE k (x INT PRIMARY KEY)")
        .await
        .unwrap();
    for write in ["INSERT INTO t VALUES (1)", "INSERT INTO k VALUES (7)"] {
        let err = b.sql(write).await.unwrap_err();
        assert_eq!(err.sqlstate(), "40001", "{write}: {err}");
    }
    a.sql("ROLLBACK").await.unwrap();
    assert!(e.tables().table("t").await.unwrap().is_none());
    a.sql("CREATE TABLE t (x INT); CREATE TABLE k (x INT PRIMARY KEY)")
        .await
        .unwrap();
    assert_eq!(rows(&a, "SELECT count(*) FROM t").await, [["0"]]);
    assert_eq!(rows(&a, "SELECT count(*) FROM k").await, [["0"]]);
    let plan = e
        .tables()
        .vacuum_plan(std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(plan.referenced, 0, "{plan:?}");
}

/// A process that ends with a transaction open (its session never rolled back) leaves
/// undo records; the next writer to open rolls the DDL back before anything reads it, and
/// VACUUM meanwhile keeps the files a rollback brings back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_open_rolls_back_a_transaction_left_open() {
    let capacity = Arc::new(object_store::memory::InMemory::new());
    let e = common::engine_on(capacity.clone(), 1000).await;
    let s = e.new_session();
    s.sql("CREATE TABLE c (x INT); INSERT INTO c VALUES (1), (2)")
        .await
        .unwrap();
    let before = catalog(&e).await;
    s.sql("BEGIN; DROP TABLE c; CREATE TABLE n (x INT)")
        .await
        .unwrap();
    let plan = e.tables().vacuum(std::time::Duration::ZERO).await.unwrap();
    assert!(plan.delete.is_empty(), "{plan:?}");
    // As a killed process: the session is never dropped, so it never rolls back.
    std::mem::forget(s);
    let e2 = common::engine_taking_over(capacity, 1000).await;
    assert_eq!(catalog(&e2).await, before);
    let s2 = e2.new_session();
    assert_eq!(rows(&s2, "SELECT count(*) FROM c").await, [["2"]]);
    drop(e);
}
