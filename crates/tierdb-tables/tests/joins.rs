//! Join planning end to end: the join reordering rule (`joinorder.rs`: the most selective
//! dimension next to the fact table, by guessed and then measured counts; ties decided by
//! the inputs, not their positions) and the scans' statistics, by which DataFusion puts
//! each hash join's smaller input on its build side.

#![allow(clippy::unwrap_used)]

use tierdb_tables::provider::ScanOptions;

use crate::common;
use common::{engine, rows, to_text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn star_joins_start_from_the_most_selective_dimension() {
    let (e, _) = engine(1 << 20).await;
    e.sql(
        "CREATE TABLE fact (a INT NOT NULL, b INT NOT NULL, x BIGINT NOT NULL);
         CREATE TABLE da (a INT NOT NULL, name VARCHAR NOT NULL);
         CREATE TABLE db (b INT NOT NULL, kind VARCHAR NOT NULL);
         INSERT INTO da SELECT CAST(value AS INT), 'a' || value FROM generate_series(1, 50);
         INSERT INTO db SELECT CAST(value AS INT), 'k' || (value % 5) FROM generate_series(1, 20);
         INSERT INTO fact SELECT CAST(value % 50 + 1 AS INT), CAST(value % 20 + 1 AS INT), value FROM generate_series(1, 5000)",
    )
    .await
    .unwrap();
    // FROM order names the unfiltered dimension first; the filtered one (db) must be joined
    // to the fact table first.
    let q = "SELECT count(*), sum(x) FROM fact, da, db WHERE fact.a = da.a AND fact.b = db.b AND kind = 'k3'";
    let plan = rows(&e, &format!("EXPLAIN {q}")).await;
    let logical = &plan[0][1];
    let pos = |s: &str| {
        logical
            .find(s)
            .unwrap_or_else(|| panic!("{s} in {logical}"))
    };
    // The innermost join (printed last) is fact with db, each dimension on the build
    // (left) side.
    assert!(
        pos("Inner Join: db.b = fact.b") > pos("Inner Join: da.a = fact.a"),
        "{logical}"
    );
    let expected: u64 = (1..=5000u64).filter(|v| (v % 20 + 1) % 5 == 3).sum();
    let got = rows(&e, q).await;
    assert_eq!(got[0][1], expected.to_string());
}

/// A hash join builds its table from the input with fewer rows by the scans' statistics
/// (the extent map's counts and ranges): `big` keeps 100 of its 20,000 rows, so its rows
/// and not all 2,000 of `small` are the build side, whichever order FROM names them in.
/// Without the statistics (`ScanOptions::scan_statistics` off) the planner cannot tell.
/// Counts answered from the statistics stay exact after DELETE and inside a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_joins_build_on_the_input_the_extent_map_shows_smaller() {
    let (e, _) = engine(5000).await;
    e.sql(
        "CREATE TABLE big (k INT NOT NULL, v INT NOT NULL);
         CREATE TABLE small (k INT NOT NULL, p VARCHAR NOT NULL);
         INSERT INTO big SELECT CAST(value % 2000 AS INT), CAST(value AS INT) FROM generate_series(0, 19999);
         INSERT INTO small SELECT CAST(value AS INT), 'p' || value FROM generate_series(0, 1999)",
    )
    .await
    .unwrap();
    let q = "SELECT count(*), sum(v) FROM small, big WHERE small.k = big.k AND big.v < 100";
    // The first scan under the hash join is its build side: big's (it projects v).
    let build_scans_big = |plan: &str| {
        let join = plan
            .find("HashJoinExec")
            .unwrap_or_else(|| panic!("{plan}"));
        let scan = plan[join..].find("DataSourceExec").unwrap() + join;
        plan[scan..]
            .lines()
            .next()
            .unwrap()
            .contains("projection=[k, v]")
    };
    let plan = rows(&e, &format!("EXPLAIN {q}")).await;
    assert!(build_scans_big(&plan[1][1]), "{}", plan[1][1]);
    let expected: u64 = (0..100u64).sum();
    assert_eq!(
        rows(&e, q).await,
        [["100".to_string(), expected.to_string()]]
    );
    e.set_scan_options(ScanOptions {
        scan_statistics: false,
        ..ScanOptions::default()
    });
    let plan = rows(&e, &format!("EXPLAIN {q}")).await;
    assert!(!build_scans_big(&plan[1][1]), "{}", plan[1][1]);
    assert_eq!(
        rows(&e, q).await,
        [["100".to_string(), expected.to_string()]]
    );
    e.set_scan_options(ScanOptions::default());
    // count(*) comes from the statistics (no scan in the plan) and stays exact.
    let plan = rows(&e, "EXPLAIN SELECT count(*) FROM big").await;
    assert!(!plan[1][1].contains("DataSourceExec"), "{}", plan[1][1]);
    e.sql("DELETE FROM big WHERE v % 3 = 0").await.unwrap();
    assert_eq!(rows(&e, "SELECT count(*) FROM big").await, [["13333"]]);
    let r = e
        .sql("BEGIN; INSERT INTO big VALUES (1, 1); SELECT count(*) FROM big; ROLLBACK")
        .await
        .unwrap();
    assert_eq!(to_text(&r[2].batches), [["13334"]]);
    assert_eq!(rows(&e, "SELECT count(*) FROM big").await, [["13333"]]);
}

