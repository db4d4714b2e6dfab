//! Integer arithmetic that fails on overflow, as in PostgreSQL.
//!
//! DataFusion computes `a + b`, `a - b` and `a * b` on integers with wrapping kernels and
//! sums BIGINTs into a BIGINT that wraps: `9223372036854775807 + 1` answers
//! `-9223372036854775808`, a silently wrong row (found by the differential tester against
//! PostgreSQL). PostgreSQL fails the statement with 22003 instead. [`CheckedArithmetic`]
//! (an analyzer rule after type coercion) gives tierdb the same semantics: `+`, `-`, `*`
//! whose operands are both of
//! one integer type become `tierdb_checked_add|sub|mul`, which run Arrow's checked kernels
//! (an overflow is `ArrowError::ArithmeticOverflow`, SQLSTATE 22003) and keep the
//! operator's column name and type (`a + b`), so nothing above them changes.
//!
//! [`SumAsNumeric`] replaces DataFusion's `sum`, which sums BIGINTs into a wrapping BIGINT,
//! with PostgreSQL's typing: `sum(bigint)` is NUMERIC (DECIMAL(38,0) here).
//!
//! The functions are registered on every session and on workers (a distributed plan names
//! them).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Datum};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::FieldRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, ReversedUDAF, SetMonotonicity,
};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::castinput::{CastGroupsInput, CastInput};

/// `tierdb_checked_add|sub|mul(a, b)`: integer `a op b`, an error on overflow.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedOp {
    op: Operator,
    signature: Signature,
}

impl CheckedOp {
    fn new(op: Operator) -> Self {
        CheckedOp {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

/// The three checked functions, to register on a session.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    [Operator::Plus, Operator::Minus, Operator::Multiply]
        .into_iter()
        .map(|op| Arc::new(ScalarUDF::new_from_impl(CheckedOp::new(op))))
        .collect()
}

fn checked_name(op: Operator) -> &'static str {
    match op {
        Operator::Plus => "tierdb_checked_add",
        Operator::Minus => "tierdb_checked_sub",
        _ => "tierdb_checked_mul",
    }
}

impl ScalarUDFImpl for CheckedOp {
    fn name(&self) -> &str {
        checked_name(self.op)
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Int64))
    }

    /// The operator's own column name, so replacing `a + b` renames nothing.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [a, b] => Ok(format!(
                "{} {} {}",
                a.schema_name(),
                self.op,
                b.schema_name()
            )),
            _ => Ok(self.name().to_string()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [l, r] = args.args.as_slice() else {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "{} takes two arguments",
                self.name()
            )));
        };
        let kernel = |a: &dyn Datum, b: &dyn Datum| -> Result<ArrayRef> {
            Ok(match self.op {
                Operator::Plus => numeric::add(a, b)?,
                Operator::Minus => numeric::sub(a, b)?,
                _ => numeric::mul(a, b)?,
            })
        };
        Ok(match (l, r) {
            (ColumnarValue::Array(a), ColumnarValue::Array(b)) => {
                ColumnarValue::Array(kernel(a, b)?)
            }
            (ColumnarValue::Array(a), ColumnarValue::Scalar(s)) => {
                ColumnarValue::Array(kernel(a, &s.to_scalar()?)?)
            }
            (ColumnarValue::Scalar(s), ColumnarValue::Array(b)) => {
                ColumnarValue::Array(kernel(&s.to_scalar()?, b)?)
            }
            (ColumnarValue::Scalar(x), ColumnarValue::Scalar(y)) => {
                let out = kernel(&x.to_scalar()?, &y.to_scalar()?)?;
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
        })
    }
}

/// The schema a node's expressions are typed against: its inputs' (a scan's own).
fn input_schema(plan: &LogicalPlan) -> DFSchema {
    match plan {
        LogicalPlan::TableScan(_) | LogicalPlan::Values(_) => plan.schema().as_ref().clone(),
        _ => merge_schema(&plan.inputs()),
    }
}

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

/// See the module doc.
#[derive(Debug)]
pub struct CheckedArithmetic {
    add: Arc<ScalarUDF>,
    sub: Arc<ScalarUDF>,
    mul: Arc<ScalarUDF>,
}

impl Default for CheckedArithmetic {
    fn default() -> Self {
        let f = |op| Arc::new(ScalarUDF::new_from_impl(CheckedOp::new(op)));
        CheckedArithmetic {
            add: f(Operator::Plus),
            sub: f(Operator::Minus),
            mul: f(Operator::Multiply),
        }
    }
}

impl AnalyzerRule for CheckedArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = input_schema(&node);
            node.map_expressions(|e| e.transform_up(|e| self.rewrite(e, &schema)))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tierdb_checked_arithmetic"
    }
}

impl CheckedArithmetic {
    fn rewrite(&self, e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
            return Ok(Transformed::no(e));
        };
        let udf = match op {
            Operator::Plus => &self.add,
            Operator::Minus => &self.sub,
            Operator::Multiply => &self.mul,
            _ => return Ok(Transformed::no(e)),
        };
        let (Ok(lt), Ok(rt)) = (left.get_type(schema), right.get_type(schema)) else {
            return Ok(Transformed::no(e));
        };
        if lt != rt || !is_integer(&lt) {
            return Ok(Transformed::no(e));
        }
        let args = vec![left.as_ref().clone(), right.as_ref().clone()];
        Ok(Transformed::yes(Expr::ScalarFunction(
            ScalarFunction::new_udf(udf.clone(), args),
        )))
    }
}

