//! Entry point for the fuzz target in `fuzz/` (and the corpus replay in CI): arbitrary
//! bytes as a catalog value. Must return, never panic, hang or allocate without bound.
//! Not an API.

use crate::catalog::{ColumnType, Retired, SegmentMeta, TableDef, decode};

pub(crate) const TYPES: [ColumnType; 17] = [
    ColumnType::Boolean,
    ColumnType::Int16,
    ColumnType::Int32,
    ColumnType::Int64,
    ColumnType::Float32,
    ColumnType::Float64,
    ColumnType::Utf8,
    ColumnType::Varchar { len: 4 },
    ColumnType::Char { len: 2 },
    ColumnType::Timestamp,
    ColumnType::TimestampTz,
    ColumnType::Time,
    ColumnType::Binary,
    ColumnType::Date32,
    ColumnType::Decimal {
        precision: 10,
        scale: 2,
    },
    ColumnType::Decimal {
        precision: 38,
        scale: 0,
    },
    ColumnType::Decimal {
        precision: 65,
        scale: 30,
    },
];

/// `data` decoded as each kind of catalog value, and what the engine derives from it.
pub fn catalog(data: &[u8]) {
    let key = b"fuzz";
    if let Ok(def) = decode::<TableDef>(key, data) {
        drop(def.validate());
        if def.validate().is_ok() {
            drop(def.schema());
            drop(def.ingest_order());
        }
    }
    if let Ok(seg) = decode::<SegmentMeta>(key, data) {
        // What a read does with the checksums it finds in the catalog.
        let len = seg.checksums.object_bytes.min(1 << 16);
        drop(seg.checksums.aligned(&(0..len)));
        drop(seg.checksums.verify(0, &vec![0u8; len as usize]));
        for c in &seg.columns {
            for v in [&c.min, &c.max].into_iter().flatten() {
                for ty in TYPES {
                    drop(v.to_scalar(ty));
                }
            }
        }
    }
    drop(decode::<Retired>(key, data));
}

/// `data` as the CSV a COPY FROM (or `tierdb import`) spools: every field decoded as every
/// column type. Must return, never panic, hang or allocate without bound.
pub fn copy_fields(data: &[u8]) -> usize {
    crate::import::decode_all_types(data)
}

/// The row table every fuzzed row value is read against: one nullable column of each type
/// of [`TYPES`], keyed by the first.
fn row_table(columns: usize) -> TableDef {
    TableDef {
        id: 1,
        name: "fuzz".into(),
        columns: TYPES
            .iter()
            .take(columns)
            .enumerate()
            .map(|(i, &ty)| crate::catalog::ColumnDef {
                name: format!("c{i}"),
                ty,
                nullable: i > 0,
            })
            .collect(),
        sort_key: Vec::new(),
        partition_key: None,
        created_ms: 0,
        dropped: Vec::new(),
        primary_key: vec!["c0".into()],
        defaults: Vec::new(),
        indexes: Vec::new(),
        comments: Default::default(),
        missing: Vec::new(),
    }
}

/// `data` as a row table's value (`rows/format.rs`): its first byte picks how many of the
/// table's columns exist (so rows written before ADD COLUMN, and rows with more columns
/// than the table, are reached), the rest is the value. A row that decodes becomes a batch
/// and is printed, as a scan and a query's answer use it. Must return, never panic, hang
/// or allocate without bound: a value that does not decode is `TableError::Damaged`.
pub fn row_value(data: &[u8]) {
    let Some((&first, value)) = data.split_first() else {
        return;
    };
    let def = row_table(1 + first as usize % TYPES.len());
    let Ok(row) = crate::rows::format::decode_row(&def, b"fuzz", value) else {
        return;
    };
    let schema = def.schema();
    if let Ok(batch) = crate::rows::format::to_batch(&def, &schema, vec![row]) {
        drop(
            datafusion::arrow::util::pretty::pretty_format_batches(&[batch]).map(|t| t.to_string()),
        );
    }
}

/// Valid inputs for [`row_value`]: rows of the full table (every type, with and without
/// NULLs, edge values) as the engine writes them, each after its column-count byte.
pub fn row_value_seeds() -> Vec<Vec<u8>> {
    use datafusion::common::ScalarValue as S;
    let def = row_table(TYPES.len());
    let tz = Some(crate::catalog::UTC.into());
    let rows: Vec<Vec<S>> = vec![
        vec![
            S::Boolean(Some(true)),
            S::Int16(Some(i16::MIN)),
            S::Int32(Some(i32::MAX)),
            S::Int64(Some(-1)),
            S::Float32(Some(f32::NAN)),
            S::Float64(Some(-0.0)),
            S::Utf8(Some("text with \0 and é".into())),
            S::Utf8(Some("abcd".into())),
            S::Utf8(Some("x ".into())),
            S::TimestampMicrosecond(Some(i64::MIN), None),
            S::TimestampMicrosecond(Some(1_700_000_000_000_000), tz.clone()),
            S::Time64Microsecond(Some(86_399_999_999)),
            S::Binary(Some(vec![0, 255, 7])),
            S::Date32(Some(-719_162)),
            S::Decimal128(Some(-9_999_999_999), 10, 2),
            S::Decimal128(Some(i128::MAX / 2), 38, 0),
            S::Decimal256(
                Some(datafusion::arrow::datatypes::i256::from_parts(
                    7,
                    i128::MIN / 3,
                )),
                65,
                30,
            ),
        ],
        def.columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    S::Boolean(Some(false))
                } else {
                    S::try_from(c.ty.arrow()).unwrap_or(S::Null)
                }
            })
            .collect(),
    ];
    let schema = def.schema();
    let mut out = Vec::new();
    for row in rows {
        let Ok(batch) = crate::rows::format::to_batch(&def, &schema, vec![row]) else {
            continue;
        };
        if let Ok(value) = crate::rows::format::encode_row(&def, &batch, 0) {
            out.push([&[(TYPES.len() - 1) as u8][..], &value].concat());
        }
    }
    out
}
