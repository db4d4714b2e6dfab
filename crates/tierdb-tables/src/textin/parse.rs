//! PostgreSQL's text forms of dates, times, timestamps and NUMERIC, read without a plan:
//! the pieces [`super`]'s functions call per value.
//!
//! Timestamps: `DATE[( |T)TIME][ ][ZONE]`, where DATE is `YYYY-MM-DD`, TIME `HH:MM`,
//! `HH:MM:SS` or `HH:MM:SS.ffffff` (more digits rounded to microseconds, half up, on the
//! digits as written) and ZONE `Z`, `+HH`, `+HHMM`, `+HH:MM`, `+HH:MM:SS` or a zone name
//! (`UTC`, `America/New_York`). `24:00:00` is the next day's midnight, as in PostgreSQL.
//! `epoch` is 1970-01-01 00:00:00 UTC. Other special words (`now`, `today`, `infinity`)
//! are refused: tierdb has no infinite timestamps, and a word whose value depends on the
//! moment would be frozen into a kept plan.

use chrono::{Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone};
use datafusion::arrow::array::timezone::Tz;

use crate::error::TableError;

/// What a text said about its zone.
#[derive(Debug, Clone)]
pub enum Zone {
    /// None: wall-clock time, to be read in the session's TimeZone (TIMESTAMPTZ) or kept as
    /// written (TIMESTAMP).
    Absent,
    /// A fixed offset east of UTC, in seconds.
    Offset(i32),
    /// A named zone (resolved at the written wall-clock time).
    Named(Tz),
}

/// A timestamp as written: its wall-clock time and zone.
#[derive(Debug, Clone)]
pub struct Written {
    pub local: NaiveDateTime,
    pub zone: Zone,
}

/// PostgreSQL's type names in messages.
pub const TIMESTAMP: &str = "timestamp";
pub const TIMESTAMPTZ: &str = "timestamp with time zone";
pub const DATE: &str = "date";
pub const TIME: &str = "time";

fn syntax(ty: &str, text: &str) -> TableError {
    TableError::Column {
        code: "22007",
        message: format!("invalid input syntax for type {ty}: \"{text}\""),
    }
}

fn range(text: &str) -> TableError {
    TableError::Column {
        code: "22008",
        message: format!("date/time field value out of range: \"{text}\""),
    }
}

/// Digits only, at least one.
fn number(s: &str) -> Option<u32> {
    (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `HH:MM[:SS[.ffffff]]` as (hours, minutes, seconds, microseconds), unchecked ranges.
/// Minutes and seconds take one or two digits (`10:5` is 10:05, as in PostgreSQL); digits
/// past microseconds round half to even, as PostgreSQL's `rint` does.
fn clock(s: &str) -> Option<(u32, u32, u32, u32)> {
    let mut parts = s.splitn(3, ':');
    let h = number(parts.next()?)?;
    let two = |f: &str| (f.len() <= 2).then(|| number(f)).flatten();
    let m = two(parts.next()?)?;
    let (sec, frac) = match parts.next() {
        None => (0, 0),
        Some(rest) => {
            let (whole, frac) = rest.split_once('.').unwrap_or((rest, ""));
            if !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let mut micros = 0u32;
            for (i, d) in frac.bytes().take(6).enumerate() {
                micros += u32::from(d - b'0') * 10u32.pow(5 - i as u32);
            }
            let rest = frac.as_bytes().get(6..).unwrap_or(&[]);
            let up = match rest.first() {
                Some(&d) if d > b'5' => true,
                Some(b'5') => rest[1..].iter().any(|&d| d != b'0') || micros % 2 == 1,
                _ => false,
            };
            (two(whole)?, micros + u32::from(up))
        }
    };
    Some((h, m, sec, frac))
}

/// The time of day as a duration since midnight (`24:00:00` is 24 hours; a second of 60
/// runs into the next minute, as PostgreSQL reads a leap second). `None` when out of range.
fn time_of_day((h, m, s, micros): (u32, u32, u32, u32)) -> Option<Duration> {
    let day = h == 24 && m == 0 && s == 0 && micros == 0;
    if (h > 23 && !day) || m > 59 || s > 60 {
        return None;
    }
    let total =
        (i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s)) * 1_000_000 + i64::from(micros);
    Some(Duration::microseconds(total))
}

/// An offset (`+05`, `-0330`, `+05:30`, `+05:30:15`) in seconds east of UTC.
pub(crate) fn offset(s: &str) -> Option<i32> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let fields: Vec<&str> = if rest.contains(':') {
        rest.split(':').collect()
    } else if rest.len() == 4 {
        vec![&rest[..2], &rest[2..]]
    } else {
        vec![rest]
    };
    if fields.len() > 3 || fields.iter().any(|f| f.is_empty() || f.len() > 2) {
        return None;
    }
    let mut secs = 0i32;
    for (i, f) in fields.iter().enumerate() {
        let v = number(f)? as i32;
        if (i == 0 && v > 15) || (i > 0 && v > 59) {
            return None;
        }
        secs += v * [3600, 60, 1][i];
    }
    Some(sign * secs)
}

