//! Text read into dates, times, timestamps and NUMERIC as PostgreSQL reads it, by an
//! analyzer rule after type coercion ([`PgTextInput`]).
//!
//! Arrow's casts from text read other forms and other zones: `'2024-05-17 10:00'` (no
//! seconds) failed to parse; text without an offset cast to a TIMESTAMPTZ column was read
//! in UTC whatever the session's TimeZone, so an INSERT of `'2024-01-01 10:00:00'` in
//! America/New_York stored 05:00 local time, a silently wrong value; an offset written
//! into a TIMESTAMP (without time zone) was applied where PostgreSQL ignores it; and
//! `'1e5'::numeric` failed.
//!
//! 1. Every cast from a string type to TIMESTAMP, TIMESTAMPTZ, DATE, TIME, NUMERIC,
//!    INTERVAL ([`interval`]; text it does not read goes to Arrow's parser) or BYTEA
//!    (`textvalue::bytea_in`: `'\x00ff'` is two bytes, not six; Arrow took the text's
//!    bytes) in a
//!    plan, written (`'…'::timestamptz`, `CAST(x AS DATE)`) or made by type coercion (an
//!    INSERT's text into a column, `ts_col > '2024-05-17 10:00'`), becomes a call of a
//!    `tierdb_*_in` function reading PostgreSQL's forms ([`parse`]), cast on to the planned
//!    type where it differs (a unit, a zone name: the same instant).
//! 2. TIMESTAMPTZ: text without a zone is wall-clock time in the session's TimeZone at
//!    planning (a plan kept across executions is dropped when a setting changes,
//!    `plancache.rs` invariant 3); a written offset or zone name wins.
//! 3. TIMESTAMP: a written zone is ignored, as PostgreSQL ignores it.
//! 4. NUMERIC: the text is rewritten as plain decimal text rounded half away from zero to
//!    the target's scale (exponents expanded), which Arrow's cast then reads exactly.
//! 5. Applied twice, nothing changes: a cast's input is then a `tierdb_*_in` call, not
//!    text (for NUMERIC the call is recognised by name).
//! 6. Constant text is read once, by the optimizer's constant folding (the functions are
//!    immutable given their arguments), so a comparison with a literal still prunes.
//! 7. The other way: a TIMESTAMP, TIMESTAMPTZ or TIME cast to a string type (`ts::text`,
//!    `'at ' || ts`, `concat(tz, …)`: the casts coercion plans) is written as PostgreSQL
//!    writes it ([`out`]): a space, not `T`; a TIMESTAMPTZ in the session's TimeZone with
//!    its offset (`-05`), not UTC with `Z`; no trailing zeros in a fraction. The cast's
//!    own target field is kept (`sql/casts.rs`).
//! 8. `x AT TIME ZONE z` (rewritten by `parsefix.rs` rule 10) and `timezone(z, x)` are
//!    PostgreSQL's conversion between TIMESTAMPTZ and wall-clock TIMESTAMP ([`atzone`]).

pub mod atzone;
pub mod interval;
pub mod out;
pub mod parse;

use std::sync::Arc;

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, IntervalMonthDayNanoArray, StringArray,
    Time64MicrosecondArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::catalog::UTC;

/// The type a function reads text into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Timestamp,
    TimestampTz,
    Date,
    Time,
    Numeric,
    Interval,
    Bytea,
}

impl Kind {
    const ALL: [Kind; 7] = [
        Kind::Timestamp,
        Kind::TimestampTz,
        Kind::Date,
        Kind::Time,
        Kind::Numeric,
        Kind::Interval,
        Kind::Bytea,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Timestamp => "tierdb_timestamp_in",
            Kind::TimestampTz => "tierdb_timestamptz_in",
            Kind::Date => "tierdb_date_in",
            Kind::Time => "tierdb_time_in",
            Kind::Numeric => "tierdb_numeric_in",
            Kind::Interval => "tierdb_interval_in",
            Kind::Bytea => "tierdb_bytea_in",
        }
    }

    fn output(self) -> DataType {
        match self {
            Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Kind::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            Kind::Date => DataType::Date32,
            Kind::Time => DataType::Time64(TimeUnit::Microsecond),
            Kind::Numeric => DataType::Utf8,
            Kind::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            Kind::Bytea => DataType::Binary,
        }
    }

    /// The function reading text for a cast to `to`, if rule 1 applies to it.
    fn for_target(to: &DataType) -> Option<Kind> {
        Some(match to {
            DataType::Timestamp(_, None) => Kind::Timestamp,
            DataType::Timestamp(_, Some(_)) => Kind::TimestampTz,
            DataType::Date32 => Kind::Date,
            DataType::Time64(_) => Kind::Time,
            DataType::Decimal128(..) | DataType::Decimal256(..) => Kind::Numeric,
            DataType::Interval(_) => Kind::Interval,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Kind::Bytea,
            _ => return None,
        })
    }
}

