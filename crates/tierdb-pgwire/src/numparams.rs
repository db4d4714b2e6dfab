//! NUMERIC parameters, decoded here rather than by arrow-pg, which reads them through
//! `rust_decimal`: 28 digits at most, so a driver's `Decimal` of a NUMERIC(65,30) value
//! (Prisma's default) failed with "Invalid decimal: overflow from too many digits".
//!
//! 1. A parameter is decoded here when the client declared it NUMERIC (1700), or declared
//!    nothing and the statement wants a NUMERIC there. Others are arrow-pg's.
//! 2. The value keeps every digit it was sent with: its scale is the digits after the
//!    point (`1.50` is 150 at scale 2); NUMERIC(38, s) when it has at most 38 digits,
//!    Arrow's Decimal256 NUMERIC(76, s) up to 76; the statement's cast to the target type
//!    rounds and checks the range as for any value.
//! 3. Text is PostgreSQL's `numeric_in` (sign, digits, point, exponent); binary is
//!    `numeric_send` (byte table in `numeric.rs`). NaN and infinities, which no tierdb
//!    column holds, and malformed input fail with 22P02 naming the parameter.

use std::sync::Arc;

use datafusion::arrow::compute::kernels::cast_utils::parse_decimal;
use datafusion::arrow::datatypes::{DataType, Decimal256Type, i256};
use datafusion::common::ScalarValue;
use pgwire::api::Type;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::stmt::StoredStatement;
use pgwire::error::PgWireResult;

use crate::errors::user_error;

/// The most digits a value may have (Arrow's Decimal256).
const MAX_DIGITS: usize = 76;

/// A NUMERIC value from its text (rule 3).
pub(crate) fn from_text(text: &str) -> Result<ScalarValue, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        "nan" | "infinity" | "inf"
    ) {
        return Err(format!(
            "{t} cannot be stored: tierdb's NUMERIC holds finite numbers"
        ));
    }
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(at) => (
            &t[..at],
            t[at + 1..]
                .parse::<i32>()
                .map_err(|_| format!("invalid input syntax for type numeric: \"{t}\""))?,
        ),
        None => (t, 0),
    };
    let body = mantissa.trim_start_matches(['+', '-']);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        || mantissa.len() - body.len() > 1
    {
        return Err(format!("invalid input syntax for type numeric: \"{t}\""));
    }
    let scale = (frac.len() as i64 - i64::from(exponent)).max(0);
    // Digits of the unscaled integer: the integer part's (after the exponent) and `scale`.
    let int_digits = (int.trim_start_matches('0').len() as i64 + i64::from(exponent)).max(0);
    if scale as usize > MAX_DIGITS || (int_digits + scale) as usize > MAX_DIGITS {
        return Err(format!(
            "{t} has more than the {MAX_DIGITS} digits tierdb's NUMERIC holds"
        ));
    }
    let scale = scale as i8;
    let value = parse_decimal::<Decimal256Type>(t, MAX_DIGITS as u8, scale)
        .map_err(|_| format!("invalid input syntax for type numeric: \"{t}\""))?;
    Ok(narrowest(value, scale))
}

/// NUMERIC(38, s) when the value fits 38 digits, else NUMERIC(76, s) (rule 2).
fn narrowest(value: i256, scale: i8) -> ScalarValue {
    let limit = i256::from_i128(10i128.pow(38));
    if scale <= 38
        && value < limit
        && value > limit.wrapping_neg()
        && let Some(v) = value.to_i128()
    {
        return ScalarValue::Decimal128(Some(v), 38, scale);
    }
    ScalarValue::Decimal256(Some(value), MAX_DIGITS as u8, scale)
}

