//! A Delta Lake transaction log beside the catalog, over the same Parquet segments, so
//! other engines (DuckDB's `delta_scan`, the `deltalake` Python package, Polars, Spark)
//! read a tierdb table straight from the bucket, with no export.
//!
//! Each table's segments live under `<db>/tables/<table id>/`; that directory is also a
//! Delta table: `_delta_log/<version, 20 digits>.json`, one JSON action per line
//! (protocol 1/2, `metaData` with the schema, `add` and `remove` of segment files,
//! `commitInfo`). The KV catalog stays the source of truth: after every catalog commit
//! that changes a table (create, load, INSERT, UPDATE, DELETE, drop) the writer appends one
//! Delta version holding the difference between the catalog's segments and the files of
//! the log's last version, created if absent (two writers cannot both write version N).
//! Delta versions therefore follow catalog commits in the same order; a version that was
//! not written (a crash between the two commits, a store error) is made up by the next
//! commit of that table, which carries the whole difference.
//!
//! Why not the `deltalake` crate: tierdb writes only these append-only commits of whole
//! files (no reads of Delta tables, no checkpoints, no deletion vectors), a few JSON lines
//! per commit; the crate would bring a second object-store stack and its own DataFusion
//! integration into the build for that. The format's own readers check what is written
//! here: `python/tests/test_scale.py` reads tables with DuckDB's delta extension and with
//! `deltalake` (delta-rs).
//!
//! Not written: checkpoints (readers replay every JSON version: fine for thousands of
//! commits, slower past that), column statistics other than row and null counts.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde_json::{Value, json};

use crate::catalog::{ColumnType, SegmentMeta, TableDef};
use crate::error::{Result, TableError};

/// The Delta table directory of `table` in the database at `root`.
pub fn table_root(root: &str, table_id: u64) -> String {
    format!("{}/tables/{table_id}", root.trim_end_matches('/'))
}

/// Whether `path` is part of a Delta log (VACUUM keeps the logs of existing tables).
pub fn is_log_file(path: &str) -> bool {
    path.contains("/_delta_log/")
}

/// What the log's last version holds, as this process last read or wrote it.
#[derive(Debug, Clone, Default)]
struct LogState {
    /// The last version, if the log has any.
    version: Option<u64>,
    /// Files (relative to the table directory) of that version.
    files: BTreeSet<String>,
}

fn version_path(dir: &str, version: u64) -> Path {
    Path::from(format!("{dir}/_delta_log/{version:020}.json"))
}

fn delta_type(ty: ColumnType) -> String {
    match ty {
        ColumnType::Boolean => "boolean".into(),
        ColumnType::Int16 => "short".into(),
        ColumnType::Int32 => "integer".into(),
        ColumnType::Int64 => "long".into(),
        ColumnType::Float32 => "float".into(),
        ColumnType::Float64 => "double".into(),
        ColumnType::Utf8 | ColumnType::Varchar { .. } | ColumnType::Char { .. } => "string".into(),
        ColumnType::Date32 => "date".into(),
        ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        // Delta's `timestamp` is an instant (UTC microseconds), `timestamp_ntz` a local one.
        ColumnType::TimestampTz => "timestamp".into(),
        ColumnType::Timestamp => "timestamp_ntz".into(),
        ColumnType::Binary => "binary".into(),
    }
}

/// The table's schema as Delta's `schemaString`.
fn schema_string(def: &TableDef) -> String {
    let fields: Vec<Value> = def
        .columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": delta_type(c.ty), "nullable": c.nullable, "metadata": {}})
        })
        .collect();
    json!({"type": "struct", "fields": fields}).to_string()
}

/// Reads the log of the table at `dir`: every version in order, replayed.
async fn read_log(store: &dyn ObjectStore, dir: &str) -> Result<LogState> {
    let prefix = Path::from(format!("{dir}/_delta_log"));
    let mut versions: Vec<(u64, Path)> = store
        .list(Some(&prefix))
        .try_filter_map(|m| async move {
            let name = m.location.filename().unwrap_or_default().to_string();
            let v = name
                .strip_suffix(".json")
                .filter(|n| n.len() == 20)
                .and_then(|n| n.parse::<u64>().ok());
            Ok(v.map(|v| (v, m.location)))
        })
        .try_collect()
        .await?;
    versions.sort();
    let mut state = LogState::default();
    for (v, path) in versions {
        let bytes = store.get(&path).await?.bytes().await?;
        let text = std::str::from_utf8(&bytes).map_err(|e| damaged(&path, e.to_string()))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let action: Value =
                serde_json::from_str(line).map_err(|e| damaged(&path, e.to_string()))?;
            if let Some(p) = action.pointer("/add/path").and_then(Value::as_str) {
                state.files.insert(p.to_string());
            }
            if let Some(p) = action.pointer("/remove/path").and_then(Value::as_str) {
                state.files.remove(p);
            }
        }
        state.version = Some(v);
    }
    Ok(state)
}

