//! `to_char(number, format)`: PostgreSQL's number formatting (`formatting.c`), which
//! DataFusion's `to_char` (dates and times only) does not have: reports and dashboards
//! (Grafana's table panels, `to_char(amount, 'FM999,999.00')`) failed with "No function
//! matches". The function registered here formats integers, floats and NUMERIC itself,
//! dates and timestamps with PostgreSQL's patterns (`tochar_time.rs`), and hands every
//! other type (TIME, INTERVAL) to DataFusion's `to_char` unchanged.
//!
//! 1. The format's patterns: `9` (a digit, blank when a leading zero), `0` (a digit, kept
//!    when a leading zero), `.` or `D` (the decimal point), `,` or `G` (a group separator,
//!    blank before the first digit), `S` (the sign, `+` or `-`, before the first digit
//!    when it leads the digits, after the last when it follows them), `MI` (`-` or blank),
//!    `PL` (`+` or blank, beside the usual sign), `SG` (`+` or `-`, where written), `PR`
//!    (a negative value in angle brackets), `L` (the currency symbol: the C locale's empty
//!    one, written as a blank), `FM` (fill mode: no padding blanks and no trailing zeros
//!    in `9` places), `EEEE` (scientific notation), `"text"` and any other character
//!    (written as it is). `RN`, `V` and `TH` are refused with one message naming them.
//! 2. The value is rounded to the `9`/`0` places after the point (NUMERIC and integers
//!    half away from zero, floats as C's `printf` rounds them, to even on the binary
//!    value); its sign is the rounded value's (`-0.0001` with two places is `.00`).
//! 3. More integer digits than the format has places: every place is `#`, the point
//!    stays (`to_char(12345, '999.9')` is ` ###.#`).
//! 4. With no sign pattern (`S`, `MI`, `PR`, `SG`), one place before the first digit
//!    is kept for the sign: `-` or a blank (no blank in fill mode).
//! 5. The integer zero of a value below 1 is a blank in a `9` place when the format has
//!    places after the point (`to_char(0.5, '9.99')` is `  .50`); in fill mode it is `0`
//!    only when every digit after the point is dropped (`to_char(0, 'FM9.99')` is `0.`).
//!
//! Checked against PostgreSQL 15 by the unit tests below (its outputs, recorded) and by
//! `python/tests/test_types.py` (the same calls on both servers).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, Field, Float32Type, Float64Type, Int64Type,
};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The `to_char` to register in place of DataFusion's.
pub fn function() -> ScalarUDF {
    let inner = datafusion::functions::datetime::to_char();
    ScalarUDF::new_from_impl(ToChar {
        // DataFusion's keeps its other name too: a session state rebuilt from this one
        // registers every function again, by name and alias, in no fixed order, and
        // `date_format` would bring DataFusion's `to_char` back over this one.
        aliases: inner.aliases().to_vec(),
        inner,
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToChar {
    inner: Arc<ScalarUDF>,
    signature: Signature,
    aliases: Vec<String>,
}

/// Dates and timestamps, formatted by `tochar_time.rs`.
fn is_time(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)
    )
}

fn is_number(t: &DataType) -> bool {
    t.is_integer()
        || t.is_floating()
        || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [value, _] if is_time(value) => Ok(vec![value.clone(), DataType::Utf8]),
            [value, _] if is_number(value) => {
                let value = if value.is_integer() {
                    DataType::Int64
                } else if value.is_floating() {
                    DataType::Float64
                } else {
                    value.clone()
                };
                Ok(vec![value, DataType::Utf8])
            }
            _ => {
                let fields: Vec<_> = args
                    .iter()
                    .map(|t| Arc::new(Field::new("a", t.clone(), true)))
                    .collect();
                Ok(
                    datafusion::logical_expr::type_coercion::functions::fields_with_udf(
                        &fields,
                        self.inner.as_ref(),
                    )?
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect(),
                )
            }
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ty = args.args[0].data_type();
        if is_time(&ty) {
            return crate::tochar_time::times(&args);
        }
        if !is_number(&ty) {
            return self.inner.invoke_with_args(args);
        }
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (values, formats) = (&arrays[0], arrays[1].as_string::<i32>());
        let mut out = StringBuilder::with_capacity(rows, rows * 12);
        for row in 0..values.len() {
            if values.is_null(row) || formats.is_null(row) {
                out.append_null();
                continue;
            }
            let format = match Format::parse(formats.value(row)) {
                Ok(f) => f,
                Err(e) => return exec_err!("{e}"),
            };
            let Some(number) = number_text(values, row, &format) else {
                return exec_err!("to_char: cannot format a value of {}", values.data_type());
            };
            out.append_value(format.render(&number));
        }
        answer(&args, out)
    }
}