/// Two dimensions whose filters look alike (`col = literal` each, a tie for the guess) but
/// keep 1 in 2 rows of one and 1 in 50 of the other: the measured counts put the selective
/// one next to the fact table, whatever the FROM order; a commit that changes the table is
/// measured again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_order_follows_measured_dimension_counts() {
    let (e, _) = engine(1 << 20).await;
    e.sql(
        "CREATE TABLE fact (a INT NOT NULL, b INT NOT NULL, x BIGINT NOT NULL);
         CREATE TABLE wide (a INT NOT NULL, half VARCHAR NOT NULL);
         CREATE TABLE narrow (b INT NOT NULL, fifty VARCHAR NOT NULL);
         INSERT INTO wide SELECT CAST(value AS INT), 'h' || (value % 2) FROM generate_series(1, 100);
         INSERT INTO narrow SELECT CAST(value AS INT), 'f' || (value % 50) FROM generate_series(1, 200);
         INSERT INTO fact SELECT CAST(value % 100 + 1 AS INT), CAST(value % 200 + 1 AS INT), value FROM generate_series(1, 20000)",
    )
    .await
    .unwrap();
    // The guess ties (0.1 each) and takes the smaller table (wide, 100 rows) first.
    let q = "SELECT count(*), sum(x) FROM fact, wide, narrow \
             WHERE fact.a = wide.a AND fact.b = narrow.b AND half = 'h1' AND fifty = 'f7'";
    let innermost = |plan: &str| {
        let w = plan.find("Inner Join: wide.a = fact.a");
        let n = plan.find("Inner Join: narrow.b = fact.b");
        match (w, n) {
            // Printed outermost first: the later one is joined to the fact table first.
            (Some(w), Some(n)) if n > w => "narrow",
            (Some(_), Some(_)) => "wide",
            _ => panic!("no star join in {plan}"),
        }
    };
    let plan = rows(&e, &format!("EXPLAIN {q}")).await;
    assert_eq!(innermost(&plan[0][1]), "narrow", "{}", plan[0][1]);
    let expected: u64 = (1..=20000u64)
        .filter(|v| (v % 100 + 1) % 2 == 1 && (v % 200 + 1) % 50 == 7)
        .sum();
    let got = rows(&e, q).await;
    assert_eq!(got[0][1], expected.to_string());
    // Now 'h1' is rare in wide and 'f7' common in narrow: a new snapshot, a new count.
    e.sql(
        "DELETE FROM wide WHERE half = 'h1' AND a > 3;
         INSERT INTO narrow SELECT CAST(value AS INT), 'f7' FROM generate_series(201, 400)",
    )
    .await
    .unwrap();
    let plan = rows(&e, &format!("EXPLAIN {q}")).await;
    assert_eq!(innermost(&plan[0][1]), "wide", "{}", plan[0][1]);
}

/// TPC-DS Q44's shape: two alike subqueries and the same table twice, joined in a ring. The
/// inputs tie on every estimate; when ties were decided by position the rule reordered its
/// own output again and again, and planning grew the server to all of the machine's memory.
/// Planning must end, with the answer worked out here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_of_tied_inputs_is_reordered_once() {
    let (e, _) = engine(1 << 20).await;
    e.sql(
        "CREATE TABLE sales (item INT NOT NULL, store INT NOT NULL, profit BIGINT NOT NULL);
         CREATE TABLE item (i_sk INT NOT NULL, i_name VARCHAR NOT NULL);
         INSERT INTO item SELECT CAST(value AS INT), 'n' || value FROM generate_series(1, 30);
         INSERT INTO sales SELECT CAST(value % 30 + 1 AS INT), 2, (value % 30 + 1) * 10
           FROM generate_series(0, 299)",
    )
    .await
    .unwrap();
    let ranked = |dir: &str| {
        format!(
            "(SELECT * FROM (SELECT item_sk, rank() OVER (ORDER BY rank_col {dir}) rnk FROM \
               (SELECT item item_sk, avg(profit) rank_col FROM sales WHERE store = 2 GROUP BY item \
                HAVING avg(profit) > 0.9 * (SELECT avg(profit) FROM sales WHERE store = 2)) v) w \
             WHERE rnk < 11)"
        )
    };
    let q = format!(
        "SELECT a.rnk, i1.i_name best, i2.i_name worst FROM {} a, {} d, item i1, item i2 \
         WHERE a.rnk = d.rnk AND i1.i_sk = a.item_sk AND i2.i_sk = d.item_sk ORDER BY a.rnk",
        ranked("ASC"),
        ranked("DESC")
    );
    let planned = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        rows(&e, &format!("EXPLAIN {q}")),
    )
    .await
    .expect("planning ends");
    let logical = &planned[0][1];
    assert!(logical.matches("Inner Join").count() == 3, "{logical}");
    // avg(profit) per item is item*10; 0.9 * the mean (155) keeps items 14..30: ascending
    // ranks 1..10 are items 14..23, descending ranks 1..10 items 30..21.
    let expected: Vec<Vec<String>> = (1..=10)
        .map(|k| {
            vec![
                k.to_string(),
                format!("n{}", 13 + k),
                format!("n{}", 31 - k),
            ]
        })
        .collect();
    assert_eq!(rows(&e, &q).await, expected);
}
