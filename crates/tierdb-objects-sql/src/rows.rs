//! Record batches of the `zodb` tables, a cursor page at a time.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use futures::{Stream, StreamExt, TryStreamExt};
use tierdb_objects::{ObjectCursor, Oid, RevisionCursor, RevisionRow, Tid, pickle, unpickle};

use crate::tables::{Scan, TableKind};

/// Data records read at once within a page.
const READ_AHEAD: usize = 16;
/// Transactions per page.
const TXN_PAGE: usize = 1024;

enum Cursor {
    Objects(ObjectCursor),
    Revisions(RevisionCursor),
    Transactions { after: Option<Tid>, done: bool },
}

fn failed(what: String) -> DataFusionError {
    DataFusionError::Execution(what)
}

pub(crate) fn batches(scan: Arc<Scan>) -> impl Stream<Item = Result<RecordBatch>> + Send {
    let cursor = match scan.kind {
        TableKind::Objects | TableKind::Refs => Cursor::Objects(scan.store.object_cursor(scan.at)),
        TableKind::Revisions | TableKind::Blobs => {
            Cursor::Revisions(scan.store.revision_cursor(scan.at))
        }
        TableKind::Transactions => Cursor::Transactions {
            after: None,
            done: false,
        },
    };
    futures::stream::try_unfold((scan, cursor), |(scan, mut cursor)| async move {
        loop {
            let batch = match &mut cursor {
                Cursor::Objects(c) => {
                    let Some(page) = scan.store.next_objects(c).await.map_err(store_err)? else {
                        return Ok(None);
                    };
                    match scan.kind {
                        TableKind::Refs => refs(&scan, page).await?,
                        _ => objects(&scan, page).await?,
                    }
                }
                Cursor::Revisions(c) => {
                    let Some(page) = scan.store.next_revisions(c).await.map_err(store_err)? else {
                        return Ok(None);
                    };
                    match scan.kind {
                        TableKind::Blobs => blobs(&scan, page).await?,
                        _ => revisions(&scan, page).await?,
                    }
                }
                Cursor::Transactions { after, done } => {
                    if *done {
                        return Ok(None);
                    }
                    let page = scan
                        .store
                        .transaction_records(*after, scan.at, TXN_PAGE)
                        .await
                        .map_err(store_err)?;
                    *done = page.len() < TXN_PAGE;
                    *after = page.last().map(|(t, _)| *t).or(*after);
                    transactions(&scan, page)?
                }
            };
            if batch.num_rows() > 0 {
                return Ok(Some((batch, (scan, cursor))));
            }
        }
    })
}

