//! INTERVAL values on the wire, written here rather than by arrow-pg, which sends a NULL
//! interval as `00:00:00` (its encoder reads the value under a null: `NULL::interval`
//! and `interval '1 min' * NULL` were zero, a silently wrong answer) and writes six digits
//! of fraction where PostgreSQL trims them (`06:51:25.689600` for `06:51:25.6896`).
//!
//! 1. A value is PostgreSQL's triple: months, days and microseconds (Arrow's nanoseconds
//!    truncated to the microsecond; DayTime's milliseconds and YearMonth's months as such).
//! 2. Text is `IntervalStyle = postgres` (`EncodeInterval`): `N year(s)`, `N mon(s)`,
//!    `N day(s)`, each left out when zero and signed on its own (`+` after a negative
//!    part), then `[-|+]HH:MM:SS[.ffffff]` when the time is not zero or nothing else was
//!    written, hours unbounded (`36:00:00`), the fraction without trailing zeros.
//! 3. Binary (`interval_send`): the microseconds as i64, the days as i32, the months as
//!    i32, big-endian.
//! 4. COPY TO writes the text of rule 2 (Arrow's display, `1 days 2 hours`, was sent).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::{
    DataType, Field, IntervalDayTimeType, IntervalMonthDayNanoType, IntervalUnit,
    IntervalYearMonthType, Schema,
};
use pgwire::api::results::{FieldFormat, FieldInfo};

/// Rule 1: (months, days, microseconds) of row `row`.
fn parts(col: &ArrayRef, row: usize) -> Option<(i32, i32, i64)> {
    Some(match col.data_type() {
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = col.as_primitive::<IntervalMonthDayNanoType>().value(row);
            (v.months, v.days, v.nanoseconds / 1000)
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = col.as_primitive::<IntervalDayTimeType>().value(row);
            (0, v.days, i64::from(v.milliseconds) * 1000)
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            (col.as_primitive::<IntervalYearMonthType>().value(row), 0, 0)
        }
        _ => return None,
    })
}

/// Rule 2.
pub(crate) fn text(months: i32, days: i32, micros: i64) -> String {
    let mut out = String::new();
    let mut before_negative = false;
    for (value, unit) in [
        (i64::from(months / 12), "year"),
        (i64::from(months % 12), "mon"),
        (i64::from(days), "day"),
    ] {
        if value == 0 {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        if before_negative && value > 0 {
            out.push('+');
        }
        out.push_str(&format!(
            "{value} {unit}{}",
            if value != 1 { "s" } else { "" }
        ));
        before_negative = value < 0;
    }
    if out.is_empty() || micros != 0 {
        let sign = if micros < 0 {
            "-"
        } else if before_negative {
            "+"
        } else {
            ""
        };
        let m = micros.unsigned_abs();
        let (hours, minutes, seconds, fraction) = (
            m / 3_600_000_000,
            m / 60_000_000 % 60,
            m / 1_000_000 % 60,
            m % 1_000_000,
        );
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&format!("{sign}{hours:02}:{minutes:02}:{seconds:02}"));
        if fraction != 0 {
            let digits = format!("{fraction:06}");
            out.push('.');
            out.push_str(digits.trim_end_matches('0'));
        }
    }
    out
}

/// Row `row` (not NULL) of an INTERVAL column as PostgreSQL's text (COPY TO); `None` for
/// other columns.
pub(crate) fn cell(col: &ArrayRef, row: usize) -> Option<String> {
    parts(col, row).map(|(m, d, us)| text(m, d, us))
}

/// Rule 3.
pub(crate) fn binary(months: i32, days: i32, micros: i64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&micros.to_be_bytes());
    out[8..12].copy_from_slice(&days.to_be_bytes());
    out[12..].copy_from_slice(&months.to_be_bytes());
    out
}

