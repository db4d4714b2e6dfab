//! Casts to VARCHAR(n) and CHAR(n), as PostgreSQL makes them.
//!
//! DataFusion plans `CAST(x AS VARCHAR(3))` and `x::char(2)` as a cast to a string and
//! drops the length: `'abcdef'::varchar(3)` was `abcdef` (PostgreSQL: `abc`), and the
//! result was described to clients as text. The parser's tree is repaired before planning
//! (`parsefix` rule 4): such a cast becomes a call of
//!
//! | written | called | value (PostgreSQL's explicit cast) | described as |
//! |---|---|---|---|
//! | `VARCHAR(n)`, `CHARACTER VARYING(n)` | `tierdb_varchar(x, n)` | the first `n` characters | `character varying(n)` |
//! | `CHAR(n)`, `CHARACTER(n)`, `CHAR` (n = 1) | `tierdb_bpchar(x, n)` | the first `n` characters, padded with spaces to `n` (how tierdb stores CHAR(n)) | `character(n)` |
//!
//! A cast to VARCHAR without a length stays DataFusion's cast to text. An explicit cast
//! truncates without an error; storing a longer value into a VARCHAR(n) or CHAR(n) column
//! still fails with 22001 (`catalog.rs`), as in PostgreSQL.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion::sql::sqlparser::ast::{self, CharacterLength, DataType as Sql, Expr};

use crate::catalog::{ColumnType, DECLARED_TYPE};

/// `parsefix` rule 4: a cast to VARCHAR(n) or CHAR(n) in `e` becomes the call that keeps
/// the length (module doc).
pub(crate) fn repair(e: &mut Expr) {
    let (arg, ty) = match e {
        Expr::Cast {
            expr, data_type, ..
        } => match target(data_type) {
            Some(t) => (expr.as_ref().clone(), t),
            None => return,
        },
        Expr::TypedString(t) => match target(&t.data_type) {
            Some(ty) => (Expr::Value(t.value.clone()), ty),
            None => return,
        },
        _ => return,
    };
    // A NULL stays a cast NULL: nothing to cut, and the CHAR(n) rules (`bpchar.rs`) and
    // the IN-list rules (`inlist.rs`) know a cast NULL literal for what it is. (It is
    // described as text, where PostgreSQL says character(n).)
    if matches!(&arg, Expr::Value(v) if matches!(v.value, ast::Value::Null)) {
        return;
    }
    let (name, len) = match ty {
        ColumnType::Varchar { len } => (VARCHAR, len),
        ColumnType::Char { len } => (BPCHAR, len),
        _ => return,
    };
    // The argument as text first: a number or a date is cut as PostgreSQL prints it.
    let arg = Expr::Cast {
        kind: ast::CastKind::DoubleColon,
        expr: Box::new(arg),
        data_type: Sql::Text,
        array: false,
        format: None,
    };
    let number = Expr::Value(ast::Value::Number(len.to_string(), false).into());
    *e = crate::parsefix::call(name, vec![arg, number]);
}

const VARCHAR: &str = "tierdb_varchar";
pub(crate) const BPCHAR: &str = "tierdb_bpchar";

/// The type a cast names, when it has a length to keep.
fn target(t: &Sql) -> Option<ColumnType> {
    let len = |l: &Option<CharacterLength>| match l {
        Some(CharacterLength::IntegerLength { length, .. }) => u32::try_from(*length).ok(),
        _ => None,
    };
    match t {
        Sql::Varchar(l) | Sql::CharacterVarying(l) | Sql::CharVarying(l) => {
            len(l).map(|len| ColumnType::Varchar { len })
        }
        Sql::Char(l) | Sql::Character(l) => Some(ColumnType::Char {
            len: len(l).unwrap_or(1),
        }),
        _ => None,
    }
}

/// `tierdb_varchar(text, n)` and `tierdb_bpchar(text, n)`.
pub fn functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(CharCast::new(false)),
        ScalarUDF::new_from_impl(CharCast::new(true)),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CharCast {
    /// CHAR(n) (padded) rather than VARCHAR(n).
    pad: bool,
    signature: Signature,
}

