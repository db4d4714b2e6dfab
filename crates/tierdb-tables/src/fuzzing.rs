//! Entry point for the fuzz target in `fuzz/` (and the corpus replay in CI): arbitrary
//! bytes as a catalog value. Must return, never panic, hang or allocate without bound.
//! Not an API.

use crate::catalog::{ColumnType, Retired, SegmentMeta, TableDef, decode};

pub(crate) const TYPES: [ColumnType; 15] = [
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
