//! PostgreSQL's text forms of an INTERVAL, which Arrow's parser lacks: a time of day among
//! the fields (`1 day 02:00:00`, PostgreSQL's own output; `-1 days +02:00:00`; `-02:30`),
//! `@ … ago`, ISO 8601 (`P1DT2H`), a bare number of seconds. Fields are a number and a
//! unit (`1.5 hours`, `3 mons`, `2 weeks`), each with its own sign; fractions spill down
//! as PostgreSQL spills them (a month is 30 days, a day 24 hours; years keep whole months).

use crate::error::TableError;

/// An interval as (months, days, microseconds).
pub type Parts = (i32, i32, i64);

fn invalid(text: &str) -> TableError {
    TableError::Column {
        code: "22007",
        message: format!("invalid input syntax for type interval: \"{text}\""),
    }
}

const DAY: f64 = 86_400_000_000.0;

#[derive(Default)]
struct Acc {
    months: f64,
    days: f64,
    micros: f64,
}

impl Acc {
    /// `v` of `unit`; false if the unit is unknown.
    fn add(&mut self, v: f64, unit: &str) -> bool {
        let unit = unit.trim_end_matches(',');
        match unit {
            "millennium" | "millennia" | "millenniums" | "mil" | "mils" => {
                self.months += (v * 12000.0).trunc()
            }
            "century" | "centuries" | "cent" | "c" => self.months += (v * 1200.0).trunc(),
            "decade" | "decades" | "dec" | "decs" => self.months += (v * 120.0).trunc(),
            "year" | "years" | "yr" | "yrs" | "y" => self.months += (v * 12.0).trunc(),
            "month" | "months" | "mon" | "mons" => self.months += v,
            "week" | "weeks" | "w" => self.days += v * 7.0,
            "day" | "days" | "d" => self.days += v,
            "hour" | "hours" | "hr" | "hrs" | "h" => self.micros += v * 3_600_000_000.0,
            "minute" | "minutes" | "min" | "mins" | "m" => self.micros += v * 60_000_000.0,
            "second" | "seconds" | "sec" | "secs" | "s" => self.micros += v * 1_000_000.0,
            "millisecond" | "milliseconds" | "msec" | "msecs" | "ms" => self.micros += v * 1000.0,
            "microsecond" | "microseconds" | "usec" | "usecs" | "us" => self.micros += v,
            _ => return false,
        }
        true
    }

    /// Whole months, whole days and microseconds, fractions spilled down.
    fn parts(self, text: &str) -> Result<Parts, TableError> {
        let months = self.months.trunc();
        let days = self.days + (self.months - months) * 30.0;
        let whole_days = days.trunc();
        let micros = (self.micros + (days - whole_days) * DAY).round();
        let fits = |v: f64, max: f64| v.is_finite() && v.abs() <= max;
        if !fits(months, f64::from(i32::MAX))
            || !fits(whole_days, f64::from(i32::MAX))
            || !fits(micros, 9.2e18)
        {
            return Err(TableError::Column {
                code: "22015",
                message: format!("interval field value out of range: \"{text}\""),
            });
        }
        Ok((months as i32, whole_days as i32, micros as i64))
    }
}

/// `[+-]H:MM[:SS[.f]]` (hours unbounded) in microseconds.
fn clock(token: &str) -> Option<f64> {
    let (sign, rest) = match token.as_bytes().first()? {
        b'-' => (-1.0, &token[1..]),
        b'+' => (1.0, &token[1..]),
        _ => (1.0, token),
    };
    let mut parts = rest.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = match parts.next() {
        Some(s) => s.parse().ok()?,
        None => 0.0,
    };
    if parts.next().is_some() || m >= 60.0 || s >= 60.0 || h < 0.0 || m < 0.0 || s < 0.0 {
        return None;
    }
    Some(sign * ((h * 3600.0 + m * 60.0 + s) * 1_000_000.0))
}