fn store_err(e: tierdb_objects::ObjError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn batch(scan: &Scan, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(scan.schema.clone(), columns)?)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn id(v: u64) -> i64 {
    v as i64
}

/// What `zodb.objects` shows of one object.
struct ObjectRow {
    oid: Oid,
    tid: Tid,
    class_name: Option<String>,
    size: u64,
    stored_size: u64,
    state: Option<String>,
    state_error: Option<String>,
}

async fn object_row(scan: Arc<Scan>, r: RevisionRow) -> Result<ObjectRow> {
    let h = r.data.unwrap_or_default();
    let damaged = |e: tierdb_objects::ObjError| {
        failed(format!(
            "zodb.objects: object {} (tid {}) cannot be read: {e}",
            r.oid, r.tid
        ))
    };
    let decode = ["class_name", "state", "state_error"]
        .iter()
        .any(|c| scan.wants(c));
    let mut row = ObjectRow {
        oid: r.oid,
        tid: r.tid,
        class_name: None,
        size: 0,
        stored_size: 0,
        state: None,
        state_error: None,
    };
    if decode {
        let data = scan.store.read_data(&h).await.map_err(damaged)?;
        row.size = data.len() as u64;
        match unpickle::decode_record(&data) {
            Ok(d) => {
                row.class_name = d.class_name;
                match d.state {
                    Ok(v) => row.state = Some(v.to_string()),
                    Err(e) => row.state_error = Some(e),
                }
            }
            Err(e) => row.state_error = Some(e),
        }
    }
    if scan.wants("stored_size") || (!decode && scan.wants("size")) {
        let sizes = scan.store.data_sizes(&h).await.map_err(damaged)?;
        row.size = sizes.raw;
        row.stored_size = sizes.stored;
    }
    Ok(row)
}

async fn objects(scan: &Arc<Scan>, page: Vec<RevisionRow>) -> Result<RecordBatch> {
    let rows: Vec<ObjectRow> = futures::stream::iter(page)
        .map(|r| object_row(scan.clone(), r))
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    let n = rows.len();
    let (mut oid, mut tid) = (
        Int64Builder::with_capacity(n),
        Int64Builder::with_capacity(n),
    );
    let (mut size, mut stored) = (
        Int64Builder::with_capacity(n),
        Int64Builder::with_capacity(n),
    );
    let mut class = StringBuilder::new();
    let mut state = StringBuilder::new();
    let mut error = StringBuilder::new();
    for r in rows {
        oid.append_value(id(r.oid.0));
        tid.append_value(id(r.tid.0));
        class.append_option(r.class_name);
        size.append_value(r.size as i64);
        stored.append_value(r.stored_size as i64);
        state.append_option(r.state);
        error.append_option(r.state_error);
    }
    batch(
        scan,
        vec![
            Arc::new(oid.finish()),
            Arc::new(tid.finish()),
            Arc::new(class.finish()),
            Arc::new(size.finish()),
            Arc::new(stored.finish()),
            Arc::new(state.finish()),
            Arc::new(error.finish()),
        ],
    )
}

async fn refs(scan: &Arc<Scan>, page: Vec<RevisionRow>) -> Result<RecordBatch> {
    let found: Vec<(RevisionRow, Vec<Oid>)> = futures::stream::iter(page)
        .map(|r| {
            let scan = scan.clone();
            async move {
                let data = scan
                    .store
                    .read_data(&r.data.unwrap_or_default())
                    .await
                    .map_err(|e| {
                        failed(format!(
                            "zodb.refs: object {} (tid {}) cannot be read: {e}",
                            r.oid, r.tid
                        ))
                    })?;
                // A record whose references cannot be read has none here; zodb.objects
                // says why in state_error.
                let to = pickle::references(&data).unwrap_or_default();
                Ok::<_, DataFusionError>((r, to))
            }
        })
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    let (mut oid, mut tid, mut to) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    for (r, refs) in found {
        for t in refs {
            oid.append_value(id(r.oid.0));
            tid.append_value(id(r.tid.0));
            to.append_value(id(t.0));
        }
    }
    batch(
        scan,
        vec![
            Arc::new(oid.finish()),
            Arc::new(tid.finish()),
            Arc::new(to.finish()),
        ],
    )
}

async fn revisions(scan: &Arc<Scan>, page: Vec<RevisionRow>) -> Result<RecordBatch> {
    let want_size = scan.wants("size");
    let sizes: Vec<Option<u64>> = futures::stream::iter(page.clone())
        .map(|r| {
            let scan = scan.clone();
            async move {
                match (r.data, want_size) {
                    (Some(h), true) => {
                        let s = scan.store.data_sizes(&h).await.map_err(|e| {
                            failed(format!(
                                "zodb.revisions: revision {} of object {} cannot be read: {e}",
                                r.tid, r.oid
                            ))
                        })?;
                        Ok::<_, DataFusionError>(Some(s.raw))
                    }
                    _ => Ok(None),
                }
            }
        })
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    let mut oid = Int64Builder::new();
    let mut tid = Int64Builder::new();
    let mut prev = Int64Builder::new();
    let mut size = Int64Builder::new();
    let mut data_hash = StringBuilder::new();
    let mut data_tid = Int64Builder::new();
    let mut blob_hash = StringBuilder::new();
    for (r, s) in page.iter().zip(sizes) {
        oid.append_value(id(r.oid.0));
        tid.append_value(id(r.tid.0));
        prev.append_option((r.prev != Tid::ZERO).then(|| id(r.prev.0)));
        size.append_option(s.map(|s| s as i64));
        data_hash.append_option(r.data.map(|h| hex(&h)));
        data_tid.append_option(r.data_txn.map(|t| id(t.0)));
        blob_hash.append_option(r.blob.map(|h| hex(&h)));
    }
    batch(
        scan,
        vec![
            Arc::new(oid.finish()),
            Arc::new(tid.finish()),
            Arc::new(prev.finish()),
            Arc::new(size.finish()),
            Arc::new(data_hash.finish()),
            Arc::new(data_tid.finish()),
            Arc::new(blob_hash.finish()),
        ],
    )
}

async fn blobs(scan: &Arc<Scan>, page: Vec<RevisionRow>) -> Result<RecordBatch> {
    let with_blob: Vec<_> = page
        .into_iter()
        .filter_map(|r| r.blob.map(|b| (r, b)))
        .collect();
    let want_size = scan.wants("size");
    let sizes: Vec<u64> = futures::stream::iter(with_blob.clone())
        .map(|(r, b)| {
            let scan = scan.clone();
            async move {
                if !want_size {
                    return Ok(0);
                }
                scan.store
                    .blob_size(r.oid, r.tid, &b)
                    .await
                    .map_err(|e| failed(format!("zodb.blobs: {e}")))
            }
        })
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    let mut oid = Int64Builder::new();
    let mut tid = Int64Builder::new();
    let mut hash = StringBuilder::new();
    let mut size = Int64Builder::new();
    for ((r, b), s) in with_blob.iter().zip(sizes) {
        oid.append_value(id(r.oid.0));
        tid.append_value(id(r.tid.0));
        hash.append_value(hex(b));
        size.append_value(s as i64);
    }
    batch(
        scan,
        vec![
            Arc::new(oid.finish()),
            Arc::new(tid.finish()),
            Arc::new(hash.finish()),
            Arc::new(size.finish()),
        ],
    )
}

fn transactions(scan: &Scan, page: Vec<(Tid, tierdb_objects::TxnRecord)>) -> Result<RecordBatch> {
    let mut tid = Int64Builder::new();
    let mut time = TimestampMicrosecondBuilder::new().with_timezone("UTC");
    let mut user = StringBuilder::new();
    let mut description = StringBuilder::new();
    let mut extension = StringBuilder::new();
    let mut packed = BooleanBuilder::new();
    let want_extension = scan.wants("extension");
    for (t, rec) in page {
        tid.append_value(id(t.0));
        time.append_value((t.to_unix() * 1e6).round() as i64);
        user.append_value(String::from_utf8_lossy(&rec.meta.user));
        description.append_value(String::from_utf8_lossy(&rec.meta.description));
        // ZODB pickles the extension mapping; empty when there is none.
        let ext = &rec.meta.extension;
        extension.append_option(
            (want_extension && !ext.is_empty())
                .then(|| unpickle::decode_pickle(ext).ok().map(|v| v.to_string()))
                .flatten(),
        );
        packed.append_value(rec.status == b'p');
    }
    batch(
        scan,
        vec![
            Arc::new(tid.finish()),
            Arc::new(time.finish()),
            Arc::new(user.finish()),
            Arc::new(description.finish()),
            Arc::new(extension.finish()),
            Arc::new(packed.finish()),
        ],
    )
}
