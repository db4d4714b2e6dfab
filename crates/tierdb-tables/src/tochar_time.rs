//! `to_char(date or timestamp, format)` with PostgreSQL's patterns (`formatting.c`).
//! DataFusion's `to_char` reads a chrono format (`%Y-%m-%d`), so `to_char(day,
//! 'YYYY-MM-DD')` answered the text `YYYY-MM-DD` for every row: a wrong answer, not an
//! error.
//!
//! 1. Patterns, matched longest first at each place of the format: `HH`, `HH12`, `HH24`,
//!    `MI`, `SS`, `MS`, `US`, `SSSS`/`SSSSS` (seconds past midnight), `AM`/`PM`/`A.M.`/`P.M.`
//!    (and lower case), `Y,YYY`, `YYYY`, `YYY`, `YY`, `Y`, `IYYY`, `IYY`, `IY`, `I`, `BC`/`AD`
//!    (and `B.C.`/`A.D.`, lower case), `MONTH`/`Month`/`month` (blank-padded to 9), `MON`/
//!    `Mon`/`mon`, `MM`, `DAY`/`Day`/`day` (padded to 9), `DY`/`Dy`/`dy`, `DDD`, `IDDD`,
//!    `DD`, `D` (Sunday 1), `ID` (Monday 1), `W`, `WW`, `IW`, `CC`, `J`, `Q`, `RM`/`rm`,
//!    `TZ`/`tz`, `TZH`, `TZM`, `OF`. Numeric patterns match in any case (`yyyy`), as in
//!    PostgreSQL; the case of a name pattern is the case of its output.
//! 2. Modifiers: `FM` before a pattern drops its padding (zeros, blanks); `TH`/`th` after a
//!    numeric pattern adds the ordinal suffix (`1st`); `FX` is accepted and ignored.
//! 3. `"text"` is written as it is (`\"` inside is a quote); `\"` outside is a quote; any
//!    other character is written as it is (a backslash too).
//! 4. A TIMESTAMPTZ is shown in the session's `TimeZone` (DataFusion's `execution.time_zone`,
//!    which `SET TIME ZONE` sets); DATE and TIMESTAMP are shown as they are (`TZ` empty).

use chrono::{DateTime, Datelike, FixedOffset, NaiveDateTime, Offset, TimeZone, Timelike};
use datafusion::arrow::array::{Array, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs};

/// A value to format: its local date and time and, for a TIMESTAMPTZ, its offset and the
/// zone's abbreviation.
pub(crate) struct Moment {
    pub local: NaiveDateTime,
    pub zone: Option<(FixedOffset, String)>,
}

impl Moment {
    /// `utc_micros` (a TIMESTAMPTZ) in the time zone named `tz` (`+02:00`, `Europe/Paris`).
    pub(crate) fn in_zone(utc_micros: i64, tz: &str) -> Option<Moment> {
        let utc = DateTime::from_timestamp_micros(utc_micros)?.naive_utc();
        // A named zone's abbreviation (`EST`) is chrono-tz's; arrow's `Tz` (also fixed
        // offsets) names every offset by its digits.
        if let Ok(named) = tz.parse::<chrono_tz::Tz>() {
            let at = named.from_utc_datetime(&utc);
            return Some(Moment {
                local: at.naive_local(),
                zone: Some((at.offset().fix(), at.format("%Z").to_string())),
            });
        }
        let tz: datafusion::arrow::array::timezone::Tz = tz.parse().ok()?;
        let at = tz.from_utc_datetime(&utc);
        let offset = at.offset().fix();
        let abbrev = at.format("%Z").to_string();
        Some(Moment {
            local: at.naive_local(),
            zone: Some((offset, abbrev)),
        })
    }
}

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const ROMAN: [&str; 12] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII",
];

/// Numeric patterns (any case), longest first where one begins another.
const NUMERIC: [&str; 33] = [
    "Y,YYY", "YYYY", "YYY", "YY", "IYYY", "IYY", "IY", "HH24", "HH12", "HH", "MI", "SSSSS", "SSSS",
    "SS", "MS", "US", "MM", "IDDD", "DDD", "DD", "ID", "D", "WW", "W", "IW", "CC", "J", "Q", "TZH",
    "TZM", "Y", "I", "OF",
];

