//! Arithmetic typed as PostgreSQL types it where DataFusion's answer differs, by an
//! analyzer rule after type coercion ([`PgArithmetic`]).
//!
//! NUMERIC division. Arrow divides decimals with MySQL's rule: the quotient keeps the
//! dividend's scale plus 4, so `1.0 / 3` is `0.33333` and `7 / 2.0` is `3.5000`.
//! PostgreSQL gives a quotient at least 16 significant digits (`0.33333333333333333333`,
//! `3.5000000000000000`). Before tierdb read `1.0` as NUMERIC, such literals were DOUBLE
//! PRECISION and these quotients had 16 digits: rules 1 to 3 keep them.
//!
//! 1. The dividend of a division of two decimals is cast to `k` more places of scale, so
//!    the quotient's scale (dividend's + 4) is at least 16, PostgreSQL's
//!    `NUMERIC_MIN_SIG_DIGITS`.
//! 2. `k` never lets the division overflow where it would not have: Arrow multiplies the
//!    dividend by `10^(4 + divisor's scale)`, so `k` is at most what keeps the cast
//!    dividend's precision plus that within 38 digits (`p1 + k + 4 + s2 <= 38`,
//!    [`extra_scale`]; 76 for a Decimal256 dividend). A dividend of high precision (a `sum` of a NUMERIC(38,…)) keeps
//!    Arrow's scale.
//! 3. Applied twice, it changes nothing the second time (the cast dividend already has
//!    the scale), so a plan analyzed again (to describe, then to run) keeps its types.
//!
//! DATE plus or minus an INTERVAL.
//!
//! 4. In PostgreSQL `date + interval` and `date - interval` are timestamps; DataFusion
//!    keeps a date and drops the interval's time of day: `date '2024-01-01' + interval
//!    '1.5 hours'` was `2024-01-01`, a silently wrong value. Where the interval is not a
//!    literal of whole days and months, the date is cast to TIMESTAMP first. A literal of
//!    whole days and months (`+ interval '1' year`, TPC-H's) keeps the date: the same
//!    value PostgreSQL gives at midnight, typed DATE, so a date column's comparison with
//!    it is still pruned by the extent map; so does `date + integer` (a date in
//!    PostgreSQL). Applied twice, the cast date is a timestamp
//!    and is left alone.
//!
//! Casts to integers.
//!
//! 5. PostgreSQL rounds a NUMERIC cast to an integer half away from zero (`2.5::int` is
//!    3) and a REAL or DOUBLE PRECISION to the nearest even (`rint`: `2.5::float8::int`
//!    is 2, `3.5::float8::int` 4); Arrow truncates both (2, 2, 3). The casts DataFusion
//!    plans (written ones, and the ones an INSERT or UPDATE makes into an integer column)
//!    go through a NUMERIC of scale 0 first (Arrow rounds that one half away from zero)
//!    or through `tierdb_rint`. Applied twice, the inner value is already whole (scale 0,
//!    or `tierdb_rint`'s) and nothing changes.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use std::sync::Arc;

use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// PostgreSQL's fewest significant digits of a quotient (`NUMERIC_MIN_SIG_DIGITS`).
const MIN_SCALE: i8 = 16;

/// Rules 1 and 2: how many places of scale to add to a dividend of `max` digits at most
/// (38 for `Decimal128(p1, s1)`, 76 for Decimal256) over a divisor of scale `s2`.
fn extra_scale(max: u8, p1: u8, s1: i8, s2: i8) -> i8 {
    let wanted = MIN_SCALE - (s1.max(0) + 4);
    let room = i16::from(max) - (i16::from(p1) + 4 + i16::from(s2.max(0)));
    wanted.min(room.clamp(0, i16::from(max)) as i8).max(0)
}

#[derive(Debug)]
pub struct PgArithmetic {
    rint: Arc<ScalarUDF>,
}

impl Default for PgArithmetic {
    fn default() -> Self {
        PgArithmetic {
            rint: Arc::new(ScalarUDF::new_from_impl(Rint::default())),
        }
    }
}

/// `tierdb_rint`, to register on a session (plans name it).
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![Arc::new(ScalarUDF::new_from_impl(Rint::default()))]
}

