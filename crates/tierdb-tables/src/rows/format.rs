//! The value of a row in the KV engine (row format 1): every column of the row, in the
//! table's column order as of the write.
//!
//! | bytes | meaning |
//! |---|---|
//! | 1 | [`ROW_FORMAT_VERSION`] (1) |
//! | 2 | column count `n`, u16 little-endian |
//! | ⌈n/8⌉ | NULL bitmap: bit `i % 8` of byte `i / 8` set when column `i` is NULL |
//! | … | each non-NULL column in order: BOOLEAN 1 byte; SMALLINT 2, INT and DATE 4, BIGINT, TIMESTAMP(TZ) and TIME 8 (µs; TIME since midnight), REAL 4, DOUBLE 8 (IEEE bits), NUMERIC(p,s) 16 (unscaled i128) up to p = 38 and 32 (unscaled i256) from p = 39: all little-endian; TEXT, VARCHAR, CHAR, UUID, JSON, JSONB (their canonical text) and BYTEA a u32 little-endian length, then the bytes |
//!
//! Invariants:
//!
//! 1. A row written before ALTER TABLE … ADD COLUMN has fewer columns than the table: the
//!    columns past its count read as the value ADD COLUMN … DEFAULT gave them
//!    ([`TableDef::missing`], that value's bytes as a column of a row), else NULL. A row never holds
//!    more columns than its table: DROP COLUMN and ALTER COLUMN … TYPE write every row
//!    again (`sql/alter_type.rs`), and a transaction that wrote rows before cannot commit
//!    them after (`rows/index.rs` `check_tables`), so position `i` always means the
//!    table's column `i`.
//! 2. Decoding checks every length against the bytes left and the version byte; a value
//!    that does not decode is reported as damaged data naming the key, never served.
//!    (SlateDB checksums its blocks, so a flipped byte is caught before this point.)

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{SchemaRef, i256};
use datafusion::common::ScalarValue;

use crate::catalog::{ColumnType, DECIMAL128_MAX_PRECISION, TableDef, UTC};
use crate::error::{Result, TableError};

/// The version byte every row value starts with.
pub const ROW_FORMAT_VERSION: u8 = 1;

/// Encodes row `row` of `batch` (the table's columns, in order, already conformed).
pub(crate) fn encode_row(def: &TableDef, batch: &RecordBatch, row: usize) -> Result<Vec<u8>> {
    let n = def.columns.len();
    let mut out = Vec::with_capacity(16 + n * 8);
    out.push(ROW_FORMAT_VERSION);
    out.extend_from_slice(&(n as u16).to_le_bytes());
    let bitmap_at = out.len();
    out.resize(bitmap_at + n.div_ceil(8), 0);
    for (i, c) in def.columns.iter().enumerate() {
        let v = ScalarValue::try_from_array(batch.column(i), row)?;
        if v.is_null() {
            out[bitmap_at + i / 8] |= 1 << (i % 8);
            continue;
        }
        encode_value(&mut out, c.ty, &v)?;
    }
    Ok(out)
}

