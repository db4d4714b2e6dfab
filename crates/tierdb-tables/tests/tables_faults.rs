//! Model-based test of the SQL tables under capacity-store faults: random INSERT batches,
//! aggregate and point queries, and reopens against a model of the rows, with the capacity
//! store failing requests at random, before they run and after they took effect.
//!
//! What must hold: a query answers exactly the model or fails (never a wrong answer); an
//! INSERT that returned an error is, after a reopen on a healthy store, all there or not
//! at all; no segment of a failed INSERT is ever visible in part.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use proptest::prelude::*;
use tierdb_kv::{KvDb, KvOptions};
use tierdb_store::{FaultConfig, FaultStore, TierOptions, TieredStore, WriteMode};
use tierdb_tables::{EngineOptions, SqlEngine, Tables};

#[derive(Debug, Clone)]
enum Action {
    /// Rows (first id, count, value seed).
    Insert(u16, u8, u8),
    Aggregate,
    Point(u16),
    Reopen,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (any::<u16>(), 1u8..40, any::<u8>()).prop_map(|(a, n, s)| Action::Insert(a, n, s)),
        3 => Just(Action::Aggregate),
        2 => any::<u16>().prop_map(Action::Point),
        1 => Just(Action::Reopen),
    ]
}

/// Row id → (value, label); ids repeat across inserts, so the model is a multiset by id.
type Model = BTreeMap<i64, Vec<(i64, String)>>;

fn rows_of(first: u16, n: u8, seed: u8) -> Vec<(i64, i64, String)> {
    (0..i64::from(n))
        .map(|i| {
            let id = i64::from(first) + i;
            let v = id * 7 + i64::from(seed);
            (id, v, format!("r{id}-{seed}"))
        })
        .collect()
}

fn insert_sql(rows: &[(i64, i64, String)]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|(id, v, l)| format!("({id}, {v}, '{l}')"))
        .collect();
    format!("INSERT INTO t VALUES {}", values.join(", "))
}

fn apply(model: &mut Model, rows: &[(i64, i64, String)]) {
    for (id, v, l) in rows {
        model.entry(*id).or_default().push((*v, l.clone()));
    }
}

/// count(*), sum(v), count(DISTINCT label) as the model has them.
fn aggregate_of(model: &Model) -> Vec<String> {
    let all: Vec<&(i64, String)> = model.values().flatten().collect();
    let labels: std::collections::BTreeSet<&String> = all.iter().map(|r| &r.1).collect();
    let sum: i64 = all.iter().map(|r| r.0).sum();
    vec![
        all.len().to_string(),
        if all.is_empty() {
            "NULL".into()
        } else {
            sum.to_string()
        },
        labels.len().to_string(),
    ]
}

fn faults() -> FaultConfig {
    FaultConfig {
        error_before: 0.15,
        error_after: 0.08,
        ..FaultConfig::default()
    }
}

struct Open {
    kv: Arc<KvDb>,
    e: SqlEngine,
}

async fn open(store: &TieredStore, create: bool) -> Open {
    let options = KvOptions {
        create,
        compaction: false,
        // Few retries, so injected faults reach the SQL layer.
        store_retries: 1,
        ..KvOptions::default()
    };
    let kv = Arc::new(
        KvDb::open(store.clone(), "db", "db", &options)
            .await
            .unwrap(),
    );
    let mut tables = Tables::open(tierdb_kv::KvHandle::Writer(kv.clone()));
    tables.segment_options.segment_rows = 16;
    tables.segment_options.row_group_rows = 8;
    let opts = EngineOptions {
        threads: 2,
        memory_limit: 128 << 20,
        ..EngineOptions::default()
    };
    let e = SqlEngine::new(Arc::new(tables), &opts).unwrap();
    Open { kv, e }
}

async fn reopen(faulty: &FaultStore, store: &TieredStore, old: Open) -> Open {
    faulty.set_config(FaultConfig::default());
    old.kv.close_without_flush().await;
    drop(old);
    open(store, false).await
}

