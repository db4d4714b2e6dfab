//! Order-preserving ("memcomparable") encoding of key values: for two values `a` and `b`
//! of one column type, `encode(a) < encode(b)` as bytes exactly when `a < b` as SQL
//! compares them, and a key of several columns is the concatenation of its columns'
//! encodings (no encoding is a prefix of another of the same type). The KV engine keeps
//! rows and index entries in this order, so a key range is a range of SQL values.
//!
//! | type | bytes |
//! |---|---|
//! | NULL (index columns only) | `0x00` (sorts first); a present value is `0x01` then its bytes |
//! | BOOLEAN | `0x00` false, `0x01` true |
//! | SMALLINT, INT, BIGINT, DATE, TIMESTAMP(TZ) | big-endian two's complement with the sign bit flipped (2, 4 or 8 bytes; DATE 4, timestamps 8: microseconds) |
//! | REAL, DOUBLE | IEEE bits big-endian; negative: every bit flipped, else the sign bit flipped; -0 is written as 0, every NaN as one NaN (above +inf, as PostgreSQL sorts it) |
//! | NUMERIC(p,s) | the unscaled integer, big-endian, sign bit flipped (one scale per column): 16 bytes (i128) up to p = 38, 32 (i256) from p = 39 |
//! | TEXT, VARCHAR, CHAR, BYTEA | the bytes with each `0x00` written `0x00 0xFF`, then `0x00 0x00` |
//!
//! Decoding is never needed: a row's value holds every column (`format.rs`).

use datafusion::common::ScalarValue;

use crate::catalog::ColumnType;
use crate::error::{Result, TableError};