/// A NUMERIC value's text from its binary form (`numeric_send`, rule 3).
pub(crate) fn binary_text(b: &[u8]) -> Result<String, String> {
    let field = |i: usize| -> Result<u16, String> {
        b.get(i..i + 2)
            .map(|x| u16::from_be_bytes([x[0], x[1]]))
            .ok_or_else(|| format!("a binary numeric of {} bytes is cut short", b.len()))
    };
    let ndigits = field(0)? as i16;
    let weight = field(2)? as i16;
    let sign = field(4)?;
    let dscale = field(6)? as i16;
    if ndigits < 0 || dscale < 0 || b.len() != 8 + 2 * ndigits as usize {
        return Err("invalid binary numeric: its lengths disagree".into());
    }
    let negative = match sign {
        0x0000 => false,
        0x4000 => true,
        0xC000 => return Err("NaN cannot be stored: tierdb's NUMERIC holds finite numbers".into()),
        0xD000 | 0xF000 => {
            return Err("infinity cannot be stored: tierdb's NUMERIC holds finite numbers".into());
        }
        other => return Err(format!("invalid binary numeric sign 0x{other:04x}")),
    };
    let mut digits = Vec::with_capacity(ndigits as usize);
    for i in 0..ndigits as usize {
        let d = field(8 + 2 * i)?;
        if d > 9999 {
            return Err(format!("invalid binary numeric digit {d}"));
        }
        digits.push(d);
    }
    // The base-10000 digit at power `p` of 10000 (zero outside the ones sent).
    let at = |p: i32| -> u16 {
        let i = i32::from(weight) - p;
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i).copied())
            .unwrap_or(0)
    };
    if i32::from(weight).max(0) as usize * 4 > MAX_DIGITS + 4 || dscale as usize > MAX_DIGITS {
        return Err(format!(
            "a value of more than the {MAX_DIGITS} digits tierdb's NUMERIC holds"
        ));
    }
    let mut int = String::new();
    for p in (0..=i32::from(weight).max(0)).rev() {
        int.push_str(&format!("{:04}", at(p)));
    }
    let int = int.trim_start_matches('0');
    let mut frac = String::new();
    let mut p = -1;
    while frac.len() < dscale as usize {
        frac.push_str(&format!("{:04}", at(p)));
        p -= 1;
    }
    frac.truncate(dscale as usize);
    let sign = if negative { "-" } else { "" };
    let int = if int.is_empty() { "0" } else { int };
    Ok(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

/// Whether parameter `i` is decoded here (rule 1).
fn is_numeric(portal_types: &[Option<Type>], inferred: &[Option<DataType>], i: usize) -> bool {
    match portal_types.get(i).and_then(Option::as_ref) {
        Some(t) if *t == Type::NUMERIC => true,
        Some(t) if *t != Type::UNKNOWN => false,
        _ => matches!(
            inferred.get(i).and_then(Option::as_ref),
            Some(DataType::Decimal128(..) | DataType::Decimal256(..))
        ),
    }
}

/// The NUMERIC parameters of `portal` decoded (rule 1; `None` at the others), and the
/// portal with those given to arrow-pg as NULL; `None` when there are none.
#[allow(clippy::type_complexity)]
pub(crate) fn take_numeric<S: Clone>(
    portal: &Portal<S>,
    inferred: &[Option<DataType>],
) -> PgWireResult<Option<(Portal<S>, Vec<Option<ScalarValue>>)>> {
    let types = &portal.statement.parameter_types;
    take_decoded(
        portal,
        |i, _| is_numeric(types, inferred, i),
        |_, bytes, binary| {
            let text = if binary {
                binary_text(bytes)?
            } else {
                std::str::from_utf8(bytes)
                    .map_err(|_| "a numeric is not UTF-8 text".to_string())?
                    .to_string()
            };
            from_text(&text)
        },
    )
}

/// The parameters of `portal` that `wanted(i, binary)` picks, decoded by `decode(i, bytes,
/// binary)` (`None` at the others, and at NULLs, which arrow-pg types), and the portal with
/// those given to arrow-pg as NULL; `None` when none is picked. A decoding error fails with
/// 22P02 naming the parameter.
#[allow(clippy::type_complexity)]
pub(crate) fn take_decoded<S: Clone>(
    portal: &Portal<S>,
    wanted: impl Fn(usize, bool) -> bool,
    decode: impl Fn(usize, &[u8], bool) -> Result<ScalarValue, String>,
) -> PgWireResult<Option<(Portal<S>, Vec<Option<ScalarValue>>)>> {
    let n = portal.parameters.len();
    let binary = |i: usize| portal.parameter_format.is_binary(i);
    if !(0..n).any(|i| wanted(i, binary(i))) {
        return Ok(None);
    }
    let mut decoded = vec![None; n];
    let mut values = portal.parameters.clone();
    let mut formats = Vec::with_capacity(n);
    for (i, value) in portal.parameters.iter().enumerate() {
        formats.push(i16::from(binary(i)));
        if !wanted(i, binary(i)) {
            continue;
        }
        let Some(bytes) = value else {
            continue; // NULL: arrow-pg's typed NULL.
        };
        let value = decode(i, bytes, binary(i))
            .map_err(|e| user_error("22P02", format!("parameter ${}: {e}", i + 1)))?;
        decoded[i] = Some(value);
        values[i] = None;
    }
    let statement = StoredStatement::new(
        portal.statement.id.clone(),
        portal.statement.statement.clone(),
        portal.statement.parameter_types.clone(),
    );
    let mut out = Portal::new_cursor(portal.name.clone(), Arc::new(statement));
    out.parameter_format = Format::Individual(formats);
    out.parameters = values;
    out.result_column_format = portal.result_column_format.clone();
    out.state = portal.state.clone();
    Ok(Some((out, decoded)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn d128(v: i128, s: i8) -> ScalarValue {
        ScalarValue::Decimal128(Some(v), 38, s)
    }

    #[test]
    fn text_keeps_every_digit_and_its_scale() {
        assert_eq!(from_text("1.50").unwrap(), d128(150, 2));
        assert_eq!(from_text("-0.01").unwrap(), d128(-1, 2));
        assert_eq!(from_text("+7").unwrap(), d128(7, 0));
        assert_eq!(from_text("1.5e3").unwrap(), d128(1500, 0));
        assert_eq!(from_text("15e-1").unwrap(), d128(15, 1));
        assert_eq!(from_text(".5").unwrap(), d128(5, 1));
        let wide = "123456789012345678901234567890.123456789012345678901234567890";
        assert_eq!(
            from_text(wide).unwrap(),
            ScalarValue::Decimal256(
                Some(i256::from_string(&wide.replace('.', "")).unwrap()),
                76,
                30
            )
        );
        for bad in [
            "",
            "abc",
            "1.2.3",
            "--1",
            "1e",
            "NaN",
            "-Infinity",
            &"9".repeat(77),
        ] {
            assert!(from_text(bad).is_err(), "{bad:?}");
        }
    }

    /// PostgreSQL 15's `numeric_send` bytes of each value (`SELECT numeric_send(v)`).
    #[test]
    fn binary_is_read_as_postgresql_writes_it() {
        let cases: &[(&str, &[u8])] = &[
            ("0", &[0, 0, 0, 0, 0, 0, 0, 0]),
            ("0.00", &[0, 0, 0, 0, 0, 0, 0, 2]),
            ("1.50", &[0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88]),
            ("-0.01", &[0, 1, 0xff, 0xff, 0x40, 0, 0, 2, 0, 100]),
            (
                "12345678",
                &[0, 2, 0, 1, 0, 0, 0, 0, 0x04, 0xd2, 0x16, 0x2e],
            ),
            ("10000", &[0, 1, 0, 1, 0, 0, 0, 0, 0, 1]),
        ];
        for (text, bytes) in cases {
            assert_eq!(binary_text(bytes).unwrap(), *text);
            // And what numeric.rs writes is read back.
            let value = from_text(text).unwrap();
            let ScalarValue::Decimal128(Some(v), _, s) = value else {
                panic!("narrow")
            };
            assert_eq!(crate::numeric::binary(&v.to_string(), s), *bytes, "{text}");
        }
        assert!(binary_text(&[0, 1, 0, 0]).is_err(), "cut short");
        assert!(binary_text(&[0, 0, 0, 0, 0xc0, 0, 0, 0]).is_err(), "NaN");
        assert!(
            binary_text(&[0, 1, 0, 0, 0, 0, 0, 0, 0x27, 0x10]).is_err(),
            "digit 10000"
        );
    }

    #[test]
    fn only_numeric_parameters_are_taken() {
        let statement = StoredStatement::new(
            String::new(),
            (),
            vec![
                Some(Type::NUMERIC),
                Some(Type::INT4),
                None,
                Some(Type::NUMERIC),
            ],
        );
        let mut p = Portal::new_cursor(String::new(), Arc::new(statement));
        p.parameter_format = Format::UnifiedText;
        p.parameters = vec![
            Some(Bytes::from_static(b"0.10")),
            Some(Bytes::from_static(b"7")),
            Some(Bytes::from_static(b"2.5")),
            None,
        ];
        let inferred = vec![None, None, Some(DataType::Decimal128(10, 2)), None];
        let (q, decoded) = take_numeric(&p, &inferred).unwrap().expect("taken");
        assert_eq!(
            decoded,
            vec![Some(d128(10, 2)), None, Some(d128(25, 1)), None]
        );
        assert_eq!(q.parameters[0], None);
        assert_eq!(q.parameters[1].as_deref(), Some(&b"7"[..]));
        p.parameters[0] = Some(Bytes::from_static(b"x"));
        assert!(take_numeric(&p, &inferred).is_err());
        p.parameters[0] = None;
        let ints = vec![None, None, None, None];
        let statement = StoredStatement::new(String::new(), (), vec![Some(Type::INT4)]);
        let mut p = Portal::new_cursor(String::new(), Arc::new(statement));
        p.parameters = vec![Some(Bytes::from_static(b"7"))];
        assert!(take_numeric(&p, &ints).unwrap().is_none());
    }
}
