//! Accumulators that cast their input before an inner accumulator sees it: `sum` over
//! SMALLINT and INT sums in BIGINT (PostgreSQL's type) without type coercion inserting a
//! cast to BIGINT into the plan. Such a cast made the plan's type ambiguous: analyzed a
//! second time, the cast BIGINT looked like a BIGINT column, whose sum is NUMERIC, and
//! `sum(int_col)` came out NUMERIC (or failed: "expected Decimal128(38, 0) but found
//! Int64" inside scalar subqueries). See `checked::SumAsNumeric`.

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{Accumulator, EmitTo, GroupsAccumulator};

fn cast_all(values: &[ArrayRef], to: &DataType) -> Result<Vec<ArrayRef>> {
    Ok(values
        .iter()
        .map(|v| cast(v, to))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// An [`Accumulator`] whose input rows are cast to `to` first.
#[derive(Debug)]
pub struct CastInput {
    pub inner: Box<dyn Accumulator>,
    pub to: DataType,
}

impl Accumulator for CastInput {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(&cast_all(values, &self.to)?)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.inner.evaluate()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    /// States are the inner accumulator's own (already in `to`).
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(&cast_all(values, &self.to)?)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// A [`GroupsAccumulator`] whose input rows are cast to `to` first.
pub struct CastGroupsInput {
    pub inner: Box<dyn GroupsAccumulator>,
    pub to: DataType,
}

impl std::fmt::Debug for CastGroupsInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CastGroupsInput")
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

impl GroupsAccumulator for CastGroupsInput {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner.update_batch(
            &cast_all(values, &self.to)?,
            group_indices,
            opt_filter,
            total_num_groups,
        )
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.inner.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner
            .convert_to_state(&cast_all(values, &self.to)?, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}
