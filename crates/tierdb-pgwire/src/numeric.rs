//! NUMERIC values on the wire, written here rather than by arrow-pg, which converts them to
//! `rust_decimal` first: 28 digits at most (`SELECT 12345678901234567890123456789.5` or a
//! large NUMERIC(38,0) sum failed with "Number exceeds maximum value that can be
//! represented"), no negative Arrow scale, and no Decimal256 (a literal of more than 38
//! digits) at all.
//!
//! 1. A value is its unscaled integer and its column's Arrow scale `s`: the value is
//!    `unscaled * 10^-s`. The scale is the display scale (digits after the point), as a
//!    PostgreSQL value of that type shows; a negative scale shows none.
//! 2. Text (`numeric_out`): an optional `-`, the integer digits (at least `0`), then `.` and
//!    exactly `s` digits when `s > 0`.
//! 3. Binary (`numeric_send`), big-endian:
//!
//!    | bytes     | field   | meaning                                                   |
//!    |-----------|---------|-----------------------------------------------------------|
//!    | 0..2      | ndigits | i16: how many base-10000 digits follow                    |
//!    | 2..4      | weight  | i16: the power of 10000 of the first digit                |
//!    | 4..6      | sign    | u16: 0x0000 positive (also zero), 0x4000 negative          |
//!    | 6..8      | dscale  | i16: the display scale, `max(s, 0)`                        |
//!    | 8..8+2n   | digits  | i16 each, 0..=9999; leading and trailing zero digits left out |
//!
//!    Zero is `ndigits = 0, weight = 0`, positive, with its display scale.
//! 4. A value of precision 76 (a NUMERIC column without precision,
//!    `tierdb_tables::catalog::ColumnType::Numeric`, a cast to `numeric`, and what DataFusion
//!    computes from them, which keeps the widest precision) is unconstrained: its display
//!    scale is the digits after the point left once the fraction's trailing zeros are
//!    dropped (`1.5`, `2`; PostgreSQL would show the digits the value was written with,
//!    `1.50`, which a fixed Arrow scale does not keep). A column declared NUMERIC(76,s)
//!    shows so too.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Decimal256Type, Field, Schema};
use pgwire::api::results::{FieldFormat, FieldInfo};

/// The sign and the digits of an unscaled integer's decimal text (`-120` → `(true, "120")`),
/// split at the point `scale` places from the right (rule 1): `(negative, integer, fraction)`.
fn parts(unscaled: &str, scale: i8) -> (bool, String, String) {
    let (negative, digits) = match unscaled.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, unscaled),
    };
    if scale <= 0 {
        let int = if digits.trim_start_matches('0').is_empty() {
            "0".to_string()
        } else {
            format!("{digits}{}", "0".repeat(usize::from(scale.unsigned_abs())))
        };
        return (negative, int, String::new());
    }
    let scale = scale as usize;
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits.to_string()
    };
    let (int, frac) = padded.split_at(padded.len() - scale);
    (negative, int.to_string(), frac.to_string())
}

