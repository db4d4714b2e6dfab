//! Model-based test: random puts, deletes, batches, reads, scans, snapshots, memtable
//! flushes and reopens against a `BTreeMap`, with the capacity store failing requests at
//! random (before they run, and after they ran). A commit that returns an error may or may
//! not have happened: the database is then reopened and must hold the model either with
//! the whole batch or without any of it.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use proptest::prelude::*;
use tierdb_kv::{Batch, KvDb, KvRead, KvWrite};
use tierdb_store::{FaultConfig, FaultStore, WriteMode};

#[derive(Debug, Clone)]
enum Action {
    Commit(Vec<(u8, Option<u8>)>),
    Get(u8),
    Scan(u8, u8),
    Snapshot(Vec<(u8, Option<u8>)>),
    FlushMemtable,
    Reopen,
}

fn action() -> impl Strategy<Value = Action> {
    let change = (0u8..32, proptest::option::weighted(0.8, any::<u8>()));
    prop_oneof![
        6 => proptest::collection::vec(change.clone(), 1..6).prop_map(Action::Commit),
        3 => (0u8..32).prop_map(Action::Get),
        2 => (0u8..32, 0u8..32).prop_map(|(a, b)| Action::Scan(a.min(b), a.max(b))),
        1 => proptest::collection::vec(change, 1..4).prop_map(Action::Snapshot),
        1 => Just(Action::FlushMemtable),
        1 => Just(Action::Reopen),
    ]
}

fn key(k: u8) -> Bytes {
    Bytes::from(format!("key{k:03}"))
}

fn apply(model: &mut BTreeMap<Bytes, Bytes>, changes: &[(u8, Option<u8>)]) {
    for (k, v) in changes {
        match v {
            Some(v) => model.insert(key(*k), Bytes::from(vec![*v; 1 + *k as usize])),
            None => model.remove(&key(*k)),
        };
    }
}

fn batch(changes: &[(u8, Option<u8>)]) -> Batch {
    let mut b = Batch::new();
    for (k, v) in changes {
        match v {
            Some(v) => b.put(key(*k), Bytes::from(vec![*v; 1 + *k as usize])),
            None => b.delete(key(*k)),
        };
    }
    b
}

/// The shared test options with one retry, so injected faults reach the callers.
fn model_options(create: bool) -> tierdb_kv::KvOptions {
    tierdb_kv::KvOptions {
        store_retries: 1,
        ..common::options(create)
    }
}

async fn contents(db: &KvDb) -> BTreeMap<Bytes, Bytes> {
    db.scan((Bound::Unbounded, Bound::Unbounded), None)
        .await
        .expect("full scan")
        .into_iter()
        .collect()
}

/// The injected faults: with one retry (see `model_options`), some reach the callers.
fn faults() -> FaultConfig {
    FaultConfig {
        error_before: 0.2,
        error_after: 0.1,
        ..FaultConfig::default()
    }
}

/// After a commit with an unknown outcome: gives the handle up as a crash would, reopens
/// on a healthy store and checks the batch is all there or not at all. Returns the new
/// handle and the model as it now is.
async fn settle(
    faulty: &FaultStore,
    store: &tierdb_store::TieredStore,
    db: KvDb,
    model: BTreeMap<Bytes, Bytes>,
    changes: &[(u8, Option<u8>)],
) -> (KvDb, BTreeMap<Bytes, Bytes>) {
    faulty.set_config(FaultConfig::default());
    db.close_without_flush().await;
    drop(db);
    let db = KvDb::open(store.clone(), "db", "db", &model_options(false))
        .await
        .expect("reopen after a failed commit");
    let mut with = model.clone();
    apply(&mut with, changes);
    let got = contents(&db).await;
    assert!(
        got == model || got == with,
        "after a failed commit the batch must be all there or not at all"
    );
    faulty.set_config(faults());
    (db, got)
}

