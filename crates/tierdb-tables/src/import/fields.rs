//! Parsing delimited records into typed column batches: one parsed field per column,
//! rows appended only once every field parsed, rejects with their reason.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Decimal256Builder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::kernels::cast_utils::parse_decimal;
use datafusion::arrow::datatypes::{
    ArrowNativeType, ArrowNativeTypeOp, Decimal128Type, Decimal256Type, DecimalType, i256,
};

use crate::catalog::{ColumnType, DECIMAL128_MAX_PRECISION, TableDef};
use crate::error::{Result, TableError};
use crate::textin::parse as textin;

use super::{COPY_NULL, Chunk, Format, Rejects};

/// One parsed field.
enum Value<'a> {
    Null,
    Bool(bool),
    I16(i16),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Str(&'a str),
    /// Text rewritten to its type's canonical form (UUID, JSONB).
    Owned(String),
    Date(i32),
    Dec(i128),
    /// NUMERIC of more than 38 digits.
    WideDec(i256),
    /// Microseconds since the epoch.
    Ts(i64),
    /// Microseconds since midnight.
    Time(i64),
    Bin(Vec<u8>),
}

/// Column builders for one chunk.
enum Col {
    Bool(BooleanBuilder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    /// Text; the most characters a value may have (VARCHAR(n), CHAR(n)).
    Str(StringBuilder, Option<u32>),
    /// UUID, JSON or JSONB: text checked and made canonical (`pgtext.rs`).
    Typed(StringBuilder, ColumnType),
    Date(Date32Builder),
    Dec(Decimal128Builder, u8, i8),
    /// NUMERIC of more than 38 digits.
    WideDec(Decimal256Builder, u8, i8),
    /// Timestamps: with a time zone (an instant; text without a zone is read in the
    /// given one, the session's TimeZone) or without (`None`: the zone written is ignored).
    Ts(TimestampMicrosecondBuilder, Option<Tz>),
    Time(Time64MicrosecondBuilder),
    Bin(BinaryBuilder),
}

impl Col {
    fn new(ty: ColumnType, n: usize, zone: Tz) -> Result<Col> {
        let (precision, scale) = ty.decimal().unwrap_or((0, 0));
        Ok(match ty {
            ColumnType::Boolean => Col::Bool(BooleanBuilder::with_capacity(n)),
            ColumnType::Int16 => Col::I16(Int16Builder::with_capacity(n)),
            ColumnType::Int32 => Col::I32(Int32Builder::with_capacity(n)),
            ColumnType::Int64 => Col::I64(Int64Builder::with_capacity(n)),
            ColumnType::Float32 => Col::F32(Float32Builder::with_capacity(n)),
            ColumnType::Float64 => Col::F64(Float64Builder::with_capacity(n)),
            ColumnType::Utf8
            | ColumnType::VarcharUnbounded
            | ColumnType::Varchar { .. }
            | ColumnType::Char { .. } => {
                Col::Str(StringBuilder::with_capacity(n, n * 16), ty.max_chars())
            }
            ColumnType::Uuid | ColumnType::Json | ColumnType::Jsonb => {
                Col::Typed(StringBuilder::with_capacity(n, n * 36), ty)
            }
            ColumnType::Timestamp => Col::Ts(TimestampMicrosecondBuilder::with_capacity(n), None),
            ColumnType::TimestampTz => Col::Ts(
                TimestampMicrosecondBuilder::with_capacity(n).with_timezone(crate::catalog::UTC),
                Some(zone),
            ),
            ColumnType::Time => Col::Time(Time64MicrosecondBuilder::with_capacity(n)),
            ColumnType::Binary => Col::Bin(BinaryBuilder::with_capacity(n, n * 16)),
            ColumnType::Date32 => Col::Date(Date32Builder::with_capacity(n)),
            ColumnType::Decimal { .. } | ColumnType::Numeric
                if precision > DECIMAL128_MAX_PRECISION =>
            {
                Col::WideDec(
                    Decimal256Builder::with_capacity(n)
                        .with_precision_and_scale(precision, scale)?,
                    precision,
                    scale,
                )
            }
            ColumnType::Decimal { .. } | ColumnType::Numeric => Col::Dec(
                Decimal128Builder::with_capacity(n).with_precision_and_scale(precision, scale)?,
                precision,
                scale,
            ),
        })
    }