/// ISO 8601's `P[nY][nM][nW][nD][T[nH][nM][nS]]`.
fn iso(t: &str, acc: &mut Acc) -> Option<()> {
    let mut time = false;
    let mut number = String::new();
    for c in t.chars().skip(1) {
        match c {
            't' => time = true,
            '0'..='9' | '.' | '-' | '+' => number.push(c),
            unit => {
                let v: f64 = number.parse().ok()?;
                number.clear();
                let unit = match (unit, time) {
                    ('y', false) => "year",
                    ('m', false) => "month",
                    ('w', false) => "week",
                    ('d', false) => "day",
                    ('h', true) => "hour",
                    ('m', true) => "minute",
                    ('s', true) => "second",
                    _ => return None,
                };
                acc.add(v, unit);
            }
        }
    }
    number.is_empty().then_some(())
}

/// The interval `text` names (module doc).
pub fn interval(text: &str) -> Result<Parts, TableError> {
    let t = text.trim().to_ascii_lowercase();
    let mut acc = Acc::default();
    if t.starts_with('p') {
        iso(&t, &mut acc).ok_or_else(|| invalid(text))?;
        return acc.parts(text);
    }
    let t = t.strip_prefix('@').unwrap_or(&t);
    let mut tokens: Vec<&str> = t.split_whitespace().collect();
    let ago = tokens.last() == Some(&"ago");
    if ago {
        tokens.pop();
    }
    if tokens.is_empty() {
        return Err(invalid(text));
    }
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i];
        if token.contains(':') {
            acc.micros += clock(token).ok_or_else(|| invalid(text))?;
            i += 1;
            continue;
        }
        // A number and its unit, written apart (`3 days`) or together (`3days`).
        let split = token
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(token.len());
        let (number, glued) = token.split_at(split);
        let v: f64 = number.parse().map_err(|_| invalid(text))?;
        let unit = if !glued.is_empty() {
            glued
        } else if let Some(next) = tokens.get(i + 1) {
            i += 1;
            next
        } else {
            "second" // a bare number is seconds
        };
        if !acc.add(v, unit) {
            return Err(invalid(text));
        }
        i += 1;
    }
    if ago {
        acc.months = -acc.months;
        acc.days = -acc.days;
        acc.micros = -acc.micros;
    }
    acc.parts(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000_000;

    #[test]
    fn postgresql_forms() {
        // Each answer is PostgreSQL 15's (months, days, time).
        let cases: [(&str, Parts); 15] = [
            ("1 day", (0, 1, 0)),
            ("1 day 02:00:00", (0, 1, 2 * H)),
            ("-1 days +02:00:00", (0, -1, 2 * H)),
            ("1 year 2 mons -3 days", (14, -3, 0)),
            ("@ 1 hour ago", (0, 0, -H)),
            ("P1DT2H", (0, 1, 2 * H)),
            ("02:00:00", (0, 0, 2 * H)),
            ("1.5 hours", (0, 0, 3 * H / 2)),
            ("1 week", (0, 7, 0)),
            (
                "1 mon 2 days 03:04:05.5",
                (1, 2, 3 * H + 4 * 60_000_000 + 5_500_000),
            ),
            ("-02:30", (0, 0, -(5 * H / 2))),
            ("3 days ago", (0, -3, 0)),
            ("1.5 years", (18, 0, 0)),
            ("1.25 mon", (1, 7, 12 * H)),
            ("90", (0, 0, 90_000_000)),
        ];
        for (text, want) in cases {
            assert_eq!(interval(text).unwrap(), want, "{text}");
        }
        assert_eq!(interval("2days 3h").unwrap(), (0, 2, 3 * H));
    }

    #[test]
    fn bad_text_is_22007() {
        for text in ["", "day", "1 fortnight", "1:2:3:4", "P1X", "1 day 25:61"] {
            let e = interval(text).unwrap_err();
            assert_eq!(e.sqlstate(), "22007", "{text:?}");
        }
    }
}
