//! `pg_sleep(seconds)`: waits, then returns PostgreSQL's `void` value, an empty text (NULL
//! for a NULL argument), in a column the PostgreSQL server describes as `void` (OID 2278,
//! by its field's declared type, as PostgreSQL describes it).
//!
//! Test suites, connection-pool checks and statement-timeout demonstrations call it; it
//! was "Invalid function". It is an async function (DataFusion's `AsyncScalarUDFImpl`), so
//! a sleeping statement holds no thread of the runtime, and dropping the statement (a
//! CancelRequest, `statement_timeout`, a closed connection) ends the sleep at once.
//!
//! Invariants:
//! 1. Each row sleeps for its own argument, one after another, as PostgreSQL evaluates it
//!    per row; NULL, zero, negative and NaN sleep not at all, as PostgreSQL's.
//! 2. Volatile: never folded into a constant while planning, so the sleep happens when
//!    the statement runs, every time it runs.
//! 3. A sleep longer than tokio's timer can hold (~2 years) is refused with 22023 rather
//!    than wrapped or panicking.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, Float64Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::TableError;

/// The longest sleep taken (invariant 3): a year.
const LONGEST: f64 = 365.0 * 24.0 * 3600.0;

/// `pg_sleep`, ready to register.
pub fn function() -> ScalarUDF {
    AsyncScalarUDF::new(Arc::new(PgSleep::new())).into_scalar_udf()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSleep {
    signature: Signature,
}

impl PgSleep {
    fn new() -> Self {
        PgSleep {
            // Invariant 2.
            // Any one argument, cast to float8 when it runs: a text that is no number
            // fails as PostgreSQL's cast does (22P02).
            signature: Signature::any(1, Volatility::Volatile),
        }
    }
}

impl ScalarUDFImpl for PgSleep {
    fn name(&self) -> &str {
        "pg_sleep"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        let declared = [(
            crate::catalog::DECLARED_TYPE.to_string(),
            "VOID".to_string(),
        )];
        Ok(Arc::new(
            datafusion::arrow::datatypes::Field::new(self.name(), DataType::Utf8, true)
                .with_metadata(declared.into_iter().collect()),
        ))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(DataFusionError::Internal(
            "pg_sleep runs as an async function".into(),
        ))
    }
}

/// How long each row sleeps (invariant 1), or the argument refused (invariant 3).
fn durations(seconds: &Float64Array) -> std::result::Result<Vec<Duration>, TableError> {
    let mut out = Vec::with_capacity(seconds.len());
    for i in 0..seconds.len() {
        let s = if seconds.is_null(i) {
            0.0
        } else {
            seconds.value(i)
        };
        if s > LONGEST {
            return Err(TableError::Transaction {
                code: "22023",
                message: format!("pg_sleep({s}): at most {LONGEST} seconds (a year)"),
            });
        }
        // `!(s > 0)` also catches NaN.
        out.push(if s > 0.0 {
            Duration::from_secs_f64(s)
        } else {
            Duration::ZERO
        });
    }
    Ok(out)
}

#[async_trait::async_trait]
impl AsyncScalarUDFImpl for PgSleep {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let seconds = match &args.args[..] {
            [ColumnarValue::Scalar(s)] => s.cast_to(&DataType::Float64)?.to_array_of_size(rows)?,
            [ColumnarValue::Array(a)] => {
                datafusion::arrow::compute::cast(a.as_ref(), &DataType::Float64)?
            }
            _ => {
                return Err(DataFusionError::Plan(
                    "function pg_sleep takes one argument, the seconds to sleep".into(),
                ));
            }
        };
        let seconds = seconds
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or_else(|| DataFusionError::Internal("pg_sleep: seconds not float8".into()))?;
        for d in durations(seconds)? {
            if !d.is_zero() {
                tokio::time::sleep(d).await;
            }
        }
        // PostgreSQL's void is written as an empty text; NULL in, NULL out (it is strict).
        let out: StringArray = (0..rows)
            .map(|i| (!seconds.is_null(i)).then_some(""))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sleep_their_own_time_and_nothing_for_null_or_negative() {
        let got = durations(&Float64Array::from(vec![
            Some(0.25),
            None,
            Some(-3.0),
            Some(f64::NAN),
            Some(0.0),
            Some(1.5),
        ]))
        .unwrap();
        assert_eq!(
            got,
            [
                Duration::from_millis(250),
                Duration::ZERO,
                Duration::ZERO,
                Duration::ZERO,
                Duration::ZERO,
                Duration::from_millis(1500),
            ]
        );
    }

    #[test]
    fn a_sleep_past_a_year_is_refused_not_wrapped() {
        let e = durations(&Float64Array::from(vec![1e30])).unwrap_err();
        assert_eq!(e.sqlstate(), "22023");
        assert!(durations(&Float64Array::from(vec![f64::INFINITY])).is_err());
    }
}
