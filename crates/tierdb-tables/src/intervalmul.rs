//! An INTERVAL times or divided by a number, as PostgreSQL computes it (`interval_mul`,
//! `interval_div`): DataFusion has no such operator (`interval '1 day' * 2` failed with
//! "Invalid interval arithmetic operation"), which reports (`interval '1 hour' * n`) and
//! Rails/Django queries (`now() - interval '1 day' * $1`) write.
//!
//! 1. [`rewrite`] (a `parsefix` repair of the syntax tree) turns `i * n`, `n * i` and
//!    `i / n` (an INTERVAL `i`, a number `n`) into `tierdb_interval_mul(i, n)` or
//!    `tierdb_interval_div(i, n)`, `n` cast to DOUBLE PRECISION as PostgreSQL's
//!    `interval_mul(interval, float8)` takes it.
//! 2. Months and days are multiplied as whole numbers; their fractions cascade down, a
//!    month as 30 days and a day as 24 hours, rounded to the microsecond (PostgreSQL's
//!    `TSROUND`); nothing cascades up (`interval '1 day' * 1.5` is `1 day 12:00:00`).
//! 3. A month or day count past a 32-bit integer, a time past 64 bits of microseconds, or
//!    a non-finite factor is 22008 "interval out of range"; dividing by zero is 22012.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType as SqlType, Expr as SqlExpr,
};

const DAYS_PER_MONTH: f64 = 30.0;
const SECS_PER_DAY: f64 = 86_400.0;

/// PostgreSQL's `TSROUND`: to the microsecond.
fn tsround(x: f64) -> f64 {
    (x * 1e6).round_ties_even() / 1e6
}

fn error(code: &'static str, message: &str) -> DataFusionError {
    crate::TableError::Column {
        code,
        message: message.into(),
    }
    .into()
}

fn out_of_range() -> DataFusionError {
    error("22008", "interval out of range")
}

/// Rule 2: `span` with each field put through `by` (times or divided by the factor).
fn scaled(span: IntervalMonthDayNano, by: impl Fn(f64) -> f64) -> Result<IntervalMonthDayNano> {
    let whole = |x: f64| {
        if x.is_nan() || x > f64::from(i32::MAX) || x < f64::from(i32::MIN) {
            Err(out_of_range())
        } else {
            Ok(x.trunc() as i32)
        }
    };
    let months = by(f64::from(span.months));
    let days = by(f64::from(span.days));
    let (out_months, mut out_days) = (whole(months)?, whole(days)?);
    let month_remainder_days = tsround((months - f64::from(out_months)) * DAYS_PER_MONTH);
    let mut sec_remainder = tsround(
        (days - f64::from(out_days) + month_remainder_days - month_remainder_days.trunc())
            * SECS_PER_DAY,
    );
    if sec_remainder.abs() >= SECS_PER_DAY {
        let carried = (sec_remainder / SECS_PER_DAY).trunc();
        out_days = out_days
            .checked_add(carried as i32)
            .ok_or_else(out_of_range)?;
        sec_remainder -= carried * SECS_PER_DAY;
    }
    out_days = out_days
        .checked_add(month_remainder_days.trunc() as i32)
        .ok_or_else(out_of_range)?;
    // PostgreSQL keeps microseconds; Arrow's nanoseconds below them are kept exact.
    let micros = (by(span.nanoseconds as f64 / 1000.0) + sec_remainder * 1e6).round_ties_even();
    if !micros.is_finite() || micros.abs() >= 9.2e18 {
        return Err(out_of_range());
    }
    let nanos = (micros as i64).checked_mul(1000).ok_or_else(out_of_range)?;
    Ok(IntervalMonthDayNano::new(out_months, out_days, nanos))
}

/// `tierdb_interval_mul(interval, float8)` and `tierdb_interval_div(interval, float8)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalOp {
    divide: bool,
    signature: Signature,
}

impl IntervalOp {
    fn new(divide: bool) -> Self {
        IntervalOp {
            divide,
            signature: Signature::exact(
                vec![
                    DataType::Interval(IntervalUnit::MonthDayNano),
                    DataType::Float64,
                ],
                Volatility::Immutable,
            ),
        }
    }
}

/// The two functions, to register on a session.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    [false, true]
        .into_iter()
        .map(|d| Arc::new(ScalarUDF::new_from_impl(IntervalOp::new(d))))
        .collect()
}

