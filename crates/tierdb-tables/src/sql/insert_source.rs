//! INSERT … SELECT over a VALUES list in a subquery, planned around DataFusion 55's SQL
//! planner, which types *every* VALUES list of an INSERT's source by the table's columns
//! (it means the top-level `INSERT … VALUES`), so
//! `INSERT INTO t (name) SELECT p0 FROM (VALUES ('a', 0)) AS v(p0, n) ORDER BY n` fails
//! with "Inconsistent data length across values list". SQLAlchemy 2 sends exactly this
//! for every ORM flush of several rows whose keys it learns by RETURNING
//! ("insertmanyvalues" with a sort sentinel), so ORMs could not add objects.
//!
//! 1. Only an INSERT (append, no ON CONFLICT) whose source is a query but not itself a
//!    VALUES list, and which has a VALUES list inside, is planned here; DataFusion plans
//!    every other INSERT as before.
//! 2. The source is planned as the query it is (its VALUES lists typed by their own
//!    rows), then projected onto the table as DataFusion projects any INSERT's source:
//!    each named column cast from the source column in its position, every other column
//!    its default (a SERIAL's `nextval`) or NULL, cast to the column's type.
//! 3. An INSERT without a column list whose source has fewer columns than the table names
//!    the first ones, as PostgreSQL reads it: `INSERT INTO t VALUES (1)` into `t (a, b)`
//!    sets `a` and gives `b` its default ([`name_leading_columns`]), for every INSERT,
//!    also the ones DataFusion plans.
//! 4. The column count must match, as PostgreSQL says: more source columns than target
//!    columns is 42601 "INSERT has more expressions than target columns", fewer
//!    "INSERT has more target columns than expressions".

use std::sync::Arc;

