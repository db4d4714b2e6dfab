//! Timestamps and times cast to text as PostgreSQL writes them (rule 7 of [`super`]):
//! `ts::text`, `'at ' || ts`, `concat(tz, …)`. Arrow's cast wrote ISO 8601
//! (`2024-01-01T10:00:00`, a TIMESTAMPTZ in UTC with `Z`, TIME with three places).

use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, NaiveTime, Offset, TimeZone};
use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{
    DataType, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};

use crate::catalog::UTC;

/// The function's name in plans.
pub const NAME: &str = "tierdb_datetime_out";

/// `.ffffff` without trailing zeros, nothing for whole seconds.
fn fraction(micros: u32) -> String {
    if micros == 0 {
        return String::new();
    }
    let f = format!(".{micros:06}");
    f.trim_end_matches('0').to_string()
}

/// A TIMESTAMP (wall-clock microseconds) as PostgreSQL writes it.
pub fn timestamp_text(micros: i64) -> Option<String> {
    let t = DateTime::from_timestamp_micros(micros)?.naive_utc();
    Some(local_text(&t))
}

fn local_text(t: &NaiveDateTime) -> String {
    format!(
        "{}{}",
        t.format("%Y-%m-%d %H:%M:%S"),
        fraction(t.and_utc().timestamp_subsec_micros())
    )
}

/// A TIMESTAMPTZ (an instant) in `zone` as PostgreSQL writes it: `+02`, `-03:30`.
pub fn timestamptz_text(micros: i64, zone: &Tz) -> Option<String> {
    let utc = DateTime::from_timestamp_micros(micros)?.naive_utc();
    let offset = zone.offset_from_utc_datetime(&utc).fix().local_minus_utc();
    let local = utc + chrono::Duration::seconds(i64::from(offset));
    let sign = if offset < 0 { '-' } else { '+' };
    let a = offset.unsigned_abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    let zone = match (m, s) {
        (0, 0) => format!("{sign}{h:02}"),
        (_, 0) => format!("{sign}{h:02}:{m:02}"),
        _ => format!("{sign}{h:02}:{m:02}:{s:02}"),
    };
    Some(format!("{}{zone}", local_text(&local)))
}

/// A TIME (microseconds since midnight) as PostgreSQL writes it.
pub fn time_text(micros: i64) -> Option<String> {
    let secs = u32::try_from(micros.div_euclid(1_000_000)).ok()?;
    let t = NaiveTime::from_num_seconds_from_midnight_opt(secs, 0)?;
    Some(format!(
        "{}{}",
        t.format("%H:%M:%S"),
        fraction(micros.rem_euclid(1_000_000) as u32)
    ))
}

/// Whether rule 7 rewrites a cast to text of a value of type `t`.
pub fn written_by_us(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Timestamp(..) | DataType::Time32(_) | DataType::Time64(_)
    )
}

/// `tierdb_datetime_out(value, zone)`: a TIMESTAMP, TIMESTAMPTZ (in `zone`, the session's
/// TimeZone) or TIME as PostgreSQL's text.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DatetimeOut {
    signature: Signature,
}

impl Default for DatetimeOut {
    fn default() -> Self {
        DatetimeOut {
            signature: Signature::new(TypeSignature::Any(2), Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for DatetimeOut {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::compute::cast;
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let input = args.args[0].to_array(args.number_rows.max(1))?;
        let zone: Tz = match args.args.get(1) {
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(z)))) => z.parse()?,
            _ => UTC.parse()?,
        };
        let out: StringArray = match input.data_type() {
            DataType::Timestamp(_, tz) => {
                let micros = cast(&input, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
                let micros = micros.as_primitive::<TimestampMicrosecondType>();
                micros
                    .iter()
                    .map(|v| match tz {
                        Some(_) => v.and_then(|m| timestamptz_text(m, &zone)),
                        None => v.and_then(timestamp_text),
                    })
                    .collect()
            }
            DataType::Time32(_) | DataType::Time64(_) => {
                let micros = cast(&input, &DataType::Time64(TimeUnit::Microsecond))?;
                micros
                    .as_primitive::<Time64MicrosecondType>()
                    .iter()
                    .map(|v| v.and_then(time_text))
                    .collect()
            }
            other => {
                return Err(datafusion::error::DataFusionError::Plan(format!(
                    "{NAME} writes timestamps and times, not {other}"
                )));
            }
        };
        let out: ArrayRef = Arc::new(out);
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            debug_assert_eq!(out.len(), input.len());
            ColumnarValue::Array(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_postgresql_writes_them() {
        let at = |s: &str| {
            NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .unwrap()
                .and_utc()
                .timestamp_micros()
        };
        assert_eq!(
            timestamp_text(at("2024-01-01 10:00:00")).unwrap(),
            "2024-01-01 10:00:00"
        );
        assert_eq!(
            timestamp_text(at("2024-07-01 10:00:00.123")).unwrap(),
            "2024-07-01 10:00:00.123"
        );
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            timestamptz_text(at("2024-01-01 15:00:00"), &ny).unwrap(),
            "2024-01-01 10:00:00-05"
        );
        assert_eq!(
            timestamptz_text(at("2024-07-01 14:00:00.5"), &ny).unwrap(),
            "2024-07-01 10:00:00.5-04"
        );
        let india: Tz = "Asia/Kolkata".parse().unwrap();
        assert_eq!(
            timestamptz_text(at("2024-07-01 00:00:00"), &india).unwrap(),
            "2024-07-01 05:30:00+05:30"
        );
        let utc: Tz = UTC.parse().unwrap();
        assert_eq!(
            timestamptz_text(at("2024-07-01 00:00:00"), &utc).unwrap(),
            "2024-07-01 00:00:00+00"
        );
        assert_eq!(time_text(36_672_500_000).unwrap(), "10:11:12.5");
        assert_eq!(time_text(0).unwrap(), "00:00:00");
    }
}
