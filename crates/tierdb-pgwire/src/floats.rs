//! Floating-point values as PostgreSQL writes them in text (`float8out`/`float4out` with
//! the default `extra_float_digits = 1`): the shortest digits that read back exactly, in
//! fixed notation for decimal exponents from -4 up to the type's digits (15 for double
//! precision, 6 for real), otherwise as `1e+15` / `1.5e-05`; `NaN`, `Infinity`,
//! `-Infinity`. Arrow writes `30000000000.0` and `1e300`, which psql and JDBC show as is.

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};

/// Row `row` of a REAL or DOUBLE column as PostgreSQL's text; `None` for other columns.
pub(crate) fn cell(col: &ArrayRef, row: usize) -> Option<String> {
    match col.data_type() {
        DataType::Float64 => Some(float8(col.as_primitive::<Float64Type>().value(row))),
        DataType::Float32 => Some(float4(col.as_primitive::<Float32Type>().value(row))),
        _ => None,
    }
}

/// A DOUBLE PRECISION as PostgreSQL writes it.
pub(crate) fn float8(x: f64) -> String {
    special(x).unwrap_or_else(|| layout(&format!("{x:e}"), 15))
}

/// A REAL as PostgreSQL writes it.
pub(crate) fn float4(x: f32) -> String {
    special(f64::from(x)).unwrap_or_else(|| layout(&shortest_f32(x), 6))
}

/// The fewest digits that name `x` without a tie: PostgreSQL's float4 output does not take
/// a decimal exactly halfway between two floats (REAL 3e10 is `3.0000001e+10`), where
/// Rust's shortest form does. Neighbours and midpoints of an f32 are exact in f64.
fn shortest_f32(x: f32) -> String {
    let a = x.abs();
    let below = f64::from(f32::from_bits(a.to_bits().saturating_sub(1)));
    let above = f64::from(f32::from_bits(a.to_bits() + 1));
    let (lo, hi) = ((below + f64::from(a)) / 2.0, (f64::from(a) + above) / 2.0);
    (1..=9)
        .map(|p| format!("{a:.*e}", p - 1))
        .find(|s| s.parse::<f64>().is_ok_and(|v| lo < v && v < hi))
        .map_or_else(
            || format!("{x:e}"),
            |s| if x < 0.0 { format!("-{s}") } else { s },
        )
}

fn special(x: f64) -> Option<String> {
    if x.is_nan() {
        Some("NaN".into())
    } else if x.is_infinite() {
        Some(if x > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else if x == 0.0 {
        Some(if x.is_sign_negative() { "-0" } else { "0" }.into())
    } else {
        None
    }
}

/// Rust's shortest round-trip digits `sci` (`-1.5e-5`; like PostgreSQL's Ryu-based output,
/// a value halfway between two shorter decimals keeps its longer form: REAL 3e10 is
/// `3.0000001e+10`) in PostgreSQL's layout: fixed notation for exponents from -4 below
/// `digits`, else `1.5e-05`.
fn layout(sci: &str, digits: i32) -> String {
    let Some((mantissa, exponent)) = sci.split_once('e') else {
        return sci.to_string();
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        return sci.to_string();
    };
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let figures: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let figures = figures.trim_end_matches('0');
    let figures = if figures.is_empty() { "0" } else { figures };
    if !(-4..digits).contains(&exponent) {
        let (first, rest) = figures.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}{rest}e{esign}{:02}", exponent.abs());
    }
    let point = exponent + 1; // digits before the decimal point
    let n = figures.len() as i32;
    if point <= 0 {
        format!("{sign}0.{}{figures}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{sign}{figures}{}", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = figures.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_as_postgresql_writes_them() {
        // Each pair is PostgreSQL 15's `SELECT x::float8` output.
        for (x, pg) in [
            (30000000000.0, "30000000000"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (-0.25, "-0.25"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1e15, "1e+15"),
            (123456789012345.0, "123456789012345"),
            (1e300, "1e+300"),
            (-1e-300, "-1e-300"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1.0 / 3.0, "0.3333333333333333"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(float8(x), pg, "{x:e}");
        }
    }

    #[test]
    fn reals_as_postgresql_writes_them() {
        for (x, pg) in [
            (1.5f32, "1.5"),
            (0.1, "0.1"),
            (123456.0, "123456"),
            (30000000000.0, "3.0000001e+10"),
            (-0.25, "-0.25"),
            (1234567.0, "1.234567e+06"),
            (f32::INFINITY, "Infinity"),
        ] {
            assert_eq!(float4(x), pg, "{x:e}");
        }
    }
}