impl ScalarUDFImpl for IntervalOp {
    fn name(&self) -> &str {
        if self.divide {
            "tierdb_interval_div"
        } else {
            "tierdb_interval_mul"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let spans =
            arrays[0].as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        let factors = arrays[1].as_primitive::<Float64Type>();
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if spans.is_null(i) || factors.is_null(i) {
                out.push(None);
                continue;
            }
            let f = factors.value(i);
            if self.divide && f == 0.0 {
                return Err(error("22012", "division by zero"));
            }
            let v = if self.divide {
                scaled(spans.value(i), |x| x / f)?
            } else {
                scaled(spans.value(i), |x| x * f)?
            };
            out.push(Some(v));
        }
        let array = IntervalMonthDayNanoArray::from(out);
        Ok(
            if args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&array, 0)?)
            } else {
                ColumnarValue::Array(Arc::new(array))
            },
        )
    }
}

/// Rule 1, on the syntax tree (DataFusion's SQL planner fails on `interval * n` before any
/// analyzer rule could see it): `e` rewritten when it multiplies or divides an INTERVAL,
/// as far as the syntax says so (an INTERVAL literal, a cast to INTERVAL, a sum,
/// difference or negation of those, or an earlier rewrite). Applied bottom-up by
/// `parsefix`, so `interval '1 day' * 2 * 3` is rewritten twice.
pub fn rewrite(e: &mut SqlExpr) {
    let SqlExpr::BinaryOp { left, op, right } = e else {
        return;
    };
    let (span, factor, name) = match op {
        BinaryOperator::Multiply if is_interval(left) && !is_interval(right) => {
            (left, right, "tierdb_interval_mul")
        }
        BinaryOperator::Multiply if is_interval(right) && !is_interval(left) => {
            (right, left, "tierdb_interval_mul")
        }
        BinaryOperator::Divide if is_interval(left) && !is_interval(right) => {
            (left, right, "tierdb_interval_div")
        }
        _ => return,
    };
    let factor = SqlExpr::Cast {
        kind: CastKind::DoubleColon,
        expr: Box::new(factor.as_ref().clone()),
        data_type: SqlType::DoublePrecision,
        array: false,
        format: None,
    };
    *e = crate::parsefix::call(name, vec![span.as_ref().clone(), factor]);
}

fn is_interval(e: &SqlExpr) -> bool {
    match e {
        SqlExpr::Interval(_) => true,
        SqlExpr::Cast { data_type, .. } => matches!(data_type, SqlType::Interval { .. }),
        SqlExpr::TypedString(t) => matches!(t.data_type, SqlType::Interval { .. }),
        SqlExpr::Nested(inner) | SqlExpr::UnaryOp { expr: inner, .. } => is_interval(inner),
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::Plus | BinaryOperator::Minus,
            right,
        } => is_interval(left) && is_interval(right),
        SqlExpr::Function(f) => {
            f.name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| {
                i.value == "tierdb_interval_mul" || i.value == "tierdb_interval_div"
            })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(months: i32, days: i32, secs: f64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, (secs * 1e9) as i64)
    }

    /// Each answer is PostgreSQL 15's (`SELECT interval '…' * x`).
    #[test]
    fn fractions_cascade_down_as_in_postgresql() {
        // 1 day * 1.5 = 1 day 12:00:00
        assert_eq!(
            scaled(iv(0, 1, 0.0), |x| x * 1.5).unwrap(),
            iv(0, 1, 43_200.0)
        );
        // 1 mon * 1.5 = 1 mon 15 days
        assert_eq!(scaled(iv(1, 0, 0.0), |x| x * 1.5).unwrap(), iv(1, 15, 0.0));
        // 1 hour * 2 = 02:00:00
        assert_eq!(
            scaled(iv(0, 0, 3600.0), |x| x * 2.0).unwrap(),
            iv(0, 0, 7200.0)
        );
        // 1 mon / 7 = 4 days 06:51:25.6896 (the day fraction rounded to the microsecond
        // first, as PostgreSQL rounds it)
        assert_eq!(
            scaled(iv(1, 0, 0.0), |x| x / 7.0).unwrap(),
            IntervalMonthDayNano::new(0, 4, 24_685_689_600_000)
        );
        // 1 mon 1 day 1 hour * 2.7 = 2 mons 23 days 19:30:00
        assert_eq!(
            scaled(iv(1, 1, 3600.0), |x| x * 2.7).unwrap(),
            iv(2, 23, 70_200.0)
        );
        // -1 day * 0.5 = -12:00:00
        assert_eq!(
            scaled(iv(0, -1, 0.0), |x| x * 0.5).unwrap(),
            iv(0, 0, -43_200.0)
        );
        // Out of range.
        assert!(scaled(iv(i32::MAX, 0, 0.0), |x| x * 2.0).is_err());
        assert!(scaled(iv(1, 0, 0.0), |x| x * f64::NAN).is_err());
    }
}