/// `tierdb_rint(x)`: a REAL or DOUBLE PRECISION rounded to the nearest whole number, ties
/// to even (C's `rint`, which PostgreSQL's float-to-integer casts use).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Rint {
    signature: Signature,
}

impl Default for Rint {
    fn default() -> Self {
        Rint {
            signature: Signature::uniform(
                1,
                vec![DataType::Float32, DataType::Float64],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for Rint {
    fn name(&self) -> &str {
        "tierdb_rint"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::{Float32Type, Float64Type};
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let a = &arrays[0];
        let out: datafusion::arrow::array::ArrayRef = match a.data_type() {
            DataType::Float32 => Arc::new(
                a.as_primitive::<Float32Type>()
                    .unary::<_, Float32Type>(f32::round_ties_even),
            ),
            _ => Arc::new(
                a.as_primitive::<Float64Type>()
                    .unary::<_, Float64Type>(f64::round_ties_even),
            ),
        };
        Ok(if matches!(args.args[0], ColumnarValue::Scalar(_)) {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

impl AnalyzerRule for PgArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, |e, schema| {
            let t = widen(e, schema)?;
            if t.transformed {
                return Ok(t);
            }
            let t = date_interval(t.data, schema)?;
            if t.transformed {
                return Ok(t);
            }
            integer_cast(t.data, schema, &self.rint)
        })
    }

    fn name(&self) -> &str {
        "tierdb_pg_arithmetic"
    }
}

/// `plan` with `rewrite` applied bottom-up to every expression of every node (subqueries
/// included), given the schema the node's expressions read; output names are kept and
/// every node's schema recomputed (a parent's schema names its children's types). The
/// walk of the analyzer rules that retype expressions (this one, `textin`).
pub(crate) fn rewrite_expressions(
    plan: LogicalPlan,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let schema = match &node {
            LogicalPlan::TableScan(_) | LogicalPlan::Values(_) => node.schema().as_ref().clone(),
            _ => datafusion::logical_expr::utils::merge_schema(&node.inputs()),
        };
        let names = NamePreserver::new(&node);
        let t = node.map_expressions(|e| {
            let saved = names.save(&e);
            e.transform_up(|e| rewrite(e, &schema))
                .map(|t| t.update_data(|e| saved.restore(e)))
        })?;
        t.data
            .recompute_schema()
            .map(|p| Transformed::new_transformed(p, t.transformed))
    })
    .map(|t| t.data)
}

fn widen(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Divide,
        right,
    }) = &e
    else {
        return Ok(Transformed::no(e));
    };
    let (Ok(dividend), Ok(DataType::Decimal128(_, s2) | DataType::Decimal256(_, s2))) =
        (left.get_type(schema), right.get_type(schema))
    else {
        return Ok(Transformed::no(e));
    };
    let to = match dividend {
        DataType::Decimal128(p1, s1) => {
            let k = extra_scale(38, p1, s1, s2);
            DataType::Decimal128(p1 + k as u8, s1 + k)
        }
        DataType::Decimal256(p1, s1) => {
            let k = extra_scale(76, p1, s1, s2);
            DataType::Decimal256(p1 + k as u8, s1 + k)
        }
        _ => return Ok(Transformed::no(e)),
    };
    if to == dividend {
        return Ok(Transformed::no(e));
    }
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr {
        left: Box::new(Expr::Cast(Cast::new(left.clone(), to))),
        op: Operator::Divide,
        right: right.clone(),
    })))
}