async fn run(
    mode: WriteMode,
    seed: u64,
    actions: Vec<Action>,
    at: Arc<parking_lot::Mutex<String>>,
) {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultStore::new(memory, FaultConfig::default(), seed));
    let cache = tempfile::tempdir().expect("tempdir");
    let cache_dir = (mode == WriteMode::WriteBack).then(|| cache.path());
    let store = common::over(faulty.clone(), cache_dir, mode).await;
    let mut db = KvDb::open(store.clone(), "db", "db", &model_options(true))
        .await
        .expect("create");
    faulty.set_config(faults());
    let mut model = BTreeMap::new();
    for (i, action) in actions.into_iter().enumerate() {
        *at.lock() = format!("action {i}: {action:?}");
        match action {
            Action::Commit(changes) => match db.commit(batch(&changes)).await {
                Ok(_) => apply(&mut model, &changes),
                Err(_) => {
                    (db, model) = settle(&faulty, &store, db, model, &changes).await;
                }
            },
            Action::Get(k) => {
                // A failed read is allowed under faults; a wrong answer is not.
                if let Ok(got) = db.get(&key(k)).await {
                    assert_eq!(got.as_ref(), model.get(&key(k)), "get key{k:03}");
                }
            }
            Action::Scan(a, b) => {
                let range = (Bound::Included(key(a)), Bound::Excluded(key(b)));
                if let Ok(got) = db.scan(range.clone(), None).await {
                    let want: Vec<_> = model
                        .range(range)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(got, want, "scan key{a:03}..key{b:03}");
                }
            }
            Action::Snapshot(changes) => {
                let snap = match db.snapshot() {
                    Ok(snap) => snap,
                    Err(_) => {
                        // Only a handle an earlier fault shut down refuses a snapshot.
                        assert!(
                            db.failure().is_some(),
                            "a snapshot of a working handle failed"
                        );
                        (db, model) = settle(&faulty, &store, db, model, &[]).await;
                        continue;
                    }
                };
                let before = model.clone();
                let committed = db.commit(batch(&changes)).await.is_ok();
                for (k, _) in &changes {
                    if let Ok(got) = snap.get(&key(*k)).await {
                        assert_eq!(got.as_ref(), before.get(&key(*k)), "snapshot isolation");
                    }
                }
                drop(snap);
                if committed {
                    apply(&mut model, &changes);
                } else {
                    (db, model) = settle(&faulty, &store, db, model, &changes).await;
                }
            }
            Action::FlushMemtable => {
                let _ = db.flush_memtable().await; // a failure here loses nothing committed
            }
            Action::Reopen => {
                let _ = db.close().await;
                db = match KvDb::open(store.clone(), "db", "db", &model_options(false)).await {
                    Ok(db) => db,
                    Err(_) => {
                        // An open may fail under faults; it must succeed on a healthy store.
                        faulty.set_config(FaultConfig::default());
                        let db = KvDb::open(store.clone(), "db", "db", &model_options(false))
                            .await
                            .expect("reopen on a healthy store");
                        faulty.set_config(faults());
                        db
                    }
                };
                faulty.set_config(FaultConfig::default());
                assert_eq!(contents(&db).await, model, "contents after reopen");
                faulty.set_config(faults());
            }
        }
    }
    *at.lock() = "final: drop the writer".into();
    faulty.set_config(FaultConfig::default());
    db.close_without_flush().await;
    *at.lock() = "final: reopen".into();
    let db = KvDb::open(store.clone(), "db", "db", &model_options(false))
        .await
        .expect("final reopen");
    *at.lock() = "final: full scan".into();
    assert_eq!(contents(&db).await, model, "final contents");
    *at.lock() = "final: close the writer".into();
    db.close().await.expect("close");
    *at.lock() = "final: close the store".into();
    store.close().await.expect("store close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tierdb_testkit::model_cases(6), max_shrink_iters: 3, ..ProptestConfig::default() })]

    // The saved cases in kv_model.proptest-regressions stalled at "final: close the writer"
    // until KvDb::close stopped asking SlateDB 0.18's close() for a memtable flush, and
    // until a handle given up after a failed commit stopped its background tasks
    // (KvDb::close_without_flush) instead of racing the reopened writer. More cases:
    // TIERDB_MODEL_CASES=100 cargo test -p tierdb-kv --test kv_model
    #[test]
    fn kv_matches_a_btreemap_under_store_faults(
        write_back in any::<bool>(),
        seed in any::<u64>(),
        actions in proptest::collection::vec(action(), 10..50),
    ) {
        let mode = if write_back { WriteMode::WriteBack } else { WriteMode::WriteThrough };
        // A liveness guard, not a speed check: a stalled store must fail, naming where,
        // not hang CI (shrinking reruns a failing case, so both are kept small).
        let at = Arc::new(parking_lot::Mutex::new(String::from("opening")));
        let limit = std::time::Duration::from_secs(120);
        let outcome = tierdb_testkit::run_with_deadline(limit, run(mode, seed, actions, at.clone()));
        if outcome.is_err() {
            panic!(
                "the model run ({mode:?}, seed {seed}) stalled for 120 s at {}",
                at.lock()
            );
        }
    }
}
