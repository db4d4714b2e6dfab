//! A quoted literal among the arguments of `coalesce`, `greatest`, `least` and `nullif`
//! takes the type of the other arguments, as PostgreSQL types an untyped literal:
//! `coalesce(max(ts), '1900-01-01')` is a timestamp there, where DataFusion finds no
//! common type for Timestamp and Utf8 and refuses the query (dbt's incremental models
//! write such defaults).
//!
//! Each function is DataFusion's own, wrapped: only its argument coercion changes, and
//! only where DataFusion's fails: when every argument that is not text (or NULL) has one
//! type, the text arguments are cast to it (a text value that does not parse then fails
//! as PostgreSQL's `invalid input syntax` does, at run time).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// The wrapped functions, to register over DataFusion's.
pub fn functions() -> Vec<ScalarUDF> {
    [
        datafusion::functions::core::coalesce(),
        datafusion::functions::core::greatest(),
        datafusion::functions::core::least(),
        datafusion::functions::core::nullif(),
    ]
    .into_iter()
    .map(|inner| ScalarUDF::new_from_impl(UnknownText { inner }))
    .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct UnknownText {
    inner: Arc<ScalarUDF>,
}

/// The one type of the arguments that are neither text nor NULL, if they have one.
fn typed(arg_types: &[DataType]) -> Option<&DataType> {
    let mut others = arg_types.iter().filter(|t| !is_text(t) && !t.is_null());
    let first = others.next()?;
    others.all(|t| t == first).then_some(first)
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

impl ScalarUDFImpl for UnknownText {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match self.inner.coerce_types(arg_types) {
            Ok(types) => Ok(types),
            Err(e) => match typed(arg_types) {
                Some(t) if arg_types.iter().any(is_text) => {
                    let t = t.clone();
                    let cast: Vec<DataType> = arg_types
                        .iter()
                        .map(|a| if is_text(a) { t.clone() } else { a.clone() })
                        .collect();
                    self.inner.coerce_types(&cast).or(Err(e))
                }
                _ => Err(e),
            },
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::TimeUnit;

    #[test]
    fn text_takes_the_other_arguments_type_only_where_datafusion_finds_none() {
        let f = &functions()[0];
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(
            f.coerce_types(&[ts.clone(), DataType::Utf8]).unwrap(),
            [ts.clone(), ts.clone()]
        );
        // DataFusion's own answer where it has one: Int32 and Int64 widen.
        assert_eq!(
            f.coerce_types(&[DataType::Int32, DataType::Int64]).unwrap(),
            [DataType::Int64, DataType::Int64]
        );
        // Two typed arguments that do not agree stay refused.
        assert!(
            f.coerce_types(&[ts, DataType::Boolean, DataType::Utf8])
                .is_err()
        );
    }
}