    /// Parses `s` as a value of this column; the error says why it is not one. Nothing is
    /// appended, so a row is appended only once all its fields parsed.
    fn parse<'a>(&self, s: &'a str) -> std::result::Result<Value<'a>, String> {
        let t = s.trim();
        Ok(match self {
            Col::Bool(_) => Value::Bool(match t.to_ascii_lowercase().as_str() {
                "true" | "t" | "1" | "yes" | "y" => true,
                "false" | "f" | "0" | "no" | "n" => false,
                _ => return Err(format!("{s:?} is not a boolean")),
            }),
            Col::I16(_) => Value::I16(t.parse().map_err(|_| format!("{s:?} is not a SMALLINT"))?),
            Col::I32(_) => Value::I32(t.parse().map_err(|_| format!("{s:?} is not an INT"))?),
            Col::I64(_) => Value::I64(t.parse().map_err(|_| format!("{s:?} is not a BIGINT"))?),
            Col::F32(_) => Value::F32(t.parse().map_err(|_| format!("{s:?} is not a number"))?),
            Col::F64(_) => Value::F64(t.parse().map_err(|_| format!("{s:?} is not a number"))?),
            Col::Str(_, Some(max)) if s.chars().count() > *max as usize => {
                return Err(format!("{s:?} is longer than {max} characters"));
            }
            Col::Str(_, _) => Value::Str(s),
            Col::Typed(_, ty) => match crate::pgtext::canonical(*ty, s) {
                Some(Ok(std::borrow::Cow::Borrowed(v))) => Value::Str(v),
                Some(Ok(std::borrow::Cow::Owned(v))) => Value::Owned(v),
                Some(Err(e)) => return Err(e.to_string()),
                None => Value::Str(s),
            },
            // PostgreSQL's text forms (`textin::parse`): `2024-05-17 10:00`, offsets, zone
            // names; the message says what is wrong with the text.
            Col::Ts(_, None) => Value::Ts(
                textin::timestamp(t, textin::TIMESTAMP)
                    .map_err(|e| format!("{s:?} is not a timestamp: {}", reason(e)))?
                    .local
                    .and_utc()
                    .timestamp_micros(),
            ),
            Col::Ts(_, Some(zone)) => {
                let w = textin::timestamp(t, textin::TIMESTAMPTZ)
                    .map_err(|e| format!("{s:?} is not a timestamp: {}", reason(e)))?;
                Value::Ts(textin::instant_micros(&w, zone))
            }
            Col::Time(_) => Value::Time(
                textin::time(t).map_err(|e| format!("{s:?} is not a time: {}", reason(e)))?,
            ),
            Col::Bin(_) => Value::Bin(
                crate::textvalue::bytea_in(s).map_err(|e| format!("{s:?} is not BYTEA: {e}"))?,
            ),
            Col::Date(_) => Value::Date(
                textin::date(t).map_err(|e| format!("{s:?} is not a date: {}", reason(e)))?,
            ),
            Col::Dec(_, p, sc) => Value::Dec(
                parse_decimal_rounded::<Decimal128Type>(t, *p, *sc).ok_or_else(|| {
                    format!("{s:?} is not a DECIMAL({p},{sc}) (or is out of its range)")
                })?,
            ),
            Col::WideDec(_, p, sc) => Value::WideDec(
                parse_decimal_rounded::<Decimal256Type>(t, *p, *sc).ok_or_else(|| {
                    format!("{s:?} is not a DECIMAL({p},{sc}) (or is out of its range)")
                })?,
            ),
        })
    }

    /// Appends a value `parse` returned for this column (or `Null`).
    fn append(&mut self, v: &Value<'_>) {
        match (self, v) {
            (Col::Bool(b), Value::Bool(x)) => b.append_value(*x),
            (Col::I16(b), Value::I16(x)) => b.append_value(*x),
            (Col::I32(b), Value::I32(x)) => b.append_value(*x),
            (Col::I64(b), Value::I64(x)) => b.append_value(*x),
            (Col::F32(b), Value::F32(x)) => b.append_value(*x),
            (Col::F64(b), Value::F64(x)) => b.append_value(*x),
            (Col::Str(b, _) | Col::Typed(b, _), Value::Str(x)) => b.append_value(x),
            (Col::Typed(b, _), Value::Owned(x)) => b.append_value(x),
            (Col::Date(b), Value::Date(x)) => b.append_value(*x),
            (Col::Dec(b, _, _), Value::Dec(x)) => b.append_value(*x),
            (Col::WideDec(b, _, _), Value::WideDec(x)) => b.append_value(*x),
            (Col::Ts(b, _), Value::Ts(x)) => b.append_value(*x),
            (Col::Time(b), Value::Time(x)) => b.append_value(*x),
            (Col::Bin(b), Value::Bin(x)) => b.append_value(x),
            (Col::Bool(b), _) => b.append_null(),
            (Col::I16(b), _) => b.append_null(),
            (Col::I32(b), _) => b.append_null(),
            (Col::I64(b), _) => b.append_null(),
            (Col::F32(b), _) => b.append_null(),
            (Col::F64(b), _) => b.append_null(),
            (Col::Str(b, _) | Col::Typed(b, _), _) => b.append_null(),
            (Col::Date(b), _) => b.append_null(),
            (Col::Dec(b, _, _), _) => b.append_null(),
            (Col::WideDec(b, _, _), _) => b.append_null(),
            (Col::Ts(b, _), _) => b.append_null(),
            (Col::Time(b), _) => b.append_null(),
            (Col::Bin(b), _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Col::Bool(b) => Arc::new(b.finish()),
            Col::I16(b) => Arc::new(b.finish()),
            Col::I32(b) => Arc::new(b.finish()),
            Col::I64(b) => Arc::new(b.finish()),
            Col::F32(b) => Arc::new(b.finish()),
            Col::F64(b) => Arc::new(b.finish()),
            Col::Str(b, _) | Col::Typed(b, _) => Arc::new(b.finish()),
            Col::Date(b) => Arc::new(b.finish()),
            Col::Dec(b, _, _) => Arc::new(b.finish()),
            Col::WideDec(b, _, _) => Arc::new(b.finish()),
            Col::Ts(b, _) => Arc::new(b.finish()),
            Col::Time(b) => Arc::new(b.finish()),
            Col::Bin(b) => Arc::new(b.finish()),
        }
    }
}

