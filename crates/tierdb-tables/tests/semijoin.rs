//! Semi-join reduction of grouped aggregates (`src/semijoin.rs`): the same data in two
//! engines, one with the rule and one without (DataFusion's own plan), every query's rows
//! equal, over generated data (NULL keys, keys on one side only, duplicates, empty
//! filters) and generated filter constants; EXPLAIN shows the reduction where it must
//! apply (TPC-H Q17, Q20 and Q2 shapes, an IN subquery with GROUP BY) and its absence
//! where it must not (a LIMIT in the subquery, a LEFT JOIN, an unfiltered outer side).

#![allow(clippy::unwrap_used)]

use tierdb_tables::{EngineOptions, SqlEngine};

use crate::common::{self, Gen, explain, sorted_rows};

/// The statements that build one generated database: `part` (keys 1..=parts, a few NULL
/// and duplicated), `supp`, `partsupp` and `lineitem` (keys beyond the parts too, NULLs).
fn data(seed: u64) -> String {
    let mut g = Gen(seed);
    let parts = 150 + g.below(100);
    let mut sql = String::from(
        "CREATE TABLE part (p_partkey INT, p_brand VARCHAR NOT NULL, p_size INT NOT NULL);
         CREATE TABLE supp (s_suppkey INT NOT NULL, s_nation INT NOT NULL);
         CREATE TABLE partsupp (ps_partkey INT, ps_suppkey INT NOT NULL, ps_cost DOUBLE NOT NULL, ps_qty INT NOT NULL);
         CREATE TABLE lineitem (l_partkey INT, l_suppkey INT NOT NULL, l_quantity DOUBLE NOT NULL, l_price DOUBLE NOT NULL);\n",
    );
    let mut values = Vec::new();
    for k in 1..=parts {
        let key = if g.below(40) == 0 {
            "NULL".to_string()
        } else if g.below(30) == 0 {
            (k - 1).max(1).to_string() // a duplicate key
        } else {
            k.to_string()
        };
        values.push(format!("({key}, 'B{}', {})", g.below(10), g.below(20)));
    }
    sql += &format!("INSERT INTO part VALUES {};\n", values.join(", "));
    sql += "INSERT INTO supp SELECT CAST(value AS INT), CAST(value % 5 AS INT) FROM generate_series(1, 20);\n";
    let mut values = Vec::new();
    for _ in 0..parts * 4 {
        let key = match g.below(50) {
            0 => "NULL".to_string(),
            1 => (parts + 1 + g.below(20)).to_string(), // no such part
            _ => (1 + g.below(parts)).to_string(),
        };
        values.push(format!(
            "({key}, {}, {}.5, {})",
            1 + g.below(20),
            g.below(100),
            g.below(50)
        ));
    }
    sql += &format!("INSERT INTO partsupp VALUES {};\n", values.join(", "));
    for _chunk in 0..4 {
        let mut values = Vec::new();
        for _ in 0..parts * 10 {
            let key = match g.below(60) {
                0 => "NULL".to_string(),
                1 => (parts + 1 + g.below(20)).to_string(),
                _ => (1 + g.below(parts)).to_string(),
            };
            values.push(format!(
                "({key}, {}, {}, {}.25)",
                1 + g.below(20),
                1 + g.below(50),
                g.below(1000)
            ));
        }
        sql += &format!("INSERT INTO lineitem VALUES {};\n", values.join(", "));
    }
    sql
}