/// The strings built for `args`: one value when every argument was one.
pub(crate) fn answer(args: &ScalarFunctionArgs, mut out: StringBuilder) -> Result<ColumnarValue> {
    let array: ArrayRef = Arc::new(out.finish());
    let scalars = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    Ok(if scalars && array.len() == 1 {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
    } else {
        ColumnarValue::Array(array)
    })
}

/// A value as its sign and the decimal digits of its magnitude, rounded to the format's
/// places after the point (rule 2).
#[derive(Debug, PartialEq)]
struct Number {
    negative: bool,
    int: String,
    frac: String,
    /// A float's digits (`EEEE` is then C's `%e`), not a NUMERIC's or an integer's.
    float: bool,
}

/// Row `row` of `values` as a [`Number`] for `format`: rounded to its places, or exact
/// for `EEEE` (which rounds the mantissa).
fn number_text(values: &ArrayRef, row: usize, format: &Format) -> Option<Number> {
    let places = (!format.exponent).then(|| format.places_after());
    let exact = |text: String, scale: i8| {
        let all = usize::from(scale.max(0).unsigned_abs());
        Some(round(&text, scale, places.unwrap_or(all)))
    };
    match values.data_type() {
        DataType::Int64 => exact(values.as_primitive::<Int64Type>().value(row).to_string(), 0),
        DataType::Decimal128(_, s) => exact(
            values
                .as_primitive::<Decimal128Type>()
                .value(row)
                .to_string(),
            *s,
        ),
        DataType::Decimal256(_, s) => exact(
            values
                .as_primitive::<Decimal256Type>()
                .value(row)
                .to_string(),
            *s,
        ),
        DataType::Float64 => float(values.as_primitive::<Float64Type>().value(row), places),
        DataType::Float32 => float(
            f64::from(values.as_primitive::<Float32Type>().value(row)),
            places,
        ),
        _ => None,
    }
}

/// A float rounded as `printf("%.*f")` rounds it (rule 2), to no more places than leave
/// 15 significant digits (`DBL_DIG`; PostgreSQL writes no more: `to_char(-1e300::float8,
/// '0.00')` is `-#.`); `None` places: all its digits.
fn float(v: f64, places: Option<usize>) -> Option<Number> {
    if !v.is_finite() {
        return None;
    }
    let text = match places {
        Some(p) => {
            let int_digits = format!("{:.0}", v.abs()).len();
            format!("{:.*}", p.min(15usize.saturating_sub(int_digits)), v.abs())
        }
        None => format!("{}", v.abs()),
    };
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let zero = int.bytes().chain(frac.bytes()).all(|b| b == b'0');
    Some(Number {
        negative: v < 0.0 && !zero,
        int: int.to_string(),
        frac: frac.to_string(),
        float: true,
    })
}