/// What is wrong with a date/time text, from `textin`'s PostgreSQL message.
fn reason(e: TableError) -> String {
    match e {
        TableError::Column { message, .. } => message,
        e => e.to_string(),
    }
}

pub(super) fn parse_chunk(
    def: &TableDef,
    path: &Path,
    format: Format,
    chunk: &Chunk,
    rejects: &Rejects,
    zone: Tz,
) -> Result<RecordBatch> {
    let n = chunk.used;
    let mut cols = def
        .columns
        .iter()
        .map(|c| Col::new(c.ty, n, zone))
        .collect::<Result<Vec<_>>>()?;
    let want = def.columns.len();
    let trailing_delimiter = format == Format::Tbl;
    let copy_text = format == Format::CopyText;
    let mut row: Vec<Value<'_>> = Vec::with_capacity(want);
    for (record, &line) in chunk.records[..chunk.used].iter().zip(&chunk.lines) {
        let mut fields = record.len();
        // dbgen ends every line with the delimiter: an empty last field is that terminator.
        if trailing_delimiter && fields > 0 && record.get(fields - 1).is_some_and(|f| f.is_empty())
        {
            fields -= 1;
        }
        let raw = || record.iter().collect::<Vec<_>>().join(&b"|"[..]);
        if fields != want {
            rejects.reject(
                path,
                line,
                &format!("{fields} fields, the table has {want} columns"),
                &raw(),
            )?;
            continue;
        }
        row.clear();
        let mut bad = None;
        for (i, c) in def.columns.iter().enumerate() {
            let bytes = record.get(i).unwrap_or_default();
            if copy_text && bytes == [COPY_NULL] {
                if !c.nullable {
                    bad = Some(format!(
                        "column {}: null value in a NOT NULL column",
                        c.name
                    ));
                    break;
                }
                row.push(Value::Null);
                continue;
            }
            let Ok(s) = std::str::from_utf8(bytes) else {
                bad = Some(format!("column {}: invalid UTF-8", c.name));
                break;
            };
            // Empty is NULL, except in a NOT NULL text column (an empty string).
            if s.is_empty()
                && !copy_text
                && (c.nullable || c.ty.max_chars().is_none() && !c.ty.is_text())
            {
                if !c.nullable {
                    bad = Some(format!(
                        "column {}: empty value for a NOT NULL column",
                        c.name
                    ));
                    break;
                }
                row.push(Value::Null);
                continue;
            }
            match cols[i].parse(s) {
                Ok(v) => row.push(v),
                Err(why) => {
                    bad = Some(format!("column {}: {why}", c.name));
                    break;
                }
            }
        }
        match bad {
            None => {
                for (col, v) in cols.iter_mut().zip(&row) {
                    col.append(v);
                }
            }
            Some(reason) => rejects.reject(path, line, &reason, &raw())?,
        }
    }
    let arrays: Vec<ArrayRef> = cols.iter_mut().map(Col::finish).collect();
    Ok(RecordBatch::try_new(def.schema(), arrays)?)
}