/// A zone name: `Z`, `UTC`, `GMT` or an IANA name.
pub(crate) fn named(s: &str) -> Option<Zone> {
    if s.eq_ignore_ascii_case("z") || s.eq_ignore_ascii_case("utc") || s.eq_ignore_ascii_case("gmt")
    {
        return Some(Zone::Offset(0));
    }
    if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    s.parse::<chrono_tz::Tz>()
        .ok()
        .and_then(|z| z.name().parse::<Tz>().ok())
        .map(Zone::Named)
}

/// The text of a timestamp (or a date), read as written; `ty` names the type in errors.
pub fn timestamp(text: &str, ty: &str) -> Result<Written, TableError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("epoch") {
        return Ok(Written {
            local: chrono::DateTime::UNIX_EPOCH.naive_utc(),
            zone: Zone::Offset(0),
        });
    }
    // The date: up to the first space or `T`.
    let split = t.find([' ', 'T', 't']).unwrap_or(t.len());
    let (date, rest) = t.split_at(split);
    let mut ymd = date.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (ymd.next(), ymd.next(), ymd.next()) else {
        return Err(syntax(ty, text));
    };
    if y.len() < 4 {
        return Err(syntax(ty, text));
    }
    let (Some(y), Some(m), Some(d)) = (number(y), number(m), number(d)) else {
        return Err(syntax(ty, text));
    };
    let day = NaiveDate::from_ymd_opt(y as i32, m, d).ok_or_else(|| range(text))?;
    let rest = rest.get(1..).unwrap_or("").trim_start();
    if rest.is_empty() {
        return Ok(Written {
            local: day.and_time(NaiveTime::MIN),
            zone: Zone::Absent,
        });
    }
    // The time: digits, colons and a point; then the zone, if any.
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let (time, zone) = rest.split_at(end);
    let (since_midnight, zone) = if time.is_empty() {
        // A date and a zone only (`2024-01-01 UTC`, `2024-01-01+02`).
        (Duration::zero(), rest)
    } else {
        let c = clock(time).ok_or_else(|| syntax(ty, text))?;
        (time_of_day(c).ok_or_else(|| range(text))?, zone)
    };
    let zone = zone.trim();
    let zone = if zone.is_empty() {
        Zone::Absent
    } else if let Some(secs) = offset(zone) {
        Zone::Offset(secs)
    } else if let Some(z) = named(zone) {
        z
    } else if zone.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(TableError::Column {
            code: "22023",
            message: format!("time zone \"{}\" not recognized", zone.to_lowercase()),
        });
    } else {
        return Err(syntax(ty, text));
    };
    Ok(Written {
        local: day.and_time(NaiveTime::MIN) + since_midnight,
        zone,
    })
}

/// Microseconds since the epoch of `local` wall-clock time in `zone`. A time the clocks
/// skipped (spring forward) is read with the offset before the change, one that occurred
/// twice (fall back) as the later of the two, standard time: PostgreSQL's choices.
pub fn local_micros(local: NaiveDateTime, zone: &Tz) -> i64 {
    let offset = match zone.offset_from_local_datetime(&local) {
        LocalResult::Single(o) => o.fix(),
        LocalResult::Ambiguous(a, b) => {
            // The later instant has the smaller offset (standard time).
            let (a, b) = (a.fix(), b.fix());
            if a.local_minus_utc() < b.local_minus_utc() {
                a
            } else {
                b
            }
        }
        LocalResult::None => zone
            .offset_from_utc_datetime(&(local - Duration::hours(3)))
            .fix(),
    };
    (local - Duration::seconds(i64::from(offset.local_minus_utc())))
        .and_utc()
        .timestamp_micros()
}

