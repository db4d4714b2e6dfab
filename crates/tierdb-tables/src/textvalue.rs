//! Values of the types whose text form needs more than `str::parse`, as CSV files and
//! PostgreSQL's COPY write them: timestamps (with or without an offset), times and BYTEA.

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

const NAIVE: [&str; 2] = ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"];
const OFFSET: [&str; 2] = ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"];

/// Microseconds since 1970-01-01 00:00 of a timestamp in text: `2024-05-06 07:08:09.123456`,
/// with `T` or a space, seconds' fraction optional, a date alone meaning midnight, and an
/// optional offset (`+02`, `+02:00`, `Z`). With an offset the instant is converted to UTC;
/// `keep_offset = false` (TIMESTAMP without time zone) drops the offset as PostgreSQL does.
/// `None` if it is not a timestamp. Digits past microseconds are truncated.
pub fn timestamp_micros(text: &str, keep_offset: bool) -> Option<i64> {
    let t = text.trim();
    let t = t
        .strip_suffix('Z')
        .map_or_else(|| t.to_string(), |s| format!("{s}+00"));
    for f in OFFSET {
        if let Ok(dt) = DateTime::parse_from_str(&t, f) {
            return Some(if keep_offset {
                dt.timestamp_micros()
            } else {
                dt.naive_local().and_utc().timestamp_micros()
            });
        }
    }
    for f in NAIVE {
        if let Ok(dt) = NaiveDateTime::parse_from_str(&t, f) {
            return Some(dt.and_utc().timestamp_micros());
        }
    }
    let date = NaiveDate::parse_from_str(&t, "%Y-%m-%d").ok()?;
    Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros())
}

/// A TIME's microseconds since midnight: `HH:MM`, `HH:MM:SS` or `HH:MM:SS.ffffff` (more
/// digits are rounded to microseconds, as PostgreSQL does). PostgreSQL also takes
/// `24:00:00`; tierdb does not (Arrow's TIME, and the clients' time types, end at
/// 23:59:59.999999), nor a fraction that rounds up to it.
pub fn time_micros(text: &str) -> Option<i64> {
    let t = text.trim();
    let (whole, frac) = match t.split_once('.') {
        Some((w, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => (w, f),
        Some(_) => return None,
        None => (t, ""),
    };
    let time = NaiveTime::parse_from_str(whole, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(whole, "%H:%M"))
        .ok()?;
    let secs = i64::from(time.num_seconds_from_midnight());
    // Round to microseconds, half away from zero, on the digits as written.
    let mut micros: i64 = 0;
    for (i, d) in frac.bytes().take(6).enumerate() {
        micros += i64::from(d - b'0') * 10_i64.pow(5 - i as u32);
    }
    if frac.as_bytes().get(6).is_some_and(|&d| d >= b'5') {
        micros += 1;
    }
    let total = secs * 1_000_000 + micros;
    (total < 86_400_000_000).then_some(total)
}

/// BYTEA in PostgreSQL's hex format (`\x0a0b`, as COPY and psql write it); text without the
/// `\x` prefix is taken as its UTF-8 bytes. `None` for a bad hex digit or an odd count.
pub fn bytea(text: &str) -> Option<Vec<u8>> {
    let Some(hex) = text.strip_prefix("\\x") else {
        return Some(text.as_bytes().to_vec());
    };
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_postgresql_reads_them() {
        assert_eq!(time_micros("00:00"), Some(0));
        assert_eq!(time_micros("10:11:12"), Some(36_672_000_000));
        assert_eq!(time_micros("10:11:12.5"), Some(36_672_500_000));
        assert_eq!(time_micros(" 23:59:59.9999994 "), Some(86_399_999_999));
        assert_eq!(time_micros("00:00:00.0000005"), Some(1));
        assert_eq!(time_micros("00:00:00.0000004"), Some(0));
        for bad in [
            "",
            "25:00",
            "10:61:00",
            "10:11:12.",
            "10:11:12.x",
            "24:00:00",
            "23:59:59.9999995",
            "noon",
        ] {
            assert_eq!(time_micros(bad), None, "{bad}");
        }
    }

    #[test]
    fn timestamps_in_every_spelling() {
        let t = |s| timestamp_micros(s, true);
        assert_eq!(t("1970-01-01 00:00:00"), Some(0));
        assert_eq!(t("1970-01-01T00:00:01.5"), Some(1_500_000));
        assert_eq!(t("1970-01-01"), Some(0));
        assert_eq!(t("1970-01-01 02:00:00+02"), Some(0));
        assert_eq!(t("1970-01-01 02:00:00+02:00"), Some(0));
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(t("1969-12-31 23:59:59.999999"), Some(-1));
        assert_eq!(t("3000-01-01 00:00:00"), Some(32_503_680_000_000_000));
        assert_eq!(t("not a time"), None);
        assert_eq!(t("2024-02-30 00:00:00"), None);
        // Without time zone the offset is dropped, as PostgreSQL does.
        assert_eq!(
            timestamp_micros("1970-01-01 02:00:00+02", false),
            Some(7_200_000_000)
        );
    }

    #[test]
    fn bytea_hex_and_raw() {
        assert_eq!(bytea("\\x00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(bytea("\\x"), Some(vec![]));
        assert_eq!(bytea("ab"), Some(b"ab".to_vec()));
        assert_eq!(bytea("\\x0"), None);
        assert_eq!(bytea("\\xzz"), None);
    }
}
