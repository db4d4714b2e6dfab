//! Model-based test of row tables: two sessions run random INSERTs, UPDATEs (by key and
//! through a secondary index), DELETEs, transactions, savepoints and rollbacks against a
//! model of the committed rows and each session's uncommitted ones, with the capacity store
//! failing requests at random (before they run and after they took effect), and reopens.
//!
//! What must hold: every read answers the model of what that session may see (committed
//! rows with its own writes over them) or fails, never a wrong answer; a lookup through
//! the index answers what a scan answers; a duplicate key fails with 23505; a commit that
//! returned an error is, after a reopen on a healthy store, all there or not at all.
//!
//! A step that would wait for the other session's row lock is not taken (both sessions
//! run on one task); waiting and deadlocks are tests/isolation.rs's.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use proptest::prelude::*;
use tierdb_kv::{KvDb, KvOptions};
use tierdb_store::{FaultConfig, FaultStore, TierOptions, TieredStore, WriteMode};
use tierdb_tables::sql::SqlSession;
use tierdb_tables::{EngineOptions, SqlEngine, Tables};

#[derive(Debug, Clone)]
enum Op {
    Insert(i32, i64, i32),
    Update(i32, i64),
    /// Moves the row to another k (its index entry moves).
    SetK(i32, i32),
    /// `UPDATE … WHERE k = …` (found through the index).
    UpdateByK(i32, i64),
    Delete(i32),
    Begin,
    Commit,
    Rollback,
    Savepoint,
    RollbackToSavepoint,
    Read,
    IndexRead(i32),
}

#[derive(Debug, Clone)]
enum Action {
    Step(usize, Op),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0i32..12;
    let k = 0i32..4;
    prop_oneof![
        5 => (id.clone(), -50i64..50, k.clone()).prop_map(|(i, v, k)| Op::Insert(i, v, k)),
        4 => (id.clone(), -5i64..5).prop_map(|(i, d)| Op::Update(i, d)),
        2 => (id.clone(), k.clone()).prop_map(|(i, k)| Op::SetK(i, k)),
        2 => (k.clone(), -5i64..5).prop_map(|(k, d)| Op::UpdateByK(k, d)),
        3 => id.prop_map(Op::Delete),
        3 => Just(Op::Begin),
        2 => Just(Op::Commit),
        1 => Just(Op::Rollback),
        1 => Just(Op::Savepoint),
        1 => Just(Op::RollbackToSavepoint),
        3 => Just(Op::Read),
        2 => k.prop_map(Op::IndexRead),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        20 => (0usize..2, op()).prop_map(|(s, o)| Action::Step(s, o)),
        1 => Just(Action::Reopen),
    ]
}

/// id → (v, k).
type Rows = BTreeMap<i32, (i64, i32)>;

/// A session's open transaction in the model: its writes over the committed rows (READ
/// COMMITTED: other sessions' commits show through where it wrote nothing).
#[derive(Debug, Clone, Default)]
struct Tx {
    pending: BTreeMap<i32, Option<(i64, i32)>>,
    locked: BTreeSet<i32>,
    savepoint: Option<BTreeMap<i32, Option<(i64, i32)>>>,
    aborted: bool,
}

fn overlay(committed: &Rows, pending: &BTreeMap<i32, Option<(i64, i32)>>) -> Rows {
    let mut out = committed.clone();
    for (id, r) in pending {
        match r {
            Some(r) => out.insert(*id, *r),
            None => out.remove(id),
        };
    }
    out
}

fn faults() -> FaultConfig {
    FaultConfig {
        error_before: 0.1,
        error_after: 0.05,
        ..FaultConfig::default()
    }
}

struct Open {
    kv: Arc<KvDb>,
    e: SqlEngine,
    s: [SqlSession; 2],
}

async fn open(store: &TieredStore, create: bool) -> Open {
    let options = KvOptions {
        create,
        compaction: false,
        store_retries: 1,
        ..KvOptions::default()
    };
    let kv = Arc::new(
        KvDb::open(store.clone(), "db", "db", &options)
            .await
            .unwrap(),
    );
    let tables = Tables::open(tierdb_kv::KvHandle::Writer(kv.clone()));
    let opts = EngineOptions {
        threads: 2,
        memory_limit: 128 << 20,
        ..EngineOptions::default()
    };
    let e = SqlEngine::new(Arc::new(tables), &opts).unwrap();
    let s = [e.new_session(), e.new_session()];
    Open { kv, e, s }
}

async fn reopen(faulty: &FaultStore, store: &TieredStore, old: Open) -> Open {
    faulty.set_config(FaultConfig::default());
    old.kv.close_without_flush().await;
    drop(old);
    open(store, false).await
}

async fn query(s: &SqlSession, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let results = s.sql(sql).await.map_err(|e| e.sqlstate().to_string())?;
    let mut out = Vec::new();
    for r in results {
        out.extend(crate::common::to_text(&r.batches));
    }
    Ok(out)
}

fn table(rows: &Rows) -> Vec<Vec<String>> {
    rows.iter()
        .map(|(id, (v, k))| vec![id.to_string(), v.to_string(), k.to_string()])
        .collect()
}

