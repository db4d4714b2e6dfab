//! PostgreSQL's JSON path and containment operators (beside `jsonops.rs`'s `->`, `->>`):
//!
//! | operator   | PostgreSQL                                         | planned as                       |
//! |------------|----------------------------------------------------|----------------------------------|
//! | `a #> p`   | the value at path `p` (a text array `'{k,0,k2}'`) as JSON | `tierdb_json_path(a, p)`   |
//! | `a #>> p`  | the value at path `p` as text                      | `tierdb_json_path_text(a, p)`    |
//! | `a @> b`   | whether `a` contains `b` (PostgreSQL's jsonb containment) | `tierdb_json_contains(a, b)` |
//! | `a <@ b`   | whether `b` contains `a`                           | `tierdb_json_contains(b, a)`     |
//!
//! A path step into an array is an integer (negative counts from the end); a step that
//! finds nothing makes the result NULL. Containment follows PostgreSQL's jsonb rules: an
//! object contains an object whose every key it has with a contained value; an array
//! contains an array whose every element some element of it contains (order and
//! duplicates ignored); an array also contains a scalar it holds at its top level; scalars
//! contain equal scalars (numbers by value). Text that is not JSON fails with 22P02.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::Value;

use crate::catalog::DECLARED_TYPE;
use crate::error::TableError;
use crate::jsonops::{Key, append_member, member};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PathOp {
    Path,
    PathText,
    Contains,
}

