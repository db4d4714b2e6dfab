//! UUID, JSON and JSONB: PostgreSQL types tierdb stores as text (Arrow `Utf8`, Parquet
//! `BYTE_ARRAY` UTF8), each value checked and written in the type's one canonical form on
//! every write, so equal values are equal strings and sort, group and join as such.
//!
//! | type  | stored text                                                           | bad input |
//! |-------|-----------------------------------------------------------------------|-----------|
//! | UUID  | 32 lowercase hex digits in groups 8-4-4-4-12 (PostgreSQL's output)    | 22P02     |
//! | JSON  | the text as written (PostgreSQL keeps it, spaces and key order too)    | 22P02     |
//! | JSONB | PostgreSQL's jsonb output: keys unique (the last wins) and ordered by length, then bytes; `", "` and `": "` between items; strings re-escaped; numbers as numeric prints them | 22P02 |
//!
//! The column's field carries its SQL type in [`crate::catalog::DECLARED_TYPE`], which the
//! PostgreSQL server reports (type oids 2950, 114, 3802). A cast `x::uuid`, `x::json`,
//! `x::jsonb` (or `UUID '…'`) is planned as the function of the same check ([`functions`];
//! `parsefix` rule 3), whose result carries the declaration too.
//!
//! Invariants:
//!
//! 1. Validity is decided by well-kept parsers (`uuid`, `serde_json`); the normalizer here
//!    only re-prints text `serde_json` accepted, so it cannot accept what JSON does not.
//! 2. Normalizing is idempotent: the text of a stored JSONB value normalizes to itself.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::catalog::{ColumnType, DECLARED_TYPE};
use crate::error::{Result, TableError};

/// PostgreSQL's error for text that is not a value of `ty`.
fn invalid(ty: &str, s: &str) -> TableError {
    TableError::Column {
        code: "22P02",
        message: format!("invalid input syntax for type {ty}: \"{s}\""),
    }
}

/// `s` as a UUID's canonical text. PostgreSQL's input forms: hyphenated, without hyphens,
/// in braces, any case.
pub fn uuid(s: &str) -> Result<String> {
    let t = s.trim();
    let inner = t
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(t);
    // `uuid` also takes a `urn:uuid:` prefix, which PostgreSQL does not.
    if inner.contains(':') {
        return Err(invalid("uuid", s));
    }
    uuid::Uuid::try_parse(inner)
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| invalid("uuid", s))
}

/// `s`, checked to be one JSON value.
pub fn json(s: &str) -> Result<&str> {
    serde_json::from_str::<serde::de::IgnoredAny>(s)
        .map(|_| s)
        .map_err(|_| invalid("json", s))
}

/// `s` as JSONB's canonical text (module doc).
pub fn jsonb(s: &str) -> Result<String> {
    json(s).map_err(|_| invalid("jsonb", s))?;
    let mut p = Printer {
        src: s.as_bytes(),
        at: 0,
    };
    let mut out = String::with_capacity(s.len());
    p.value(&mut out).map_err(|_| invalid("jsonb", s))?;
    Ok(out)
}

/// Re-prints JSON that `serde_json` accepted (invariant 1); an `Err` only for input that
/// was not checked first.
struct Printer<'a> {
    src: &'a [u8],
    at: usize,
}

