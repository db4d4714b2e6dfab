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
//! Every tenth version is also a checkpoint, and log files older checkpoints cover are
//! deleted (`delta_checkpoint.rs`), so the log a reader replays stays short. Not written:
//! column statistics other than row and null counts.

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
    /// The `metaData` id of the table (a checkpoint repeats it).
    meta_id: Option<String>,
}

fn version_path(dir: &str, version: u64) -> Path {
    Path::from(format!("{dir}/_delta_log/{version:020}.json"))
}

/// The Delta type of a column; `None` for TIME and NUMERIC of more than 38 digits, which
/// Delta has no type for (a table with one gets no Delta log: other engines cannot read it
/// through Delta).
fn delta_type(ty: ColumnType) -> Option<String> {
    Some(match ty.storage() {
        ColumnType::Boolean => "boolean".into(),
        ColumnType::Int16 => "short".into(),
        ColumnType::Int32 => "integer".into(),
        ColumnType::Int64 => "long".into(),
        ColumnType::Float32 => "float".into(),
        ColumnType::Float64 => "double".into(),
        ColumnType::Utf8
        | ColumnType::VarcharUnbounded
        | ColumnType::Varchar { .. }
        | ColumnType::Char { .. }
        | ColumnType::Uuid
        | ColumnType::Json
        | ColumnType::Jsonb => "string".into(),
        ColumnType::Date32 => "date".into(),
        // Delta's decimals end at 38 digits: a wider NUMERIC gets no Delta log, as TIME.
        ColumnType::Decimal { precision, .. }
            if precision > crate::catalog::DECIMAL128_MAX_PRECISION =>
        {
            return None;
        }
        ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        // Delta's `timestamp` is an instant (UTC microseconds), `timestamp_ntz` a local one.
        ColumnType::TimestampTz => "timestamp".into(),
        ColumnType::Timestamp => "timestamp_ntz".into(),
        ColumnType::Binary => "binary".into(),
        ColumnType::Time | ColumnType::Numeric => return None,
    })
}

/// The table's schema as Delta's `schemaString`.
fn schema_string(def: &TableDef) -> String {
    let fields: Vec<Value> = def
        .columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": delta_type(c.ty).unwrap_or_default(), "nullable": c.nullable, "metadata": {}})
        })
        .collect();
    json!({"type": "struct", "fields": fields}).to_string()
}

