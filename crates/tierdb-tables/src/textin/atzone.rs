//! `x AT TIME ZONE z` and `timezone(z, x)` as PostgreSQL computes them (rule 8 of
//! [`super`]). DataFusion planned AT TIME ZONE as a cast to `Timestamp(_, z)`, which only
//! changes the zone a TIMESTAMPTZ is shown in: `tz AT TIME ZONE 'UTC'` stayed the same
//! instant, shown in the session's zone, where PostgreSQL answers the wall-clock time in
//! UTC, a TIMESTAMP (a wrong answer to a common query: reports by day in a zone).
//!
//! 1. TIMESTAMPTZ AT TIME ZONE z: the wall-clock time of the instant in z, a TIMESTAMP.
//! 2. TIMESTAMP AT TIME ZONE z: the instant that wall-clock time names in z, a
//!    TIMESTAMPTZ (a time the clocks skipped or repeated resolved as PostgreSQL does,
//!    `parse::local_micros`).
//! 3. DATE and text are read as TIMESTAMPTZ first (midnight, or text without an offset,
//!    in the session's TimeZone), as PostgreSQL casts them, then rule 1.
//! 4. The zone: a name (`UTC`, `America/New_York`, any case), or a POSIX offset (`+05`,
//!    `-03:30`, `UTC+5`), which counts hours WEST of Greenwich, as PostgreSQL reads such
//!    names (`AT TIME ZONE '+05'` is UTC-5). Anything else fails with 22023 naming it.

use std::sync::Arc;

use chrono::Duration;
use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};

use super::parse::{self, Zone};
use crate::catalog::UTC;
use crate::error::TableError;

/// The function's name, PostgreSQL's.
pub const NAME: &str = "timezone";

fn unknown_zone(z: &str) -> TableError {
    TableError::Column {
        code: "22023",
        message: format!("time zone \"{z}\" not recognized"),
    }
}

/// Rule 4: the zone `AT TIME ZONE` names.
pub fn zone(text: &str) -> Result<Zone, TableError> {
    let t = text.trim();
    // POSIX: `UTC+5`, `GMT-3`, or a bare signed or unsigned number of hours.
    let posix = t
        .strip_prefix("UTC")
        .or_else(|| t.strip_prefix("utc"))
        .or_else(|| t.strip_prefix("GMT"))
        .or_else(|| t.strip_prefix("gmt"))
        .filter(|rest| !rest.is_empty())
        .unwrap_or(t);
    if posix.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-') {
        let signed = if posix.starts_with(['+', '-']) {
            posix.to_string()
        } else {
            format!("+{posix}")
        };
        return parse::offset(&signed)
            .map(|east| Zone::Offset(-east))
            .ok_or_else(|| unknown_zone(t));
    }
    if let Some(z) = parse::named(t) {
        return Ok(z);
    }
    // Names in any case, as PostgreSQL matches them.
    chrono_tz::TZ_VARIANTS
        .iter()
        .find(|z| z.name().eq_ignore_ascii_case(t))
        .and_then(|z| z.name().parse::<Tz>().ok())
        .map(Zone::Named)
        .ok_or_else(|| unknown_zone(t))
}

/// Rule 1: the wall-clock microseconds of instant `micros` in `zone`.
fn wall_clock(micros: i64, zone: &Zone) -> Option<i64> {
    use chrono::{Offset, TimeZone};
    let utc = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    let east = match zone {
        Zone::Absent => 0,
        Zone::Offset(secs) => *secs,
        Zone::Named(z) => z.offset_from_utc_datetime(&utc).fix().local_minus_utc(),
    };
    Some(
        (utc + Duration::seconds(i64::from(east)))
            .and_utc()
            .timestamp_micros(),
    )
}

/// Rule 2: the instant wall-clock microseconds `micros` name in `zone`.
fn instant(micros: i64, zone: &Zone) -> Option<i64> {
    let local = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    Some(match zone {
        Zone::Named(z) => parse::local_micros(local, z),
        Zone::Offset(east) => micros - i64::from(*east) * 1_000_000,
        Zone::Absent => micros,
    })
}

/// `timezone(zone, value)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AtTimeZone {
    signature: Signature,
}

impl Default for AtTimeZone {
    fn default() -> Self {
        AtTimeZone {
            signature: Signature::new(TypeSignature::Any(2), Volatility::Immutable),
        }
    }
}

/// What the value is read as: an instant (TIMESTAMPTZ, rule 1) or wall-clock time.
fn is_instant(t: &DataType) -> Result<bool> {
    match t {
        DataType::Timestamp(_, Some(_))
        | DataType::Date32
        | DataType::Date64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Null => Ok(true),
        DataType::Timestamp(_, None) => Ok(false),
        other => Err(DataFusionError::Plan(format!(
            "AT TIME ZONE takes a timestamp, timestamptz or date, not {other}"
        ))),
    }
}