/// Appends `v` (of column type `ty`) to `out`; `nullable` columns carry a NULL marker.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    ty: ColumnType,
    v: &ScalarValue,
    nullable: bool,
) -> Result<()> {
    if v.is_null() {
        if !nullable {
            return Err(TableError::Schema("a key column cannot be NULL".into()));
        }
        out.push(0x00);
        return Ok(());
    }
    if nullable {
        out.push(0x01);
    }
    let v = if v.data_type() == ty.arrow() {
        v.clone()
    } else {
        v.cast_to(&ty.arrow())?
    };
    match v {
        ScalarValue::Boolean(Some(b)) => out.push(u8::from(b)),
        ScalarValue::Int16(Some(i)) => out.extend_from_slice(&((i as u16) ^ 0x8000).to_be_bytes()),
        ScalarValue::Int32(Some(i)) | ScalarValue::Date32(Some(i)) => {
            out.extend_from_slice(&((i as u32) ^ 0x8000_0000).to_be_bytes())
        }
        ScalarValue::Int64(Some(i))
        | ScalarValue::TimestampMicrosecond(Some(i), _)
        | ScalarValue::Time64Microsecond(Some(i)) => {
            out.extend_from_slice(&((i as u64) ^ (1 << 63)).to_be_bytes())
        }
        ScalarValue::Float32(Some(f)) => {
            let f = if f == 0.0 {
                0.0
            } else if f.is_nan() {
                f32::NAN
            } else {
                f
            };
            let bits = f.to_bits();
            let bits = if bits >> 31 == 1 {
                !bits
            } else {
                bits ^ (1 << 31)
            };
            out.extend_from_slice(&bits.to_be_bytes());
        }
        ScalarValue::Float64(Some(f)) => {
            let f = if f == 0.0 {
                0.0
            } else if f.is_nan() {
                f64::NAN
            } else {
                f
            };
            let bits = f.to_bits();
            let bits = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.extend_from_slice(&bits.to_be_bytes());
        }
        ScalarValue::Decimal128(Some(i), _, _) => {
            out.extend_from_slice(&((i as u128) ^ (1 << 127)).to_be_bytes())
        }
        ScalarValue::Decimal256(Some(i), _, _) => {
            // Two's complement, big-endian, sign bit flipped: orders as the numbers do.
            let mut be = i.to_be_bytes();
            be[0] ^= 0x80;
            out.extend_from_slice(&be)
        }
        ScalarValue::Utf8(Some(s)) => bytes(out, s.as_bytes()),
        ScalarValue::Binary(Some(b)) => bytes(out, &b),
        other => {
            return Err(TableError::Schema(format!(
                "a key value of type {} cannot be encoded as {}",
                other.data_type(),
                ty.sql()
            )));
        }
    }
    Ok(())
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    for &x in b {
        out.push(x);
        if x == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn enc(ty: ColumnType, v: ScalarValue) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, ty, &v, false).unwrap();
        out
    }

    proptest! {
        #[test]
        fn integers_keep_their_order(a in any::<i64>(), b in any::<i64>()) {
            let (ea, eb) = (enc(ColumnType::Int64, ScalarValue::Int64(Some(a))), enc(ColumnType::Int64, ScalarValue::Int64(Some(b))));
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            let (a, b) = (a as i32, b as i32);
            let (ea, eb) = (enc(ColumnType::Int32, ScalarValue::Int32(Some(a))), enc(ColumnType::Int32, ScalarValue::Int32(Some(b))));
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
        }

        #[test]
        fn floats_keep_their_order(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let (ea, eb) = (enc(ColumnType::Float64, ScalarValue::Float64(Some(a))), enc(ColumnType::Float64, ScalarValue::Float64(Some(b))));
            prop_assert_eq!(a.partial_cmp(&b).unwrap(), ea.cmp(&eb));
        }

        #[test]
        fn strings_keep_their_order_also_as_the_first_of_two_columns(
            a in proptest::collection::vec(any::<u8>(), 0..6),
            b in proptest::collection::vec(any::<u8>(), 0..6),
            x in any::<i32>(), y in any::<i32>(),
        ) {
            let key = |s: &[u8], i: i32| {
                let mut out = Vec::new();
                encode(&mut out, ColumnType::Binary, &ScalarValue::Binary(Some(s.to_vec())), false).unwrap();
                encode(&mut out, ColumnType::Int32, &ScalarValue::Int32(Some(i)), false).unwrap();
                out
            };
            prop_assert_eq!((&a, x).cmp(&(&b, y)), key(&a, x).cmp(&key(&b, y)));
        }

        #[test]
        fn decimals_keep_their_order(a in any::<i64>(), b in any::<i64>()) {
            let ty = ColumnType::Decimal { precision: 38, scale: 2 };
            let d = |v: i64| enc(ty, ScalarValue::Decimal128(Some(v as i128 * 1000), 38, 2));
            prop_assert_eq!(a.cmp(&b), d(a).cmp(&d(b)));
        }

        #[test]
        fn wide_decimals_keep_their_order(a in any::<(i128, u128)>(), b in any::<(i128, u128)>()) {
            use datafusion::arrow::datatypes::i256;
            let ty = ColumnType::Decimal { precision: 65, scale: 30 };
            let v = |(high, low): (i128, u128)| i256::from_parts(low, high);
            let d = |x: i256| enc(ty, ScalarValue::Decimal256(Some(x), 65, 30));
            prop_assert_eq!(v(a).cmp(&v(b)), d(v(a)).cmp(&d(v(b))));
        }
    }

    #[test]
    fn nulls_sort_first_and_zero_has_one_spelling() {
        let mut null = Vec::new();
        encode(
            &mut null,
            ColumnType::Int32,
            &ScalarValue::Int32(None),
            true,
        )
        .unwrap();
        let mut min = Vec::new();
        encode(
            &mut min,
            ColumnType::Int32,
            &ScalarValue::Int32(Some(i32::MIN)),
            true,
        )
        .unwrap();
        assert!(null < min);
        assert!(
            encode(
                &mut Vec::new(),
                ColumnType::Int32,
                &ScalarValue::Int32(None),
                false
            )
            .is_err()
        );
        assert_eq!(
            enc(ColumnType::Float64, ScalarValue::Float64(Some(-0.0))),
            enc(ColumnType::Float64, ScalarValue::Float64(Some(0.0)))
        );
        assert!(
            enc(ColumnType::Float64, ScalarValue::Float64(Some(f64::NAN)))
                > enc(
                    ColumnType::Float64,
                    ScalarValue::Float64(Some(f64::INFINITY))
                )
        );
        // A literal of another integer type is cast to the column's.
        assert_eq!(
            enc(ColumnType::Int64, ScalarValue::Int32(Some(7))),
            enc(ColumnType::Int64, ScalarValue::Int64(Some(7)))
        );
    }
}