/// Parses a decimal literal into DECIMAL(`precision`, `scale`), rounding digits past the
/// scale half away from zero, as PostgreSQL and `INSERT` do (0.129 -> 0.13, -1.005 -> -1.01),
/// never truncating. `None` if it is not a number or does not fit the precision. `T` is
/// Decimal128Type up to 38 digits, Decimal256Type beyond.
fn parse_decimal_rounded<T: DecimalType>(
    text: &str,
    precision: u8,
    scale: i8,
) -> Option<T::Native> {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    // Arrow's parser overflows (a panic in debug builds) on exponents past i16 / 10; no
    // DECIMAL(76) value needs one beyond 1000 (found by the copy_text fuzz target).
    if exponent.unsigned_abs() > 1000 {
        return None;
    }
    // It also counts digits in a u8 (arrow-cast 59: overflow past 255 integer digits, and
    // in release builds a wrapped count that passes the precision check): more integer
    // digits than the type holds are refused before it reads them (found by the copy_binary
    // fuzz target).
    let integer = mantissa
        .trim_start_matches(['+', '-'])
        .split('.')
        .next()
        .unwrap_or("")
        .trim_start_matches('0');
    if integer.len() > usize::from(T::MAX_PRECISION) {
        return None;
    }
    let fraction_digits = mantissa.split_once('.').map_or(0, |(_, f)| f.len() as i32);
    let excess = fraction_digits - exponent - i32::from(scale);
    if excess <= 0 || scale < 0 {
        return parse_decimal::<T>(text, precision, scale).ok();
    }
    // Parse exactly at the literal's own scale (at most T's digits), then round to `scale`.
    let wide_scale = i8::try_from(i32::from(scale) + excess).ok()?;
    let wide = parse_decimal::<T>(text, T::MAX_PRECISION, wide_scale).ok()?;
    let ten = T::Native::usize_as(10);
    let divisor = ten.pow_checked(u32::try_from(excess).ok()?).ok()?;
    let quotient = wide.div_wrapping(divisor);
    let remainder = wide.mod_wrapping(divisor);
    let negative = wide.is_lt(T::Native::ZERO);
    let remainder = if negative {
        remainder.neg_wrapping()
    } else {
        remainder
    };
    // remainder >= divisor / 2, without doubling past the type's range.
    let rounded = if remainder.is_ge(divisor.sub_wrapping(remainder)) {
        if negative {
            quotient.sub_wrapping(T::Native::ONE)
        } else {
            quotient.add_wrapping(T::Native::ONE)
        }
    } else {
        quotient
    };
    let limit = ten.pow_checked(u32::from(precision)).ok()?;
    let magnitude = if rounded.is_lt(T::Native::ZERO) {
        rounded.neg_wrapping()
    } else {
        rounded
    };
    magnitude.is_lt(limit).then_some(rounded)
}