const READ: &str = "SELECT id, v, k FROM r ORDER BY id";

struct Model {
    committed: Rows,
    tx: [Option<Tx>; 2],
}

impl Model {
    fn view(&self, s: usize) -> Rows {
        match &self.tx[s] {
            Some(t) => overlay(&self.committed, &t.pending),
            None => self.committed.clone(),
        }
    }

    /// Whether the other session's open transaction holds a lock on `id`.
    fn locked_by_other(&self, s: usize, id: i32) -> bool {
        self.tx[1 - s]
            .as_ref()
            .is_some_and(|t| t.locked.contains(&id))
    }

    /// The rows `op` changes in session `s`'s view, and the view after it (`None`: the
    /// statement fails with 23505).
    fn effect(&self, s: usize, op: &Op) -> Option<(Vec<i32>, Option<Rows>)> {
        let mut view = self.view(s);
        let touched: Vec<i32> = match op {
            Op::Insert(id, v, k) => {
                if view.contains_key(id) {
                    return Some((vec![*id], None));
                }
                view.insert(*id, (*v, *k));
                vec![*id]
            }
            Op::Update(id, d) => {
                if let Some(r) = view.get_mut(id) {
                    r.0 += d;
                    vec![*id]
                } else {
                    vec![]
                }
            }
            Op::SetK(id, k) => {
                if let Some(r) = view.get_mut(id) {
                    r.1 = *k;
                    vec![*id]
                } else {
                    vec![]
                }
            }
            Op::UpdateByK(k, d) => {
                let ids: Vec<i32> = view
                    .iter()
                    .filter(|(_, r)| r.1 == *k)
                    .map(|(i, _)| *i)
                    .collect();
                for i in &ids {
                    if let Some(r) = view.get_mut(i) {
                        r.0 += d;
                    }
                }
                ids
            }
            Op::Delete(id) => {
                if view.remove(id).is_some() {
                    vec![*id]
                } else {
                    vec![]
                }
            }
            _ => return None,
        };
        Some((touched, Some(view)))
    }
}

fn sql_of(op: &Op) -> String {
    match op {
        Op::Insert(id, v, k) => format!("INSERT INTO r VALUES ({id}, {v}, {k})"),
        Op::Update(id, d) => format!("UPDATE r SET v = v + {d} WHERE id = {id}"),
        Op::SetK(id, k) => format!("UPDATE r SET k = {k} WHERE id = {id}"),
        Op::UpdateByK(k, d) => format!("UPDATE r SET v = v + {d} WHERE k = {k}"),
        Op::Delete(id) => format!("DELETE FROM r WHERE id = {id}"),
        _ => String::new(),
    }
}