fn damaged(path: &Path, reason: String) -> TableError {
    TableError::Damaged {
        key: path.to_string(),
        reason: format!("not a Delta log version: {reason}"),
    }
}

/// Appends the version that brings the log of `def` from `state` to `segments` (none for a
/// dropped table), if they differ; returns the new state. `Ok(None)`: another version was
/// written first (re-read the log and try again).
async fn append(
    store: &dyn ObjectStore,
    root: &str,
    def: &TableDef,
    state: &LogState,
    segments: &[SegmentMeta],
) -> Result<Option<LogState>> {
    let dir = table_root(root, def.id);
    let prefix = format!("{dir}/");
    let now = tierdb_kv::lease::now_ms();
    let mut files = BTreeSet::new();
    let mut actions: Vec<Value> = Vec::new();
    for s in segments {
        let Some(rel) = s.path.strip_prefix(&prefix) else {
            continue; // not under this table's directory: never written by tierdb
        };
        files.insert(rel.to_string());
        if !state.files.contains(rel) {
            let nulls: serde_json::Map<String, Value> = def
                .columns
                .iter()
                .zip(&s.columns)
                .map(|(c, st)| (c.name.clone(), json!(st.nulls)))
                .collect();
            let stats = json!({"numRecords": s.rows, "nullCount": nulls}).to_string();
            actions.push(json!({"add": {
                "path": rel, "partitionValues": {}, "size": s.bytes,
                "modificationTime": now, "dataChange": true, "stats": stats,
            }}));
        }
    }
    for gone in state.files.difference(&files) {
        actions.push(json!({"remove": {
            "path": gone, "deletionTimestamp": now, "dataChange": true,
            "extendedFileMetadata": false,
        }}));
    }
    let version = state.version.map_or(0, |v| v + 1);
    if state.version.is_none() {
        // TIMESTAMP (timestamp_ntz) is a table feature of Delta's protocol 3/7.
        let protocol = if def.columns.iter().any(|c| c.ty == ColumnType::Timestamp) {
            json!({"protocol": {
                "minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["timestampNtz"], "writerFeatures": ["timestampNtz"],
            }})
        } else {
            json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
        };
        actions.insert(0, protocol);
        actions.insert(
            1,
            json!({"metaData": {
                "id": uuid::Uuid::new_v4().to_string(),
                "name": def.name,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_string(def),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": def.created_ms,
            }}),
        );
    } else if actions.is_empty() {
        return Ok(Some(state.clone()));
    }
    actions.push(json!({"commitInfo": {
        "timestamp": now,
        "operation": "WRITE",
        "operationParameters": {},
        "engineInfo": concat!("tierdb/", env!("CARGO_PKG_VERSION")),
    }}));
    let mut body = String::new();
    for a in &actions {
        body.push_str(&a.to_string());
        body.push('\n');
    }
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    match store
        .put_opts(
            &version_path(&dir, version),
            PutPayload::from(Bytes::from(body)),
            opts,
        )
        .await
    {
        Ok(_) => Ok(Some(LogState {
            version: Some(version),
            files,
        })),
        Err(object_store::Error::AlreadyExists { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The Delta logs this process writes, with the state of each as last seen.
#[derive(Debug, Default)]
pub struct DeltaLogs {
    states: tokio::sync::Mutex<HashMap<u64, LogState>>,
}

impl DeltaLogs {
    /// Brings the log of `def` to `segments` (its segments in the catalog just committed;
    /// none when it was dropped). Called under the catalog's commit lock, so versions follow
    /// catalog commits in order.
    ///
    /// Each version is a create-if-absent put. In write-back mode, once this process has
    /// written a version of a log directly (which claims it), later versions go through the
    /// write-back log like the segments before them (`TieredStore::log_creates_in`): a
    /// commit then does not wait for the segments' upload, and the upload keeps the order
    /// segments, then the version naming them.
    pub async fn publish(
        &self,
        tiered: &tierdb_store::TieredStore,
        root: &str,
        def: &TableDef,
        segments: &[SegmentMeta],
    ) -> Result<()> {
        let store: &dyn ObjectStore = tiered;
        let mut states = self.states.lock().await;
        let dir = table_root(root, def.id);
        for _ in 0..3 {
            let state = match states.get(&def.id) {
                Some(s) => s.clone(),
                None => read_log(store, &dir).await?,
            };
            match append(store, root, def, &state, segments).await? {
                Some(next) => {
                    states.insert(def.id, next);
                    tiered.log_creates_in(&Path::from(format!("{dir}/_delta_log")));
                    return Ok(());
                }
                None => {
                    states.remove(&def.id);
                }
            }
        }
        Err(TableError::Conflict(format!(
            "table {}: another process keeps writing its Delta log at {dir}/_delta_log",
            def.name
        )))
    }
}
