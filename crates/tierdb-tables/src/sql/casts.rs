//! A cast to text is text: `'{}'::jsonb::text`, `uuid_col::varchar` and `jb::text` were
//! reported to clients as jsonb and uuid. DataFusion carries a value's field metadata
//! through a cast whose target names only a type, and the declared type of UUID, JSON,
//! JSONB, VARCHAR(n) and CHAR(n) values travels in that metadata (`DECLARED_TYPE`), so
//! the cast's result kept it. Every user-written cast to a string type in a new plan gets
//! a target field of its own (marked [`CAST_MARK`]), which DataFusion uses as it is.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, LogicalPlan, TryCast};

/// The metadata key of a cast's own target field.
pub const CAST_MARK: &str = "tierdb.cast";

/// `plan` with its casts to text declaring no other type (module doc).
pub(crate) fn text_casts_are_text(plan: LogicalPlan) -> Result<LogicalPlan> {
    let out = plan.transform_up_with_subqueries(|node| {
        let inputs = input_schema(&node);
        let changed = node.map_expressions(|e| e.transform_up(|e| Ok(own_target(e, &inputs))))?;
        if changed.transformed {
            changed.map_data(|p| p.recompute_schema())
        } else {
            Ok(changed)
        }
    })?;
    Ok(out.data)
}

/// The schema `node`'s expressions read: its inputs' together (a join's two sides), or
/// its own for a node without inputs (a scan's filters).
fn input_schema(node: &LogicalPlan) -> Option<DFSchema> {
    let mut inputs = node.inputs().into_iter();
    let Some(first) = inputs.next() else {
        return Some(node.schema().as_ref().clone());
    };
    inputs.try_fold(first.schema().as_ref().clone(), |mut merged, next| {
        merged.merge(next.schema());
        Some(merged)
    })
}

/// A cast to text with a target field of its own. Its nullability is the value's (a
/// TRY_CAST's is always nullable), as DataFusion's logical plan says of any cast: the
/// physical plan takes an own target field's nullability as it is, and the two must
/// agree or DataFusion refuses the plan ("Physical input schema should be the same",
/// as a GROUP BY over `CAST(not_null_col AS VARCHAR)` was).
fn own_target(e: Expr, inputs: &Option<DFSchema>) -> Transformed<Expr> {
    let marked = |f: &Arc<Field>| f.metadata().contains_key(CAST_MARK);
    let text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8);
    let target = |f: &Arc<Field>, nullable: bool| {
        Arc::new(
            Field::new("", f.data_type().clone(), nullable)
                .with_metadata([(CAST_MARK.to_string(), String::new())].into()),
        )
    };
    let nullable = |value: &Expr| {
        inputs
            .as_ref()
            .and_then(|schema| value.nullable(schema).ok())
            .unwrap_or(true)
    };
    match e {
        Expr::Cast(Cast { expr, field }) if text(field.data_type()) && !marked(&field) => {
            let field = target(&field, nullable(&expr));
            Transformed::yes(Expr::Cast(Cast { expr, field }))
        }
        Expr::TryCast(TryCast { expr, field }) if text(field.data_type()) && !marked(&field) => {
            Transformed::yes(Expr::TryCast(TryCast {
                expr,
                field: target(&field, true),
            }))
        }
        other => Transformed::no(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn a_cast_to_text_drops_the_declared_type_and_nothing_else_changes() {
        let ctx = SessionContext::new();
        let declared = Field::new("j", DataType::Utf8, true).with_metadata(
            [(
                crate::catalog::DECLARED_TYPE.to_string(),
                "JSONB".to_string(),
            )]
            .into(),
        );
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![declared]));
        let batch = datafusion::arrow::array::RecordBatch::new_empty(schema);
        ctx.register_batch("t", batch).unwrap();
        let plan = ctx
            .table("t")
            .await
            .unwrap()
            .select(vec![
                col("j"),
                Expr::Cast(Cast::new(Box::new(col("j")), DataType::Utf8View)).alias("c"),
                (col("j").eq(lit("x"))).alias("b"),
            ])
            .unwrap()
            .into_unoptimized_plan();
        let before = plan.schema().field(1).metadata().clone();
        assert!(
            before.contains_key(crate::catalog::DECLARED_TYPE),
            "DataFusion carries it"
        );
        let after = text_casts_are_text(plan).unwrap();
        let s = after.schema();
        assert!(
            s.field(0)
                .metadata()
                .contains_key(crate::catalog::DECLARED_TYPE)
        );
        assert!(
            !s.field(1)
                .metadata()
                .contains_key(crate::catalog::DECLARED_TYPE)
        );
        assert_eq!(s.field(1).data_type(), &DataType::Utf8View);
        assert_eq!(s.field(2).data_type(), &DataType::Boolean);
    }
}