impl CharCast {
    fn new(pad: bool) -> Self {
        CharCast {
            pad,
            // The length as written (int4) is taken as it is: a coercion to int8 would hide
            // the literal from `return_field_from_args`, which reads the declared length.
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Int32]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Int64]),
                ],
                Volatility::Immutable,
            ),
        }
    }

    fn declared(&self, len: u32) -> ColumnType {
        if self.pad {
            ColumnType::Char { len }
        } else {
            ColumnType::Varchar { len }
        }
    }
}

/// The first `len` characters of `s`, padded with spaces to `len` when `pad`.
fn cut(s: &str, len: usize, pad: bool, out: &mut String) {
    out.clear();
    let mut n = 0;
    for c in s.chars().take(len) {
        out.push(c);
        n += 1;
    }
    if pad {
        out.extend(std::iter::repeat_n(' ', len - n));
    }
}

/// The length a cast's second argument gives (an integer literal, int4 as written or
/// int8 after type coercion), if it is one of at least 1.
pub(crate) fn length_of(v: &ScalarValue) -> Option<u32> {
    let n = match v {
        ScalarValue::Int32(Some(n)) => i64::from(*n),
        ScalarValue::Int64(Some(n)) => *n,
        _ => return None,
    };
    u32::try_from(n).ok().filter(|n| *n >= 1)
}

fn length(v: &ColumnarValue) -> Result<usize> {
    match v {
        ColumnarValue::Scalar(v) => match length_of(v) {
            Some(n) => Ok(n as usize),
            None => {
                exec_err!("the length of a VARCHAR(n) or CHAR(n) cast must be a positive integer")
            }
        },
        _ => exec_err!("the length of a VARCHAR(n) or CHAR(n) cast must be a constant"),
    }
}

impl ScalarUDFImpl for CharCast {
    fn name(&self) -> &str {
        if self.pad { BPCHAR } else { VARCHAR }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let nullable = args.arg_fields.first().is_none_or(|f| f.is_nullable());
        let mut field = Field::new(self.name(), DataType::Utf8, nullable);
        if let Some(Some(v)) = args.scalar_arguments.get(1)
            && let Some(len) = length_of(v)
        {
            field = field.with_metadata(
                [(DECLARED_TYPE.to_string(), self.declared(len).sql())]
                    .into_iter()
                    .collect(),
            );
        }
        Ok(Arc::new(field))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let len = length(&args.args[1])?;
        let mut buf = String::new();
        match &args.args[0] {
            ColumnarValue::Scalar(v) => {
                let out = match v {
                    ScalarValue::Utf8(Some(s)) => {
                        cut(s, len, self.pad, &mut buf);
                        Some(buf)
                    }
                    _ => None,
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(out)))
            }
            ColumnarValue::Array(a) => {
                let a = a.as_string::<i32>();
                let mut out = StringBuilder::with_capacity(a.len(), a.len() * len);
                for i in 0..a.len() {
                    if a.is_null(i) {
                        out.append_null();
                    } else {
                        cut(a.value(i), len, self.pad, &mut buf);
                        out.append_value(&buf);
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_and_pads_by_characters() {
        let mut out = String::new();
        cut("abcdef", 3, false, &mut out);
        assert_eq!(out, "abc");
        cut("ab", 3, false, &mut out);
        assert_eq!(out, "ab");
        cut("ab", 4, true, &mut out);
        assert_eq!(out, "ab  ");
        cut("äöüß", 2, true, &mut out);
        assert_eq!(out, "äö");
    }

    #[test]
    fn only_casts_with_a_length_are_repaired() {
        let parse = |sql: &str| {
            let d = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
            let mut s = datafusion::sql::sqlparser::parser::Parser::parse_sql(&d, sql).unwrap();
            crate::parsefix::repair(&mut s[0]);
            s[0].to_string()
        };
        assert_eq!(
            parse(
                "SELECT CAST(a AS VARCHAR(3)), b::char(2), c::character, d::varchar, NULL::char(2)"
            ),
            "SELECT tierdb_varchar(a::TEXT, 3), tierdb_bpchar(b::TEXT, 2), \
             tierdb_bpchar(c::TEXT, 1), d::VARCHAR, NULL::CHAR(2)"
        );
    }
}