impl Printer<'_> {
    fn skip_ws(&mut self) {
        while self
            .src
            .get(self.at)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> std::result::Result<u8, ()> {
        self.skip_ws();
        self.src.get(self.at).copied().ok_or(())
    }

    fn value(&mut self, out: &mut String) -> std::result::Result<(), ()> {
        match self.peek()? {
            b'{' => self.object(out),
            b'[' => self.array(out),
            b'"' => {
                let s = self.string()?;
                quote(&s, out);
                Ok(())
            }
            b't' | b'f' | b'n' => {
                let word = ["true", "false", "null"]
                    .into_iter()
                    .find(|w| self.src[self.at..].starts_with(w.as_bytes()))
                    .ok_or(())?;
                self.at += word.len();
                out.push_str(word);
                Ok(())
            }
            _ => {
                let start = self.at;
                while self
                    .src
                    .get(self.at)
                    .is_some_and(|b| b.is_ascii_digit() || b"+-.eE".contains(b))
                {
                    self.at += 1;
                }
                let text = std::str::from_utf8(&self.src[start..self.at]).map_err(|_| ())?;
                out.push_str(&numeric(text).ok_or(())?);
                Ok(())
            }
        }
    }

    /// A string token, decoded (`serde_json` decodes the escapes).
    fn string(&mut self) -> std::result::Result<String, ()> {
        let start = self.at;
        self.at += 1;
        loop {
            match self.src.get(self.at).ok_or(())? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    break;
                }
                _ => self.at += 1,
            }
        }
        let token = std::str::from_utf8(&self.src[start..self.at]).map_err(|_| ())?;
        serde_json::from_str(token).map_err(|_| ())
    }

    fn array(&mut self, out: &mut String) -> std::result::Result<(), ()> {
        self.at += 1;
        out.push('[');
        if self.peek()? == b']' {
            self.at += 1;
            out.push(']');
            return Ok(());
        }
        loop {
            self.value(out)?;
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    out.push_str(", ");
                }
                b']' => {
                    self.at += 1;
                    out.push(']');
                    return Ok(());
                }
                _ => return Err(()),
            }
        }
    }

    fn object(&mut self, out: &mut String) -> std::result::Result<(), ()> {
        self.at += 1;
        let mut members: Vec<(String, String)> = Vec::new();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                if self.peek()? != b'"' {
                    return Err(());
                }
                let key = self.string()?;
                if self.peek()? != b':' {
                    return Err(());
                }
                self.at += 1;
                let mut v = String::new();
                self.value(&mut v)?;
                // The last of duplicate keys wins, as in PostgreSQL.
                members.retain(|(k, _)| *k != key);
                members.push((key, v));
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(()),
                }
            }
        }
        members.sort_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
        out.push('{');
        for (i, (k, v)) in members.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            quote(k, out);
            out.push_str(": ");
            out.push_str(v);
        }
        out.push('}');
        Ok(())
    }
}

/// A string as PostgreSQL's JSON output escapes it.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON number as PostgreSQL's numeric prints it: the digits as written (trailing zeros
/// of a fraction kept), an exponent applied (`1e2` is `100`, `1.5E-3` is `0.0015`), `-0`
/// as `0`; `None` for an exponent past numeric's range (PostgreSQL refuses those too).
fn numeric(text: &str) -> Option<String> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i64>().ok()?),
        None => (body, 0),
    };
    if exp.abs() > MAX_EXPONENT {
        return None;
    }
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int}{frac}");
    // The value is digits × 10^(exp − frac.len()); its printed scale is max(0, that).
    let scale = i64::try_from(frac.len()).unwrap_or(0) - exp;
    let mut s = if scale <= 0 {
        let zeros = usize::try_from(-scale).unwrap_or(0);
        format!("{digits}{}", "0".repeat(zeros))
    } else {
        let scale = usize::try_from(scale).unwrap_or(0);
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let (i, f) = padded.split_at(padded.len() - scale);
        format!("{i}.{f}")
    };
    // Leading zeros of the integer part go (never the last one before the point).
    let int_len = s.find('.').unwrap_or(s.len());
    let strip = s[..int_len.saturating_sub(1)]
        .bytes()
        .take_while(|&b| b == b'0')
        .count();
    s.drain(..strip);
    if negative && s.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        s.insert(0, '-');
    }
    Some(s)
}

/// The largest decimal exponent a JSONB number may have: numeric's 131,072 digits before
/// the point and 16,383 after are its limits; text this long is refused, never built.
const MAX_EXPONENT: i64 = 16_383;

/// The canonical text of `s` for a column of type `ty`; `None` for types not kept here.
pub fn canonical(ty: ColumnType, s: &str) -> Option<Result<std::borrow::Cow<'_, str>>> {
    use std::borrow::Cow;
    Some(match ty {
        ColumnType::Uuid => uuid(s).map(Cow::Owned),
        ColumnType::Json => json(s).map(Cow::Borrowed),
        ColumnType::Jsonb => jsonb(s).map(Cow::Owned),
        _ => return None,
    })
}

/// A text column of type `ty` with every value checked and canonical (`write::conform`).
pub(crate) fn conform(array: ArrayRef, ty: ColumnType) -> Result<ArrayRef> {
    if !matches!(ty, ColumnType::Uuid | ColumnType::Json | ColumnType::Jsonb) {
        return Ok(array);
    }
    let strings = array.as_string::<i32>();
    if ty == ColumnType::Json {
        for v in strings.iter().flatten() {
            json(v)?;
        }
        return Ok(array);
    }
    let mut out = StringBuilder::with_capacity(strings.len(), strings.value_data().len());
    for v in strings.iter() {
        match v {
            None => out.append_null(),
            Some(v) => match canonical(ty, v) {
                Some(c) => out.append_value(c?),
                None => out.append_value(v),
            },
        }
    }
    Ok(Arc::new(out.finish()))
}

