//! Model-based test: random operations against a `TieredStore` and a `BTreeMap` model side
//! by side, with faults injected into the capacity store underneath.
//!
//! Faults are errors before a request (nothing happened) and after it (it happened, the
//! caller was told it failed). A write that returned an error leaves its key uncertain
//! (old or new value); every successful read must return a value the model allows, and
//! settles the key. At the end the faults are healed, the store is flushed, and the
//! capacity store itself must hold exactly what the model says, for every write mode.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use proptest::prelude::*;
use tierdb_store::{FaultConfig, FaultStore, TierOptions, TieredStore, WriteMode};

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u16, u8),
    Delete(u8),
    Get(u8),
    Range(u8, u16, u16),
    List,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 0u16..3000, any::<u8>()).prop_map(|(k, n, s)| Op::Put(k, n, s)),
        1 => (0u8..6).prop_map(Op::Delete),
        4 => (0u8..6).prop_map(Op::Get),
        2 => (0u8..6, any::<u16>(), any::<u16>()).prop_map(|(k, a, b)| Op::Range(k, a, b)),
        1 => Just(Op::List),
        1 => Just(Op::Flush),
    ]
}

fn value(n: u16, seed: u8) -> Bytes {
    (0..n)
        .map(|i| (i as u8).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

/// The values a key may have: `None` means absent.
type Possible = BTreeSet<Option<Bytes>>;

fn run(ops: Vec<Op>, mode: WriteMode, seed: u64) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let faults = FaultConfig {
            error_before: 0.1,
            error_after: 0.05,
            ..Default::default()
        };
        let faulty = Arc::new(FaultStore::new(inner.clone(), faults, seed));
        let cache = tempfile::tempdir().unwrap();
        let options = TierOptions {
            memory_bytes: 64 << 10,
            block_bytes: 512, // small blocks: every value spans several
            cache_dir: Some(cache.path().to_path_buf()),
            cache_bytes: 4 << 20,
            write_mode: mode,
            upload_attempts_max: 1000,
            ..TierOptions::default()
        };
        let store = TieredStore::with_capacity(faulty.clone(), "memory://model".into(), options)
            .await
            .unwrap();
        let mut model: BTreeMap<u8, Possible> =
            (0..6).map(|k| (k, BTreeSet::from([None]))).collect();
        for op in ops {
            match op {
                Op::Put(k, n, s) => {
                    let v = value(n, s);
                    let ok = store
                        .put(&Path::from(format!("k{k}")), PutPayload::from(v.clone()))
                        .await
                        .is_ok();
                    let entry = model.get_mut(&k).unwrap();
                    if ok {
                        *entry = BTreeSet::from([Some(v)]);
                    } else {
                        entry.insert(Some(v));
                    }
                }
                Op::Delete(k) => {
                    let ok = store.delete(&Path::from(format!("k{k}"))).await.is_ok();
                    let entry = model.get_mut(&k).unwrap();
                    if ok {
                        *entry = BTreeSet::from([None]);
                    } else {
                        entry.insert(None);
                    }
                }
                Op::Get(k) => {
                    let got = match store.get(&Path::from(format!("k{k}"))).await {
                        Ok(r) => match r.bytes().await {
                            Ok(b) => Some(Some(b)),
                            Err(_) => None,
                        },
                        Err(object_store::Error::NotFound { .. }) => Some(None),
                        Err(_) => None, // an injected fault: nothing learned
                    };
                    if let Some(got) = got {
                        let entry = model.get_mut(&k).unwrap();
                        prop_assert!(
                            entry.contains(&got),
                            "k{k}: got {got:?}, model allows {entry:?}"
                        );
                        *entry = BTreeSet::from([got]);
                    }
                }
                Op::Range(k, a, b) => {
                    let (start, end) = (u64::from(a.min(b)), u64::from(a.max(b)) + 1);
                    if let Ok(got) = store
                        .get_range(&Path::from(format!("k{k}")), start..end)
                        .await
                    {
                        let entry = &model[&k];
                        let allowed = entry.iter().flatten().any(|v| {
                            let len = v.len() as u64;
                            start < len && got == v.slice(start as usize..end.min(len) as usize)
                        });
                        prop_assert!(
                            allowed,
                            "k{k} range {start}..{end}: {} bytes not allowed by {entry:?}",
                            got.len()
                        );
                    }
                }
                Op::List => {
                    if let Ok(listed) = store
                        .list(None)
                        .map_ok(|m| m.location.to_string())
                        .try_collect::<Vec<_>>()
                        .await
                    {
                        for (k, entry) in &model {
                            let present = listed.contains(&format!("k{k}"));
                            prop_assert!(
                                entry.iter().any(|v| v.is_some() == present),
                                "k{k} listed={present}, model {entry:?}"
                            );
                        }
                    }
                }
                Op::Flush => {
                    let _ = store.flush().await; // may report failing uploads; data stays logged
                }
            }
        }
        // Heal, drain, and check the capacity store itself.
        faulty.set_config(FaultConfig::default());
        store.close().await.unwrap();
        for (k, entry) in &model {
            let got = match inner.get(&Path::from(format!("k{k}"))).await {
                Ok(r) => Some(r.bytes().await.unwrap()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("{e}"),
            };
            prop_assert!(
                entry.contains(&got),
                "capacity k{k}: {got:?} not in {entry:?}"
            );
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn write_through_matches_model(ops in prop::collection::vec(op(), 1..60), seed in any::<u64>()) {
        run(ops, WriteMode::WriteThrough, seed)?;
    }

    #[test]
    fn write_around_matches_model(ops in prop::collection::vec(op(), 1..60), seed in any::<u64>()) {
        run(ops, WriteMode::WriteAround, seed)?;
    }

    #[test]
    fn write_back_matches_model(ops in prop::collection::vec(op(), 1..60), seed in any::<u64>()) {
        run(ops, WriteMode::WriteBack, seed)?;
    }
}