/// Rule 2.
pub(crate) fn text(unscaled: &str, scale: i8) -> String {
    let (negative, int, frac) = parts(unscaled, scale);
    let sign = if negative { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// Rule 3.
pub(crate) fn binary(unscaled: &str, scale: i8) -> Vec<u8> {
    let (negative, int, frac) = parts(unscaled, scale);
    let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0i16, |n, d| n * 10 + i16::from(d - b'0')))
            .collect()
    };
    let mut digits = group(&int);
    let mut weight = digits.len() as i32 - 1;
    digits.extend(group(&frac));
    let leading = digits.iter().take_while(|d| **d == 0).count();
    digits.drain(..leading);
    weight -= leading as i32;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let zero = digits.is_empty();
    let (weight, sign) = if zero {
        (0, 0u16)
    } else {
        (weight, if negative { 0x4000 } else { 0 })
    };
    let mut out = Vec::with_capacity(8 + 2 * digits.len());
    out.extend_from_slice(&(digits.len() as i16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&i16::from(scale.max(0)).to_be_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

/// Whether values of `ty` are unconstrained NUMERIC (rule 4).
pub(crate) fn unconstrained(ty: &DataType) -> bool {
    matches!(ty, DataType::Decimal256(p, _) if *p == tierdb_tables::catalog::MAX_NUMERIC_PRECISION)
}

/// `unscaled` and `scale` with the fraction's trailing zeros dropped (rule 4).
fn trimmed(mut unscaled: String, mut scale: i8) -> (String, i8) {
    while scale > 0 && unscaled.len() > 1 && unscaled.ends_with('0') {
        unscaled.pop();
        scale -= 1;
    }
    if scale > 0 && unscaled == "0" {
        scale = 0;
    }
    (unscaled, scale)
}

/// Row `row` of a Decimal128 or Decimal256 column as its unscaled integer's text and scale.
fn unscaled(col: &ArrayRef, row: usize) -> Option<(String, i8)> {
    match col.data_type() {
        DataType::Decimal128(_, s) => Some((
            col.as_primitive::<Decimal128Type>().value(row).to_string(),
            *s,
        )),
        DataType::Decimal256(_, s) => {
            let n = col.as_primitive::<Decimal256Type>().value(row).to_string();
            Some(if unconstrained(col.data_type()) {
                trimmed(n, *s)
            } else {
                (n, *s)
            })
        }
        _ => None,
    }
}

/// Row `row` of `col` as PostgreSQL's text of a NUMERIC (COPY TO); `None` when `col` is
/// not one or the row is NULL.
pub(crate) fn cell(col: &ArrayRef, row: usize) -> Option<String> {
    if col.is_null(row) {
        return None;
    }
    unscaled(col, row).map(|(n, s)| text(&n, s))
}

/// `batch` with its NUMERIC columns written here (text as Utf8, binary as Binary arrays,
/// which arrow-pg sends as they are under the column's NUMERIC type).
pub(crate) fn as_pg_numeric(batch: RecordBatch, fields: &[FieldInfo]) -> RecordBatch {
    let is_decimal = |c: &ArrayRef| {
        matches!(
            c.data_type(),
            DataType::Decimal128(..) | DataType::Decimal256(..)
        )
    };
    if !batch.columns().iter().any(is_decimal) {
        return batch;
    }
    let schema = batch.schema();
    let mut new_fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, (c, f)) in batch.columns().iter().zip(schema.fields()).enumerate() {
        if !is_decimal(c) {
            columns.push(c.clone());
            new_fields.push(f.as_ref().clone());
            continue;
        }
        let values = (0..c.len()).map(|r| (!c.is_null(r)).then(|| unscaled(c, r)).flatten());
        let binary_format = fields
            .get(i)
            .is_some_and(|f| f.format() == FieldFormat::Binary);
        if binary_format {
            let mut out = BinaryBuilder::with_capacity(c.len(), 16 * c.len());
            for v in values {
                match v {
                    Some((n, s)) => out.append_value(binary(&n, s)),
                    None => out.append_null(),
                }
            }
            columns.push(Arc::new(out.finish()) as ArrayRef);
            new_fields.push(Field::new(f.name(), DataType::Binary, f.is_nullable()));
        } else {
            let mut out = StringBuilder::with_capacity(c.len(), 16 * c.len());
            for v in values {
                match v {
                    Some((n, s)) => out.append_value(text(&n, s)),
                    None => out.append_null(),
                }
            }
            columns.push(Arc::new(out.finish()) as ArrayRef);
            new_fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(new_fields)), columns).unwrap_or(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconstrained_values_drop_the_fractions_trailing_zeros() {
        for (n, s, want) in [
            ("150000", 5, ("15", 1)),
            ("-1500", 3, ("-15", 1)),
            ("0", 20, ("0", 0)),
            ("100", 0, ("100", 0)),
            ("-10", 1, ("-1", 0)),
            ("12345", 2, ("12345", 2)),
        ] {
            assert_eq!(
                trimmed(n.into(), s),
                (want.0.to_string(), want.1),
                "{n} {s}"
            );
        }
        let col: ArrayRef = Arc::new(
            datafusion::arrow::array::Decimal256Array::from(vec![
                Some(datafusion::arrow::datatypes::i256::from_i128(
                    15 * 10i128.pow(19),
                )),
                None,
            ])
            .with_precision_and_scale(76, 20)
            .unwrap(),
        );
        assert_eq!(cell(&col, 0).as_deref(), Some("1.5"));
        assert_eq!(cell(&col, 1), None);
        assert_eq!(binary("15", 1), binary(&unscaled(&col, 0).unwrap().0, 1));
    }

    #[test]
    fn text_puts_the_point_scale_places_from_the_right() {
        for (n, s, want) in [
            ("150", 2, "1.50"),
            ("-5", 2, "-0.05"),
            ("0", 2, "0.00"),
            ("7", 0, "7"),
            ("0", 0, "0"),
            ("1", -10, "10000000000"),
            ("0", -3, "0"),
            (
                "123456789012345678901234567895",
                1,
                "12345678901234567890123456789.5",
            ),
            ("-1", 3, "-0.001"),
        ] {
            assert_eq!(text(n, s), want, "{n} scale {s}");
        }
    }

    /// The bytes PostgreSQL 15 sends (`SELECT …::numeric` in binary, as psycopg's
    /// `binary=True` cursor receives them).
    #[test]
    fn binary_is_postgresqls_numeric_send() {
        let be = |v: &[i16]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        // 1.50: one digit 1 at weight 0, digit 5000 at weight -1, dscale 2.
        assert_eq!(binary("150", 2), be(&[2, 0, 0, 2, 1, 5000]));
        // -0.05: weight -1, digit 500, negative.
        assert_eq!(binary("-5", 2), be(&[1, -1, 0x4000, 2, 500]));
        // 0.00: no digits, positive, dscale 2.
        assert_eq!(binary("0", 2), be(&[0, 0, 0, 2]));
        // 10000000000 = 1_0000_0000_00: digits 100, 0, 0 at weight 2; trailing zeros dropped.
        assert_eq!(binary("1", -10), be(&[1, 2, 0, 0, 100]));
        // 12345678901234567890123456789.5: more than rust_decimal holds.
        assert_eq!(
            binary("123456789012345678901234567895", 1),
            be(&[9, 7, 0, 1, 1, 2345, 6789, 123, 4567, 8901, 2345, 6789, 5000])
        );
        // 0.0001: the zero digit before it is left out (weight -1).
        assert_eq!(binary("1", 4), be(&[1, -1, 0, 4, 1]));
        // 20000: weight 1, digit 2 (the zero digit after it left out).
        assert_eq!(binary("20000", 0), be(&[1, 1, 0, 0, 2]));
    }

    #[test]
    fn decimal_columns_go_out_in_the_clients_format() {
        use datafusion::arrow::array::{Decimal128Array, Int32Array};
        use pgwire::api::Type;
        let schema = Arc::new(Schema::new(vec![
            Field::new("d", DataType::Decimal128(38, 2), true),
            Field::new("i", DataType::Int32, true),
            Field::new("b", DataType::Decimal128(38, 2), true),
        ]));
        let d: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(150), None])
                .with_precision_and_scale(38, 2)
                .unwrap(),
        );
        let i: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
        let batch = RecordBatch::try_new(schema, vec![d.clone(), i, d]).unwrap();
        let field =
            |name: &str, ty: Type, format| FieldInfo::new(name.into(), None, None, ty, format);
        let fields = [
            field("d", Type::NUMERIC, FieldFormat::Text),
            field("i", Type::INT4, FieldFormat::Text),
            field("b", Type::NUMERIC, FieldFormat::Binary),
        ];
        let out = as_pg_numeric(batch, &fields);
        let t = out.column(0).as_string::<i32>();
        assert_eq!((t.value(0), t.is_null(1)), ("1.50", true));
        assert_eq!(out.column(1).data_type(), &DataType::Int32);
        let b = out.column(2).as_binary::<i32>();
        assert_eq!(b.value(0), binary("150", 2).as_slice());
        assert!(b.is_null(1));
    }
}