/// `tierdb_timestamp_in(text)`, `tierdb_timestamptz_in(text, zone)`, `tierdb_date_in(text)`,
/// `tierdb_time_in(text)`, `tierdb_numeric_in(text, scale)`: to register on a session
/// (plans name them).
pub fn functions() -> Vec<ScalarUDF> {
    Kind::ALL
        .into_iter()
        .map(|kind| ScalarUDF::new_from_impl(TextIn::new(kind)))
        .chain([
            ScalarUDF::new_from_impl(out::DatetimeOut::default()),
            ScalarUDF::new_from_impl(atzone::AtTimeZone::default()),
        ])
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TextIn {
    kind: Kind,
    signature: Signature,
}

impl TextIn {
    fn new(kind: Kind) -> Self {
        let text = [DataType::Utf8, DataType::LargeUtf8, DataType::Utf8View];
        let signature = match kind {
            Kind::TimestampTz => TypeSignature::OneOf(
                text.iter()
                    .map(|t| TypeSignature::Exact(vec![t.clone(), DataType::Utf8]))
                    .collect(),
            ),
            Kind::Numeric => TypeSignature::OneOf(
                text.iter()
                    .map(|t| TypeSignature::Exact(vec![t.clone(), DataType::Int64]))
                    .collect(),
            ),
            _ => TypeSignature::Uniform(1, text.to_vec()),
        };
        TextIn {
            kind,
            signature: Signature::new(signature, Volatility::Immutable),
        }
    }
}

fn scalar_text(v: &ColumnarValue) -> Option<String> {
    match v {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
        ) => s.clone(),
        _ => None,
    }
}

impl ScalarUDFImpl for TextIn {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.kind.output())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let input = args.args[0].to_array(args.number_rows.max(1))?;
        let input = datafusion::arrow::compute::cast(&input, &DataType::Utf8)?;
        let texts = input.as_string::<i32>();
        let failed = |e: crate::error::TableError| datafusion::error::DataFusionError::from(e);
        let out: ArrayRef = match self.kind {
            Kind::Timestamp => {
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(match t {
                        None => None,
                        Some(t) => {
                            let w = parse::timestamp(t, parse::TIMESTAMP).map_err(failed)?;
                            Some(w.local.and_utc().timestamp_micros())
                        }
                    });
                }
                Arc::new(TimestampMicrosecondArray::from(v))
            }
            Kind::TimestampTz => {
                let zone = args.args.get(1).and_then(scalar_text);
                let zone: Tz = zone
                    .as_deref()
                    .unwrap_or(UTC)
                    .parse()
                    .map_err(datafusion::error::DataFusionError::from)?;
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(match t {
                        None => None,
                        Some(t) => {
                            let w = parse::timestamp(t, parse::TIMESTAMPTZ).map_err(failed)?;
                            Some(parse::instant_micros(&w, &zone))
                        }
                    });
                }
                Arc::new(TimestampMicrosecondArray::from(v).with_timezone(UTC))
            }
            Kind::Date => {
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(t.map(parse::date).transpose().map_err(failed)?);
                }
                Arc::new(Date32Array::from(v))
            }
            Kind::Time => {
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(t.map(parse::time).transpose().map_err(failed)?);
                }
                Arc::new(Time64MicrosecondArray::from(v))
            }
            Kind::Interval => {
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(t.map(interval_value).transpose().map_err(failed)?);
                }
                Arc::new(IntervalMonthDayNanoArray::from(v))
            }
            Kind::Bytea => {
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(
                        t.map(|t| {
                            crate::textvalue::bytea_in(t).map_err(|message| {
                                crate::error::TableError::Column {
                                    code: crate::textvalue::bytea_error_code(&message),
                                    message,
                                }
                            })
                        })
                        .transpose()
                        .map_err(failed)?,
                    );
                }
                Arc::new(datafusion::arrow::array::BinaryArray::from_iter(v))
            }
            Kind::Numeric => {
                let scale = match args.args.get(1) {
                    Some(ColumnarValue::Scalar(ScalarValue::Int64(Some(s)))) => {
                        i8::try_from(*s).unwrap_or(0)
                    }
                    _ => 0,
                };
                let mut v = Vec::with_capacity(texts.len());
                for t in texts.iter() {
                    v.push(
                        t.map(|t| parse::numeric(t, scale))
                            .transpose()
                            .map_err(failed)?,
                    );
                }
                Arc::new(StringArray::from(v))
            }
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// An INTERVAL from its text: PostgreSQL's forms ([`interval`]), else Arrow's parser's
/// (which reads a few PostgreSQL does not, as it did before), else PostgreSQL's error.
fn interval_value(
    text: &str,
) -> std::result::Result<IntervalMonthDayNano, crate::error::TableError> {
    match interval::interval(text) {
        Ok((months, days, micros)) => Ok(IntervalMonthDayNano::new(
            months,
            days,
            micros.saturating_mul(1000),
        )),
        Err(e) => {
            datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(text)
                .map_err(|_| e)
        }
    }
}