/// Name patterns (their case is the output's), longest first.
const NAMES: [&str; 30] = [
    "MONTH", "Month", "month", "MON", "Mon", "mon", "DAY", "Day", "day", "DY", "Dy", "dy", "A.M.",
    "a.m.", "P.M.", "p.m.", "AM", "am", "PM", "pm", "B.C.", "b.c.", "A.D.", "a.d.", "BC", "bc",
    "AD", "ad", "RM", "rm",
];

/// `m` formatted by `format` (module doc).
pub(crate) fn format(m: &Moment, format: &str) -> String {
    let chars: Vec<char> = format.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let starts = |i: usize, p: &str, any_case: bool| {
        let n = p.chars().count();
        chars.len() >= i + n
            && chars[i..i + n].iter().zip(p.chars()).all(|(a, b)| {
                if any_case {
                    a.eq_ignore_ascii_case(&b)
                } else {
                    *a == b
                }
            })
    };
    while i < chars.len() {
        let mut fill = false;
        while starts(i, "FM", true) || starts(i, "FX", true) {
            fill |= starts(i, "FM", true);
            i += 2;
        }
        if i >= chars.len() {
            break;
        }
        // Names first (case-sensitive): `Dy` is a day's name, not `D` then `y`.
        if let Some(p) = NAMES.iter().find(|p| starts(i, p, false)) {
            i += p.chars().count();
            out.push_str(&name(m, p, fill));
            continue;
        }
        if let Some(p) = NUMERIC.iter().find(|p| starts(i, p, true)) {
            i += p.chars().count();
            let (text, n) = numeric(m, p, fill);
            out.push_str(&text);
            if starts(i, "TH", false) || starts(i, "th", false) {
                let suffix = ordinal(n);
                out.push_str(&if chars[i] == 'T' {
                    suffix.to_uppercase()
                } else {
                    suffix.into()
                });
                i += 2;
            }
            continue;
        }
        if starts(i, "TZ", false) || starts(i, "tz", false) {
            let abbrev = m.zone.as_ref().map(|(_, a)| a.clone()).unwrap_or_default();
            out.push_str(&if chars[i] == 'T' {
                abbrev.to_uppercase()
            } else {
                abbrev.to_lowercase()
            });
            i += 2;
            continue;
        }
        match chars[i] {
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    out.push(chars[i]);
                    i += 1;
                }
                i += 1;
            }
            '\\' if chars.get(i + 1) == Some(&'"') => {
                out.push('"');
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// `to_char` of dates and timestamps (`tochar_time.rs`); a TIMESTAMPTZ in the session's
/// time zone.
pub(crate) fn times(args: &ScalarFunctionArgs) -> Result<ColumnarValue> {
    use datafusion::arrow::datatypes::{TimeUnit, TimestampMicrosecondType};
    let arrays = ColumnarValue::values_to_arrays(&args.args)?;
    let zoned = matches!(arrays[0].data_type(), DataType::Timestamp(_, Some(_)));
    let micros = datafusion::arrow::compute::cast(
        &arrays[0],
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )?;
    let (values, formats) = (
        micros.as_primitive::<TimestampMicrosecondType>(),
        arrays[1].as_string::<i32>(),
    );
    let zone = args
        .config_options
        .execution
        .time_zone
        .clone()
        .unwrap_or_else(|| crate::catalog::UTC.into());
    let mut out = StringBuilder::with_capacity(values.len(), values.len() * 20);
    for row in 0..values.len() {
        if values.is_null(row) || formats.is_null(row) {
            out.append_null();
            continue;
        }
        let v = values.value(row);
        let moment = if zoned {
            Moment::in_zone(v, &zone)
        } else {
            chrono::DateTime::from_timestamp_micros(v).map(|t| Moment {
                local: t.naive_utc(),
                zone: None,
            })
        };
        let Some(moment) = moment else {
            return exec_err!("to_char: time zone \"{zone}\" or timestamp {v} out of range");
        };
        out.append_value(format(&moment, formats.value(row)));
    }
    crate::tochar::answer(args, out)
}

/// A numeric pattern's text and its number (for `TH`).
fn numeric(m: &Moment, p: &str, fill: bool) -> (String, i64) {
    let (d, t) = (m.local.date(), m.local.time());
    let year = i64::from(d.year());
    let iso = d.iso_week();
    let pad = |n: i64, width: usize| {
        if fill {
            n.to_string()
        } else if n < 0 {
            format!("-{:0width$}", -n)
        } else {
            format!("{n:0width$}")
        }
    };
    let hour12 = match t.hour() % 12 {
        0 => 12,
        h => i64::from(h),
    };
    let (n, width) = match p.to_ascii_uppercase().as_str() {
        "Y,YYY" => {
            let y = year.abs();
            let text = format!("{},{:03}", y / 1000, y % 1000);
            return (text, y);
        }
        "YYYY" => (year, 4),
        "YYY" => (year.rem_euclid(1000), 3),
        "YY" => (year.rem_euclid(100), 2),
        "Y" => (year.rem_euclid(10), 1),
        "IYYY" => (i64::from(iso.year()), 4),
        "IYY" => (i64::from(iso.year()).rem_euclid(1000), 3),
        "IY" => (i64::from(iso.year()).rem_euclid(100), 2),
        "I" => (i64::from(iso.year()).rem_euclid(10), 1),
        "HH24" => (i64::from(t.hour()), 2),
        "HH" | "HH12" => (hour12, 2),
        "MI" => (i64::from(t.minute()), 2),
        "SS" => (i64::from(t.second()), 2),
        "SSSS" | "SSSSS" => (i64::from(t.num_seconds_from_midnight()), 0),
        "MS" => (i64::from(t.nanosecond() / 1_000_000), 3),
        "US" => (i64::from(t.nanosecond() / 1_000), 6),
        "MM" => (i64::from(d.month()), 2),
        "DDD" => (i64::from(d.ordinal()), 3),
        "IDDD" => {
            let days = i64::from(iso.week() - 1) * 7 + i64::from(d.weekday().number_from_monday());
            (days, 3)
        }
        "DD" => (i64::from(d.day()), 2),
        "D" => (i64::from(d.weekday().number_from_sunday()), 1),
        "ID" => (i64::from(d.weekday().number_from_monday()), 1),
        "W" => (i64::from((d.day() - 1) / 7 + 1), 1),
        "WW" => (i64::from((d.ordinal() - 1) / 7 + 1), 2),
        "IW" => (i64::from(iso.week()), 2),
        "CC" => {
            let cc = if year > 0 {
                (year + 99) / 100
            } else {
                -((99 - year) / 100)
            };
            (cc, 2)
        }
        "J" => (i64::from(d.num_days_from_ce()) + 1_721_425, 0),
        "Q" => (i64::from((d.month() - 1) / 3 + 1), 1),
        "TZH" | "TZM" | "OF" => {
            let secs = m.zone.as_ref().map_or(0, |(o, _)| o.local_minus_utc());
            let sign = if secs < 0 { '-' } else { '+' };
            let (h, mi) = (secs.abs() / 3600, secs.abs() % 3600 / 60);
            let text = match p.to_ascii_uppercase().as_str() {
                "TZH" => format!("{sign}{h:02}"),
                "TZM" => format!("{mi:02}"),
                _ if mi == 0 => format!("{sign}{h:02}"),
                _ => format!("{sign}{h:02}:{mi:02}"),
            };
            return (text, i64::from(h));
        }
        _ => (0, 0),
    };
    (pad(n, width), n)
}

/// A name pattern's text, in the pattern's case.
fn name(m: &Moment, p: &str, fill: bool) -> String {
    let d = m.local.date();
    let cased = |s: &str, full: bool| {
        let s = if p.chars().all(|c| c.is_ascii_uppercase() || c == '.') {
            s.to_uppercase()
        } else if p.chars().all(|c| c.is_ascii_lowercase() || c == '.') {
            s.to_lowercase()
        } else {
            s.to_string()
        };
        if full && !fill { format!("{s:<9}") } else { s }
    };
    let month =
        chrono::Month::try_from(u8::try_from(d.month()).unwrap_or(1)).map_or("", |m| m.name());
    let day = DAYS[d.weekday().num_days_from_sunday() as usize];
    let pm = m.local.time().hour() >= 12;
    let bc = d.year() <= 0;
    match p.to_ascii_uppercase().as_str() {
        "MONTH" => cased(month, true),
        "MON" => cased(&month[..3], false),
        "DAY" => cased(day, true),
        "DY" => cased(&day[..3], false),
        "AM" | "PM" => cased(if pm { "PM" } else { "AM" }, false),
        "A.M." | "P.M." => cased(if pm { "P.M." } else { "A.M." }, false),
        "BC" | "AD" => cased(if bc { "BC" } else { "AD" }, false),
        "B.C." | "A.D." => cased(if bc { "B.C." } else { "A.D." }, false),
        "RM" => {
            let r = ROMAN[d.month0() as usize];
            let r = if p == "rm" {
                r.to_lowercase()
            } else {
                r.into()
            };
            if fill { r } else { format!("{r:<4}") }
        }
        _ => String::new(),
    }
}

/// English ordinal suffix of `n` (`TH`).
fn ordinal(n: i64) -> &'static str {
    match (n.abs() % 100, n.abs() % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Moment {
        Moment {
            local: NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap(),
            zone: None,
        }
    }

    /// PostgreSQL 15's `to_char(timestamp '…', f)` for each (value, f).
    #[test]
    fn timestamps_are_formatted_as_postgresql_formats_them() {
        for (v, f, want) in [
            (
                "2024-03-05 14:07:09.123456",
                "YYYY-MM-DD HH24:MI:SS",
                "2024-03-05 14:07:09",
            ),
            (
                "2024-03-05 14:07:09.123456",
                "yyyy-mm-dd hh24:mi:ss.us",
                "2024-03-05 14:07:09.123456",
            ),
            (
                "2024-03-05 14:07:09.123456",
                "HH12:MI AM, MS",
                "02:07 PM, 123",
            ),
            ("2024-03-05 00:07:09", "HH:MI a.m.", "12:07 a.m."),
            (
                "2024-03-05 14:07:09",
                "Month DD, YYYY",
                "March     05, 2024",
            ),
            (
                "2024-03-05 14:07:09",
                "FMMonth FMDDth, YYYY",
                "March 5th, 2024",
            ),
            ("2024-03-05 14:07:09", "Dy Mon DD", "Tue Mar 05"),
            (
                "2024-03-05 14:07:09",
                "DAY|day|Day",
                "TUESDAY  |tuesday  |Tuesday  ",
            ),
            (
                "2024-03-05 14:07:09",
                "DDD D ID W WW IW Q CC J",
                "065 3 2 1 10 10 1 21 2460375",
            ),
            ("2024-03-05 14:07:09", "IYYY-IW-ID IDDD", "2024-10-2 065"),
            ("2024-12-30 14:07:09", "IYYY IW YYYY", "2025 01 2024"),
            ("2024-03-05 14:07:09", "Y,YYY YYY YY Y", "2,024 024 24 4"),
            ("2024-03-05 14:07:09", "RM rm FMRM", "III  iii  III"),
            (
                "2024-03-05 14:07:09",
                "\"Q\"Q \\H SSSS \\\"",
                "Q1 \\H 50829 \"",
            ),
            ("2024-03-01 14:07:09", "DDth DDTH FMDDth", "01st 01ST 1st"),
            ("2024-03-22 14:07:09", "DDth", "22nd"),
            ("2024-03-13 14:07:09", "DDth", "13th"),
            ("2024-03-05 14:07:09", "AD B.C.", "AD A.D."),
        ] {
            assert_eq!(format(&at(v), f), want, "to_char('{v}', '{f}')");
        }
    }

    #[test]
    fn timestamptz_is_shown_in_the_zone_given() {
        // 2024-03-05 12:00:00 UTC.
        let micros = 1_709_640_000_000_000;
        let m = Moment::in_zone(micros, "+05:30").unwrap();
        assert_eq!(
            format(&m, "YYYY-MM-DD HH24:MI TZH:TZM OF"),
            "2024-03-05 17:30 +05:30 +05:30"
        );
        let m = Moment::in_zone(micros, "America/New_York").unwrap();
        assert_eq!(format(&m, "HH24:MI TZ tz OF"), "07:00 EST est -05");
        assert!(Moment::in_zone(micros, "Nowhere/Else").is_none());
    }
}
