//! One contract suite for every store the engines may be handed.
//!
//! Each backend (in-memory, a local directory, MinIO when `TIERDB_TEST_S3_URL` names a
//! bucket prefix) is checked raw and behind a `TieredStore` in each write mode, with DRAM
//! only, device only and both tiers. The contract is the part of `ObjectStore` the engines
//! rely on: read-your-writes, ranges, listing, deletes, copies, and conditional puts that
//! refuse to overwrite. `scripts/test.sh` starts MinIO and sets `TIERDB_REQUIRE_MINIO=1`,
//! under which a missing MinIO fails the suite instead of skipping it.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};
use tierdb_store::{CapacityOptions, StoreUrl, TierOptions, TieredStore, WriteMode, open_capacity};

/// A unique prefix per run, so runs against one MinIO bucket do not meet.
fn run_prefix(case: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("contract-{case}-{nanos}-{}", std::process::id())
}

fn bytes_of(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

async fn contract(store: &dyn ObjectStore, label: &str) {
    let a = Path::from("dir/a.bin");
    let b = Path::from("dir/sub/b.bin");
    let big = bytes_of(300_000, 1); // spans several 64 KiB blocks, not block aligned

    // Missing objects.
    assert!(
        matches!(
            store.get(&a).await,
            Err(object_store::Error::NotFound { .. })
        ),
        "{label}: get missing"
    );
    assert!(
        matches!(
            store.head(&a).await,
            Err(object_store::Error::NotFound { .. })
        ),
        "{label}: head missing"
    );

    // Read your writes, whole and in ranges (aligned, unaligned, across blocks, suffix).
    store.put(&a, PutPayload::from(big.clone())).await.unwrap();
    assert_eq!(
        store.get(&a).await.unwrap().bytes().await.unwrap(),
        big,
        "{label}: whole object"
    );
    assert_eq!(
        store.head(&a).await.unwrap().size,
        big.len() as u64,
        "{label}: head size"
    );
    for range in [
        0..1,
        65_536..131_072,
        1000..200_000,
        299_990..300_000,
        0..300_000,
    ] {
        let got = store.get_range(&a, range.clone()).await.unwrap();
        assert_eq!(
            got,
            big.slice(range.start as usize..range.end as usize),
            "{label}: range {range:?}"
        );
    }
    let suffix = store
        .get_opts(
            &a,
            GetOptions {
                range: Some(GetRange::Suffix(10)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(suffix.range, 299_990..300_000, "{label}: suffix range");
    assert_eq!(
        suffix.bytes().await.unwrap(),
        big.slice(299_990..),
        "{label}: suffix bytes"
    );
    assert!(
        store.get_range(&a, 400_000..400_010).await.is_err(),
        "{label}: range past the end"
    );

    // Overwrite: never the old version, not even partly (blocks are keyed by version).
    let newer = bytes_of(200_000, 7);
    store
        .put(&a, PutPayload::from(newer.clone()))
        .await
        .unwrap();
    assert_eq!(
        store.get(&a).await.unwrap().bytes().await.unwrap(),
        newer,
        "{label}: overwrite"
    );
    assert_eq!(
        store.get_range(&a, 100_000..100_100).await.unwrap(),
        newer.slice(100_000..100_100)
    );

    // Empty objects.
    let empty = Path::from("dir/empty");
    store.put(&empty, PutPayload::default()).await.unwrap();
    assert_eq!(
        store
            .get(&empty)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .len(),
        0,
        "{label}: empty"
    );

    // Listing, recursive and by delimiter.
    store
        .put(&b, PutPayload::from_static(b"bee"))
        .await
        .unwrap();
    let mut listed: Vec<String> = store
        .list(Some(&Path::from("dir")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    listed.sort();
    assert_eq!(
        listed,
        ["dir/a.bin", "dir/empty", "dir/sub/b.bin"],
        "{label}: list"
    );
    let sizes: Vec<u64> = store
        .list(Some(&Path::from("dir/sub")))
        .map_ok(|m| m.size)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(sizes, [3], "{label}: list sizes");
    let by_dir = store
        .list_with_delimiter(Some(&Path::from("dir")))
        .await
        .unwrap();
    let mut objects: Vec<String> = by_dir
        .objects
        .iter()
        .map(|m| m.location.to_string())
        .collect();
    objects.sort();
    assert_eq!(
        objects,
        ["dir/a.bin", "dir/empty"],
        "{label}: delimiter objects"
    );
    assert_eq!(
        by_dir.common_prefixes,
        [Path::from("dir/sub")],
        "{label}: delimiter prefixes"
    );
    let after: Vec<String> = store
        .list_with_offset(Some(&Path::from("dir")), &Path::from("dir/a.bin"))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    assert!(
        !after.contains(&"dir/a.bin".to_string()) && after.contains(&"dir/empty".to_string()),
        "{label}: offset {after:?}"
    );

    // Conditional create refuses an existing object and keeps it intact.
    let create = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let refused = store
        .put_opts(&b, PutPayload::from_static(b"other"), create.clone())
        .await;
    assert!(
        matches!(refused, Err(object_store::Error::AlreadyExists { .. })),
        "{label}: create existing: {refused:?}"
    );
    assert_eq!(
        store.get(&b).await.unwrap().bytes().await.unwrap(),
        Bytes::from_static(b"bee")
    );
    let fresh = Path::from("dir/fresh");
    store
        .put_opts(&fresh, PutPayload::from_static(b"1"), create)
        .await
        .unwrap();
    assert_eq!(
        store.get(&fresh).await.unwrap().bytes().await.unwrap(),
        Bytes::from_static(b"1")
    );

    // Copy and rename.
    let c = Path::from("copy/c.bin");
    store.copy(&b, &c).await.unwrap();
    assert_eq!(
        store.get(&c).await.unwrap().bytes().await.unwrap(),
        Bytes::from_static(b"bee"),
        "{label}: copy"
    );
    let d = Path::from("copy/d.bin");
    store.rename(&c, &d).await.unwrap();
    assert!(
        matches!(
            store.head(&c).await,
            Err(object_store::Error::NotFound { .. })
        ),
        "{label}: rename source"
    );
    assert_eq!(
        store.get(&d).await.unwrap().bytes().await.unwrap(),
        Bytes::from_static(b"bee"),
        "{label}: rename target"
    );

    // Deletes are visible at once; deleting a missing object is not an error for callers
    // that tolerate NotFound (S3 returns success, local returns NotFound).
    store.delete(&a).await.unwrap();
    assert!(
        matches!(
            store.get(&a).await,
            Err(object_store::Error::NotFound { .. })
        ),
        "{label}: deleted"
    );
    let listed: Vec<Path> = store
        .list(Some(&Path::from("dir")))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .unwrap();
    assert!(!listed.contains(&a), "{label}: deleted object listed");
    for p in [&b, &d, &empty, &fresh] {
        store.delete(p).await.unwrap();
    }
}

/// Backends under test: (label, store, a factory reopening the same capacity store).
fn backends() -> Vec<(String, StoreUrl, tempfile::TempDir)> {
    let mut out = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    out.push((
        "local".to_string(),
        StoreUrl::Local(dir.path().join("db")),
        dir,
    ));
    match std::env::var("TIERDB_TEST_S3_URL") {
        Ok(url) => {
            let StoreUrl::S3 { bucket, prefix } = StoreUrl::parse(&url).unwrap() else {
                panic!("TIERDB_TEST_S3_URL must be an s3:// URL, got {url}");
            };
            let prefix = format!("{prefix}/{}", run_prefix("s3"))
                .trim_start_matches('/')
                .to_string();
            out.push((
                "minio".to_string(),
                StoreUrl::S3 { bucket, prefix },
                tempfile::tempdir().unwrap(),
            ));
        }
        Err(_) if std::env::var("TIERDB_REQUIRE_MINIO").is_ok() => {
            panic!(
                "TIERDB_REQUIRE_MINIO is set but TIERDB_TEST_S3_URL is not: MinIO was not started"
            );
        }
        Err(_) => {
            eprintln!("TIERDB_TEST_S3_URL not set: MinIO backend skipped (scripts/test.sh runs it)")
        }
    }
    out
}

fn tier_configs(cache_dir: &std::path::Path) -> Vec<(String, TierOptions)> {
    let mut out = Vec::new();
    for mode in [
        WriteMode::WriteThrough,
        WriteMode::WriteAround,
        WriteMode::WriteBack,
    ] {
        for (tiers, memory, device) in [
            ("dram", 8 << 20, 0),
            ("device", 0, 16 << 20),
            ("dram+device", 1 << 20, 16 << 20),
        ] {
            if mode == WriteMode::WriteBack && tiers == "dram" {
                // write-back needs the device directory for its log; give it one without a
                // device read tier.
                out.push((
                    format!("{mode}/log-only"),
                    TierOptions {
                        memory_bytes: memory,
                        cache_dir: Some(cache_dir.join(format!("{mode}-log-only"))),
                        write_mode: mode,
                        ..TierOptions::default()
                    },
                ));
                continue;
            }
            out.push((
                format!("{mode}/{tiers}"),
                TierOptions {
                    memory_bytes: memory,
                    cache_dir: (device > 0).then(|| cache_dir.join(format!("{mode}-{tiers}"))),
                    cache_bytes: device,
                    write_mode: mode,
                    ..TierOptions::default()
                },
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_holds_for_every_backend_and_tier_configuration() {
    let capacity_options = CapacityOptions {
        create: true,
        ..Default::default()
    };
    // The in-memory store is checked raw and tiered too.
    contract(&object_store::memory::InMemory::new(), "memory/raw").await;
    for (backend, url, _keep) in backends() {
        let base = match &url {
            StoreUrl::Local(p) => StoreUrl::Local(p.clone()),
            other => other.clone(),
        };
        let raw = open_capacity(&base, &capacity_options).unwrap();
        tierdb_store::check_reachable(&base, raw.as_ref())
            .await
            .unwrap();
        contract(raw.as_ref(), &format!("{backend}/raw")).await;
        let cache_root = tempfile::tempdir().unwrap();
        for (name, options) in tier_configs(cache_root.path()) {
            let label = format!("{backend}/{name}");
            let sub = match &base {
                StoreUrl::Local(p) => StoreUrl::Local(p.join(name.replace('/', "-"))),
                StoreUrl::S3 { bucket, prefix } => StoreUrl::S3 {
                    bucket: bucket.clone(),
                    prefix: format!("{prefix}/{}", name.replace('/', "-")),
                },
                StoreUrl::Memory => StoreUrl::Memory,
            };
            let store = TieredStore::open(&sub, &capacity_options, options)
                .await
                .unwrap();
            contract(&store, &label).await;
            store.close().await.unwrap();
        }
        let mem = TieredStore::with_capacity(
            Arc::new(object_store::memory::InMemory::new()),
            "memory://".into(),
            TierOptions::default(),
        )
        .await
        .unwrap();
        contract(&mem, "memory/tiered").await;
    }
}
