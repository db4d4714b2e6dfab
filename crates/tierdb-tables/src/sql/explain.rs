//! `EXPLAIN UPDATE …` and `EXPLAIN DELETE …`. tierdb runs these statements itself
//! (`dml/`), not through DataFusion's DML planning, so their plan is the query that names
//! the rows they change: on a columnar table, a scan of its row-id view; on a row table, a
//! scan of its key view, or one key lookup on the short path (`rows/fastdml.rs`). The
//! first row says which; DataFusion explains the query as for any SELECT.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::DFSchema;
use datafusion::logical_expr::LogicalPlanBuilder;
use datafusion::sql::parser::Statement as DfStatement;

use super::SqlSession;
use super::session::{Outcome, Rows, Source};
use crate::error::{Result, TableError};

impl SqlSession {
    /// `stmt` explained, if it is EXPLAIN of an UPDATE or DELETE.
    pub(super) async fn explain_dml(&self, stmt: &DfStatement) -> Result<Option<Outcome>> {
        let DfStatement::Explain(explain) = stmt else {
            return Ok(None);
        };
        let inner = explain.statement.as_ref();
        if !crate::dml::is_update_or_delete(inner) {
            return Ok(None);
        }
        if explain.options.analyze {
            return Err(TableError::Unsupported(
                "EXPLAIN ANALYZE of UPDATE or DELETE is not supported (it would change the \
                 rows): use EXPLAIN without ANALYZE"
                    .into(),
            ));
        }
        let state = self.ctx.state();
        self.require_tables(&state, inner)?;
        let plan = crate::dml::plan(&state, &self.tables, inner).await?;
        let verb = crate::dml::verb(inner);
        let table = crate::dml::target_table(inner).unwrap_or_default();
        let schema = Arc::new(Schema::new(vec![
            Field::new("plan_type", DataType::Utf8, false),
            Field::new("plan", DataType::Utf8, false),
        ]));
        if crate::rows::fastdml::target(&plan).is_some() {
            // The short path has no physical plan: one KV read, then the new values.
            let text = format!(
                "{verb}: table={table} (row store: KV engine), short path: one row by its \
                 primary key\n{}",
                plan.display_indent()
            );
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec!["logical_plan"])),
                    Arc::new(StringArray::from(vec![text])),
                ],
            )?;
            return Ok(Some(Outcome::Rows(Rows {
                source: Source::Ready(Arc::new(DFSchema::try_from(schema)?), vec![batch]),
                abort: self.abort.clone(),
            })));
        }
        let store = match self.tables.table(&table).await? {
            Some(def) if def.is_row_table() => "row store: KV engine",
            _ => "columnar segments",
        };
        let explained = LogicalPlanBuilder::from(plan)
            .explain(explain.options.verbose, false)?
            .build()?;
        let df = self.exec_ctx().execute_logical_plan(explained).await?;
        let header = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["dml"])),
                Arc::new(StringArray::from(vec![format!(
                    "{verb}: table={table} ({store}), the rows the plans below name"
                )])),
            ],
        )?;
        let mut batches = vec![header];
        for b in df.collect().await? {
            batches.push(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?);
        }
        Ok(Some(Outcome::Rows(Rows {
            source: Source::Ready(Arc::new(DFSchema::try_from(schema)?), batches),
            abort: self.abort.clone(),
        })))
    }
}
