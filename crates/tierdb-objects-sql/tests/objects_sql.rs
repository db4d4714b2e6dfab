//! The `zodb` tables over an object store on an in-memory capacity store: what they show,
//! that a query reads one tid while commits go on, and that damage fails the query naming
//! the object. (The oracle test against ZODB itself is python/tests/test_zodb_sql.py.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use object_store::memory::InMemory;
use tierdb_kv::{Batch, KvDb, KvHandle, KvOptions, KvWrite};
use tierdb_objects::records::{self, DataRecord};
use tierdb_objects::{Oid, Tid, Txn, TxnMeta, VersionedStore};
use tierdb_store::{TierOptions, TieredStore};

async fn open() -> Arc<VersionedStore> {
    let store = TieredStore::with_capacity(
        Arc::new(InMemory::new()),
        "memory".into(),
        TierOptions::default(),
    )
    .await
    .unwrap();
    let options = KvOptions {
        create: true,
        compaction: false,
        ..KvOptions::default()
    };
    let kv = KvDb::open(store, "zodb", "zodb", &options).await.unwrap();
    Arc::new(
        VersionedStore::open(KvHandle::Writer(Arc::new(kv)))
            .await
            .unwrap(),
    )
}

/// A ZODB record of class `m.C` whose state is `{"n": n}` plus references to `refs`.
fn record(class: &str, n: u8, refs: &[u64]) -> Bytes {
    let (module, name) = class.rsplit_once('.').unwrap();
    let mut p = vec![0x80, 0x03, b'c'];
    p.extend_from_slice(module.as_bytes());
    p.push(b'\n');
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(b"\n.");
    p.extend_from_slice(b"\x80\x03}(X\x01\x00\x00\x00nK");
    p.push(n);
    p.extend_from_slice(b"X\x01\x00\x00\x00r]");
    for r in refs {
        p.push(b'C');
        p.push(8);
        p.extend_from_slice(&r.to_be_bytes());
        p.extend_from_slice(b"Qa");
    }
    p.extend_from_slice(b"u.");
    Bytes::from(p)
}

async fn commit(s: &VersionedStore, desc: &str, writes: &[(Oid, Tid, Bytes)]) -> Tid {
    let mut txn = Txn::new(TxnMeta {
        user: Bytes::from("tester"),
        description: Bytes::from(desc.to_string()),
        // {'k': 1}, pickled
        extension: Bytes::from_static(b"\x80\x03}X\x01\x00\x00\x00kK\x01s."),
    });
    for (oid, serial, data) in writes {
        txn.store(*oid, *serial, Some(data.clone()));
    }
    let voted = s.vote(txn).await.unwrap();
    s.finish(voted).await.unwrap()
}

fn context(store: &Arc<VersionedStore>) -> SessionContext {
    let ctx = SessionContext::new_with_config(
        SessionConfig::new().with_default_catalog_and_schema("tierdb", "public"),
    );
    ctx.register_catalog(
        "tierdb",
        Arc::new(datafusion::catalog::MemoryCatalogProvider::new()),
    );
    tierdb_objects_sql::register(&ctx, store.clone()).unwrap();
    ctx
}

async fn ints(ctx: &SessionContext, sql: &str) -> Vec<Option<i64>> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches {
        let col = b.column(0).as_primitive::<Int64Type>();
        out.extend((0..col.len()).map(|i| (!col.is_null(i)).then(|| col.value(i))));
    }
    out
}

