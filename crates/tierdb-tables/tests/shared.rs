//! Repeated subplans computed once (`src/shared.rs`): the same data in two engines, one
//! sharing repeated subplans and one planning every copy (DataFusion's own plan); every
//! query's rows equal over generated data and constants; EXPLAIN shows a `SharedExec`
//! where a CTE or view that aggregates is read twice (TPC-H Q15's shape, self-joins, a
//! union, a window, a view) and none where it must not be shared (a bare scan, a volatile
//! function, a recursive CTE, reads that differ).

#![allow(clippy::unwrap_used)]

use tierdb_tables::{EngineOptions, SqlEngine};

use crate::common::{self, Gen, explain, sorted_rows};

/// Facts `f` (NULL groups, duplicate values so `max` ties) and a dimension `d` keyed by
/// group, with groups on one side only.
fn data(seed: u64) -> String {
    let mut g = Gen(seed);
    let mut sql = String::from(
        "CREATE TABLE f (k INT NOT NULL, g INT, v INT NOT NULL, day DATE NOT NULL);
         CREATE TABLE d (g INT NOT NULL, name VARCHAR NOT NULL);
         CREATE VIEW per_group AS SELECT g, count(*) AS n, sum(v) AS total FROM f GROUP BY g;\n",
    );
    let rows = 300 + g.below(500);
    let mut values = Vec::new();
    for k in 0..rows {
        let group = match g.below(25) {
            0 => "NULL".to_string(),
            _ => g.below(40).to_string(),
        };
        let day = format!("DATE '1996-01-01' + INTERVAL '{} days'", g.below(200));
        values.push(format!("({k}, {group}, {}, {day})", g.below(30)));
    }
    sql.push_str(&format!("INSERT INTO f VALUES {};\n", values.join(", ")));
    let dims: Vec<String> = (5..50).map(|g| format!("({g}, 'group {g}')")).collect();
    sql.push_str(&format!("INSERT INTO d VALUES {};\n", dims.join(", ")));
    sql
}

/// (whether the plan must share a subplan, the query).
fn queries(g: &mut Gen) -> Vec<(bool, String)> {
    let day = g.below(150);
    let v = g.below(20);
    let revenue = format!(
        "revenue AS (SELECT g AS supplier_no, sum(v) AS total FROM f
           WHERE day >= DATE '1996-01-01' + INTERVAL '{day} days'
             AND day < DATE '1996-01-01' + INTERVAL '{} days' GROUP BY g)",
        day + 60
    );
    vec![
        // TPC-H Q15: joined, and read again under max() in a scalar subquery.
        (
            true,
            format!(
                "WITH {revenue} SELECT d.g, d.name, total FROM d, revenue
                 WHERE d.g = supplier_no AND total = (SELECT max(total) FROM revenue)"
            ),
        ),
        // A self-join of an aggregate.
        (
            true,
            format!(
                "WITH t AS (SELECT g, count(*) AS n FROM f WHERE v > {v} GROUP BY g)
                 SELECT a.g, b.g, a.n FROM t a JOIN t b ON a.n = b.n AND a.g < b.g"
            ),
        ),
        // A union of two reads of a DISTINCT.
        (
            true,
            format!(
                "WITH t AS (SELECT DISTINCT g FROM f WHERE v < {v})
                 SELECT g FROM t UNION ALL SELECT g + 100 FROM t"
            ),
        ),
        // A window read twice.
        (
            true,
            "WITH t AS (SELECT k, rank() OVER (PARTITION BY g ORDER BY v, k) AS r FROM f)
             SELECT a.k, b.k FROM t a JOIN t b ON a.k = b.r WHERE a.r <= 2"
                .to_string(),
        ),
        // A view named twice, the same columns read (reads of different columns are
        // different plans: the optimizer prunes the aggregates each does not read).
        (
            true,
            "SELECT a.g, a.n, a.total, b.n, b.total FROM per_group a JOIN per_group b ON a.g = b.g + 1"
                .to_string(),
        ),
        // An empty aggregate read twice.
        (
            true,
            "WITH t AS (SELECT g, sum(v) AS s FROM f WHERE v > 1000 GROUP BY g)
             SELECT * FROM t WHERE s = (SELECT max(s) FROM t)"
                .to_string(),
        ),
        // Not: a bare scan is never buffered.
        (
            false,
            format!(
                "WITH t AS (SELECT k, g FROM f WHERE v > {v})
                 SELECT count(*) FROM t a JOIN t b ON a.k = b.k"
            ),
        ),
        // Not: a volatile function may differ between reads of a view.
        (
            false,
            "WITH t AS (SELECT g, sum(v) + floor(random() * 0.5) AS s FROM f GROUP BY g)
             SELECT a.g, a.s FROM t a JOIN t b ON a.g = b.g"
                .to_string(),
        ),
        // Not: a recursive CTE's work table changes between iterations.
        (
            false,
            "WITH RECURSIVE r(i, n) AS (
               SELECT CAST(1 AS BIGINT), (SELECT count(*) FROM f)
               UNION ALL
               SELECT i + 1, (SELECT count(*) FROM f) FROM r WHERE i < 4)
             SELECT i, n FROM r"
                .to_string(),
        ),
    ]
}

async fn engines() -> (SqlEngine, SqlEngine) {
    let opts = |share| EngineOptions {
        threads: 2,
        memory_limit: 256 << 20,
        share_subplans: share,
        ..EngineOptions::default()
    };
    // Small segments: several files per table take part.
    (
        common::engine_with(200, opts(true)).await,
        common::engine_with(200, opts(false)).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_subplans_answer_as_datafusions_own_plans() {
    for seed in [1u64, 2, 3] {
        let (with, without) = engines().await;
        let ddl = data(seed);
        with.sql(&ddl).await.unwrap();
        without.sql(&ddl).await.unwrap();
        let mut g = Gen(seed.wrapping_mul(7919));
        for round in 0..2 {
            for (shares, q) in queries(&mut g) {
                let plan = explain(&with, &q).await;
                assert_eq!(
                    plan.contains("SharedExec: subplan=0, computed once for 2 readers"),
                    shares,
                    "seed {seed} round {round}: sharing expected {shares} for {q}\n{plan}"
                );
                assert!(
                    !explain(&without, &q).await.contains("SharedExec"),
                    "the option turns sharing off"
                );
                let a = sorted_rows(&with, &q).await;
                let b = sorted_rows(&without, &q).await;
                assert_eq!(a, b, "seed {seed} round {round}: {q}");
            }
        }
        // After a change, a shared subplan reads the new rows.
        for e in [&with, &without] {
            e.sql("UPDATE f SET v = v + 7 WHERE k % 3 = 0; DELETE FROM f WHERE k % 11 = 0")
                .await
                .unwrap();
        }
        for (_, q) in queries(&mut g) {
            assert_eq!(
                sorted_rows(&with, &q).await,
                sorted_rows(&without, &q).await,
                "seed {seed} after DML: {q}"
            );
        }
    }
}