/// The queries, with constants drawn from `g`: each names whether the rule must apply.
fn queries(g: &mut Gen) -> Vec<(bool, String)> {
    let brand = g.below(10);
    let size = g.below(20);
    let nation = g.below(5);
    let frac = [0.2, 0.5, 1.0, 1.5][g.below(4) as usize];
    vec![
        // TPC-H Q17: a correlated scalar average.
        (
            true,
            format!(
                "SELECT sum(l_price) / 7.0, count(*) FROM lineitem, part
                 WHERE p_partkey = l_partkey AND p_brand = 'B{brand}'
                   AND l_quantity < (SELECT {frac} * avg(l_quantity) FROM lineitem
                                     WHERE l_partkey = p_partkey)"
            ),
        ),
        // TPC-H Q20: two correlation keys, the outer keys through an IN subquery.
        (
            true,
            format!(
                "SELECT ps_partkey, ps_suppkey, ps_qty FROM partsupp
                 WHERE ps_partkey IN (SELECT p_partkey FROM part WHERE p_brand = 'B{brand}')
                   AND ps_qty > (SELECT {frac} * sum(l_quantity) FROM lineitem
                                 WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey)"
            ),
        ),
        // TPC-H Q2: a correlated minimum over a join.
        (
            true,
            format!(
                "SELECT p_partkey, s_suppkey, ps_cost FROM part, partsupp, supp
                 WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND p_size = {size}
                   AND ps_cost = (SELECT min(ps_cost) FROM partsupp, supp
                                  WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey
                                    AND s_nation = {nation})"
            ),
        ),
        // A derived table grouped by the join key, joined with a filtered dimension.
        (
            true,
            format!(
                "SELECT p_partkey, t.n, t.q FROM part
                 JOIN (SELECT l_partkey, count(*) AS n, sum(l_quantity) AS q FROM lineitem
                       GROUP BY l_partkey) t ON t.l_partkey = p_partkey
                 WHERE p_brand = 'B{brand}'"
            ),
        ),
        // An IN subquery with GROUP BY and HAVING (a semi join, the aggregate on its right).
        (
            true,
            format!(
                "SELECT p_partkey, p_size FROM part WHERE p_brand = 'B{brand}' AND p_partkey IN
                   (SELECT l_partkey FROM lineitem GROUP BY l_partkey HAVING count(*) > {})",
                g.below(12)
            ),
        ),
        // Not: a LIMIT inside the derived table changes with its input.
        (
            false,
            format!(
                "SELECT p_partkey, t.n FROM part
                 JOIN (SELECT l_partkey, count(*) AS n FROM lineitem GROUP BY l_partkey
                       ORDER BY n DESC, l_partkey LIMIT 30) t ON t.l_partkey = p_partkey
                 WHERE p_brand = 'B{brand}'"
            ),
        ),
        // Not: a LEFT JOIN keeps the aggregate's rows that match nothing.
        (
            false,
            format!(
                "SELECT t.l_partkey, t.n, p_partkey FROM
                   (SELECT l_partkey, count(*) AS n FROM lineitem GROUP BY l_partkey) t
                 LEFT JOIN (SELECT * FROM part WHERE p_brand = 'B{brand}') p
                   ON t.l_partkey = p.p_partkey"
            ),
        ),
        // Not: nothing filters the outer side's keys.
        (
            false,
            "SELECT p_partkey, t.n FROM part
             JOIN (SELECT l_partkey, count(*) AS n FROM lineitem GROUP BY l_partkey) t
               ON t.l_partkey = p_partkey"
                .to_string(),
        ),
        // Not: the join is on an aggregate's result, not its group column.
        (
            false,
            format!(
                "SELECT p_partkey, t.l_partkey FROM part
                 JOIN (SELECT l_partkey, count(*) AS n FROM lineitem GROUP BY l_partkey) t
                   ON t.n = p_partkey
                 WHERE p_brand = 'B{brand}'"
            ),
        ),
    ]
}

async fn engines() -> (SqlEngine, SqlEngine) {
    let opts = |reduce| EngineOptions {
        threads: 2,
        memory_limit: 256 << 20,
        semi_join_reduction: reduce,
        ..EngineOptions::default()
    };
    // Small segments: the extent map and several files per table take part.
    (
        common::engine_with(700, opts(true)).await,
        common::engine_with(700, opts(false)).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reduced_aggregates_answer_as_datafusions_own_plans() {
    for seed in [1u64, 2] {
        let (with, without) = engines().await;
        let ddl = data(seed);
        with.sql(&ddl).await.unwrap();
        without.sql(&ddl).await.unwrap();
        let mut g = Gen(seed.wrapping_mul(7919));
        for round in 0..2 {
            for (applies, q) in queries(&mut g) {
                let plan = explain(&with, &q).await;
                assert_eq!(
                    plan.contains("__tierdb_reduce"),
                    applies,
                    "seed {seed} round {round}: reduction expected {applies} for {q}\n{plan}"
                );
                assert!(
                    !explain(&without, &q).await.contains("__tierdb_reduce"),
                    "the option turns the rule off"
                );
                let a = sorted_rows(&with, &q).await;
                let b = sorted_rows(&without, &q).await;
                assert_eq!(a, b, "seed {seed} round {round}: {q}");
            }
        }
    }
}

/// The rule applies once per aggregate, whatever the optimizer's passes do: one semi join
/// under Q17's aggregate, built on the keys (its left input).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_is_reduced_once() {
    let (with, _) = engines().await;
    with.sql(&data(9)).await.unwrap();
    let q = "SELECT sum(l_price) FROM lineitem, part WHERE p_partkey = l_partkey
             AND p_brand = 'B3' AND l_quantity < (SELECT 0.5 * avg(l_quantity) FROM lineitem
             WHERE l_partkey = p_partkey)";
    let plan = explain(&with, q).await;
    assert_eq!(
        plan.matches("RightSemi Join: __tierdb_reduce").count(),
        1,
        "{plan}"
    );
    // The physical join builds its hash table on the keys.
    assert!(
        plan.contains("join_type=RightSemi, on=[(__tierdb_reduce@0"),
        "{plan}"
    );
}
