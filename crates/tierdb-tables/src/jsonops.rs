//! PostgreSQL's JSON operators over JSON and JSONB values (text, `pgtext.rs`):
//!
//! | operator  | PostgreSQL                                    | planned as                 |
//! |-----------|-----------------------------------------------|----------------------------|
//! | `a -> k`  | the member (object key or array index) as JSON | `tierdb_json_get(a, k)`    |
//! | `a ->> k` | the member as text (a string unquoted)         | `tierdb_json_get_text(a, k)` |
//! | `a ? k`   | whether `k` is a top-level key, or a string element of a top-level array (or the string itself) | `tierdb_json_has_key(a, k)` |
//! | `a ?\| ks` | whether any of the text array `ks` is (NULLs ignored) | `tierdb_json_has_any(a, ks)` |
//! | `a ?& ks` | whether all of them are                        | `tierdb_json_has_all(a, ks)` |
//!
//! A member is found by scanning the text, never by building the document: the result of
//! `->` is the member's own text (as written for JSON; for JSONB, whose stored text is
//! canonical, canonical too). A missing member, a key into an array or an index into an
//! object is NULL, as in PostgreSQL; a negative index counts from the end. Text that is
//! not JSON fails with 22P02.
//!
//! Why not `datafusion-functions-json`: its `jiter` dependency names pyo3 0.29 (an
//! optional dependency, but Cargo refuses two crates linking `python` while resolving) and
//! tierdb's Python module is on pyo3 0.28; its `->` also returns a union value
//! (`{int=1}`), not the JSON PostgreSQL clients read.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int64Array, StringArray, StringBuilder,
};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;

use crate::catalog::DECLARED_TYPE;
use crate::error::TableError;

/// Registered before DataFusion's own planners (`sql/mod.rs`).
#[derive(Debug, Default)]
pub struct JsonOperators;

impl ExprPlanner for JsonOperators {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        use crate::jsonpath::PathOp;
        let path = |op: PathOp, args: Vec<Expr>| {
            Ok(PlannerResult::Planned(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::new(crate::jsonpath::udf(op)), args),
            )))
        };
        // `@>` and `<@` are also DataFusion's array containment: JSON only when neither
        // side is a list.
        let lists = || {
            [&expr.left, &expr.right].iter().any(|e| {
                e.get_type(schema).is_ok_and(|t| {
                    matches!(
                        t,
                        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
                    )
                })
            })
        };
        let op = match expr.op {
            BinaryOperator::Arrow => Op::Get,
            BinaryOperator::LongArrow => Op::GetText,
            BinaryOperator::Question => Op::HasKey,
            BinaryOperator::QuestionPipe => Op::HasAny,
            BinaryOperator::QuestionAnd => Op::HasAll,
            BinaryOperator::HashArrow => return path(PathOp::Path, vec![expr.left, expr.right]),
            BinaryOperator::HashLongArrow => {
                return path(PathOp::PathText, vec![expr.left, expr.right]);
            }
            BinaryOperator::AtArrow if !lists() => {
                return path(PathOp::Contains, vec![expr.left, expr.right]);
            }
            BinaryOperator::ArrowAt if !lists() => {
                return path(PathOp::Contains, vec![expr.right, expr.left]);
            }
            _ => return Ok(PlannerResult::Original(expr)),
        };
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(
                Arc::new(ScalarUDF::new_from_impl(JsonFn::new(op))),
                vec![expr.left, expr.right],
            ),
        )))
    }
}

/// The functions, callable by name too.
pub fn functions() -> Vec<ScalarUDF> {
    [Op::Get, Op::GetText, Op::HasKey, Op::HasAny, Op::HasAll]
        .into_iter()
        .map(|op| ScalarUDF::new_from_impl(JsonFn::new(op)))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Get,
    GetText,
    HasKey,
    HasAny,
    HasAll,
}