/// `sum` as PostgreSQL types it: over SMALLINT and INT the sum is BIGINT, over BIGINT it
/// is NUMERIC (here DECIMAL(38,0)), which does not wrap where a 64-bit sum would.
/// DataFusion's `sum` with two changes:
///
/// - `coerce_types`: a BIGINT argument is cast to DECIMAL(38,0) first (type coercion
///   inserts the cast), REAL to DOUBLE; SMALLINT and INT are left as they are;
/// - SMALLINT and INT rows are cast to BIGINT inside the accumulator ([`CastInput`]),
///   not by a cast in the plan: a plan analyzed twice (a query is, once to describe its
///   columns and once to run it) would take that BIGINT cast for a BIGINT column.
///
/// `coerce_types` is idempotent, so the types a client is told at Parse are the types the
/// rows have. Workers register it too (`distributed.rs`): DataFusion's own `sum` has no
/// accumulator for an uncast INT.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SumAsNumeric {
    inner: Arc<AggregateUDF>,
    signature: Signature,
}

impl SumAsNumeric {
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(SumAsNumeric {
            inner: datafusion::functions_aggregate::sum::sum_udaf(),
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }
}

/// The type `sum` is given a value of type `t` in, after type coercion (see
/// [`SumAsNumeric`]). `sum_input(sum_input(t)) == sum_input(t)`.
fn sum_input(t: &DataType) -> Result<DataType> {
    Ok(match t {
        DataType::Int64 => DataType::Decimal128(38, 0),
        DataType::Null => DataType::Int64,
        t @ (DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64) => t.clone(),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
        DataType::Dictionary(_, v) => return sum_input(v),
        t @ (DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..)
        | DataType::Duration(_)
        | DataType::Interval(_)) => t.clone(),
        other => {
            return Err(datafusion::error::DataFusionError::Plan(format!(
                "function sum({other}) does not exist: sum takes numbers and intervals"
            )));
        }
    })
}

/// The type DataFusion's `sum` accumulates a coerced input in: BIGINT for the narrow
/// integers it is not given cast (`None`: the input is that type already).
fn widened(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::Int32 => Some(DataType::Int64),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => Some(DataType::UInt64),
        _ => None,
    }
}

fn widened_fields(fields: &[FieldRef]) -> Vec<FieldRef> {
    fields
        .iter()
        .map(|f| match widened(f.data_type()) {
            Some(t) => Arc::new(f.as_ref().clone().with_data_type(t)),
            None => f.clone(),
        })
        .collect()
}

impl AggregateUDFImpl for SumAsNumeric {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let types: Vec<DataType> = arg_types
            .iter()
            .map(|t| widened(t).unwrap_or_else(|| t.clone()))
            .collect();
        self.inner.return_type(&types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(&widened_fields(arg_fields))
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let cast_to = args
            .expr_fields
            .first()
            .and_then(|f| widened(f.data_type()));
        let fields = widened_fields(args.expr_fields);
        let inner = self.inner.accumulator(AccumulatorArgs {
            expr_fields: &fields,
            ..args
        })?;
        Ok(match cast_to {
            Some(to) => Box::new(CastInput { inner, to }),
            None => inner,
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let cast_to = args
            .expr_fields
            .first()
            .and_then(|f| widened(f.data_type()));
        let fields = widened_fields(args.expr_fields);
        let inner = self.inner.create_groups_accumulator(AccumulatorArgs {
            expr_fields: &fields,
            ..args
        })?;
        Ok(match cast_to {
            Some(to) => Box::new(CastGroupsInput { inner, to }),
            None => inner,
        })
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let cast_to = args
            .expr_fields
            .first()
            .and_then(|f| widened(f.data_type()));
        let fields = widened_fields(args.expr_fields);
        let inner = self.inner.create_sliding_accumulator(AccumulatorArgs {
            expr_fields: &fields,
            ..args
        })?;
        Ok(match cast_to {
            Some(to) => Box::new(CastInput { inner, to }),
            None => inner,
        })
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_udf()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [t] => Ok(vec![sum_input(t)?]),
            _ => Err(datafusion::error::DataFusionError::Plan(
                "sum takes one argument".into(),
            )),
        }
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}

/// An optimizer rule that must not change a plan's column types, or it is not applied.
///
/// DataFusion's `single_distinct_aggregation_to_group_by` turns `sum(a), sum(DISTINCT b)`
/// into an inner aggregation grouped by `b` and an outer `sum` of the inner sums: over INT
/// the inner sums are BIGINT, and PostgreSQL's `sum` of a BIGINT is NUMERIC
/// ([`SumAsNumeric`]), so the rewritten plan's type differs and the optimizer refused the
/// whole query. Where the types would change, the aggregation stays as it was written.
#[derive(Debug)]
pub struct KeepTypes(pub Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>);

impl datafusion::optimizer::OptimizerRule for KeepTypes {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply_order(&self) -> Option<datafusion::optimizer::ApplyOrder> {
        self.0.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        // Only aggregations are rewritten by the rules wrapped; nothing to keep otherwise.
        if !matches!(plan, LogicalPlan::Aggregate(_)) {
            return self.0.rewrite(plan, config);
        }
        let before = plan.clone();
        let after = self.0.rewrite(plan, config)?;
        let types = |p: &LogicalPlan| -> Vec<DataType> {
            p.schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect()
        };
        if after.transformed && types(&after.data) != types(&before) {
            return Ok(Transformed::no(before));
        }
        Ok(after)
    }
}