use datafusion::common::{Column, DFSchema, DataFusionError, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::execution::SessionState;
use datafusion::logical_expr::dml::{DmlStatement, InsertOp, WriteOp};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::planner::object_name_to_table_reference;
use datafusion::sql::sqlparser::ast::{
    Ident, Insert, ObjectName, SelectItem, SetExpr, Statement, TableObject,
};

type Result<T> = datafusion::common::Result<T>;

/// Rule 1: the statements planned here.
fn planned_here(stmt: &DfStatement) -> Option<&Insert> {
    let DfStatement::Statement(s) = stmt else {
        return None;
    };
    let Statement::Insert(insert) = s.as_ref() else {
        return None;
    };
    let source = insert.source.as_ref()?;
    let plain = !insert.overwrite
        && !insert.replace_into
        && insert.on.is_none()
        && insert.partitioned.is_none()
        && insert.returning.is_none()
        && matches!(insert.table, TableObject::TableName(_));
    // Display writes the keyword in capitals; a string literal holding it only sends the
    // statement down this path, which plans it alike.
    (plain && !matches!(*source.body, SetExpr::Values(_)) && source.to_string().contains("VALUES"))
        .then_some(insert)
}

/// Rule 2: the plan of `stmt` if it is planned here; `None` for DataFusion to plan.
pub(crate) async fn plan(state: &SessionState, stmt: &DfStatement) -> Result<Option<LogicalPlan>> {
    let Some(insert) = planned_here(stmt) else {
        return Ok(None);
    };
    let (TableObject::TableName(name), Some(source)) = (&insert.table, &insert.source) else {
        return Ok(None);
    };
    let normalize = state.config_options().sql_parser.enable_ident_normalization;
    let table = object_name_to_table_reference(name.clone(), normalize)?;
    let provider = state
        .schema_for_ref(table.clone())?
        .table(table.table())
        .await?
        .ok_or_else(|| DataFusionError::Plan(format!("table '{table}' not found")))?;
    let target = provider_as_source(provider);
    let query = DfStatement::Statement(Box::new(Statement::Query(source.clone())));
    let source = state.statement_to_plan(query).await?;
    let columns: Vec<String> = insert.columns.iter().map(super::ident_name_of).collect();
    onto_table(table, target, source, &columns).map(Some)
}

/// Rule 2: `INSERT INTO table (columns) <source>`: each named column cast from the source
/// column in its position (all the table's columns in order if `columns` is empty), every
/// other column its default or NULL. Also COPY's column list (`copy_columns.rs`).
pub(super) fn onto_table(
    table: datafusion::common::TableReference,
    target: Arc<dyn datafusion::logical_expr::TableSource>,
    source: LogicalPlan,
    columns: &[String],
) -> Result<LogicalPlan> {
    let table_schema = DFSchema::try_from(target.schema())?;
    // Where each table column's value comes from: the source column at that position of
    // the column list (all columns in order if there is none), else its default.
    let width = table_schema.fields().len();
    let mut from = vec![None; width];
    if columns.is_empty() {
        from = (0..width).map(Some).collect();
    } else {
        for (i, c) in columns.iter().enumerate() {
            let c = c.clone();
            let at = table_schema
                .index_of_column_by_name(None, &c)
                .ok_or_else(|| {
                    DataFusionError::SchemaError(
                        Box::new(datafusion::common::SchemaError::FieldNotFound {
                            field: Box::new(Column::new_unqualified(c.clone())),
                            valid_fields: Vec::new(),
                        }),
                        Box::new(None),
                    )
                })?;
            if from[at].replace(i).is_some() {
                return Err(DataFusionError::Plan(format!(
                    "column \"{c}\" specified more than once"
                )));
            }
        }
    }
    let named = from.iter().flatten().count();
    let given = source.schema().fields().len();
    if given != named {
        // Rule 3.
        return Err(DataFusionError::Plan(
            if given > named {
                "INSERT has more expressions than target columns"
            } else {
                "INSERT has more target columns than expressions"
            }
            .into(),
        ));
    }
    let mut exprs = Vec::with_capacity(width);
    for (i, at) in from.into_iter().enumerate() {
        let field = table_schema.field(i);
        let expr = match at {
            Some(k) => Expr::Column(Column::from(source.schema().qualified_field(k)))
                .cast_to(field.data_type(), source.schema())?,
            None => target
                .get_column_default(field.name())
                .cloned()
                .unwrap_or(Expr::Literal(ScalarValue::Null, None))
                .cast_to(field.data_type(), &DFSchema::empty())?,
        };
        exprs.push(expr.alias(field.name()));
    }
    let input = LogicalPlanBuilder::from(source).project(exprs)?.build()?;
    Ok(LogicalPlan::Dml(DmlStatement::new(
        table,
        target,
        WriteOp::Insert(InsertOp::Append),
        Arc::new(input),
    )))
}

/// Rule 3: gives an INSERT without a column list, whose source (a VALUES list, or a SELECT
/// without `*`) has fewer columns than the table, the list of the table's first columns.
pub(crate) async fn name_leading_columns(
    state: &SessionState,
    stmt: &mut DfStatement,
) -> Result<()> {
    let DfStatement::Statement(s) = stmt else {
        return Ok(());
    };
    let Statement::Insert(insert) = s.as_mut() else {
        return Ok(());
    };
    let (TableObject::TableName(name), Some(source)) = (&insert.table, &insert.source) else {
        return Ok(());
    };
    if !insert.columns.is_empty() {
        return Ok(());
    }
    let width = match source.body.as_ref() {
        SetExpr::Values(v) => v.rows.iter().map(|r| r.content.len()).max(),
        SetExpr::Select(sel)
            if !sel.projection.iter().any(|i| {
                matches!(
                    i,
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
                )
            }) =>
        {
            Some(sel.projection.len())
        }
        _ => None,
    };
    let Some(width) = width else {
        return Ok(());
    };
    let normalize = state.config_options().sql_parser.enable_ident_normalization;
    let table = object_name_to_table_reference(name.clone(), normalize)?;
    let Ok(schema) = state.schema_for_ref(table.clone()) else {
        return Ok(()); // the planner names what is missing
    };
    let Some(provider) = schema.table(table.table()).await? else {
        return Ok(());
    };
    let fields = provider.schema().fields().clone();
    if width == 0 || width >= fields.len() {
        return Ok(());
    }
    insert.columns = fields
        .iter()
        .take(width)
        .map(|f| ObjectName::from(vec![Ident::with_quote('"', f.name())]))
        .collect();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> DfStatement {
        crate::sql::parse(sql).unwrap().remove(0)
    }

    #[test]
    fn only_an_insert_of_a_query_over_values_is_planned_here() {
        for sql in [
            "INSERT INTO t (a) SELECT p0 FROM (VALUES (1, 0), (2, 1)) AS v(p0, n) ORDER BY n",
            "INSERT INTO t SELECT * FROM (VALUES (1)) v",
        ] {
            assert!(planned_here(&parsed(sql)).is_some(), "{sql}");
        }
        for sql in [
            "INSERT INTO t VALUES (1, 2)",
            "INSERT INTO t (a) VALUES (1)",
            "INSERT INTO t SELECT a FROM u",
            "SELECT * FROM (VALUES (1)) v",
        ] {
            assert!(planned_here(&parsed(sql)).is_none(), "{sql}");
        }
    }
}
