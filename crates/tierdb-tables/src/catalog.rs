//! The catalog, kept in the KV engine next to everything else in the database.
//!
//! Keys (all start with `T`, so they never meet the object store's keys):
//!
//! | key                              | value                                       |
//! |----------------------------------|---------------------------------------------|
//! | `Tn` + table name                | [`FORMAT_VERSION`], then [`TableDef`] (JSON) |
//! | `Ts` + table id (u64 BE) + segment id (u64 BE) | [`FORMAT_VERSION`], then [`SegmentMeta`] (JSON): the extent map |
//! | `Tc`                             | [`FORMAT_VERSION`], then the next id (u64 BE) for tables and segments |
//! | `Tr` + segment path              | [`FORMAT_VERSION`], then [`Retired`] (JSON): a file no table references any more, kept for readers until VACUUM |
//! | `Tv` + view name                 | [`FORMAT_VERSION`], then [`crate::views::ViewDef`] (JSON): a view's query |
//! | `Tq` + sequence name             | [`FORMAT_VERSION`], then [`crate::rows::sequence::SequenceDef`] (JSON) |
//! | `Tk` + schema name               | [`FORMAT_VERSION`], then [`SchemaDef`] (JSON): a schema other than `public` |
//! | `Tt`                             | [`FORMAT_VERSION`], then the wall-clock time (ms since the epoch, u64 BE) of the last catalog commit: how old what a replica sees is |
//! | `Tu` + transaction (u64 BE) + number (u64 BE) | an undo record of DDL in an open transaction (`ddlundo.rs` has its byte table) |
//!
//! A table, view or sequence in a schema other than `public` is keyed by its qualified
//! name, `schema.name` ([`crate::sql::qualified`]); one in `public` by its name alone.
//!
//! Every value starts with the format version byte; a value of another version is refused
//! as damaged data naming both versions, never guessed at.
//!
//! A load or an insert writes its Parquet segments first and then commits every segment
//! record (and the id counter) in one KV batch: a reader sees all of it or none of it.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use serde::{Deserialize, Serialize};
use tierdb_kv::{Batch, KvRead};

use crate::error::{Result, TableError};

mod types;
pub use types::*;

const TABLE_PREFIX: &[u8] = b"Tn";
const SEGMENT_PREFIX: &[u8] = b"Ts";
const COUNTER_KEY: &[u8] = b"Tc";
const RETIRED_PREFIX: &[u8] = b"Tr";
const COMMIT_TIME_KEY: &[u8] = b"Tt";
const VIEW_PREFIX: &[u8] = b"Tv";
const SEQUENCE_PREFIX: &[u8] = b"Tq";
const SCHEMA_PREFIX: &[u8] = b"Tk";

/// A schema other than `public` (which always exists and is not stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaDef {
    pub name: String,
    /// `COMMENT ON SCHEMA`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

fn schema_key(name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(SCHEMA_PREFIX.len() + name.len());
    k.put_slice(SCHEMA_PREFIX);
    k.put_slice(name.as_bytes());
    k.freeze()
}