/// The unscaled integer `unscaled` (its text) of scale `scale`, rounded half away from
/// zero to `places` digits after the point.
fn round(unscaled: &str, scale: i8, places: usize) -> Number {
    let (negative, digits) = match unscaled.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, unscaled),
    };
    let digits = if scale < 0 {
        format!("{digits}{}", "0".repeat(usize::from(scale.unsigned_abs())))
    } else {
        digits.to_string()
    };
    let scale = scale.max(0) as usize;
    let padded = format!(
        "{}{digits}",
        "0".repeat((scale + 1).saturating_sub(digits.len()))
    );
    let (int, frac) = padded.split_at(padded.len() - scale);
    let mut kept: Vec<u8> = int.bytes().chain(frac.bytes().take(places)).collect();
    kept.extend(std::iter::repeat_n(b'0', places.saturating_sub(frac.len())));
    if frac.as_bytes().get(places).is_some_and(|d| *d >= b'5') {
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, b'1');
                break;
            }
            i -= 1;
            if kept[i] == b'9' {
                kept[i] = b'0';
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    let split = kept.len() - places;
    let int = String::from_utf8_lossy(&kept[..split])
        .trim_start_matches('0')
        .to_string();
    let zero = kept.iter().all(|d| *d == b'0');
    Number {
        negative: negative && !zero,
        int: if int.is_empty() { "0".into() } else { int },
        frac: String::from_utf8_lossy(&kept[split..]).into_owned(),
        float: false,
    }
}

/// One pattern of a format (rule 1).
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Nine,
    Zero,
    Point,
    Group,
    /// `S`.
    Sign,
    Minus,
    Plus,
    SignGiven,
    Brackets,
    Currency,
    Literal(String),
}

#[derive(Debug, PartialEq)]
struct Format {
    parts: Vec<Part>,
    fill: bool,
    exponent: bool,
}

impl Format {
    fn parse(text: &str) -> std::result::Result<Format, String> {
        let mut parts = Vec::new();
        let (mut fill, mut exponent) = (false, false);
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        let at = |i: usize, p: &str| {
            let n = p.chars().count();
            chars.len() >= i + n
                && chars[i..i + n]
                    .iter()
                    .zip(p.chars())
                    .all(|(a, b)| a.eq_ignore_ascii_case(&b))
        };
        while i < chars.len() {
            let (part, len) = match chars[i] {
                '9' => (Some(Part::Nine), 1),
                '0' => (Some(Part::Zero), 1),
                '.' => (Some(Part::Point), 1),
                ',' => (Some(Part::Group), 1),
                '"' => {
                    let end = chars[i + 1..]
                        .iter()
                        .position(|c| *c == '"')
                        .map_or(chars.len(), |p| i + 1 + p);
                    let s: String = chars[i + 1..end].iter().collect();
                    (Some(Part::Literal(s)), end + 1 - i)
                }
                _ if at(i, "FM") => {
                    fill = true;
                    (None, 2)
                }
                _ if at(i, "EEEE") => {
                    exponent = true;
                    (None, 4)
                }
                _ if at(i, "MI") => (Some(Part::Minus), 2),
                _ if at(i, "PL") => (Some(Part::Plus), 2),
                _ if at(i, "SG") => (Some(Part::SignGiven), 2),
                _ if at(i, "PR") => (Some(Part::Brackets), 2),
                _ if at(i, "RN") || at(i, "TH") => {
                    return Err(format!(
                        "to_char: the format pattern \"{}\" is not supported for numbers \
                         (roman numerals and ordinal suffixes); use 9, 0, ., D, ',', G, S, \
                         MI, PL, SG, PR, L, FM or EEEE",
                        chars[i..i + 2].iter().collect::<String>()
                    ));
                }
                'V' | 'v' => {
                    return Err("to_char: the format pattern \"V\" is not supported; \
                                multiply the value instead"
                        .into());
                }
                'D' | 'd' => (Some(Part::Point), 1),
                'G' | 'g' => (Some(Part::Group), 1),
                'S' | 's' => (Some(Part::Sign), 1),
                'L' | 'l' => (Some(Part::Currency), 1),
                c => (Some(Part::Literal(c.to_string())), 1),
            };
            if part == Some(Part::Point) && parts.contains(&Part::Point) {
                return Err("to_char: multiple decimal points".into());
            }
            parts.extend(part);
            i += len;
        }
        let plain = |p: &Part| matches!(p, Part::Nine | Part::Zero | Part::Point);
        if exponent && (fill || !parts.iter().all(plain)) {
            return Err(
                "to_char: \"EEEE\" is incompatible with other formats: it may only \
                        be used together with digit and decimal point patterns"
                    .into(),
            );
        }
        Ok(Format {
            parts,
            fill,
            exponent,
        })
    }