/// Reads the log of the table at `dir`: its newest checkpoint, then every later version
/// in order, replayed.
async fn read_log(store: &dyn ObjectStore, dir: &str) -> Result<LogState> {
    let prefix = Path::from(format!("{dir}/_delta_log"));
    let listed: Vec<object_store::ObjectMeta> = store.list(Some(&prefix)).try_collect().await?;
    let mut versions: Vec<(u64, Path)> = Vec::new();
    let mut checkpoint: Option<(u64, Path)> = None;
    for m in listed {
        let name = m.location.filename().unwrap_or_default().to_string();
        if let Some(v) = crate::delta_checkpoint::checkpoint_version(&name) {
            if checkpoint.as_ref().is_none_or(|(c, _)| v > *c) {
                checkpoint = Some((v, m.location));
            }
            continue;
        }
        let v = name
            .strip_suffix(".json")
            .filter(|n| n.len() == 20)
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(v) = v {
            versions.push((v, m.location));
        }
    }
    versions.sort();
    let mut state = LogState::default();
    if let Some((v, path)) = checkpoint {
        let bytes = store.get(&path).await?.bytes().await?;
        let d = crate::delta_checkpoint::decode(bytes, path.as_ref())?;
        state.files = d.files;
        state.meta_id = d.meta_id;
        state.version = Some(v);
    }
    for (v, path) in versions {
        if state.version.is_some_and(|c| v <= c) {
            continue;
        }
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
            if let Some(id) = action.pointer("/metaData/id").and_then(Value::as_str) {
                state.meta_id = Some(id.to_string());
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

/// The `protocol` and `metaData` actions of `def`'s log (metadata id `id`).
fn protocol_and_metadata(def: &TableDef, id: &str) -> (Value, Value) {
    // TIMESTAMP (timestamp_ntz) is a table feature of Delta's protocol 3/7.
    let protocol = if def.columns.iter().any(|c| c.ty == ColumnType::Timestamp) {
        json!({"protocol": {
            "minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"], "writerFeatures": ["timestampNtz"],
        }})
    } else {
        json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
    };
    let meta = json!({"metaData": {
        "id": id,
        "name": def.name,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string(def),
        "partitionColumns": [],
        "configuration": {},
        "createdTime": def.created_ms,
    }});
    (protocol, meta)
}

/// The `add` action of segment `s` at `rel` (its path in the table directory).
fn add_action(def: &TableDef, s: &SegmentMeta, rel: &str, now: u64, data_change: bool) -> Value {
    let nulls: serde_json::Map<String, Value> = def
        .columns
        .iter()
        .zip(&s.columns)
        .map(|(c, st)| (c.name.clone(), json!(st.nulls)))
        .collect();
    let stats = json!({"numRecords": s.rows, "nullCount": nulls}).to_string();
    json!({"add": {
        "path": rel, "partitionValues": {}, "size": s.bytes,
        "modificationTime": now, "dataChange": data_change, "stats": stats,
    }})
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
            actions.push(add_action(def, s, rel, now, true));
        }
    }
    for gone in state.files.difference(&files) {
        actions.push(json!({"remove": {
            "path": gone, "deletionTimestamp": now, "dataChange": true,
            "extendedFileMetadata": false,
        }}));
    }
    let version = state.version.map_or(0, |v| v + 1);
    let mut meta_id = state.meta_id.clone();
    if state.version.is_none() {
        let id = uuid::Uuid::new_v4().to_string();
        let (protocol, meta) = protocol_and_metadata(def, &id);
        actions.insert(0, protocol);
        actions.insert(1, meta);
        meta_id = Some(id);
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
            meta_id,
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
        if def.columns.iter().any(|c| delta_type(c.ty).is_none()) {
            return Ok(()); // a type Delta cannot say (TIME): no log
        }
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
                    let wrote = next.version != state.version;
                    let version = next.version.unwrap_or(0);
                    let meta_id = next.meta_id.clone();
                    states.insert(def.id, next);
                    tiered.log_creates_in(&Path::from(format!("{dir}/_delta_log")));
                    if wrote
                        && version > 0
                        && version % crate::delta_checkpoint::CHECKPOINT_INTERVAL == 0
                        && let Err(e) =
                            checkpoint(store, root, def, version, meta_id, segments).await
                    {
                        // The log stays correct without it: readers replay the JSON versions.
                        tracing::warn!(table = %def.name, version, error = %e,
                            "cannot write a Delta checkpoint");
                    }
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

/// Writes the checkpoint of `version` (the table then holds `segments`), then deletes the
/// log files the previous checkpoint covers that are old enough (`delta_checkpoint.rs`).
async fn checkpoint(
    store: &dyn ObjectStore,
    root: &str,
    def: &TableDef,
    version: u64,
    meta_id: Option<String>,
    segments: &[SegmentMeta],
) -> Result<()> {
    let dir = table_root(root, def.id);
    let prefix = format!("{dir}/");
    let now = tierdb_kv::lease::now_ms();
    let id = meta_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let (protocol, meta) = protocol_and_metadata(def, &id);
    let mut actions = vec![protocol, meta];
    for s in segments {
        if let Some(rel) = s.path.strip_prefix(&prefix) {
            actions.push(add_action(def, s, rel, now, false));
        }
    }
    let bytes = crate::delta_checkpoint::encode(&actions)?;
    let log = format!("{dir}/_delta_log");
    let path = Path::from(format!(
        "{log}/{}",
        crate::delta_checkpoint::checkpoint_name(version)
    ));
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    match store.put_opts(&path, PutPayload::from(bytes), opts).await {
        Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    // Files the previous checkpoint covers, old enough that no reader still uses them.
    let listed: Vec<object_store::ObjectMeta> =
        store.list(Some(&Path::from(log))).try_collect().await?;
    let name = |m: &object_store::ObjectMeta| m.location.filename().unwrap_or_default().to_string();
    let Some(previous) = listed
        .iter()
        .filter_map(|m| crate::delta_checkpoint::checkpoint_version(&name(m)))
        .filter(|&v| v < version)
        .max()
    else {
        return Ok(());
    };
    let retention = chrono::Duration::from_std(crate::delta_checkpoint::LOG_RETENTION)
        .unwrap_or(chrono::Duration::MAX);
    let cutoff = chrono::Utc::now() - retention;
    for m in &listed {
        let n = name(m);
        let v = crate::delta_checkpoint::checkpoint_version(&n).or_else(|| {
            n.strip_suffix(".json")
                .filter(|n| n.len() == 20)
                .and_then(|n| n.parse::<u64>().ok())
        });
        if v.is_some_and(|v| v < previous) && m.last_modified < cutoff {
            match store.delete(&m.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