/// What selects a member.
#[derive(Debug, Clone, Copy)]
pub enum Key<'a> {
    Name(&'a str),
    Index(i64),
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonFn {
    op: Op,
    signature: Signature,
}

impl JsonFn {
    fn new(op: Op) -> Self {
        JsonFn {
            op,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for JsonFn {
    fn name(&self) -> &str {
        match self.op {
            Op::Get => "tierdb_json_get",
            Op::GetText => "tierdb_json_get_text",
            Op::HasKey => "tierdb_json_has_key",
            Op::HasAny => "tierdb_json_has_any",
            Op::HasAll => "tierdb_json_has_all",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    /// The document as text; the key as text, or as BIGINT when it is an integer (an array
    /// index).
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [_, key] = args else {
            return datafusion::common::plan_err!("{} takes a JSON value and a key", self.name());
        };
        let key = match self.op {
            Op::HasAny | Op::HasAll => DataType::new_list(DataType::Utf8, true),
            Op::Get | Op::GetText if key.is_integer() => DataType::Int64,
            _ => DataType::Utf8,
        };
        Ok(vec![DataType::Utf8, key])
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(match self.op {
            Op::HasKey | Op::HasAny | Op::HasAll => DataType::Boolean,
            _ => DataType::Utf8,
        })
    }
    /// `->` gives a value of its operand's type (JSONB from JSONB, else JSON); the others
    /// text and boolean.
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        use datafusion::arrow::datatypes::Field;
        let ty = self.return_type(&[])?;
        let field = Field::new(self.name(), ty, true);
        if self.op != Op::Get {
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
        Ok(Arc::new(
            field.with_metadata(
                [(DECLARED_TYPE.to_string(), declared.to_string())]
                    .into_iter()
                    .collect(),
            ),
        ))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let docs = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let docs = docs.as_string::<i32>();
        let keys = &arrays[1];
        let key = |i: usize| -> Option<Key<'_>> {
            if keys.is_null(i) {
                return None;
            }
            match keys.data_type() {
                DataType::Int64 => keys
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .map(|a| Key::Index(a.value(i))),
                _ => keys
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .map(|a| Key::Name(a.value(i))),
            }
        };
        let err = |e: TableError| datafusion::error::DataFusionError::External(Box::new(e));
        let out: ArrayRef = match self.op {
            Op::HasKey => {
                let mut b = BooleanBuilder::with_capacity(n);
                for i in 0..n {
                    match (docs.is_null(i), key(i)) {
                        (false, Some(Key::Name(k))) => {
                            b.append_value(exists(docs.value(i), k).map_err(err)?)
                        }
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            Op::HasAny | Op::HasAll => {
                let lists = keys.as_list::<i32>();
                let mut b = BooleanBuilder::with_capacity(n);
                for i in 0..n {
                    if docs.is_null(i) || lists.is_null(i) {
                        b.append_null();
                        continue;
                    }
                    let names = lists.value(i);
                    let names = datafusion::arrow::compute::cast(&names, &DataType::Utf8)?;
                    let names = names.as_string::<i32>();
                    let doc = docs.value(i);
                    // NULL elements are ignored, as PostgreSQL ignores them.
                    let mut found = names.iter().flatten().map(|k| exists(doc, k));
                    let answer = if self.op == Op::HasAny {
                        found.try_fold(false, |any, f| f.map(|f| any || f))
                    } else {
                        found.try_fold(true, |all, f| f.map(|f| all && f))
                    };
                    b.append_value(answer.map_err(err)?);
                }
                Arc::new(b.finish())
            }
            Op::Get | Op::GetText => {
                let mut b = StringBuilder::with_capacity(n, n * 8);
                for i in 0..n {
                    let found = match (docs.is_null(i), key(i)) {
                        (false, Some(k)) => member(docs.value(i), k).map_err(err)?,
                        _ => None,
                    };
                    append_member(&mut b, found, self.op == Op::Get);
                }
                Arc::new(b.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// PostgreSQL's `doc ? key`: a top-level key of an object, a string element of a
/// top-level array, or the string a scalar document is; `Err` when `doc` is not JSON.
fn exists(doc: &str, key: &str) -> std::result::Result<bool, TableError> {
    if doc.trim_start().starts_with('{') {
        return Ok(member(doc, Key::Name(key))?.is_some());
    }
    let value: serde_json::Value = serde_json::from_str(doc).map_err(|_| TableError::Column {
        code: "22P02",
        message: format!("invalid input syntax for type json: \"{doc}\""),
    })?;
    Ok(match value {
        serde_json::Value::Array(items) => items
            .iter()
            .any(|v| matches!(v, serde_json::Value::String(s) if s == key)),
        serde_json::Value::String(s) => s == key,
        _ => false,
    })
}

/// Appends a member found (or NULL): as JSON, or as text as `->>` gives it.
pub(crate) fn append_member(b: &mut StringBuilder, found: Option<&str>, as_json: bool) {
    match found {
        None => b.append_null(),
        Some(v) if as_json => b.append_value(v),
        Some(v) => match as_text(v) {
            Some(t) => b.append_value(t),
            None => b.append_null(),
        },
    }
}

/// A member's text as `->>` gives it: a string decoded, `null` as NULL, else as written.
fn as_text(v: &str) -> Option<String> {
    if v == "null" {
        return None;
    }
    if v.starts_with('"') {
        return serde_json::from_str::<String>(v).ok();
    }
    Some(v.to_string())
}

/// The text of `doc`'s member `key` (module doc); `Err` when `doc` is not JSON.
pub fn member<'a>(doc: &'a str, key: Key<'_>) -> std::result::Result<Option<&'a str>, TableError> {
    let bad = || TableError::Column {
        code: "22P02",
        message: format!("invalid input syntax for type json: \"{doc}\""),
    };
    let mut s = Scan {
        src: doc.as_bytes(),
        at: 0,
    };
    let found = s.member(key).ok_or_else(bad)?;
    Ok(found.map(|(a, b)| &doc[a..b]))
}

struct Scan<'a> {
    src: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.src.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
        self.src.get(self.at).copied()
    }

    /// The span of the member, `Some(None)` when absent, `None` when not JSON.
    #[allow(clippy::option_option)]
    fn member(&mut self, key: Key<'_>) -> Option<Option<(usize, usize)>> {
        let mut spans = Vec::new();
        match (self.peek()?, key) {
            (b'{', Key::Name(name)) => {
                self.at += 1;
                let mut found = None;
                if self.peek()? == b'}' {
                    return Some(None);
                }
                loop {
                    let (ks, ke) = self.value()?;
                    let k: String = serde_json::from_slice(&self.src[ks..ke]).ok()?;
                    if self.peek()? != b':' {
                        return None;
                    }
                    self.at += 1;
                    let span = self.value()?;
                    // The last of duplicate keys, as PostgreSQL's JSON operators take it.
                    if k == name {
                        found = Some(span);
                    }
                    match self.peek()? {
                        b',' => self.at += 1,
                        b'}' => return Some(found),
                        _ => return None,
                    }
                }
            }
            (b'[', Key::Index(i)) => {
                self.at += 1;
                if self.peek()? != b']' {
                    loop {
                        spans.push(self.value()?);
                        match self.peek()? {
                            b',' => self.at += 1,
                            b']' => break,
                            _ => return None,
                        }
                    }
                }
                let len = i64::try_from(spans.len()).ok()?;
                let at = if i < 0 { len + i } else { i };
                Some(usize::try_from(at).ok().and_then(|a| spans.get(a).copied()))
            }
            _ => {
                self.value()?;
                Some(None)
            }
        }
    }

    /// Skips one value, returning its span; `None` when it is not JSON.
    fn value(&mut self) -> Option<(usize, usize)> {
        let start = {
            self.peek()?;
            self.at
        };
        match self.src[self.at] {
            b'"' => {
                self.at += 1;
                loop {
                    match *self.src.get(self.at)? {
                        b'\\' => self.at += 2,
                        b'"' => {
                            self.at += 1;
                            break;
                        }
                        _ => self.at += 1,
                    }
                }
            }
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.at += 1;
                if self.peek()? == close {
                    self.at += 1;
                    return Some((start, self.at));
                }
                loop {
                    self.value()?;
                    if open == b'{' {
                        if self.peek()? != b':' {
                            return None;
                        }
                        self.at += 1;
                        self.value()?;
                    }
                    match self.peek()? {
                        b',' => self.at += 1,
                        c if c == close => {
                            self.at += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
            }
            _ => {
                while self
                    .src
                    .get(self.at)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b))
                {
                    self.at += 1;
                }
                if self.at == start {
                    return None;
                }
                // A scalar is checked by serde_json; containers by their structure above.
                serde_json::from_slice::<serde::de::IgnoredAny>(&self.src[start..self.at]).ok()?;
            }
        }
        Some((start, self.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(doc: &str, key: Key<'_>) -> Option<String> {
        member(doc, key).expect("json").map(str::to_string)
    }

    #[test]
    fn exists_is_postgresql_question_mark() {
        let e = |doc: &str, k: &str| exists(doc, k).expect("json");
        assert!(e(r#"{"a": {"b": 1}}"#, "a"));
        assert!(!e(r#"{"a": {"b": 1}}"#, "b")); // top level only
        assert!(e(r#"["a", "b"]"#, "b"));
        assert!(!e(r#"["a", ["b"]]"#, "b"));
        assert!(e(r#""a""#, "a"));
        assert!(!e("1", "1")); // a number is not a string
        assert_eq!(
            exists("{oops", "a").err().map(|e| e.sqlstate()),
            Some("22P02")
        );
        assert_eq!(
            exists("[oops", "a").err().map(|e| e.sqlstate()),
            Some("22P02")
        );
    }

    #[test]
    fn members_by_key_and_index_as_written() {
        let doc = r#"{"a": {"x": [1, 2.50]}, "b": "s\"t", "c": null}"#;
        assert_eq!(
            get(doc, Key::Name("a")).as_deref(),
            Some(r#"{"x": [1, 2.50]}"#)
        );
        assert_eq!(get(doc, Key::Name("b")).as_deref(), Some(r#""s\"t""#));
        assert_eq!(get(doc, Key::Name("c")).as_deref(), Some("null"));
        assert_eq!(get(doc, Key::Name("zz")), None);
        assert_eq!(get(doc, Key::Index(0)), None);
        let arr = "[10, [20], {\"k\": 1}]";
        assert_eq!(get(arr, Key::Index(1)).as_deref(), Some("[20]"));
        assert_eq!(get(arr, Key::Index(-1)).as_deref(), Some("{\"k\": 1}"));
        assert_eq!(get(arr, Key::Index(3)), None);
        assert_eq!(get(arr, Key::Index(-4)), None);
        assert_eq!(get(arr, Key::Name("k")), None);
        assert_eq!(get("5", Key::Name("k")), None);
        // The last of duplicate keys.
        assert_eq!(
            get(r#"{"a":1,"a":2}"#, Key::Name("a")).as_deref(),
            Some("2")
        );
    }

    #[test]
    fn text_of_a_member_unquotes_strings_and_nulls_null() {
        assert_eq!(as_text(r#""a\nb""#).as_deref(), Some("a\nb"));
        assert_eq!(as_text("null"), None);
        assert_eq!(as_text("[1]").as_deref(), Some("[1]"));
    }

    #[test]
    fn text_that_is_not_json_is_22p02() {
        for doc in ["{", "{\"a\" 1}", "[1,", "{\"a\": tru}", ""] {
            let e = member(doc, Key::Name("a")).unwrap_err();
            assert!(
                e.to_string().contains("invalid input syntax for type json"),
                "{doc}"
            );
        }
    }
}