impl ScalarUDFImpl for AtTimeZone {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let value = args.get(1).unwrap_or(&DataType::Null);
        Ok(if is_instant(value)? {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        } else {
            DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [zones, values] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "{NAME} takes a zone and a value"
            )));
        };
        let scalar = matches!(
            (zones, values),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let n = args.number_rows.max(1);
        let values = values.to_array(n)?;
        let instant_in = is_instant(values.data_type())?;
        // Rule 3: dates and text become instants in the session's zone.
        let micros = match values.data_type() {
            DataType::Timestamp(..) => {
                cast(&values, &DataType::Timestamp(TimeUnit::Microsecond, None))?
            }
            DataType::Null => Arc::new(TimestampMicrosecondArray::new_null(values.len())),
            _ => {
                let session = args.config_options.execution.time_zone.as_deref();
                let session = session.unwrap_or(UTC);
                let zone: Tz = session.parse()?;
                let instants: TimestampMicrosecondArray = match values.data_type() {
                    DataType::Date32 | DataType::Date64 => {
                        // Midnight, wall-clock time in the session's zone.
                        let naive =
                            cast(&values, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
                        naive
                            .as_primitive::<TimestampMicrosecondType>()
                            .iter()
                            .map(|m| {
                                let day = chrono::DateTime::from_timestamp_micros(m?)?;
                                Some(parse::local_micros(day.naive_utc(), &zone))
                            })
                            .collect()
                    }
                    // Text: a TIMESTAMPTZ as PostgreSQL reads it (`super` rule 2).
                    _ => {
                        let text = cast(&values, &DataType::Utf8)?;
                        let mut v = Vec::with_capacity(text.len());
                        for t in text.as_string::<i32>().iter() {
                            v.push(match t {
                                Some(t) => {
                                    let w = parse::timestamp(t, parse::TIMESTAMPTZ)?;
                                    Some(parse::instant_micros(&w, &zone))
                                }
                                None => None,
                            });
                        }
                        v.into()
                    }
                };
                Arc::new(instants)
            }
        };
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        let zones = zones.to_array(n)?;
        let zones = cast(&zones, &DataType::Utf8)?;
        let zones = zones.as_string::<i32>();
        let mut last: Option<(String, Zone)> = None;
        let mut out = Vec::with_capacity(micros.len());
        for i in 0..micros.len() {
            let z = if zones.len() == 1 { 0 } else { i };
            let (Some(m), false) = (
                micros.is_valid(i).then(|| micros.value(i)),
                zones.is_null(z),
            ) else {
                out.push(None);
                continue;
            };
            let text = zones.value(z);
            let zone = match &last {
                Some((t, zone)) if t == text => zone.clone(),
                _ => {
                    let zone = zone(text).map_err(DataFusionError::from)?;
                    last = Some((text.to_string(), zone.clone()));
                    zone
                }
            };
            let v = if instant_in {
                wall_clock(m, &zone)
            } else {
                instant(m, &zone)
            };
            out.push(Some(v.ok_or_else(|| {
                DataFusionError::from(TableError::Column {
                    code: "22008",
                    message: "timestamp out of range".into(),
                })
            })?));
        }
        let out = TimestampMicrosecondArray::from(out);
        let out: ArrayRef = if instant_in {
            Arc::new(out)
        } else {
            Arc::new(out.with_timezone(UTC))
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc()
            .timestamp_micros()
    }

    #[test]
    fn zones_are_read_as_postgresql_reads_them() {
        assert!(matches!(zone("UTC").unwrap(), Zone::Offset(0)));
        assert!(matches!(zone("+05").unwrap(), Zone::Offset(-18000)));
        assert!(matches!(zone("5").unwrap(), Zone::Offset(-18000)));
        assert!(matches!(zone("-03:30").unwrap(), Zone::Offset(12600)));
        assert!(matches!(zone("UTC+5").unwrap(), Zone::Offset(-18000)));
        assert!(matches!(zone("america/new_york").unwrap(), Zone::Named(_)));
        for bad in ["Mars/Olympus", "+99", "UTC+x", ""] {
            assert!(zone(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn instants_become_wall_clock_times_and_back() {
        let kolkata = zone("Asia/Kolkata").unwrap();
        assert_eq!(
            wall_clock(at("2024-07-01 10:00:00"), &kolkata),
            Some(at("2024-07-01 15:30:00"))
        );
        let ny = zone("America/New_York").unwrap();
        assert_eq!(
            wall_clock(at("2024-01-01 15:00:00"), &ny),
            Some(at("2024-01-01 10:00:00"))
        );
        assert_eq!(
            instant(at("2024-07-01 10:00:00"), &zone("Europe/Paris").unwrap()),
            Some(at("2024-07-01 08:00:00"))
        );
        assert_eq!(
            instant(at("2024-01-01 10:00:00"), &zone("+05").unwrap()),
            Some(at("2024-01-01 15:00:00"))
        );
    }
}