/// The cast functions `tierdb_uuid`, `tierdb_json` and `tierdb_jsonb` (module doc), and
/// `gen_random_uuid()`.
pub fn functions() -> Vec<ScalarUDF> {
    let mut fs: Vec<ScalarUDF> = [ColumnType::Uuid, ColumnType::Json, ColumnType::Jsonb]
        .into_iter()
        .map(|ty| ScalarUDF::new_from_impl(CastTo::new(ty)))
        .collect();
    fs.push(ScalarUDF::new_from_impl(GenRandomUuid::default()));
    fs
}

/// The type a column declared as `declared` is stored as, which DataFusion can plan (TEXT
/// for UUID, JSON and JSONB); `None` if it plans `declared` itself. The caller keeps
/// `declared` for [`ColumnType::with_declared`].
pub fn stored_sql_type(
    declared: &datafusion::sql::sqlparser::ast::DataType,
) -> Option<datafusion::sql::sqlparser::ast::DataType> {
    use datafusion::sql::sqlparser::ast::DataType as Sql;
    matches!(declared, Sql::Uuid | Sql::JSON | Sql::JSONB).then_some(Sql::Text)
}

/// The type a cast to the SQL type `target` makes, where it is one kept here.
pub fn cast_target(target: &datafusion::sql::sqlparser::ast::DataType) -> Option<ColumnType> {
    use datafusion::sql::sqlparser::ast::DataType as Sql;
    Some(match target {
        Sql::Uuid => ColumnType::Uuid,
        Sql::JSON => ColumnType::Json,
        Sql::JSONB => ColumnType::Jsonb,
        _ => return None,
    })
}

/// The name of the function a cast to `ty` is planned as (`parsefix` rule 3).
pub fn cast_function(ty: ColumnType) -> Option<&'static str> {
    Some(match ty {
        ColumnType::Uuid => "tierdb_uuid",
        ColumnType::Json => "tierdb_json",
        ColumnType::Jsonb => "tierdb_jsonb",
        _ => return None,
    })
}

fn declared_field(name: &str, ty: ColumnType, nullable: bool) -> FieldRef {
    Arc::new(
        Field::new(name, DataType::Utf8, nullable).with_metadata(
            [(DECLARED_TYPE.to_string(), ty.sql())]
                .into_iter()
                .collect(),
        ),
    )
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CastTo {
    ty: ColumnType,
    name: &'static str,
    signature: Signature,
}

impl CastTo {
    fn new(ty: ColumnType) -> Self {
        CastTo {
            ty,
            name: cast_function(ty).unwrap_or("tierdb_text"),
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CastTo {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(declared_field(self.name, self.ty, nullable))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let err = |e: TableError| datafusion::error::DataFusionError::External(Box::new(e));
        match &args.args[0] {
            ColumnarValue::Scalar(v) => {
                let text = match v {
                    ScalarValue::Utf8(Some(s))
                    | ScalarValue::LargeUtf8(Some(s))
                    | ScalarValue::Utf8View(Some(s)) => Some(s.as_str()),
                    _ => None,
                };
                let out = match text {
                    None => None,
                    Some(s) => match canonical(self.ty, s) {
                        Some(c) => Some(c.map_err(err)?.into_owned()),
                        None => Some(s.to_string()),
                    },
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(out)))
            }
            ColumnarValue::Array(a) => {
                let a = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
                Ok(ColumnarValue::Array(conform(a, self.ty).map_err(err)?))
            }
        }
    }
}

/// PostgreSQL 13's `gen_random_uuid()`: a version 4 UUID, typed UUID.
#[derive(Debug, PartialEq, Eq, Hash)]
struct GenRandomUuid {
    signature: Signature,
}

impl Default for GenRandomUuid {
    fn default() -> Self {
        GenRandomUuid {
            signature: Signature::nullary(Volatility::Volatile),
        }
    }
}

impl ScalarUDFImpl for GenRandomUuid {
    fn name(&self) -> &str {
        "gen_random_uuid"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, _: ReturnFieldArgs) -> DfResult<FieldRef> {
        Ok(declared_field(self.name(), ColumnType::Uuid, false))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let mut out = StringBuilder::with_capacity(args.number_rows, args.number_rows * 36);
        for _ in 0..args.number_rows {
            out.append_value(uuid::Uuid::new_v4().hyphenated().to_string());
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests;
