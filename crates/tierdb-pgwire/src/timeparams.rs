//! TIMESTAMP, TIMESTAMPTZ, DATE and TIME parameters sent as text, decoded with
//! PostgreSQL's input rules (`tierdb_tables::textin::parse`) rather than arrow-pg's chrono
//! formats, which refused `2024-05-17 10:00` (no seconds) and `2024-05-17 10:00:00+02` for
//! a TIMESTAMP, and read text without an offset for a TIMESTAMPTZ in UTC rather than in
//! the session's TimeZone.
//!
//! 1. A parameter is decoded here when it is sent in text format and the client declared
//!    it one of these types, or declared nothing (or `unknown`) and the statement wants
//!    one there. Binary values are arrow-pg's (PostgreSQL's binary forms are exact).
//! 2. TIMESTAMPTZ: an instant (Arrow zone `+00:00`; the statement's cast to the target's
//!    zone keeps it); text without an offset is wall-clock time in the session's zone.
//!    TIMESTAMP: the written zone is ignored, as PostgreSQL ignores it.
//! 3. Text that is not such a value fails with 22P02 naming the parameter and the
//!    reason (PostgreSQL answers 22007/22008 for the same text in a statement; a bound
//!    parameter's error is the binding's).

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::error::PgWireResult;
use tierdb_tables::catalog::UTC;
use tierdb_tables::textin::parse;

/// What a parameter is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Timestamp,
    TimestampTz,
    Date,
    Time,
}

fn declared(t: &Type) -> Option<Kind> {
    Some(match *t {
        Type::TIMESTAMP => Kind::Timestamp,
        Type::TIMESTAMPTZ => Kind::TimestampTz,
        Type::DATE => Kind::Date,
        Type::TIME => Kind::Time,
        _ => return None,
    })
}

fn inferred(t: &DataType) -> Option<Kind> {
    Some(match t {
        DataType::Timestamp(_, None) => Kind::Timestamp,
        DataType::Timestamp(_, Some(_)) => Kind::TimestampTz,
        DataType::Date32 => Kind::Date,
        DataType::Time64(_) => Kind::Time,
        _ => return None,
    })
}

/// Rule 1: what parameter `i` is read as here, if it is.
fn kind(portal_types: &[Option<Type>], want: &[Option<DataType>], i: usize) -> Option<Kind> {
    match portal_types.get(i).and_then(Option::as_ref) {
        Some(t) if *t != Type::UNKNOWN => declared(t),
        _ => want.get(i).and_then(Option::as_ref).and_then(inferred),
    }
}

/// A value of `kind` from its text (rule 2); `zone` is the session's.
fn from_text(kind: Kind, text: &str, zone: &Tz) -> Result<ScalarValue, String> {
    let e = |e: tierdb_tables::TableError| e.to_string();
    Ok(match kind {
        Kind::Timestamp => {
            let w = parse::timestamp(text, parse::TIMESTAMP).map_err(e)?;
            ScalarValue::TimestampMicrosecond(Some(w.local.and_utc().timestamp_micros()), None)
        }
        Kind::TimestampTz => {
            let w = parse::timestamp(text, parse::TIMESTAMPTZ).map_err(e)?;
            ScalarValue::TimestampMicrosecond(
                Some(parse::instant_micros(&w, zone)),
                Some(UTC.into()),
            )
        }
        Kind::Date => ScalarValue::Date32(Some(parse::date(text).map_err(e)?)),
        Kind::Time => ScalarValue::Time64Microsecond(Some(parse::time(text).map_err(e)?)),
    })
}

/// The text-format date and time parameters of `portal` decoded (rule 1; `None` at the
/// others), and the portal with those given to arrow-pg as NULL; `None` when there are
/// none. `zone` is the session's TimeZone.
#[allow(clippy::type_complexity)]
pub(crate) fn take_datetimes<S: Clone>(
    portal: &Portal<S>,
    want: &[Option<DataType>],
    zone: &str,
) -> PgWireResult<Option<(Portal<S>, Vec<Option<ScalarValue>>)>> {
    let types = &portal.statement.parameter_types;
    let zone: Tz = zone
        .parse()
        .or_else(|_| UTC.parse())
        .map_err(|e| crate::errors::user_error("22023", format!("time zone: {e}")))?;
    crate::numparams::take_decoded(
        portal,
        |i, binary| !binary && kind(types, want, i).is_some(),
        |i, bytes, _| {
            let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
            let k = kind(types, want, i).ok_or("not a date or time")?;
            from_text(k, text, &zone)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_win_and_unknown_ones_take_the_statements() {
        let want = [
            Some(DataType::Timestamp(
                datafusion::arrow::datatypes::TimeUnit::Microsecond,
                Some(UTC.into()),
            )),
            Some(DataType::Int32),
            Some(DataType::Date32),
        ];
        let types = [Some(Type::UNKNOWN), None, Some(Type::TEXT)];
        assert_eq!(kind(&types, &want, 0), Some(Kind::TimestampTz));
        assert_eq!(kind(&types, &want, 1), None);
        // Declared text: the client's type, not decoded here.
        assert_eq!(kind(&types, &want, 2), None);
        assert_eq!(kind(&[Some(Type::TIME)], &[None], 0), Some(Kind::Time));
    }

    #[test]
    fn text_is_read_as_postgresql_reads_it() {
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            from_text(Kind::TimestampTz, "2024-01-01 10:00", &ny).unwrap(),
            ScalarValue::TimestampMicrosecond(Some(1_704_121_200_000_000), Some(UTC.into()))
        );
        assert_eq!(
            from_text(Kind::Timestamp, "2024-01-01 10:00:00+02", &ny).unwrap(),
            ScalarValue::TimestampMicrosecond(Some(1_704_103_200_000_000), None)
        );
        assert_eq!(
            from_text(Kind::Date, "1970-01-02", &ny).unwrap(),
            ScalarValue::Date32(Some(1))
        );
        assert_eq!(
            from_text(Kind::Time, "00:00:01.5", &ny).unwrap(),
            ScalarValue::Time64Microsecond(Some(1_500_000))
        );
        let e = from_text(Kind::Date, "2024-02-30", &ny).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
    }
}
