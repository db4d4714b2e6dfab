//! Checked-in images of every current on-store format: a small key-value database, a ZODB
//! object store (with a record large enough to be split into chunks) and a table, written by
//! `write_format_images` below and kept in `tests/formats/`. Each test opens a copy of an
//! image with today's code and reads everything in it, so a change that cannot read the
//! databases people already have fails CI. A deliberate format change bumps the version,
//! teaches the code to read (or to refuse, by name) the old one, and adds new images beside
//! the old ones; it never rewrites them.
//!
//! To write images of a new format version:
//! `TIERDB_WRITE_FORMAT_IMAGES=1 cargo test -p tierdb-engine --test formats -- --ignored`

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tierdb_engine::{Database, OpenOptions, Role, Workload};
use tierdb_kv::{Batch, KvRead};
use tierdb_objects::{Oid, Tid, Txn, TxnMeta};
use tierdb_tables::{EngineOptions, SqlEngine};

/// The images of the formats this build writes: KV format 2, object records 2, catalog 1.
const IMAGES: &str = "tests/formats/kv2-objects2-catalog1";

fn image(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(IMAGES)
        .join(kind)
}

/// A copy of the image, so that opening it can never change the checked-in files.
fn copy_of(kind: &str) -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&image(kind), &tmp.path().join(kind));
    let url = tmp.path().join(kind).to_str().unwrap().to_string();
    (tmp, url)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// Deterministic bytes that do not compress (a large record stays large: chunks).
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const KV_KEYS: u32 = 50;
const BIG: usize = 300 << 10;

fn meta(desc: &str) -> TxnMeta {
    TxnMeta {
        user: Bytes::from_static(b"image"),
        description: Bytes::from(desc.to_string()),
        extension: Bytes::new(),
    }
}

/// The object store's transactions: (tid, [(oid, data)]).
fn object_history() -> Vec<(Tid, Vec<(Oid, Bytes)>)> {
    vec![
        (
            Tid(0x03e0_0000_0000_0001),
            vec![
                (Oid(0), Bytes::from_static(b"root v1")),
                (Oid(1), Bytes::from_static(b"one v1")),
            ],
        ),
        (
            Tid(0x03e0_0000_0000_0002),
            vec![
                (Oid(1), Bytes::from_static(b"one v2")),
                (Oid(2), Bytes::from(noise(BIG))),
            ],
        ),
    ]
}

const TABLE_ROWS: i64 = 1000;

#[tokio::test]
async fn the_key_value_image_reads() {
    let (_tmp, url) = copy_of("kv");
    let db = Database::open(&url, &OpenOptions::new(Workload::Kv, Role::Follower))
        .await
        .unwrap();
    let rows = db.kv().scan_prefix(b"key/", None).await.unwrap();
    assert_eq!(rows.len(), KV_KEYS as usize);
    for (i, (k, v)) in rows.iter().enumerate() {
        assert_eq!(k, &format!("key/{i:03}"));
        assert_eq!(v, &format!("value {i}"));
    }
    db.close().await.unwrap();
}

#[tokio::test]
async fn the_object_store_image_reads() {
    let (_tmp, url) = copy_of("objects");
    let db = Database::open(&url, &OpenOptions::new(Workload::Objects, Role::Follower))
        .await
        .unwrap();
    let store = db.objects().await.unwrap();
    let history = object_history();
    assert_eq!(store.last_tid(), history[1].0);
    assert_eq!(
        store.load(Oid(1)).await.unwrap(),
        (Bytes::from_static(b"one v2"), history[1].0)
    );
    assert_eq!(store.load(Oid(2)).await.unwrap().0, Bytes::from(noise(BIG)));
    assert_eq!(store.history(Oid(1), 10).await.unwrap().len(), 2);
    let report = store.verify().await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.transactions, 2);
    db.close().await.unwrap();
}

#[tokio::test]
async fn the_table_image_reads() {
    let (_tmp, url) = copy_of("tables");
    let db = Database::open(&url, &OpenOptions::new(Workload::Tables, Role::Follower))
        .await
        .unwrap();
    let sql = SqlEngine::new(Arc::new(db.tables()), &EngineOptions::default()).unwrap();
    let r = sql
        .sql("SELECT count(*), sum(k), min(name), max(d) FROM t")
        .await
        .unwrap();
    let text = datafusion_text(&r[0].batches);
    let want = format!(
        "{TABLE_ROWS}|{}|n0|2024-01-28",
        TABLE_ROWS * (TABLE_ROWS - 1) / 2
    );
    assert!(text.contains(&want), "{text}");
    db.close().await.unwrap();
}

fn datafusion_text(batches: &[datafusion::arrow::array::RecordBatch]) -> String {
    let mut w = datafusion::arrow::csv::WriterBuilder::new()
        .with_header(false)
        .with_delimiter(b'|')
        .build(Vec::new());
    for b in batches {
        w.write(b).unwrap();
    }
    String::from_utf8(w.into_inner()).unwrap()
}

#[tokio::test]
#[ignore = "writes the images: TIERDB_WRITE_FORMAT_IMAGES=1 ... -- --ignored"]
async fn write_format_images() {
    if std::env::var_os("TIERDB_WRITE_FORMAT_IMAGES").is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(IMAGES);
    assert!(
        !root.exists(),
        "{} exists: images are never rewritten",
        root.display()
    );

    let url = |kind: &str| root.join(kind).to_str().unwrap().to_string();
    let writer = |w: Workload| {
        let mut o = OpenOptions::new(w, Role::Writer);
        o.kv.create = true;
        o
    };

    let db = Database::open(&url("kv"), &writer(Workload::Kv))
        .await
        .unwrap();
    let mut batch = Batch::new();
    for i in 0..KV_KEYS {
        batch.put(format!("key/{i:03}"), format!("value {i}"));
    }
    tierdb_kv::KvWrite::commit(db.writer("images").unwrap().as_ref(), batch)
        .await
        .unwrap();
    db.writer("images").unwrap().flush_memtable().await.unwrap();
    db.close().await.unwrap();

    let db = Database::open(&url("objects"), &writer(Workload::Objects))
        .await
        .unwrap();
    let store = db.objects().await.unwrap();
    let txns = object_history()
        .into_iter()
        .map(|(tid, records)| {
            let mut txn = Txn::restoring(meta("image"), tid);
            for (oid, data) in records {
                txn.restore(oid, Some(data), None);
            }
            txn
        })
        .collect();
    store.restore_many(txns).await.unwrap();
    db.writer("images").unwrap().flush_memtable().await.unwrap();
    db.close().await.unwrap();

    let db = Database::open(&url("tables"), &writer(Workload::Tables))
        .await
        .unwrap();
    let sql = SqlEngine::new(Arc::new(db.tables()), &EngineOptions::default()).unwrap();
    sql.sql("CREATE TABLE t (k BIGINT NOT NULL, name VARCHAR, d DATE) ORDER BY (k)")
        .await
        .unwrap();
    let values: Vec<String> = (0..TABLE_ROWS)
        .map(|i| format!("({i}, 'n{i}', DATE '2024-01-{:02}')", i % 28 + 1))
        .collect();
    sql.sql(&format!("INSERT INTO t VALUES {}", values.join(", ")))
        .await
        .unwrap();
    db.writer("images").unwrap().flush_memtable().await.unwrap();
    db.close().await.unwrap();
}