/// The analyzer rule (module doc).
#[derive(Debug)]
pub struct PgTextInput {
    udfs: Vec<(Kind, Arc<ScalarUDF>)>,
    out: Arc<ScalarUDF>,
}

impl Default for PgTextInput {
    fn default() -> Self {
        PgTextInput {
            udfs: Kind::ALL
                .into_iter()
                .map(|k| (k, Arc::new(ScalarUDF::new_from_impl(TextIn::new(k)))))
                .collect(),
            out: Arc::new(ScalarUDF::new_from_impl(out::DatetimeOut::default())),
        }
    }
}

impl PgTextInput {
    fn udf(&self, kind: Kind) -> Arc<ScalarUDF> {
        self.udfs
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| Arc::new(ScalarUDF::new_from_impl(TextIn::new(kind))))
    }

    /// Rule 1 on one expression.
    fn rewrite(&self, e: Expr, schema: &DFSchema, zone: &str) -> Result<Transformed<Expr>> {
        let Expr::Cast(c) = &e else {
            return Ok(Transformed::no(e));
        };
        let to = c.field.data_type();
        if matches!(
            to,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            // Rule 7.
            return Ok(match c.expr.get_type(schema) {
                Ok(from) if out::written_by_us(&from) => {
                    let zone = Expr::Literal(ScalarValue::Utf8(Some(zone.into())), None);
                    let call = Expr::ScalarFunction(ScalarFunction::new_udf(
                        self.out.clone(),
                        vec![c.expr.as_ref().clone(), zone],
                    ));
                    Transformed::yes(Expr::Cast(Cast {
                        expr: Box::new(call),
                        field: c.field.clone(),
                    }))
                }
                _ => Transformed::no(e),
            });
        }
        let Some(kind) = Kind::for_target(to) else {
            return Ok(Transformed::no(e));
        };
        if !matches!(
            c.expr.get_type(schema),
            Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        ) {
            return Ok(Transformed::no(e));
        }
        // Rule 5: NUMERIC's function answers text.
        if let Expr::ScalarFunction(f) = c.expr.as_ref()
            && f.func.name() == Kind::Numeric.name()
        {
            return Ok(Transformed::no(e));
        }
        let mut args = vec![c.expr.as_ref().clone()];
        match (kind, to) {
            (Kind::TimestampTz, _) => {
                args.push(Expr::Literal(ScalarValue::Utf8(Some(zone.into())), None))
            }
            (Kind::Numeric, DataType::Decimal128(_, s) | DataType::Decimal256(_, s)) => {
                args.push(Expr::Literal(ScalarValue::Int64(Some(i64::from(*s))), None))
            }
            _ => {}
        }
        let call = Expr::ScalarFunction(ScalarFunction::new_udf(self.udf(kind), args));
        Ok(Transformed::yes(if kind.output() == *to {
            call
        } else {
            Expr::Cast(Cast::new(Box::new(call), to.clone()))
        }))
    }
}

impl AnalyzerRule for PgTextInput {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let zone = config
            .execution
            .time_zone
            .as_deref()
            .unwrap_or(UTC)
            .to_string();
        crate::pgarith::rewrite_expressions(plan, |e, schema| self.rewrite(e, schema, &zone))
    }

    fn name(&self) -> &str {
        "tierdb_pg_text_input"
    }
}