pub async fn get_schema(kv: &dyn KvRead, name: &str) -> Result<Option<SchemaDef>> {
    let key = schema_key(name);
    match kv.get(&key).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

pub async fn list_schemas(kv: &dyn KvRead) -> Result<Vec<SchemaDef>> {
    kv.scan_prefix(SCHEMA_PREFIX, None)
        .await?
        .iter()
        .map(|(k, v)| decode(k, v))
        .collect()
}

fn sequence_key(name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(SEQUENCE_PREFIX.len() + name.len());
    k.put_slice(SEQUENCE_PREFIX);
    k.put_slice(name.as_bytes());
    k.freeze()
}

pub async fn get_sequence(
    kv: &dyn KvRead,
    name: &str,
) -> Result<Option<crate::rows::sequence::SequenceDef>> {
    let key = sequence_key(name);
    match kv.get(&key).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

pub async fn list_sequences(kv: &dyn KvRead) -> Result<Vec<crate::rows::sequence::SequenceDef>> {
    kv.scan_prefix(SEQUENCE_PREFIX, None)
        .await?
        .iter()
        .map(|(k, v)| decode(k, v))
        .collect()
}

fn view_key(name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(VIEW_PREFIX.len() + name.len());
    k.put_slice(VIEW_PREFIX);
    k.put_slice(name.as_bytes());
    k.freeze()
}

pub async fn get_view(kv: &dyn KvRead, name: &str) -> Result<Option<crate::views::ViewDef>> {
    let key = view_key(name);
    match kv.get(&key).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

pub async fn list_views(kv: &dyn KvRead) -> Result<Vec<crate::views::ViewDef>> {
    kv.scan_prefix(VIEW_PREFIX, None)
        .await?
        .iter()
        .map(|(k, v)| decode(k, v))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    pub nullable: bool,
}

/// A table: its columns, and how its rows are laid out in segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub id: u64,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Rows are sorted by these columns on ingest (within each load or insert).
    #[serde(default)]
    pub sort_key: Vec<String>,
    /// No segment holds rows of two values of this column (rows are sorted by it first).
    #[serde(default)]
    pub partition_key: Option<String>,
    pub created_ms: u64,
    /// Columns dropped by ALTER TABLE whose values older segments still hold: a column of
    /// one of these names cannot be added again (it would read those values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// The PRIMARY KEY's columns. A table with one is a row table: its rows live in the KV
    /// engine, one entry per row, ordered by key (`rows/`), not in segments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_key: Vec<String>,
    /// Column DEFAULTs: (column, the expression's SQL text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defaults: Vec<(String, String)>,
    /// Secondary indexes (row tables only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<crate::rows::index::IndexDef>,
    /// COMMENT ON TABLE and COMMENT ON COLUMN.
    #[serde(default, skip_serializing_if = "Comments::is_empty")]
    pub comments: Comments,
    /// Row tables: the value of each column ADD COLUMN … DEFAULT added, for the rows
    /// written before it (PostgreSQL's "missing value"): (column, the value in row format
    /// 1's bytes, as hex). A row shorter than its table reads these past its end
    /// (`rows/format.rs` invariant 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<(String, String)>,
}

/// A table's descriptions (`COMMENT ON`), as `pg_description` lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comments {
    /// The table's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// (column, description), in the order they were made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<(String, String)>,
}

impl Comments {
    pub fn is_empty(&self) -> bool {
        self.table.is_none() && self.columns.is_empty()
    }

    /// Sets (`Some`) or removes (`None`) the description of `column`.
    pub fn set_column(&mut self, column: &str, text: Option<String>) {
        self.columns.retain(|(c, _)| c != column);
        if let Some(t) = text {
            self.columns.push((column.to_string(), t));
        }
    }

    /// A column renamed keeps its description.
    pub fn rename_column(&mut self, from: &str, to: &str) {
        for (c, _) in &mut self.columns {
            if c == from {
                *c = to.to_string();
            }
        }
    }
}

impl TableDef {
    /// The Arrow schema. A column whose declared type Arrow cannot say (VARCHAR(n),
    /// CHAR(n)) carries it in its field metadata under [`DECLARED_TYPE`], which query
    /// results keep, so the PostgreSQL server can report it.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| {
                    let f = Field::new(&c.name, c.ty.arrow(), c.nullable);
                    if c.ty.needs_declaration() {
                        f.with_metadata(
                            [(DECLARED_TYPE.to_string(), c.ty.sql())]
                                .into_iter()
                                .collect(),
                        )
                    } else {
                        f
                    }
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// Whether the rows live in the KV engine (a table with a PRIMARY KEY).
    pub fn is_row_table(&self) -> bool {
        !self.primary_key.is_empty()
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The columns rows are sorted by on ingest: the partition key, then the sort key.
    pub fn ingest_order(&self) -> Vec<String> {
        let mut order: Vec<String> = self.partition_key.iter().cloned().collect();
        for c in &self.sort_key {
            if !order.contains(c) {
                order.push(c.clone());
            }
        }
        order
    }

    /// Checks names and keys; `columns` come from the user.
    pub fn validate(&self) -> Result<()> {
        if self.name.starts_with("__tierdb_") {
            return Err(TableError::Schema(format!(
                "table name {}: names starting with __tierdb_ are reserved; choose another",
                self.name
            )));
        }
        if self.columns.is_empty() {
            return Err(TableError::Schema(format!(
                "table {} has no columns",
                self.name
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.columns {
            if !seen.insert(c.name.as_str()) {
                return Err(TableError::Schema(format!(
                    "table {}: column {} is named twice",
                    self.name, c.name
                )));
            }
        }
        for k in self.sort_key.iter().chain(self.partition_key.iter()) {
            if self.column_index(k).is_none() {
                return Err(TableError::Schema(format!(
                    "table {}: key column {k} is not a column of the table",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

/// A stored min or max. Decimals are kept as their unscaled integer in a string (an i128
/// does not fit a JSON number), dates as days since 1970-01-01.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl StatValue {
    pub fn from_scalar(v: &ScalarValue) -> Option<Self> {
        if v.is_null() {
            return None;
        }
        Some(match v {
            ScalarValue::Boolean(Some(b)) => StatValue::Bool(*b),
            ScalarValue::Int8(Some(i)) => StatValue::Int(i64::from(*i)),
            ScalarValue::Int16(Some(i)) => StatValue::Int(i64::from(*i)),
            ScalarValue::Int32(Some(i)) => StatValue::Int(i64::from(*i)),
            ScalarValue::Int64(Some(i)) => StatValue::Int(*i),
            ScalarValue::Date32(Some(d)) => StatValue::Int(i64::from(*d)),
            ScalarValue::Float32(Some(f)) => StatValue::Float(f64::from(*f)),
            ScalarValue::Float64(Some(f)) => StatValue::Float(*f),
            ScalarValue::Decimal128(Some(d), _, _) => StatValue::Str(d.to_string()),
            ScalarValue::Decimal256(Some(d), _, _) => StatValue::Str(d.to_string()),
            ScalarValue::TimestampMicrosecond(Some(t), _)
            | ScalarValue::Time64Microsecond(Some(t)) => StatValue::Int(*t),
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => StatValue::Str(s.clone()),
            _ => return None,
        })
    }

    /// The value as a scalar of `ty`; `None` if it does not fit (then nothing is pruned).
    pub fn to_scalar(&self, ty: ColumnType) -> Option<ScalarValue> {
        Some(match (ty.storage(), self) {
            (ColumnType::Boolean, StatValue::Bool(b)) => ScalarValue::Boolean(Some(*b)),
            (ColumnType::Int16, StatValue::Int(i)) => {
                ScalarValue::Int16(Some(i16::try_from(*i).ok()?))
            }
            (ColumnType::Int32, StatValue::Int(i)) => {
                ScalarValue::Int32(Some(i32::try_from(*i).ok()?))
            }
            (ColumnType::Timestamp, StatValue::Int(i)) => {
                ScalarValue::TimestampMicrosecond(Some(*i), None)
            }
            (ColumnType::TimestampTz, StatValue::Int(i)) => {
                ScalarValue::TimestampMicrosecond(Some(*i), Some(UTC.into()))
            }
            (ColumnType::Time, StatValue::Int(i)) => ScalarValue::Time64Microsecond(Some(*i)),
            // An f32's min and max are exact as f64 and back.
            (ColumnType::Float32, StatValue::Float(f)) => ScalarValue::Float32(Some(*f as f32)),
            (ColumnType::Int64, StatValue::Int(i)) => ScalarValue::Int64(Some(*i)),
            (ColumnType::Date32, StatValue::Int(i)) => {
                ScalarValue::Date32(Some(i32::try_from(*i).ok()?))
            }
            (ColumnType::Float64, StatValue::Float(f)) => ScalarValue::Float64(Some(*f)),
            (ColumnType::Float64, StatValue::Int(i)) => ScalarValue::Float64(Some(*i as f64)),
            (
                ColumnType::Utf8
                | ColumnType::VarcharUnbounded
                | ColumnType::Varchar { .. }
                | ColumnType::Char { .. },
                StatValue::Str(s),
            ) => ScalarValue::Utf8(Some(s.clone())),
            (ColumnType::Decimal { precision, scale }, StatValue::Str(s))
                if precision > DECIMAL128_MAX_PRECISION =>
            {
                ScalarValue::Decimal256(Some(s.parse().ok()?), precision, scale)
            }
            (ColumnType::Decimal { precision, scale }, StatValue::Str(s)) => {
                ScalarValue::Decimal128(Some(s.parse().ok()?), precision, scale)
            }
            _ => return None,
        })
    }
}

/// Per segment and column: the extent map entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnStats {
    pub min: Option<StatValue>,
    pub max: Option<StatValue>,
    pub nulls: u64,
}

/// One Parquet file of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentMeta {
    pub id: u64,
    /// The object's path in the store.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    /// In table column order.
    pub columns: Vec<ColumnStats>,
    /// A CRC per block of the file, checked on every read (see `checksum.rs`).
    pub checksums: crate::checksum::BlockSums,
}

pub(crate) fn table_key(name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(TABLE_PREFIX.len() + name.len());
    k.put_slice(TABLE_PREFIX);
    k.put_slice(name.as_bytes());
    k.freeze()
}

fn segment_prefix(table: u64) -> Bytes {
    let mut k = BytesMut::with_capacity(10);
    k.put_slice(SEGMENT_PREFIX);
    k.put_u64(table);
    k.freeze()
}

fn segment_key(table: u64, segment: u64) -> Bytes {
    let mut k = BytesMut::with_capacity(18);
    k.put_slice(SEGMENT_PREFIX);
    k.put_u64(table);
    k.put_u64(segment);
    k.freeze()
}

/// The version byte every catalog value starts with.
pub const FORMAT_VERSION: u8 = 1;

/// The value's payload after its version byte, or why it cannot be read.
fn versioned<'a>(key: &[u8], value: &'a [u8]) -> Result<&'a [u8]> {
    let damaged = |reason: String| TableError::Damaged {
        key: String::from_utf8_lossy(key).into_owned(),
        reason,
    };
    match value.split_first() {
        Some((&FORMAT_VERSION, rest)) => Ok(rest),
        Some((v, _)) => Err(damaged(format!(
            "catalog format version {v}, this build reads version {FORMAT_VERSION}"
        ))),
        None => Err(damaged("empty value".into())),
    }
}

/// Keys a transaction's rollback leaves alone (`ddlundo.rs`): the commit stamp, and the
/// id counter (ids are never given out twice).
pub(crate) fn is_unrecorded_key(key: &[u8]) -> bool {
    key == COMMIT_TIME_KEY || key == COUNTER_KEY
}

pub(crate) fn is_segment_key(key: &[u8]) -> bool {
    key.starts_with(SEGMENT_PREFIX) && key.len() == 18
}

pub(crate) fn is_table_key(key: &[u8]) -> bool {
    key.starts_with(TABLE_PREFIX)
}

/// The sequence a key defines, if it is a sequence's.
pub(crate) fn sequence_name(key: &[u8]) -> Option<String> {
    let name = key.strip_prefix(SEQUENCE_PREFIX)?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// What a catalog key is, for a message: `table "t"`, `view "v"`, ….
pub(crate) fn describe_key(key: &[u8]) -> String {
    let named = [
        (TABLE_PREFIX, "table"),
        (VIEW_PREFIX, "view"),
        (SEQUENCE_PREFIX, "sequence"),
        (SCHEMA_PREFIX, "schema"),
    ];
    for (prefix, what) in named {
        if let Some(name) = key.strip_prefix(prefix) {
            return format!("{what} \"{}\"", String::from_utf8_lossy(name));
        }
    }
    if is_segment_key(key) {
        return "a table's segment".into();
    }
    format!("key {}", tierdb_kv::ShowKey(key))
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(versioned(key, value)?).map_err(|e| TableError::Damaged {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

fn encode<T: Serialize>(v: &T) -> Bytes {
    let mut out = vec![FORMAT_VERSION];
    // Serializing these plain structs cannot fail (no maps with non-string keys).
    serde_json::to_writer(&mut out, v).unwrap_or_default();
    Bytes::from(out)
}

pub async fn get_table(kv: &dyn KvRead, name: &str) -> Result<Option<TableDef>> {
    let key = table_key(name);
    match kv.get(&key).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

pub async fn list_tables(kv: &dyn KvRead) -> Result<Vec<TableDef>> {
    kv.scan_prefix(TABLE_PREFIX, None)
        .await?
        .iter()
        .map(|(k, v)| decode(k, v))
        .collect()
}

pub async fn segments(kv: &dyn KvRead, table: u64) -> Result<Vec<SegmentMeta>> {
    kv.scan_prefix(&segment_prefix(table), None)
        .await?
        .iter()
        .map(|(k, v)| decode(k, v))
        .collect()
}

pub async fn get_segment(kv: &dyn KvRead, table: u64, segment: u64) -> Result<Option<SegmentMeta>> {
    let key = segment_key(table, segment);
    match kv.get(&key).await? {
        Some(v) => Ok(Some(decode(&key, &v)?)),
        None => Ok(None),
    }
}

/// A segment file that left the catalog (replaced by UPDATE, DELETE or INSERT OVERWRITE,
/// or its table dropped): readers that planned before may still read it, so it is deleted
/// by VACUUM once its retention has passed, not at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retired {
    pub path: String,
    pub bytes: u64,
    /// When the commit that removed it was made (ms since the epoch).
    pub retired_ms: u64,
}

fn retired_key(path: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(RETIRED_PREFIX.len() + path.len());
    k.put_slice(RETIRED_PREFIX);
    k.put_slice(path.as_bytes());
    k.freeze()
}

pub async fn list_retired(kv: &dyn KvRead) -> Result<Vec<Retired>> {
    kv.scan_prefix(RETIRED_PREFIX, None)
        .await?
        .iter()
        .map(|(k, v)| decode(k, v))
        .collect()
}

/// The next free id (tables and segments share one counter).
/// When the newest catalog commit this reader sees was made (ms since the epoch), if any
/// commit since the stamp was introduced.
pub async fn last_commit_ms(kv: &dyn KvRead) -> Result<Option<u64>> {
    let Some(v) = kv.get(COMMIT_TIME_KEY).await? else {
        return Ok(None);
    };
    let payload = versioned(COMMIT_TIME_KEY, &v)?;
    let bytes: [u8; 8] = payload.try_into().map_err(|_| TableError::Damaged {
        key: "Tt".into(),
        reason: format!("{} bytes, expected 8", payload.len()),
    })?;
    Ok(Some(u64::from_be_bytes(bytes)))
}

pub async fn next_id(kv: &dyn KvRead) -> Result<u64> {
    match kv.get(COUNTER_KEY).await? {
        Some(v) => {
            let payload = versioned(COUNTER_KEY, &v)?;
            let raw: [u8; 8] = payload.try_into().map_err(|_| TableError::Damaged {
                key: "Tc".into(),
                reason: format!("{} bytes, expected 8", payload.len()),
            })?;
            Ok(u64::from_be_bytes(raw))
        }
        None => Ok(1),
    }
}

/// Catalog changes staged for one atomic commit.
#[derive(Debug, Default)]
pub struct CatalogBatch {
    pub batch: Batch,
    /// Whether it changes a definition (a table, view, sequence or schema), not only data:
    /// what [`crate::Tables::ddl_generation`] counts, and cached plans depend on.
    defines: bool,
}

impl CatalogBatch {
    /// `batch` as a change of definitions (a DDL rollback's).
    pub(crate) fn redefining(batch: Batch) -> Self {
        CatalogBatch {
            batch,
            defines: true,
        }
    }

    pub fn put_table(&mut self, def: &TableDef) {
        self.defines = true;
        self.batch.put(table_key(&def.name), encode(def));
    }

    pub fn delete_table(&mut self, name: &str) {
        self.defines = true;
        self.batch.delete(table_key(name));
    }

    pub fn put_view(&mut self, def: &crate::views::ViewDef) {
        self.defines = true;
        self.batch.put(view_key(&def.name), encode(def));
    }

    pub fn delete_view(&mut self, name: &str) {
        self.defines = true;
        self.batch.delete(view_key(name));
    }

    pub fn put_sequence(&mut self, def: &crate::rows::sequence::SequenceDef) {
        self.defines = true;
        self.batch.put(sequence_key(&def.name), encode(def));
    }

    pub fn delete_sequence(&mut self, name: &str) {
        self.defines = true;
        self.batch.delete(sequence_key(name));
    }

    pub fn put_schema(&mut self, def: &SchemaDef) {
        self.defines = true;
        self.batch.put(schema_key(&def.name), encode(def));
    }

    pub fn delete_schema(&mut self, name: &str) {
        self.defines = true;
        self.batch.delete(schema_key(name));
    }

    pub fn put_segment(&mut self, table: u64, seg: &SegmentMeta) {
        self.batch.put(segment_key(table, seg.id), encode(seg));
    }

    pub fn delete_segment(&mut self, table: u64, segment: u64) {
        self.batch.delete(segment_key(table, segment));
    }

    pub fn retire(&mut self, seg: &SegmentMeta, now_ms: u64) {
        let r = Retired {
            path: seg.path.clone(),
            bytes: seg.bytes,
            retired_ms: now_ms,
        };
        self.batch.put(retired_key(&seg.path), encode(&r));
    }

    pub fn forget_retired(&mut self, path: &str) {
        self.batch.delete(retired_key(path));
    }

    /// Whether it changes a definition, not only data (rows, segments).
    pub fn defines(&self) -> bool {
        self.defines
    }

    /// The batch to commit, stamped with the commit's wall-clock time (`Tt`).
    pub fn stamped(mut self) -> Batch {
        let mut value = vec![FORMAT_VERSION];
        value.extend_from_slice(&tierdb_kv::lease::now_ms().to_be_bytes());
        self.batch
            .put(Bytes::from_static(COMMIT_TIME_KEY), Bytes::from(value));
        self.batch
    }

    pub fn set_next_id(&mut self, next: u64) {
        let mut value = vec![FORMAT_VERSION];
        value.extend_from_slice(&next.to_be_bytes());
        self.batch
            .put(Bytes::from_static(COUNTER_KEY), Bytes::from(value));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use datafusion::arrow::datatypes::DataType;

    /// Fuzz (proptest): catalog values with bytes flipped or cut, and arbitrary bytes, decode
    /// to a value or a `Damaged` error naming the key; never a panic.
    #[test]
    fn catalog_decoding_never_panics() {
        use proptest::prelude::*;
        let seg = SegmentMeta {
            id: 3,
            path: "db/tables/1/x.parquet".into(),
            rows: 10,
            bytes: 100,
            columns: vec![ColumnStats {
                min: StatValue::from_scalar(&ScalarValue::Int64(Some(1))),
                max: StatValue::from_scalar(&ScalarValue::Int64(Some(9))),
                nulls: 0,
            }],
            checksums: crate::checksum::BlockSums::of(&[1u8; 100]),
        };
        let good = encode(&seg).to_vec();
        proptest!(ProptestConfig::with_cases(1000), |(
            noise in proptest::collection::vec(any::<u8>(), 0..200),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
        )| {
            let _ = decode::<SegmentMeta>(b"Ts", &noise);
            let _ = decode::<TableDef>(b"Tn", &noise);
            let mut v = good.clone();
            for &(at, x) in &flips {
                let i = at % v.len();
                v[i] ^= x;
            }
            if let Ok(back) = decode::<SegmentMeta>(b"Ts", &v) {
                // A mutation that still parses must still be a consistent entry or be
                // caught by the checksum check when read.
                let _ = back.checksums.aligned(&(0..back.bytes.min(back.checksums.object_bytes)));
            }
            let _ = decode::<SegmentMeta>(b"Ts", &v[..cut % (v.len() + 1)]);
        });
    }

    #[test]
    fn stat_values_round_trip_through_json_and_scalars() {
        let cases = [
            (ColumnType::Int32, ScalarValue::Int32(Some(-7))),
            (ColumnType::Int64, ScalarValue::Int64(Some(1 << 40))),
            (ColumnType::Float64, ScalarValue::Float64(Some(2.5))),
            (ColumnType::Utf8, ScalarValue::Utf8(Some("AMERICA".into()))),
            (ColumnType::Date32, ScalarValue::Date32(Some(9000))),
            (ColumnType::Boolean, ScalarValue::Boolean(Some(true))),
            (ColumnType::Int16, ScalarValue::Int16(Some(-300))),
            (ColumnType::Float32, ScalarValue::Float32(Some(0.1))),
            (
                ColumnType::Varchar { len: 3 },
                ScalarValue::Utf8(Some("abc".into())),
            ),
            (
                ColumnType::Timestamp,
                ScalarValue::TimestampMicrosecond(Some(1_700_000_000_123_456), None),
            ),
            (
                ColumnType::TimestampTz,
                ScalarValue::TimestampMicrosecond(Some(-1), Some(UTC.into())),
            ),
            (
                ColumnType::Time,
                ScalarValue::Time64Microsecond(Some(86_399_999_999)),
            ),
            (
                ColumnType::Decimal {
                    precision: 38,
                    scale: 2,
                },
                ScalarValue::Decimal128(Some(i128::MAX - 3), 38, 2),
            ),
        ];
        for (ty, v) in cases {
            let s = StatValue::from_scalar(&v).unwrap();
            let json = serde_json::to_string(&s).unwrap();
            let back: StatValue = serde_json::from_str(&json).unwrap();
            assert_eq!(back.to_scalar(ty).unwrap(), v, "{ty:?} via {json}");
        }
        assert_eq!(StatValue::from_scalar(&ScalarValue::Int32(None)), None);
    }

    #[test]
    fn keys_sort_by_table_then_segment() {
        assert!(segment_key(1, u64::MAX) < segment_key(2, 0));
        assert!(segment_key(1, 2) < segment_key(1, 10));
        assert!(segment_key(7, 3).starts_with(&segment_prefix(7)));
    }

    #[test]
    fn unsupported_types_are_named() {
        let e = ColumnType::from_arrow(
            "t",
            &DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
        )
        .unwrap_err();
        assert!(e.to_string().contains("column t"), "{e}");
    }
}