/// The rows of a query as text, or the error.
async fn query(e: &SqlEngine, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let results = e.sql(sql).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for r in results {
        out.extend(crate::common::to_text(&r.batches));
    }
    Ok(out)
}

const AGGREGATE: &str = "SELECT count(*), sum(v), count(DISTINCT label) FROM t";

async fn run(mode: WriteMode, seed: u64, actions: Vec<Action>) {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultStore::new(memory, FaultConfig::default(), seed));
    let cache = tempfile::tempdir().unwrap();
    let tier = TierOptions {
        cache_dir: (mode == WriteMode::WriteBack).then(|| cache.path().to_path_buf()),
        cache_bytes: if mode == WriteMode::WriteBack {
            32 << 20
        } else {
            0
        },
        memory_bytes: 8 << 20,
        write_mode: mode,
        ..TierOptions::default()
    };
    let store = TieredStore::with_capacity(faulty.clone(), "faulty".into(), tier)
        .await
        .unwrap();
    let mut db = open(&store, true).await;
    query(
        &db.e,
        "CREATE TABLE t (id BIGINT NOT NULL, v BIGINT NOT NULL, label VARCHAR)",
    )
    .await
    .unwrap();
    faulty.set_config(faults());
    let mut model = Model::new();

    for action in actions {
        match action {
            Action::Insert(first, n, s) => {
                let rows = rows_of(first, n, s);
                if query(&db.e, &insert_sql(&rows)).await.is_ok() {
                    apply(&mut model, &rows);
                    continue;
                }
                // Unknown outcome: settle it on a healthy store after a reopen.
                db = reopen(&faulty, &store, db).await;
                let got = query(&db.e, AGGREGATE).await.unwrap();
                let mut with = model.clone();
                apply(&mut with, &rows);
                if got[0] == aggregate_of(&with) {
                    model = with;
                } else {
                    assert_eq!(
                        got[0],
                        aggregate_of(&model),
                        "a failed INSERT is partly there"
                    );
                }
                faulty.set_config(faults());
            }
            Action::Aggregate => {
                if let Ok(got) = query(&db.e, AGGREGATE).await {
                    assert_eq!(got[0], aggregate_of(&model), "{AGGREGATE}");
                }
            }
            Action::Point(id) => {
                let sql = format!("SELECT v, label FROM t WHERE id = {id} ORDER BY v, label");
                if let Ok(got) = query(&db.e, &sql).await {
                    let mut want: Vec<Vec<String>> = model
                        .get(&i64::from(id))
                        .into_iter()
                        .flatten()
                        .map(|(v, l)| vec![v.to_string(), l.clone()])
                        .collect();
                    want.sort_by(|a, b| {
                        (a[0].parse::<i64>().unwrap(), &a[1]).cmp(&(b[0].parse().unwrap(), &b[1]))
                    });
                    assert_eq!(got, want, "{sql}");
                }
            }
            Action::Reopen => {
                db = reopen(&faulty, &store, db).await;
                let got = query(&db.e, AGGREGATE).await.unwrap();
                assert_eq!(got[0], aggregate_of(&model), "after a reopen");
                faulty.set_config(faults());
            }
        }
    }
    let db = reopen(&faulty, &store, db).await;
    let got = query(&db.e, AGGREGATE).await.unwrap();
    assert_eq!(got[0], aggregate_of(&model), "at the end");
    db.kv.close().await.unwrap();
    store.close().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tierdb_testkit::model_cases(4), max_shrink_iters: 3, ..ProptestConfig::default() })]

    #[test]
    fn tables_match_the_model_under_store_faults(
        write_back in any::<bool>(),
        seed in any::<u64>(),
        actions in proptest::collection::vec(action(), 8..30),
    ) {
        let mode = if write_back { WriteMode::WriteBack } else { WriteMode::WriteThrough };
        let limit = std::time::Duration::from_secs(180);
        let outcome = tierdb_testkit::run_with_deadline(limit, run(mode, seed, actions));
        prop_assert!(outcome.is_ok(), "the model run ({:?}, seed {}) stalled", mode, seed);
    }
}