/// `batch` with its INTERVAL columns written here (text as Utf8, binary as Binary arrays,
/// which arrow-pg sends as they are under the column's INTERVAL type), NULLs as NULL.
pub(crate) fn as_pg_interval(batch: RecordBatch, fields: &[FieldInfo]) -> RecordBatch {
    let is_interval = |c: &ArrayRef| matches!(c.data_type(), DataType::Interval(_));
    if !batch.columns().iter().any(is_interval) {
        return batch;
    }
    let schema = batch.schema();
    let mut new_fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, (c, f)) in batch.columns().iter().zip(schema.fields()).enumerate() {
        if !is_interval(c) {
            columns.push(c.clone());
            new_fields.push(f.as_ref().clone());
            continue;
        }
        let values = (0..c.len()).map(|r| (!c.is_null(r)).then(|| parts(c, r)).flatten());
        if fields
            .get(i)
            .is_some_and(|f| f.format() == FieldFormat::Binary)
        {
            let mut out = BinaryBuilder::with_capacity(c.len(), 16 * c.len());
            for v in values {
                match v {
                    Some((m, d, us)) => out.append_value(binary(m, d, us)),
                    None => out.append_null(),
                }
            }
            columns.push(Arc::new(out.finish()) as ArrayRef);
            new_fields.push(Field::new(f.name(), DataType::Binary, f.is_nullable()));
        } else {
            let mut out = StringBuilder::with_capacity(c.len(), 16 * c.len());
            for v in values {
                match v {
                    Some((m, d, us)) => out.append_value(text(m, d, us)),
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

    /// Each text is PostgreSQL 15's for the same interval.
    #[test]
    fn text_is_postgresqls_interval_style() {
        let h = 3_600_000_000i64;
        for ((m, d, us), want) in [
            ((0, 0, 0), "00:00:00"),
            ((0, 1, 12 * h), "1 day 12:00:00"),
            ((1, 15, 0), "1 mon 15 days"),
            ((0, 4, 24_685_689_600), "4 days 06:51:25.6896"),
            ((2, 23, 19 * h + 1_800_000_000), "2 mons 23 days 19:30:00"),
            ((0, 3, 36 * h), "3 days 36:00:00"),
            ((0, 0, -2 * h), "-02:00:00"),
            ((14, 0, 0), "1 year 2 mons"),
            ((-1, 0, 0), "-1 mons"),
            ((0, -1, 2 * h), "-1 days +02:00:00"),
            ((0, 1, -2 * h), "1 day -02:00:00"),
            ((24, 0, 1), "2 years 00:00:00.000001"),
            ((-14, 0, 0), "-1 years -2 mons"),
            ((11, -1, -1_000_000), "11 mons -1 days -00:00:01"),
            ((0, 0, 500_000), "00:00:00.5"),
        ] {
            assert_eq!(text(m, d, us), want, "{m} {d} {us}");
        }
    }

    #[test]
    fn binary_is_postgresqls_interval_send() {
        let b = binary(1, 2, 3);
        assert_eq!(&b[..8], &3i64.to_be_bytes());
        assert_eq!(&b[8..12], &2i32.to_be_bytes());
        assert_eq!(&b[12..], &1i32.to_be_bytes());
    }

    #[test]
    fn null_intervals_are_null() {
        use datafusion::arrow::array::IntervalMonthDayNanoArray;
        use datafusion::arrow::datatypes::IntervalMonthDayNano;
        use pgwire::api::Type;
        let a: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(vec![
            Some(IntervalMonthDayNano::new(0, 1, 0)),
            None,
        ]));
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", a.data_type().clone(), true),
            Field::new("b", a.data_type().clone(), true),
        ]));
        let batch = RecordBatch::try_new(schema, vec![a.clone(), a]).unwrap();
        let field = |n: &str, format| FieldInfo::new(n.into(), None, None, Type::INTERVAL, format);
        let out = as_pg_interval(
            batch,
            &[
                field("t", FieldFormat::Text),
                field("b", FieldFormat::Binary),
            ],
        );
        let t = out.column(0).as_string::<i32>();
        assert_eq!((t.value(0), t.is_null(1)), ("1 day", true));
        let b = out.column(1).as_binary::<i32>();
        assert_eq!(b.value(0), binary(0, 1, 0).as_slice());
        assert!(b.is_null(1));
    }
}