/// The instant a written timestamp names, in microseconds since the epoch; wall-clock time
/// without a zone is read in `session` (the session's TimeZone).
pub fn instant_micros(w: &Written, session: &Tz) -> i64 {
    match &w.zone {
        Zone::Absent => local_micros(w.local, session),
        Zone::Named(z) => local_micros(w.local, z),
        Zone::Offset(secs) => (w.local - Duration::seconds(i64::from(*secs)))
            .and_utc()
            .timestamp_micros(),
    }
}

/// A TIME's microseconds since midnight: `HH:MM[:SS[.f]]`, or a timestamp's time of day;
/// a zone is ignored (PostgreSQL's TIME has none). `24:00:00` is refused: Arrow's TIME and
/// the clients' time types end at 23:59:59.999999.
pub fn time(text: &str) -> Result<i64, TableError> {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(t.len());
    let micros = if t[..end].contains(':') {
        let rest = t[end..].trim();
        if !rest.is_empty() && offset(rest).is_none() && named(rest).is_none() {
            return Err(syntax(TIME, text));
        }
        let c = clock(&t[..end]).ok_or_else(|| syntax(TIME, text))?;
        time_of_day(c)
            .ok_or_else(|| range(text))?
            .num_microseconds()
    } else {
        let w = timestamp(t, TIME)?;
        (w.local - w.local.date().and_time(NaiveTime::MIN)).num_microseconds()
    };
    let micros = micros.unwrap_or(i64::MAX);
    if micros >= 86_400_000_000 {
        return Err(TableError::Column {
            code: "22008",
            message: format!(
                "time \"{}\" is not supported: tierdb's TIME ends at 23:59:59.999999",
                t
            ),
        });
    }
    Ok(micros)
}

/// A DATE's days since the epoch: a date, or a timestamp's date (its time dropped).
pub fn date(text: &str) -> Result<i32, TableError> {
    let w = timestamp(text, DATE)?;
    let days =
        (w.local.date() - NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default()).num_days();
    i32::try_from(days).map_err(|_| range(text))
}

/// NUMERIC text (`1.5`, `-.5`, `+3`, `1e5`, `1.5E-3`) as plain decimal text rounded half
/// away from zero to `scale` places, which Arrow's decimal parser reads exactly. `NaN` and
/// `Infinity`, which PostgreSQL's NUMERIC holds, are refused naming the limit.
pub fn numeric(text: &str, scale: i8) -> Result<String, TableError> {
    let invalid = || TableError::Column {
        code: "22P02",
        message: format!("invalid input syntax for type numeric: \"{text}\""),
    };
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    if [
        "nan",
        "infinity",
        "+infinity",
        "-infinity",
        "inf",
        "+inf",
        "-inf",
    ]
    .contains(&lower.as_str())
    {
        return Err(TableError::Column {
            code: "0A000",
            message: format!(
                "NUMERIC \"{t}\" is not supported: tierdb's NUMERIC holds finite numbers only"
            ),
        });
    }
    let (negative, unsigned) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => {
            let e = &unsigned[at + 1..];
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(invalid());
            }
            (&unsigned[..at], e.parse::<i64>().map_err(|_| invalid())?)
        }
        None => (unsigned, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(invalid());
    }
    // All digits, and where the point goes in them.
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let point = int.len() as i64 + exponent;
    if point > 1000 {
        return Err(TableError::Column {
            code: "22003",
            message: "value overflows numeric format".into(),
        });
    }
    // The value is 0.d0 d1 d2… × 10^point; N = value × 10^scale, rounded half away from
    // zero, is digits 0..point+scale and a carry from the next one.
    let scale = i64::from(scale.max(0));
    let at = |i: i64| -> u8 {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i).copied())
            .unwrap_or(0)
    };
    let keep_end = point + scale;
    let mut kept: Vec<u8> = (0..keep_end.max(0)).map(at).collect();
    if keep_end >= 0 && at(keep_end) >= 5 {
        let mut carry = true;
        for d in kept.iter_mut().rev() {
            if *d == 9 {
                *d = 0;
            } else {
                *d += 1;
                carry = false;
                break;
            }
        }
        if carry {
            kept.insert(0, 1);
        }
    }
    // N's digits, at least scale + 1 of them, with the point before the last `scale`.
    let scale = scale as usize;
    while kept.len() < scale + 1 {
        kept.insert(0, 0);
    }
    let text: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
    let (int, frac) = text.split_at(text.len() - scale);
    let int = match int.trim_start_matches('0') {
        "" => "0",
        rest => rest,
    };
    let zero = int == "0" && frac.bytes().all(|b| b == b'0');
    let sign = if negative && !zero { "-" } else { "" };
    Ok(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

#[cfg(test)]
mod tests;
