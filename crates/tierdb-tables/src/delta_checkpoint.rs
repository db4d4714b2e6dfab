//! Delta checkpoints and log cleanup, so a table's Delta log stays short however many
//! commits it takes (issue 26 item 7: 10,000 one-row INSERTs left 10,000 JSON versions,
//! and every short-lived writer read all of them before it could append the next).
//!
//! Every [`CHECKPOINT_INTERVAL`] versions the writer also writes
//! `_delta_log/<version>.checkpoint.parquet`: the table's protocol, metadata and one `add`
//! per live file, in the Parquet layout of Delta's checkpoint spec (one struct column per
//! action kind, one action per row). Then it deletes the JSON versions and checkpoints the
//! *previous* checkpoint covers, once they are [`LOG_RETENTION`] old: a reader that listed
//! the log before the new checkpoint appeared still finds everything it listed.
//!
//! Readers, ours ([`crate::delta`]) and other engines', find the newest checkpoint by
//! listing `_delta_log` and replay only the JSON versions after it. No `_last_checkpoint`
//! hint is written: it is optional in the protocol, and in write-back mode it could reach
//! the bucket before the checkpoint it names.
//!
//! Not written: `remove` tombstones (only VACUUM of other engines reads them; tierdb's own
//! VACUUM deletes replaced files), `txn` actions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::{Array, AsArray, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

use crate::error::{Result, TableError};

/// A checkpoint every this many versions (Delta's own default).
pub const CHECKPOINT_INTERVAL: u64 = 10;

/// Log files a newer checkpoint covers are deleted once this old.
pub const LOG_RETENTION: Duration = Duration::from_secs(600);

/// The checkpoint file of `version`.
pub(crate) fn checkpoint_name(version: u64) -> String {
    format!("{version:020}.checkpoint.parquet")
}

/// The version of a checkpoint file name (single-part checkpoints only).
pub(crate) fn checkpoint_version(name: &str) -> Option<u64> {
    name.strip_suffix(".checkpoint.parquet")
        .filter(|n| n.len() == 20)
        .and_then(|n| n.parse().ok())
}

fn string_map() -> DataType {
    let entries = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, true),
    ]);
    DataType::Map(
        Arc::new(Field::new("key_value", DataType::Struct(entries), false)),
        false,
    )
}

fn strings() -> DataType {
    DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)))
}

/// The checkpoint's columns: one nullable struct per action kind written.
fn schema() -> SchemaRef {
    let protocol = Fields::from(vec![
        Field::new("minReaderVersion", DataType::Int32, false),
        Field::new("minWriterVersion", DataType::Int32, false),
        Field::new("readerFeatures", strings(), true),
        Field::new("writerFeatures", strings(), true),
    ]);
    let format = Fields::from(vec![
        Field::new("provider", DataType::Utf8, false),
        Field::new("options", string_map(), true),
    ]);
    let meta = Fields::from(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("description", DataType::Utf8, true),
        Field::new("format", DataType::Struct(format), false),
        Field::new("schemaString", DataType::Utf8, false),
        Field::new("partitionColumns", strings(), false),
        Field::new("configuration", string_map(), true),
        Field::new("createdTime", DataType::Int64, true),
    ]);
    let add = Fields::from(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("partitionValues", string_map(), false),
        Field::new("size", DataType::Int64, false),
        Field::new("modificationTime", DataType::Int64, false),
        Field::new("dataChange", DataType::Boolean, false),
        Field::new("stats", DataType::Utf8, true),
    ]);
    Arc::new(Schema::new(vec![
        Field::new("protocol", DataType::Struct(protocol), true),
        Field::new("metaData", DataType::Struct(meta), true),
        Field::new("add", DataType::Struct(add), true),
    ]))
}

/// Encodes `actions` (JSON objects, each with one key: `protocol`, `metaData` or `add`)
/// as a checkpoint file.
pub(crate) fn encode(actions: &[Value]) -> Result<Bytes> {
    let schema = schema();
    let mut decoder = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .build_decoder()
        .map_err(|e| TableError::Schema(format!("Delta checkpoint: {e}")))?;
    decoder
        .serialize(actions)
        .map_err(|e| TableError::Schema(format!("Delta checkpoint: {e}")))?;
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, None)?;
    if let Some(batch) = decoder
        .flush()
        .map_err(|e| TableError::Schema(format!("Delta checkpoint: {e}")))?
    {
        writer.write(&batch)?;
    }
    Ok(Bytes::from(writer.into_inner()?))
}

/// What a checkpoint holds that the writer needs: the live files and the metadata id.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub files: BTreeSet<String>,
    pub meta_id: Option<String>,
}

/// Decodes the `add` paths and metadata id of a checkpoint file (any engine's).
pub(crate) fn decode(bytes: Bytes, name: &str) -> Result<Decoded> {
    let damaged = |reason: String| TableError::Damaged {
        key: name.to_string(),
        reason: format!("not a Delta checkpoint: {reason}"),
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| damaged(e.to_string()))?;
    let mut out = Decoded::default();
    for batch in reader {
        let batch = batch.map_err(|e| damaged(e.to_string()))?;
        let field = |s: &StructArray, f: &str| s.column_by_name(f).cloned();
        if let Some(add) = batch.column_by_name("add").and_then(|c| c.as_struct_opt()) {
            let paths = field(add, "path").ok_or_else(|| damaged("add without path".into()))?;
            let paths = paths
                .as_string_opt::<i32>()
                .ok_or_else(|| damaged("add.path is not a string".into()))?;
            for i in 0..add.len() {
                if add.is_valid(i) && paths.is_valid(i) {
                    out.files.insert(paths.value(i).to_string());
                }
            }
        }
        if let Some(meta) = batch
            .column_by_name("metaData")
            .and_then(|c| c.as_struct_opt())
            && let Some(ids) = field(meta, "id")
            && let Some(ids) = ids.as_string_opt::<i32>()
        {
            for i in 0..meta.len() {
                if meta.is_valid(i) && ids.is_valid(i) {
                    out.meta_id = Some(ids.value(i).to_string());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_checkpoint_round_trips_its_files_and_metadata_id() {
        let actions = vec![
            json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
            json!({"metaData": {"id": "abc", "name": "t", "format": {"provider": "parquet", "options": {}},
                "schemaString": "{}", "partitionColumns": [], "configuration": {}, "createdTime": 1}}),
            json!({"add": {"path": "a.parquet", "partitionValues": {}, "size": 10,
                "modificationTime": 5, "dataChange": false, "stats": "{\"numRecords\":1}"}}),
            json!({"add": {"path": "b.parquet", "partitionValues": {}, "size": 20,
                "modificationTime": 5, "dataChange": false}}),
        ];
        let bytes = encode(&actions).unwrap();
        let d = decode(bytes, "x").unwrap();
        assert_eq!(d.meta_id.as_deref(), Some("abc"));
        assert_eq!(
            d.files.into_iter().collect::<Vec<_>>(),
            vec!["a.parquet", "b.parquet"]
        );
        assert_eq!(checkpoint_version(&checkpoint_name(42)), Some(42));
        assert_eq!(checkpoint_version("00000000000000000042.json"), None);
    }

    #[test]
    fn garbage_is_damage_not_a_panic() {
        assert!(decode(Bytes::from_static(b"not parquet"), "x").is_err());
    }
}