/// Rule 4.
fn date_interval(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use datafusion::arrow::datatypes::TimeUnit;
    use datafusion::common::ScalarValue;
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    if !matches!(op, Operator::Plus | Operator::Minus) {
        return Ok(Transformed::no(e));
    }
    let (Ok(lt), Ok(rt)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(e));
    };
    let interval = |t: &DataType| matches!(t, DataType::Interval(_));
    let (date, other) = match (&lt, &rt) {
        (DataType::Date32 | DataType::Date64, t) if interval(t) => (left, right),
        (t, DataType::Date32 | DataType::Date64) if interval(t) && *op == Operator::Plus => {
            (right, left)
        }
        _ => return Ok(Transformed::no(e)),
    };
    let whole_days = match other.as_ref() {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) => v.nanoseconds == 0,
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => v.milliseconds == 0,
        Expr::Literal(ScalarValue::IntervalYearMonth(Some(_)), _) => true,
        // `date + integer`, which type coercion makes `date + CAST(CAST(n * 86400 AS
        // Duration) AS Interval)`: a date in PostgreSQL too.
        Expr::Cast(c) => {
            matches!(c.expr.as_ref(), Expr::Cast(d) if matches!(d.field.data_type(), DataType::Duration(_)))
        }
        _ => false,
    };
    if whole_days {
        return Ok(Transformed::no(e));
    }
    let ts = Expr::Cast(Cast::new(
        date.clone(),
        DataType::Timestamp(TimeUnit::Microsecond, None),
    ));
    let (left, right) = if std::ptr::eq(date, left) {
        (Box::new(ts), right.clone())
    } else {
        (left.clone(), Box::new(ts))
    };
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr {
        left,
        op: *op,
        right,
    })))
}

/// Rule 5.
fn integer_cast(e: Expr, schema: &DFSchema, rint: &Arc<ScalarUDF>) -> Result<Transformed<Expr>> {
    let (inner, to) = match &e {
        Expr::Cast(c) => (&c.expr, c.field.data_type().clone()),
        Expr::TryCast(c) => (&c.expr, c.field.data_type().clone()),
        _ => return Ok(Transformed::no(e)),
    };
    if !matches!(
        to,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    ) {
        return Ok(Transformed::no(e));
    }
    let whole = match inner.get_type(schema) {
        Ok(DataType::Decimal128(p, s)) if s > 0 => {
            let digits = (i16::from(p) - i16::from(s) + 1).clamp(1, 38) as u8;
            Expr::Cast(Cast::new(inner.clone(), DataType::Decimal128(digits, 0)))
        }
        Ok(DataType::Decimal256(p, s)) if s > 0 => {
            let digits = (i16::from(p) - i16::from(s) + 1).clamp(1, 76) as u8;
            Expr::Cast(Cast::new(inner.clone(), DataType::Decimal256(digits, 0)))
        }
        Ok(DataType::Float32 | DataType::Float64) => match inner.as_ref() {
            Expr::ScalarFunction(f) if f.func.name() == rint.name() => {
                return Ok(Transformed::no(e));
            }
            _ => Expr::ScalarFunction(ScalarFunction::new_udf(
                rint.clone(),
                vec![inner.as_ref().clone()],
            )),
        },
        _ => return Ok(Transformed::no(e)),
    };
    Ok(Transformed::yes(match e {
        Expr::TryCast(c) => Expr::TryCast(datafusion::logical_expr::TryCast::new(
            Box::new(whole),
            c.field.data_type().clone(),
        )),
        _ => Expr::Cast(Cast::new(Box::new(whole), to)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotients_get_sixteen_places_where_they_fit() {
        // 1.0 / 3: NUMERIC(2,1) by NUMERIC(10,0) (an INT coerced): 11 more, scale 16.
        assert_eq!(extra_scale(38, 2, 1, 0), 11);
        // 7 / 2.0: BIGINT as NUMERIC(20,0) by NUMERIC(2,1): 12 more.
        assert_eq!(extra_scale(38, 20, 0, 1), 12);
        // Already 16 places or more: none.
        assert_eq!(extra_scale(38, 30, 12, 0), 0);
        assert_eq!(extra_scale(38, 20, 14, 2), 0);
        // A dividend of 38 digits: Arrow's scale, no new overflow.
        assert_eq!(extra_scale(38, 38, 2, 2), 0);
        // Room for some of the places only.
        assert_eq!(extra_scale(38, 30, 2, 0), 4);
        // Applied again after the cast, nothing more (rule 3).
        assert_eq!(extra_scale(38, 2 + 11, 1 + 11, 0), 0);
        assert_eq!(extra_scale(38, 30 + 4, 2 + 4, 0), 0);
        // A Decimal256 dividend (NUMERIC(50,0)) has room up to 76 digits.
        assert_eq!(extra_scale(76, 50, 0, 0), 12);
        assert_eq!(extra_scale(76, 76, 20, 20), 0);
    }
}