pub(crate) fn udf(op: PathOp) -> ScalarUDF {
    ScalarUDF::new_from_impl(PathFn {
        op,
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

/// The functions, callable by name too.
pub fn functions() -> Vec<ScalarUDF> {
    [PathOp::Path, PathOp::PathText, PathOp::Contains]
        .into_iter()
        .map(udf)
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PathFn {
    op: PathOp,
    signature: Signature,
}

fn not_json(doc: &str) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(TableError::Column {
        code: "22P02",
        message: format!("invalid input syntax for type json: \"{doc}\""),
    }))
}

impl ScalarUDFImpl for PathFn {
    fn name(&self) -> &str {
        match self.op {
            PathOp::Path => "tierdb_json_path",
            PathOp::PathText => "tierdb_json_path_text",
            PathOp::Contains => "tierdb_json_contains",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    /// Both operands as text (a JSON value; a path's text array or a JSON value).
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if args.len() != 2 {
            return datafusion::common::plan_err!("{} takes two arguments", self.name());
        }
        Ok(vec![DataType::Utf8, DataType::Utf8])
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(match self.op {
            PathOp::Contains => DataType::Boolean,
            _ => DataType::Utf8,
        })
    }
    /// `#>` gives a value of its operand's type (JSONB from JSONB, else JSON).
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        use datafusion::arrow::datatypes::Field;
        let field = Field::new(self.name(), self.return_type(&[])?, true);
        if self.op != PathOp::Path {
            return Ok(Arc::new(field));
        }
        let declared = match args
            .arg_fields
            .first()
            .and_then(|f| f.metadata().get(DECLARED_TYPE))
        {
            Some(t) if t == "JSONB" => "JSONB",
            _ => "JSON",
        };
        Ok(Arc::new(field.with_metadata(
            [(DECLARED_TYPE.to_string(), declared.to_string())].into(),
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let left = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let right = datafusion::arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let (left, right) = (left.as_string::<i32>(), right.as_string::<i32>());
        let out: ArrayRef = match self.op {
            PathOp::Contains => {
                let mut b = BooleanBuilder::with_capacity(n);
                for i in 0..n {
                    if left.is_null(i) || right.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    let parse = |s: &str| serde_json::from_str::<Value>(s).map_err(|_| not_json(s));
                    let (a, c) = (parse(left.value(i))?, parse(right.value(i))?);
                    b.append_value(contains(&a, &c, true));
                }
                Arc::new(b.finish())
            }
            PathOp::Path | PathOp::PathText => {
                let mut b = StringBuilder::with_capacity(n, n * 8);
                for i in 0..n {
                    if left.is_null(i) || right.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    let steps = text_array(right.value(i)).ok_or_else(|| {
                        datafusion::error::DataFusionError::External(Box::new(
                            TableError::Column {
                                code: "22P02",
                                message: format!(
                                    "malformed array literal: \"{}\" (a path is a text array such as '{{a,0,b}}')",
                                    right.value(i)
                                ),
                            },
                        ))
                    })?;
                    let found = at_path(left.value(i), &steps)?;
                    append_member(&mut b, found, self.op == PathOp::Path);
                }
                Arc::new(b.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// The text of the value at `steps` in `doc` (`None` when a step finds nothing).
fn at_path<'a>(doc: &'a str, steps: &[Option<String>]) -> Result<Option<&'a str>> {
    let mut cur = doc;
    for step in steps {
        let Some(step) = step else {
            return Ok(None);
        };
        let key = match (cur.trim_start().starts_with('['), step.parse::<i64>()) {
            (true, Ok(i)) => Key::Index(i),
            (true, Err(_)) => return Ok(None),
            _ => Key::Name(step),
        };
        match member(cur, key)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
        {
            Some(v) => cur = v,
            None => return Ok(None),
        }
    }
    // A path of no steps is the document itself, checked.
    if steps.is_empty() {
        serde_json::from_str::<serde::de::IgnoredAny>(doc).map_err(|_| not_json(doc))?;
    }
    Ok(Some(cur))
}

/// PostgreSQL's text form of a one-dimensional text array (`{a,"b c",NULL}`); `None` when
/// malformed.
pub(crate) fn text_array(s: &str) -> Option<Vec<Option<String>>> {
    let inner = s.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut out = Vec::new();
    if inner.trim().is_empty() {
        return Some(out);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => item.push(chars.next()?),
                    '"' => break,
                    c => item.push(c),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if c == '"' || c == '{' || c == '}' {
                    return None;
                }
                item.push(c);
                chars.next();
            }
            item = item.trim().to_string();
            if item.is_empty() {
                return None;
            }
        }
        out.push((quoted || !item.eq_ignore_ascii_case("NULL")).then_some(item));
        match chars.next() {
            None => return Some(out),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

/// Whether `a` contains `b` (module doc); `top`: `a` is the whole left operand, where an
/// array also contains a scalar it holds.
fn contains(a: &Value, b: &Value, top: bool) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => y
            .iter()
            .all(|(k, v)| x.get(k).is_some_and(|u| contains(u, v, false))),
        (Value::Array(x), Value::Array(y)) => y.iter().all(|v| {
            x.iter().any(|u| {
                !matches!((u, v), (Value::Array(_), Value::Object(_))) && contains(u, v, false)
            })
        }),
        (Value::Array(x), s) if top && !s.is_array() && !s.is_object() => {
            x.iter().any(|u| scalar_eq(u, s))
        }
        _ => scalar_eq(a, b),
    }
}

fn scalar_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(p), Some(q)) => p == q,
            _ => x == y,
        },
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(a: &str, b: &str) -> bool {
        contains(
            &serde_json::from_str(a).unwrap(),
            &serde_json::from_str(b).unwrap(),
            true,
        )
    }

    /// Each case as PostgreSQL 15 answers `a::jsonb @> b::jsonb` (its documentation's
    /// examples, and the edges around them).
    #[test]
    fn containment_as_postgresql() {
        assert!(c(r#"{"a":1,"b":2}"#, r#"{"b":2}"#));
        assert!(!c(r#"{"a":1}"#, r#"{"a":1,"b":2}"#));
        assert!(c(r#"{"a":{"b":1,"c":2}}"#, r#"{"a":{"c":2}}"#));
        assert!(!c(r#"{"a":{"b":1}}"#, r#"{"b":1}"#));
        assert!(c("[1,2,3]", "[3,1]"));
        assert!(c("[1,2,3]", "[1,1]"));
        assert!(c(r#"["foo","bar"]"#, r#""foo""#));
        assert!(!c(r#"["foo",["bar"]]"#, r#""bar""#));
        assert!(c(r#"[1,[2,3]]"#, "[[3]]"));
        assert!(!c("[1,2,[1,3]]", "[1,3]"));
        assert!(c("[1,2,[1,3]]", "[[1,3]]"));
        assert!(c("1.0", "1"));
        assert!(!c(r#""a""#, r#"["a"]"#));
        assert!(c("{}", "{}"));
        assert!(c("[]", "[]"));
        assert!(!c("[]", "{}"));
    }

    #[test]
    fn text_arrays_as_postgresql_writes_them() {
        let s = |v: &[&str]| v.iter().map(|x| Some(x.to_string())).collect::<Vec<_>>();
        assert_eq!(text_array("{a,b}"), Some(s(&["a", "b"])));
        assert_eq!(text_array("{ a , 0 }"), Some(s(&["a", "0"])));
        assert_eq!(text_array(r#"{"a b","c\"d"}"#), Some(s(&["a b", "c\"d"])));
        assert_eq!(text_array("{}"), Some(vec![]));
        assert_eq!(text_array("{a,NULL}"), Some(vec![Some("a".into()), None]));
        assert_eq!(text_array("a,b"), None);
        assert_eq!(text_array("{a,}"), None);
    }

    #[test]
    fn paths_through_objects_and_arrays() {
        let doc = r#"{"a":[10,{"b":"x"}],"n":null}"#;
        let p = |s: &[&str]| {
            at_path(
                doc,
                &s.iter().map(|x| Some(x.to_string())).collect::<Vec<_>>(),
            )
            .unwrap()
            .map(str::to_string)
        };
        assert_eq!(p(&["a", "1", "b"]).as_deref(), Some(r#""x""#));
        assert_eq!(p(&["a", "-2"]).as_deref(), Some("10"));
        assert_eq!(p(&["a", "x"]), None);
        assert_eq!(p(&["n"]).as_deref(), Some("null"));
        assert_eq!(p(&[]).as_deref(), Some(doc));
        assert!(at_path("{oops", &[Some("a".into())]).is_err());
    }
}