fn encode_value(out: &mut Vec<u8>, ty: ColumnType, v: &ScalarValue) -> Result<()> {
    match v {
        ScalarValue::Boolean(Some(b)) => out.push(u8::from(*b)),
        ScalarValue::Int16(Some(i)) => out.extend_from_slice(&i.to_le_bytes()),
        ScalarValue::Int32(Some(i)) | ScalarValue::Date32(Some(i)) => {
            out.extend_from_slice(&i.to_le_bytes())
        }
        ScalarValue::Int64(Some(i))
        | ScalarValue::TimestampMicrosecond(Some(i), _)
        | ScalarValue::Time64Microsecond(Some(i)) => out.extend_from_slice(&i.to_le_bytes()),
        ScalarValue::Float32(Some(f)) => out.extend_from_slice(&f.to_bits().to_le_bytes()),
        ScalarValue::Float64(Some(f)) => out.extend_from_slice(&f.to_bits().to_le_bytes()),
        ScalarValue::Decimal128(Some(i), _, _) => out.extend_from_slice(&i.to_le_bytes()),
        ScalarValue::Decimal256(Some(i), _, _) => out.extend_from_slice(&i.to_le_bytes()),
        ScalarValue::Utf8(Some(s)) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        ScalarValue::Binary(Some(b)) => {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        other => {
            return Err(TableError::Schema(format!(
                "a value of type {} cannot be stored in a {} column",
                other.data_type(),
                ty.sql()
            )));
        }
    }
    Ok(())
}

/// Reads a row's values, one per column of `def` (invariant 1: missing trailing columns
/// are NULL). `key` names the row in the error of a value that does not decode.
pub(crate) fn decode_row(def: &TableDef, key: &[u8], value: &[u8]) -> Result<Vec<ScalarValue>> {
    let damaged = |reason: String| TableError::Damaged {
        key: format!("row {} of table {}", hex(key), def.name),
        reason,
    };
    let mut r = Reader { buf: value, at: 0 };
    let version = r.take(1).map_err(&damaged)?[0];
    if version != ROW_FORMAT_VERSION {
        return Err(damaged(format!(
            "row format version {version}, this build reads version {ROW_FORMAT_VERSION}"
        )));
    }
    let stored = u16::from_le_bytes(r.array().map_err(&damaged)?) as usize;
    if stored > def.columns.len() {
        return Err(damaged(format!(
            "{stored} columns, the table has {}",
            def.columns.len()
        )));
    }
    let bitmap = r.take(stored.div_ceil(8)).map_err(&damaged)?.to_vec();
    let mut out = Vec::with_capacity(def.columns.len());
    for (i, c) in def.columns.iter().enumerate() {
        if i >= stored {
            out.push(missing_value(def, i)?);
            continue;
        }
        let null = bitmap[i / 8] & (1 << (i % 8)) != 0;
        if null {
            out.push(ScalarValue::try_from(c.ty.arrow())?);
            continue;
        }
        out.push(decode_value(&mut r, c.ty).map_err(&damaged)?);
    }
    if r.at != value.len() {
        return Err(damaged(format!(
            "{} bytes after the last column",
            value.len() - r.at
        )));
    }
    Ok(out)
}

/// What column `i` of `def` reads in a row written before it was added (invariant 1).
fn missing_value(def: &TableDef, i: usize) -> Result<ScalarValue> {
    let c = &def.columns[i];
    let Some((_, hex)) = def.missing.iter().find(|(n, _)| *n == c.name) else {
        return Ok(ScalarValue::try_from(c.ty.arrow())?);
    };
    let damaged = |reason: String| TableError::Damaged {
        key: format!(
            "the value column {} of table {} has in older rows",
            c.name, def.name
        ),
        reason,
    };
    let bytes = unhex(hex).ok_or_else(|| damaged(format!("{hex:?} is not hex")))?;
    let mut r = Reader { buf: &bytes, at: 0 };
    let v = decode_value(&mut r, c.ty).map_err(&damaged)?;
    if r.at != bytes.len() {
        return Err(damaged(format!(
            "{} bytes after the value",
            bytes.len() - r.at
        )));
    }
    Ok(v)
}

/// `v` (a value of a column of type `ty`) as [`TableDef::missing`] keeps it.
pub(crate) fn missing_text(ty: ColumnType, v: &ScalarValue) -> Result<String> {
    let mut out = Vec::new();
    encode_value(&mut out, ty, v)?;
    Ok(hex(&out))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn decode_value(r: &mut Reader<'_>, ty: ColumnType) -> std::result::Result<ScalarValue, String> {
    let (precision, scale) = ty.decimal().unwrap_or((0, 0));
    Ok(match ty {
        ColumnType::Boolean => ScalarValue::Boolean(Some(r.take(1)?[0] != 0)),
        ColumnType::Int16 => ScalarValue::Int16(Some(i16::from_le_bytes(r.array()?))),
        ColumnType::Int32 => ScalarValue::Int32(Some(i32::from_le_bytes(r.array()?))),
        ColumnType::Date32 => ScalarValue::Date32(Some(i32::from_le_bytes(r.array()?))),
        ColumnType::Int64 => ScalarValue::Int64(Some(i64::from_le_bytes(r.array()?))),
        ColumnType::Timestamp => {
            ScalarValue::TimestampMicrosecond(Some(i64::from_le_bytes(r.array()?)), None)
        }
        ColumnType::TimestampTz => ScalarValue::TimestampMicrosecond(
            Some(i64::from_le_bytes(r.array()?)),
            Some(UTC.into()),
        ),
        ColumnType::Time => ScalarValue::Time64Microsecond(Some(i64::from_le_bytes(r.array()?))),
        ColumnType::Float32 => {
            ScalarValue::Float32(Some(f32::from_bits(u32::from_le_bytes(r.array()?))))
        }
        ColumnType::Float64 => {
            ScalarValue::Float64(Some(f64::from_bits(u64::from_le_bytes(r.array()?))))
        }
        ColumnType::Decimal { .. } | ColumnType::Numeric
            if precision > DECIMAL128_MAX_PRECISION =>
        {
            ScalarValue::Decimal256(Some(i256::from_le_bytes(r.array()?)), precision, scale)
        }
        ColumnType::Decimal { .. } | ColumnType::Numeric => {
            ScalarValue::Decimal128(Some(i128::from_le_bytes(r.array()?)), precision, scale)
        }
        ColumnType::Utf8
        | ColumnType::VarcharUnbounded
        | ColumnType::Varchar { .. }
        | ColumnType::Char { .. }
        | ColumnType::Uuid
        | ColumnType::Json
        | ColumnType::Jsonb => {
            let len = u32::from_le_bytes(r.array()?) as usize;
            let b = r.take(len)?;
            let s = std::str::from_utf8(b).map_err(|e| format!("text is not UTF-8: {e}"))?;
            ScalarValue::Utf8(Some(s.to_string()))
        }
        ColumnType::Binary => {
            let len = u32::from_le_bytes(r.array()?) as usize;
            ScalarValue::Binary(Some(r.take(len)?.to_vec()))
        }
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "{n} bytes wanted at offset {}, the value has {}",
                    self.at,
                    self.buf.len()
                )
            })?;
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let b = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Rows (each a value per column of `def`) as a batch of `schema` (the table's schema).
pub(crate) fn to_batch(
    def: &TableDef,
    schema: &SchemaRef,
    rows: Vec<Vec<ScalarValue>>,
) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    let mut columns: Vec<Vec<ScalarValue>> = (0..def.columns.len())
        .map(|_| Vec::with_capacity(rows.len()))
        .collect();
    for row in rows {
        for (c, v) in columns.iter_mut().zip(row) {
            c.push(v);
        }
    }
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (values, field) in columns.into_iter().zip(schema.fields()) {
        let a = ScalarValue::iter_to_array(values)?;
        arrays.push(if a.data_type() == field.data_type() {
            a
        } else {
            datafusion::arrow::compute::cast(&a, field.data_type())?
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::catalog::ColumnDef;
    use datafusion::arrow::array::{BinaryArray, Int32Array, StringArray};

    fn def() -> TableDef {
        let col = |name: &str, ty| ColumnDef {
            name: name.into(),
            ty,
            nullable: true,
        };
        TableDef {
            id: 9,
            name: "t".into(),
            columns: vec![
                col("id", ColumnType::Int32),
                col("c", ColumnType::Utf8),
                col("b", ColumnType::Binary),
            ],
            sort_key: vec![],
            partition_key: None,
            created_ms: 0,
            dropped: vec![],
            primary_key: vec!["id".into()],
            defaults: vec![],
            indexes: vec![],
            comments: Default::default(),
            missing: Vec::new(),
        }
    }

    fn batch(def: &TableDef) -> RecordBatch {
        RecordBatch::try_new(
            def.schema(),
            vec![
                std::sync::Arc::new(Int32Array::from(vec![Some(7), Some(-1)])),
                std::sync::Arc::new(StringArray::from(vec![Some("héllo"), None])),
                std::sync::Arc::new(BinaryArray::from(vec![
                    Some(&b"\x00\x01"[..]),
                    Some(&b""[..]),
                ])),
            ],
        )
        .unwrap()
    }

    /// The bytes of format 1, checked in: a change to them is a new format version.
    #[test]
    fn format_1_image() {
        let d = def();
        let v = encode_row(&d, &batch(&d), 0).unwrap();
        assert_eq!(hex(&v), "01030000070000000600000068c3a96c6c6f020000000001");
        let v = encode_row(&d, &batch(&d), 1).unwrap();
        assert_eq!(hex(&v), "01030002ffffffff00000000");
        let back = decode_row(&d, b"k", &v).unwrap();
        assert_eq!(back[0], ScalarValue::Int32(Some(-1)));
        assert_eq!(back[1], ScalarValue::Utf8(None));
        assert_eq!(back[2], ScalarValue::Binary(Some(vec![])));
    }

    #[test]
    fn time_is_eight_bytes_of_microseconds_since_midnight() {
        let v = ScalarValue::Time64Microsecond(Some(36_672_500_000)); // 10:11:12.5
        let mut out = Vec::new();
        encode_value(&mut out, ColumnType::Time, &v).unwrap();
        assert_eq!(hex(&out), "20f1d98908000000");
        let mut r = Reader { buf: &out, at: 0 };
        assert_eq!(decode_value(&mut r, ColumnType::Time).unwrap(), v);
    }

    #[test]
    fn numeric_is_sixteen_bytes_up_to_precision_38_and_thirty_two_beyond() {
        let narrow = ColumnType::Decimal {
            precision: 10,
            scale: 2,
        };
        let v = ScalarValue::Decimal128(Some(-150), 10, 2);
        let mut out = Vec::new();
        encode_value(&mut out, narrow, &v).unwrap();
        assert_eq!(hex(&out), "6affffffffffffffffffffffffffffff");
        let mut r = Reader { buf: &out, at: 0 };
        assert_eq!(decode_value(&mut r, narrow).unwrap(), v);

        let wide = ColumnType::Decimal {
            precision: 65,
            scale: 30,
        };
        let v = ScalarValue::Decimal256(Some(i256::from_i128(-150)), 65, 30);
        let mut out = Vec::new();
        encode_value(&mut out, wide, &v).unwrap();
        assert_eq!(hex(&out), format!("6a{}", "ff".repeat(31)));
        let mut r = Reader { buf: &out, at: 0 };
        assert_eq!(decode_value(&mut r, wide).unwrap(), v);
        // Cut short: an error, never a value.
        let mut r = Reader {
            buf: &out[..20],
            at: 0,
        };
        assert!(decode_value(&mut r, wide).is_err());
    }

    #[test]
    fn rows_of_fewer_columns_read_the_rest_as_null() {
        let mut d = def();
        let v = encode_row(&d, &batch(&d), 0).unwrap();
        d.columns.push(ColumnDef {
            name: "added".into(),
            ty: ColumnType::Int64,
            nullable: true,
        });
        let back = decode_row(&d, b"k", &v).unwrap();
        assert_eq!(back[3], ScalarValue::Int64(None));
        assert_eq!(back[1], ScalarValue::Utf8(Some("héllo".into())));
    }

    #[test]
    fn rows_of_fewer_columns_read_a_missing_value_where_there_is_one() {
        let mut d = def();
        let v = encode_row(&d, &batch(&d), 0).unwrap();
        for (name, ty) in [("n", ColumnType::Int64), ("t", ColumnType::Utf8)] {
            d.columns.push(ColumnDef {
                name: name.into(),
                ty,
                nullable: true,
            });
        }
        let text = missing_text(ColumnType::Utf8, &ScalarValue::Utf8(Some("xy".into()))).unwrap();
        assert_eq!(text, "020000007879");
        d.missing.push(("t".into(), text));
        let back = decode_row(&d, b"k", &v).unwrap();
        assert_eq!(back[3], ScalarValue::Int64(None));
        assert_eq!(back[4], ScalarValue::Utf8(Some("xy".into())));
        // A damaged missing value is an error naming it, never data.
        d.missing[0].1 = "0200zz".into();
        let e = decode_row(&d, b"k", &v).unwrap_err().to_string();
        assert!(
            e.contains("the value column t of table t has in older rows"),
            "{e}"
        );
        d.missing[0].1 = "0500000078".into();
        assert!(decode_row(&d, b"k", &v).is_err());
    }

    /// Fuzz: cut, flipped and random values decode or fail as damaged; never a panic.
    #[test]
    fn decoding_never_panics() {
        use proptest::prelude::*;
        let d = def();
        let good = encode_row(&d, &batch(&d), 0).unwrap();
        proptest!(ProptestConfig::with_cases(2000), |(
            noise in proptest::collection::vec(any::<u8>(), 0..64),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
        )| {
            let _ = decode_row(&d, b"k", &noise);
            let mut v = good.clone();
            for &(at, x) in &flips {
                let i = at % v.len();
                v[i] ^= x;
            }
            let _ = decode_row(&d, b"k", &v);
            let cut = cut % (good.len() + 1);
            if cut < good.len() {
                prop_assert!(decode_row(&d, b"k", &good[..cut]).is_err());
            }
        });
    }
}
