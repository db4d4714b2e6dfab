//! The front door: one open for every role and workload, one close, errors with kinds.

#![allow(clippy::unwrap_used)]

use tierdb_engine::{Compression, Database, ErrorKind, OpenOptions, Role, Workload};
use tierdb_kv::{KvRead, KvWrite};

#[test]
fn defaults_are_chosen_per_workload() {
    let kv = OpenOptions::new(Workload::Kv, Role::Writer);
    let objects = OpenOptions::new(Workload::Objects, Role::Writer);
    let tables = OpenOptions::new(Workload::Tables, Role::Follower);
    assert_eq!(kv.kv.compression, Compression::Zstd);
    assert_eq!(objects.kv.compression, Compression::Lz4);
    assert!(objects.kv.block_cache_bytes > 0 && kv.kv.block_cache_bytes == 0);
    assert_eq!(tables.store.tiers.sequential_cutoff_bytes, u64::MAX);
    assert_eq!(tables.role, Role::Follower);
    assert!(!kv.kv.create && !kv.pin_checkpoint);
}

#[tokio::test]
async fn a_writer_and_a_follower_open_one_database_and_close_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("db");
    let url = url.to_str().unwrap();

    let missing = Database::open(url, &OpenOptions::new(Workload::Kv, Role::Writer)).await;
    assert_eq!(missing.unwrap_err().kind(), ErrorKind::NotFound);

    let mut options = OpenOptions::new(Workload::Kv, Role::Writer);
    options.kv.create = true;
    let writer = Database::open(url, &options).await.unwrap();
    assert!(!writer.is_read_only());
    writer.writer("put").unwrap().put(b"k", b"v").await.unwrap();
    writer.close().await.unwrap();

    let follower = Database::open(url, &OpenOptions::new(Workload::Kv, Role::Follower))
        .await
        .unwrap();
    assert!(follower.is_read_only());
    assert_eq!(follower.kv().get(b"k").await.unwrap().unwrap(), &b"v"[..]);
    let refused = follower.writer("put").unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Input);
    assert!(
        refused.to_string().contains("needs its writer"),
        "{refused}"
    );
    follower.close().await.unwrap();

    // Closed means released: a new writer opens at once, and sees the commit.
    let again = Database::open(url, &options).await.unwrap();
    assert_eq!(again.kv().get(b"k").await.unwrap().unwrap(), &b"v"[..]);
    again.close().await.unwrap();
}

#[tokio::test]
async fn the_object_store_and_the_tables_open_on_the_same_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("db");
    let mut options = OpenOptions::new(Workload::Objects, Role::Writer);
    options.kv.create = true;
    let db = Database::open(url.to_str().unwrap(), &options)
        .await
        .unwrap();
    let objects = db.objects().await.unwrap();
    assert!(!objects.is_read_only());
    let tables = db.tables();
    assert!(!tables.is_read_only());
    assert_eq!(tables.root(), db.path());
    db.close().await.unwrap();
}

#[test]
fn database_urls_name_their_own_prefix() {
    let (root, path) = tierdb_engine::locate("/data/db").unwrap();
    assert_eq!(
        (root.to_string().as_str(), path.as_str()),
        ("file:///", "data/db")
    );
    let e = tierdb_engine::locate("s3://bucket").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Input);
    assert!(e.to_string().contains("s3://bucket/mydb"), "{e}");
    assert_eq!(
        tierdb_engine::locate("/").unwrap_err().kind(),
        ErrorKind::Input
    );
}
