//! The short path of single-row writes (`rows/fastdml.rs`) computes its expressions with
//! the statement's own execution properties: `now()` is each statement's start time, as
//! on the general path.

#![allow(clippy::unwrap_used)]

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_path_writes_take_now_at_each_statement() {
    let (e, _) = common::engine(1000).await;
    let s = e.new_session();
    s.sql(
        "CREATE TABLE r (id INT PRIMARY KEY, at TIMESTAMPTZ);
         CREATE TABLE m (at TIMESTAMPTZ);
         INSERT INTO r VALUES (1, NULL), (2, NULL)",
    )
    .await
    .unwrap();
    // EXPLAIN says which of these take the short path.
    for sql in [
        "EXPLAIN UPDATE r SET at = now() WHERE id = 1",
        "EXPLAIN UPDATE r SET at = now() WHERE id = 2",
    ] {
        let r = s.sql(sql).await.unwrap().remove(0);
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&r.batches)
            .unwrap()
            .to_string();
        assert!(text.contains("short path"), "{sql}:\n{text}");
    }
    // Short path, general path (a columnar table), short path, short-path INSERT: each
    // statement's now() is at or after the one before it.
    for sql in [
        "UPDATE r SET at = now() WHERE id = 1",
        "INSERT INTO m VALUES (now())",
        "UPDATE r SET at = now() WHERE id = 2",
        "INSERT INTO r VALUES (3, now())",
    ] {
        s.sql(sql).await.unwrap();
    }
    let r = s
        .sql(
            "SELECT (SELECT at FROM r WHERE id = 1) <= (SELECT at FROM m),
                    (SELECT at FROM m) <= (SELECT at FROM r WHERE id = 2),
                    (SELECT at FROM r WHERE id = 2) <= (SELECT at FROM r WHERE id = 3),
                    (SELECT count(at) FROM r)",
        )
        .await
        .unwrap()
        .remove(0);
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&r.batches)
        .unwrap()
        .to_string();
    let row = text.lines().nth(3).unwrap();
    let cells: Vec<&str> = row
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cells, ["true", "true", "true", "3"], "{text}");
}