    fn digits(&self) -> impl Iterator<Item = (usize, &Part)> {
        self.parts
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, Part::Nine | Part::Zero))
    }

    fn point(&self) -> Option<usize> {
        self.parts.iter().position(|p| *p == Part::Point)
    }

    fn places_before(&self) -> usize {
        let point = self.point().unwrap_or(usize::MAX);
        self.digits().filter(|(i, _)| *i < point).count()
    }

    fn places_after(&self) -> usize {
        let point = self.point().unwrap_or(usize::MAX);
        self.digits().filter(|(i, _)| *i > point).count()
    }

    /// The format applied to `n` (rules 3 to 5).
    fn render(&self, n: &Number) -> String {
        if self.exponent {
            return self.scientific(n);
        }
        let pre = self.places_before();
        let post = n.frac.len();
        // Rule 3.
        let overflow = n.int.len() > pre;
        let (int, frac) = if overflow {
            ("#".repeat(pre), "#".repeat(n.frac.len()))
        } else {
            (n.int.clone(), n.frac.clone())
        };
        let blanks = pre - int.len().min(pre);
        // The first `0` place: from there on padding places are zeros.
        let point = self.point().unwrap_or(usize::MAX);
        let zero_from = self
            .digits()
            .filter(|(i, _)| *i < point)
            .position(|(_, p)| *p == Part::Zero);
        let sign_pattern = self.parts.iter().any(|p| {
            matches!(
                p,
                Part::Sign | Part::Minus | Part::Brackets | Part::SignGiven
            )
        });
        // `S` before the first digit writes the sign there (rule 1); after the last, at its place.
        let first_digit = self.digits().next().map_or(0, |(i, _)| i);
        let sign_leads = self
            .parts
            .iter()
            .position(|p| *p == Part::Sign)
            .is_some_and(|s| s < first_digit);
        // Rule 5, fill mode: the last digit after the point written (trailing zeros in
        // `9` places are dropped); `None`: none is.
        let frac_places: Vec<&Part> = self
            .digits()
            .filter(|(i, _)| *i > point)
            .map(|(_, p)| p)
            .collect();
        let last_zero_place = frac_places.iter().rposition(|p| **p == Part::Zero);
        let last_kept = if self.fill && !overflow {
            let last_nonzero = frac.bytes().rposition(|b| b != b'0');
            match (last_nonzero, last_zero_place) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        } else {
            frac.len().checked_sub(1)
        };
        let frac_all_dropped = self.fill && last_kept.is_none();
        let predec_blank = zero_from.is_none() && int == "0" && post > 0;

        let mut out = String::new();
        let (mut sign_done, mut digit_seen) = (false, false);
        let mut int_chars = int.chars();
        let mut frac_chars = frac.chars().enumerate();
        let mut place = 0;
        let write_sign = |out: &mut String, sign_done: &mut bool| {
            if *sign_done {
                return;
            }
            *sign_done = true;
            if self.parts.contains(&Part::Brackets) {
                out.push(if n.negative {
                    '<'
                } else if self.fill {
                    return;
                } else {
                    ' '
                });
            } else if sign_leads {
                out.push(if n.negative { '-' } else { '+' });
            } else if sign_pattern {
            } else if n.negative {
                out.push('-');
            } else if !self.fill {
                out.push(' ');
            }
        };
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                Part::Nine | Part::Zero if i < point => {
                    if place < blanks {
                        let zero = zero_from.is_some_and(|z| z <= place);
                        if zero {
                            if zero_from == Some(place) {
                                write_sign(&mut out, &mut sign_done);
                            }
                            out.push('0');
                            digit_seen = true;
                        } else if !self.fill {
                            out.push(' ');
                        }
                    } else {
                        let d = int_chars.next().unwrap_or('0');
                        let first = place == blanks;
                        if first && predec_blank {
                            // Rule 5.
                            if frac_all_dropped {
                                write_sign(&mut out, &mut sign_done);
                                out.push('0');
                                digit_seen = true;
                            } else if !self.fill {
                                out.push(' ');
                            }
                        } else {
                            write_sign(&mut out, &mut sign_done);
                            out.push(d);
                            digit_seen = true;
                        }
                    }
                    place += 1;
                }
                Part::Nine | Part::Zero => {
                    if let Some((k, d)) = frac_chars.next()
                        && (last_kept.is_some_and(|l| k <= l) || *part == Part::Zero)
                    {
                        out.push(d);
                    }
                }
                Part::Point => {
                    write_sign(&mut out, &mut sign_done);
                    out.push('.');
                }
                Part::Group => {
                    if digit_seen {
                        out.push(',');
                    } else if !self.fill {
                        out.push(' ');
                    }
                }
                Part::Sign if !sign_leads => out.push(if n.negative { '-' } else { '+' }),
                Part::Sign => {}
                Part::Minus => {
                    if n.negative {
                        out.push('-');
                    } else if !self.fill {
                        out.push(' ');
                    }
                }
                Part::Plus => {
                    if !n.negative {
                        out.push('+');
                    } else if !self.fill {
                        out.push(' ');
                    }
                }
                Part::SignGiven => out.push(if n.negative { '-' } else { '+' }),
                Part::Brackets => {
                    if n.negative {
                        out.push('>');
                    } else if !self.fill {
                        out.push(' ');
                    }
                }
                Part::Currency => out.push(' '),
                Part::Literal(s) => out.push_str(s),
            }
        }
        out
    }

    /// `EEEE`: one digit, the places after the point, `e`, the exponent's sign and at
    /// least two digits; the sign place as rule 4 says. A float is C's `%e`; a NUMERIC's
    /// exponent is its first digit's, and its mantissa is rounded after (PostgreSQL's
    /// `numeric_out_sci`: 99.995 with two places is `10.00e+01`).
    fn scientific(&self, n: &Number) -> String {
        let places = self.places_after();
        let (mantissa, exp) = if n.float {
            let value: f64 = format!("{}.{}", n.int, n.frac).parse().unwrap_or(0.0);
            let text = format!("{:.*e}", places, value);
            let (m, e) = text.split_once('e').unwrap_or((&text, "0"));
            (m.to_string(), e.parse::<i32>().unwrap_or(0))
        } else {
            let all = format!("{}{}", n.int, n.frac);
            let (exp, digits) = match all.bytes().position(|b| b != b'0') {
                Some(k) => (n.int.len() as i32 - 1 - k as i32, &all[k..]),
                None => (0, "0"),
            };
            let scale = i8::try_from(digits.len() - 1).unwrap_or(i8::MAX);
            let m = round(digits, scale, places);
            let m = if places == 0 {
                m.int
            } else {
                format!("{}.{}", m.int, m.frac)
            };
            (m, exp)
        };
        let sign = if n.negative {
            "-"
        } else if self.fill {
            ""
        } else {
            " "
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(value: &str, format: &str) -> String {
        let f = Format::parse(format).unwrap();
        let (unscaled, scale) = match value.split_once('.') {
            Some((i, d)) => (format!("{i}{d}"), d.len() as i8),
            None => (value.to_string(), 0),
        };
        let places = if f.exponent {
            scale as usize
        } else {
            f.places_after()
        };
        f.render(&round(&unscaled, scale, places))
    }

    /// PostgreSQL 15's `to_char(v::numeric, f)` for each (v, f).
    #[test]
    fn numbers_are_formatted_as_postgresql_formats_them() {
        for (v, f, want) in [
            ("-1234.5", "$999.99", "$-###.##"),
            ("-12", "$999.99", "$ -12.00"),
            ("-0.5", "$999.99", "$   -.50"),
            ("0", "$999.99", "$    .00"),
            ("-5", "0.00", "-5.00"),
            ("-0.5", "0.00", "-0.50"),
            ("12", "0.00", " #.##"),
            ("-12", "000", "-012"),
            ("0.5", "000", " 001"),
            ("-1234.5", "9,999.00", "-1,234.50"),
            ("-12", "9,999.00", "   -12.00"),
            ("0.001", "9,999.00", "      .00"),
            ("12345", "9,999.00", " #,###.##"),
            ("-0.5", "99.9", "  -.5"),
            ("0", "99.9", "   .0"),
            ("-0.5", "999", "  -1"),
            ("0", "999", "   0"),
            ("1234.5", "999", " ###"),
            ("-1234.5", "9999.99", "-1234.50"),
            ("0.5", "9999.99", "     .50"),
            ("-12", "999MI", " 12-"),
            ("0", "999MI", "  0 "),
            ("-1234.5", "999MI", "###-"),
            ("-12", "999PR", " <12>"),
            ("5", "999PR", "   5 "),
            ("-1234.5", "999PR", "<###>"),
            ("-12", "999S", " 12-"),
            ("0", "999S", "  0+"),
            ("-1234.5", "9G999D99", "-1,234.50"),
            ("-0.5", "FM0.00", "-0.50"),
            ("0", "FM0.00", "0.00"),
            ("-12", "FM9,999,999.999", "-12."),
            ("-0.5", "FM9,999,999.999", "-.5"),
            ("0", "FM9,999,999.999", "0."),
            ("0.001", "FM9,999,999.999", ".001"),
            ("1234567.891", "FM9,999,999.999", "1,234,567.891"),
            ("12345", "FM9,999,999.999", "12,345."),
            ("-1234.5", "FM990.00", "-###.##"),
            ("12", "FM990.00", "12.00"),
            ("0.001", "FM990.00", "0.00"),
            ("-12", "FM999", "-12"),
            ("0.001", "FM9999.99", "0."),
            ("0.5", "FM9999.99", ".5"),
            ("1234.5", "FM9999.99", "1234.5"),
            ("-12", "L999", "  -12"),
            ("5", "L999", "    5"),
            ("-12", "PL999", "  -12"),
            ("5", "PL999", "+   5"),
            ("1234.5", "PL999", "+ ###"),
            ("-12", "S999", " -12"),
            ("5", "S999", "  +5"),
            ("1234.5", "S999", "+###"),
            ("-12", "SG999", "- 12"),
            ("5", "SG999", "+  5"),
            ("0.5", ".99", " .##"),
            ("5", "0,000", " 0,005"),
            ("2.5", "9", " 3"),
            ("-5", "FM999MI", "5-"),
            ("5", "FMPL999", "+5"),
            ("5", "FM999PR", "5"),
            ("-5", "FM999PR", "<5>"),
            ("5", "FM999S", "5+"),
            ("5", "FML999", " 5"),
            ("123", "\"n=\"999", "n= 123"),
            ("-0.0001", "9.99", "  .00"),
            ("-1234.5", "9.99EEEE", "-1.23e+03"),
            ("0", "9.99EEEE", " 0.00e+00"),
            ("0.001", "9.99EEEE", " 1.00e-03"),
            ("1234567.891", "9.99EEEE", " 1.23e+06"),
            ("99.995", "9.99EEEE", " 10.00e+01"),
            ("-0.00012", "9.9EEEE", "-1.2e-04"),
        ] {
            assert_eq!(fmt(v, f), want, "to_char({v}, '{f}')");
        }
    }

    #[test]
    fn unsupported_patterns_are_named() {
        assert!(Format::parse("9RN").unwrap_err().contains("\"RN\""));
        assert!(Format::parse("99V9").unwrap_err().contains("\"V\""));
        assert!(
            Format::parse("FM9.9EEEE")
                .unwrap_err()
                .contains("incompatible")
        );
        assert_eq!(
            Format::parse("9.9.9").unwrap_err(),
            "to_char: multiple decimal points"
        );
    }

    #[test]
    fn rounding_is_half_away_from_zero_and_carries() {
        assert_eq!(
            round("-995", 3, 2),
            Number {
                negative: true,
                int: "1".into(),
                frac: "00".into(),
                float: false,
            }
        );
        assert_eq!(round("15", -1, 1).int, "150");
        assert!(!round("-4", 3, 2).negative);
    }
}