/// The field decoders of every column type over the records of `data`, read as the import
/// reads a spooled COPY (quoted CSV, `COPY_NULL` for NULL): the fuzz entry point
/// `crate::fuzzing::copy_fields`. Returns how many fields decoded.
pub(crate) fn decode_all_types(data: &[u8]) -> usize {
    let zone: Tz = "America/New_York".parse().expect("a zone chrono-tz knows");
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .quoting(true)
        .from_reader(data);
    let mut cols: Vec<Col> = crate::fuzzing::TYPES
        .iter()
        .filter_map(|&ty| Col::new(ty, 4, zone).ok())
        .collect();
    let mut decoded = 0;
    let mut record = csv::ByteRecord::new();
    // Bounded: a record is at most the input, and at most 10,000 records are looked at.
    for _ in 0..10_000 {
        match reader.read_byte_record(&mut record) {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
        for field in record.iter() {
            if field == [super::COPY_NULL] {
                continue;
            }
            let Ok(s) = std::str::from_utf8(field) else {
                continue;
            };
            for col in &mut cols {
                if let Ok(v) = col.parse(s) {
                    col.append(&v);
                    decoded += 1;
                }
            }
        }
    }
    for col in &mut cols {
        drop(col.finish());
    }
    decoded
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{Decimal128Type, Decimal256Type, i256};

    #[test]
    fn wide_decimals_parse_and_round_as_narrow_ones() {
        let p = |t: &str| super::parse_decimal_rounded::<Decimal256Type>(t, 65, 30);
        let v = |s: &str| Some(i256::from_string(s).unwrap());
        assert_eq!(
            p("123456789012345678901234567890.123456789012345678901234567890"),
            v("123456789012345678901234567890123456789012345678901234567890")
        );
        assert_eq!(p("1.5"), v(&format!("15{}", "0".repeat(29))));
        assert_eq!(
            p(&format!("-0.{}5", "0".repeat(30))),
            v("-1"),
            "half away from zero"
        );
        assert_eq!(p(&format!("0.{}49", "0".repeat(30))), v("0"));
        assert_eq!(
            p(&format!("1{}", "0".repeat(35))),
            None,
            "36 digits before the point"
        );
        assert_eq!(p("1e99999"), None);
        assert_eq!(p("x"), None);
        assert_eq!(
            p(&"9".repeat(300)),
            None,
            "300 digits: refused, not a panic"
        );
        assert_eq!(
            p(&format!("-{}1.5", "0".repeat(300))),
            v(&format!("-15{}", "0".repeat(29)))
        );
    }

    #[test]
    fn decimals_round_half_away_from_zero_never_truncate() {
        let p = |t| super::parse_decimal_rounded::<Decimal128Type>(t, 12, 2);
        // Exponents Arrow's parser would overflow on are refused, not a panic.
        assert_eq!(p("1e99999"), None);
        assert_eq!(p("1e-4000"), None);
        assert_eq!(p("1.5e2"), Some(15000));
        assert_eq!(p("0.129"), Some(13));
        assert_eq!(p("1.005"), Some(101));
        assert_eq!(p("-1.005"), Some(-101));
        assert_eq!(p("1.004"), Some(100));
        assert_eq!(p("2.5"), Some(250));
        assert_eq!(p("12.3456e1"), Some(12346));
        assert_eq!(p("7"), Some(700));
        assert_eq!(p("9999999999.995"), None, "rounds past the precision");
        assert_eq!(p("abc"), None);
        assert_eq!(p("1.2.3"), None);
    }
}