/// After a commit with an unknown outcome: reopen healthy, and the changes are all there
/// or not at all.
async fn settle(
    faulty: &FaultStore,
    store: &TieredStore,
    db: Open,
    model: &mut Model,
    with: Rows,
) -> Open {
    let db = reopen(faulty, store, db).await;
    let got = query(&db.s[0], READ).await.unwrap();
    if got == table(&with) {
        model.committed = with;
    } else {
        assert_eq!(
            got,
            table(&model.committed),
            "a failed commit is partly there"
        );
    }
    model.tx = [None, None];
    faulty.set_config(faults());
    db
}

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
        &db.s[0],
        "CREATE TABLE r (id INT NOT NULL, v BIGINT NOT NULL, k INT NOT NULL, PRIMARY KEY (id))",
    )
    .await
    .unwrap();
    query(&db.s[0], "CREATE INDEX r_k ON r (k)").await.unwrap();
    faulty.set_config(faults());
    let mut model = Model {
        committed: Rows::new(),
        tx: [None, None],
    };
    for action in actions {
        let (s, op) = match action {
            Action::Reopen => {
                if model.tx.iter().any(Option::is_some) {
                    continue; // open transactions would be lost with the process
                }
                db = reopen(&faulty, &store, db).await;
                assert_eq!(
                    query(&db.s[0], READ).await.unwrap(),
                    table(&model.committed),
                    "after a reopen"
                );
                faulty.set_config(faults());
                continue;
            }
            Action::Step(s, op) => (s, op),
        };
        let session = &db.s[s];
        match op {
            Op::Begin => {
                if model.tx[s].is_none() {
                    query(session, "BEGIN").await.unwrap();
                    model.tx[s] = Some(Tx::default());
                }
            }
            Op::Rollback => {
                if model.tx[s].take().is_some() {
                    query(session, "ROLLBACK").await.unwrap();
                }
            }
            Op::Savepoint => {
                if let Some(t) = model.tx[s].as_mut().filter(|t| !t.aborted) {
                    if query(session, "SAVEPOINT a").await.is_ok() {
                        t.savepoint = Some(t.pending.clone());
                    } else {
                        t.aborted = true;
                    }
                }
            }
            Op::RollbackToSavepoint => {
                if let Some(t) = model.tx[s].as_mut()
                    && let Some(sp) = t.savepoint.clone()
                {
                    query(session, "ROLLBACK TO SAVEPOINT a").await.unwrap();
                    t.pending = sp;
                    t.aborted = false;
                }
            }
            Op::Commit => {
                let Some(t) = model.tx[s].take() else {
                    continue;
                };
                if t.aborted {
                    query(session, "ROLLBACK").await.unwrap();
                    continue;
                }
                let with = overlay(&model.committed, &t.pending);
                match query(session, "COMMIT").await {
                    Ok(_) => model.committed = with,
                    // The other session's transaction goes with the reopen.
                    Err(_) => db = settle(&faulty, &store, db, &mut model, with).await,
                }
            }
            Op::Read => {
                if model.tx[s].as_ref().is_some_and(|t| t.aborted) {
                    continue;
                }
                match query(session, READ).await {
                    Ok(got) => assert_eq!(got, table(&model.view(s)), "session {s} reads"),
                    Err(_) => {
                        if let Some(t) = model.tx[s].as_mut() {
                            t.aborted = true;
                        }
                    }
                }
            }
            Op::IndexRead(k) => {
                if model.tx[s].as_ref().is_some_and(|t| t.aborted) {
                    continue;
                }
                let want: Vec<Vec<String>> = model
                    .view(s)
                    .iter()
                    .filter(|(_, r)| r.1 == k)
                    .map(|(id, _)| vec![id.to_string()])
                    .collect();
                match query(
                    session,
                    &format!("SELECT id FROM r WHERE k = {k} ORDER BY id"),
                )
                .await
                {
                    Ok(got) => assert_eq!(got, want, "session {s}: index lookup of k = {k}"),
                    Err(_) => {
                        if let Some(t) = model.tx[s].as_mut() {
                            t.aborted = true;
                        }
                    }
                }
            }
            write => {
                if model.tx[s].as_ref().is_some_and(|t| t.aborted) {
                    continue;
                }
                let Some((touched, after)) = model.effect(s, &write) else {
                    continue;
                };
                // Rows the other session's transaction locked (or could lock: any row a
                // statement through the index might read) would make this one wait.
                let through_index = matches!(write, Op::UpdateByK(..));
                if touched.iter().any(|id| model.locked_by_other(s, *id))
                    || (through_index
                        && model.tx[1 - s]
                            .as_ref()
                            .is_some_and(|t| !t.locked.is_empty()))
                {
                    continue;
                }
                let r = query(session, &sql_of(&write)).await;
                let Some(view) = after else {
                    // A duplicate key: 23505 and nothing written, or a fault's error.
                    let Err(code) = r else {
                        panic!("a duplicate key was inserted: {write:?}");
                    };
                    if let Some(t) = model.tx[s].as_mut() {
                        t.aborted = true;
                    } else if code != "23505" {
                        let same = model.committed.clone();
                        db = settle(&faulty, &store, db, &mut model, same).await;
                    }
                    continue;
                };
                match (&mut model.tx[s], r) {
                    (Some(t), Ok(_)) => {
                        for id in &touched {
                            t.pending.insert(*id, view.get(id).copied());
                        }
                        t.locked.extend(touched);
                    }
                    (Some(t), Err(_)) => {
                        t.aborted = true;
                        t.locked.extend(touched);
                    }
                    (None, Ok(_)) => model.committed = view,
                    // Unknown outcome; the other session's transaction goes with the reopen.
                    (None, Err(_)) => db = settle(&faulty, &store, db, &mut model, view).await,
                }
            }
        }
    }
    for s in 0..2 {
        if model.tx[s].take().is_some() {
            query(&db.s[s], "ROLLBACK").await.unwrap();
        }
    }
    let db = reopen(&faulty, &store, db).await;
    assert_eq!(
        query(&db.s[0], READ).await.unwrap(),
        table(&model.committed),
        "at the end"
    );
    for k in 0..4 {
        let by_index = query(
            &db.s[0],
            &format!("SELECT id FROM r WHERE k = {k} ORDER BY id"),
        )
        .await
        .unwrap();
        let by_scan = query(
            &db.s[0],
            &format!("SELECT id FROM r WHERE k + 0 = {k} ORDER BY id"),
        )
        .await
        .unwrap();
        assert_eq!(by_index, by_scan, "index and rows agree for k = {k}");
    }
    db.kv.close().await.unwrap();
    let _ = db.e;
    store.close().await.unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tierdb_testkit::model_cases(6), max_shrink_iters: 3, ..ProptestConfig::default() })]

    #[test]
    fn row_tables_match_the_model_under_store_faults(
        write_back in any::<bool>(),
        seed in any::<u64>(),
        actions in proptest::collection::vec(action(), 10..60),
    ) {
        let mode = if write_back { WriteMode::WriteBack } else { WriteMode::WriteThrough };
        let limit = std::time::Duration::from_secs(180);
        let outcome = tierdb_testkit::run_with_deadline(limit, run(mode, seed, actions));
        prop_assert!(outcome.is_ok(), "the model run ({:?}, seed {}) stalled", mode, seed);
    }
}