async fn texts(ctx: &SessionContext, sql: &str) -> Vec<Option<String>> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches {
        let col = datafusion::arrow::compute::cast(
            b.column(0),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let col = col.as_string::<i32>();
        out.extend((0..col.len()).map(|i| (!col.is_null(i)).then(|| col.value(i).to_string())));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_refs_revisions_and_transactions() {
    let s = open().await;
    let t1 = commit(
        &s,
        "first",
        &[
            (Oid(0), Tid::ZERO, record("app.Root", 1, &[1, 2])),
            (Oid(1), Tid::ZERO, record("app.Leaf", 2, &[])),
            (Oid(2), Tid::ZERO, record("app.Leaf", 3, &[1])),
        ],
    )
    .await;
    let t2 = commit(&s, "second", &[(Oid(1), t1, record("app.Leaf", 9, &[]))]).await;
    let ctx = context(&s);

    assert_eq!(
        ints(&ctx, "SELECT oid FROM zodb.objects ORDER BY oid").await,
        vec![Some(0), Some(1), Some(2)]
    );
    assert_eq!(
        ints(&ctx, "SELECT tid FROM zodb.objects WHERE oid = 1").await,
        vec![Some(t2.0 as i64)]
    );
    assert_eq!(
        texts(
            &ctx,
            "SELECT class_name || ':' || CAST(n AS VARCHAR) FROM \
             (SELECT class_name, count(*) AS n FROM zodb.objects GROUP BY class_name) \
             ORDER BY 1"
        )
        .await,
        vec![Some("app.Leaf:2".into()), Some("app.Root:1".into())]
    );
    assert_eq!(
        texts(&ctx, "SELECT state FROM zodb.objects WHERE oid = 1").await,
        vec![Some(r#"{"n":9,"r":[]}"#.into())]
    );
    assert_eq!(
        texts(&ctx, "SELECT state FROM zodb.objects WHERE oid = 0").await,
        vec![Some(r#"{"n":1,"r":[{"$ref":1},{"$ref":2}]}"#.into())]
    );
    assert_eq!(
        ints(&ctx, "SELECT ref_oid FROM zodb.refs ORDER BY oid, ref_oid").await,
        vec![Some(1), Some(2), Some(1)]
    );
    // Sizes without decoding equal the pickle's length.
    assert_eq!(
        ints(&ctx, "SELECT size FROM zodb.objects WHERE oid = 2").await,
        vec![Some(record("app.Leaf", 3, &[1]).len() as i64)]
    );
    assert_eq!(
        ints(
            &ctx,
            "SELECT prev_tid FROM zodb.revisions WHERE oid = 1 ORDER BY tid"
        )
        .await,
        vec![None, Some(t1.0 as i64)]
    );
    assert_eq!(
        texts(
            &ctx,
            "SELECT description || ' ' || user_name || ' ' || extension \
             FROM zodb.transactions ORDER BY tid"
        )
        .await,
        vec![
            Some(r#"first tester {"k":1}"#.into()),
            Some(r#"second tester {"k":1}"#.into())
        ]
    );
    assert_eq!(
        ints(&ctx, "SELECT count(*) FROM zodb.blobs").await,
        vec![Some(0)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_reads_one_tid_while_commits_go_on() {
    let s = open().await;
    // More objects than one cursor page (1024 keys), each with two revisions.
    let n = 1500u64;
    let writes: Vec<_> = (0..n)
        .map(|o| (Oid(o), Tid::ZERO, record("app.Leaf", 1, &[])))
        .collect();
    let t1 = commit(&s, "create", &writes).await;
    let writes: Vec<_> = (0..n)
        .map(|o| (Oid(o), t1, record("app.Leaf", 2, &[])))
        .collect();
    let t2 = commit(&s, "update", &writes).await;
    let ctx = context(&s);
    let df = ctx.sql("SELECT oid, tid FROM zodb.objects").await.unwrap();
    let mut stream = df.execute_stream().await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    // Commits after the query started: an update of every object and new objects.
    let writes: Vec<_> = (0..n + 10)
        .map(|o| {
            let serial = if o < n { t2 } else { Tid::ZERO };
            (Oid(o), serial, record("app.Leaf", 3, &[]))
        })
        .collect();
    commit(&s, "later", &writes).await;
    let mut rows = vec![first];
    while let Some(b) = stream.next().await {
        rows.push(b.unwrap());
    }
    let mut seen = 0;
    for b in rows {
        let tids = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            assert_eq!(tids.value(i), t2.0 as i64);
            seen += 1;
        }
    }
    assert_eq!(seen, n);
    // A join of two tables reads one tid too, and a new query sees the later commit.
    assert_eq!(
        ints(
            &ctx,
            "SELECT count(*) FROM zodb.objects o JOIN zodb.revisions r \
             ON o.oid = r.oid AND o.tid = r.tid"
        )
        .await,
        vec![Some(n as i64 + 10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_states_keep_their_class_and_damage_names_the_object() {
    let s = open().await;
    let mut bad_state = record("app.Odd", 1, &[]).to_vec();
    bad_state.truncate(bad_state.len() - 2);
    let t1 = commit(
        &s,
        "c",
        &[
            (Oid(0), Tid::ZERO, Bytes::from(bad_state)),
            (Oid(1), Tid::ZERO, record("app.Leaf", 1, &[])),
        ],
    )
    .await;
    let ctx = context(&s);
    assert_eq!(
        texts(
            &ctx,
            "SELECT class_name || ' ' || coalesce(state, 'NULL') || ' ' || state_error \
             FROM zodb.objects WHERE oid = 0"
        )
        .await[0]
            .as_deref()
            .unwrap()
            .split(" state pickle")
            .next(),
        Some("app.Odd NULL")
    );

    // Flip a byte of object 1's stored data: its hash no longer matches.
    let data = record("app.Leaf", 1, &[]);
    let h = *blake3::hash(&data).as_bytes();
    let key = records::data_key(&h);
    let mut flipped = data.to_vec();
    flipped[5] ^= 1;
    let rec = DataRecord {
        codec: 0,
        raw_len: data.len() as u64,
        inline: Bytes::from(flipped),
        chunks: 0,
    };
    let mut b = Batch::new();
    b.put(key, rec.encode());
    s.kv().writer().unwrap().commit(b).await.unwrap();
    let err = ctx
        .sql("SELECT state FROM zodb.objects")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("object {}", Oid(1))), "{err}");
    assert!(err.contains(&format!("tid {t1}")), "{err}");
    // Columns that do not read the data still answer.
    assert_eq!(
        ints(&ctx, "SELECT count(*) FROM zodb.objects").await,
        vec![Some(2)]
    );
}
