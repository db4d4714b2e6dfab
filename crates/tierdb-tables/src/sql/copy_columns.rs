//! `COPY t (a, c) FROM STDIN`: COPY with a column list (pgx's `CopyFrom` always sends one,
//! psql's `\copy t (a, c) from …`, pg_dump of a table with dropped columns).
//!
//! 1. The data's fields are the listed columns, in the listed order, read by the import
//!    path's parsers ([`crate::import`]) as columns of those types: the same text rules,
//!    rejects and errors as a COPY of every column.
//! 2. The rows are then inserted as `INSERT INTO t (a, c) SELECT … FROM <the data>` is
//!    (`insert_source.rs` rule 2): every column not listed takes its DEFAULT (a SERIAL's
//!    `nextval`) or NULL, and the table's constraints hold as for any INSERT. It runs in
//!    the session's transaction (or commits at once outside one), as an INSERT does.
//! 3. A column named twice is 42701, a column the table lacks 42703: PostgreSQL's codes,
//!    before any data is read.
//! 4. A row that does not parse fails the whole COPY with the reader's message (`import`),
//!    not the writer's, and nothing is written.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::TableReference;
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder};
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::Mutex;

use super::SqlSession;
use crate::error::{Result, TableError};
use crate::import::{ImportOptions, ImportProgress};

impl SqlSession {
    /// Copies `files` into the listed `columns` of `table` (a catalog name); returns the
    /// rows written.
    pub async fn import_columns(
        &self,
        table: &str,
        columns: &[String],
        files: &[PathBuf],
        options: &ImportOptions,
    ) -> Result<u64> {
        let def = self.tables.require(table).await?;
        // Rule 3.
        let mut listed = Vec::with_capacity(columns.len());
        for name in columns {
            let Some(c) = def.columns.iter().find(|c| &c.name == name) else {
                return Err(TableError::Column {
                    code: "42703",
                    message: format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                });
            };
            if listed
                .iter()
                .any(|l: &crate::catalog::ColumnDef| &l.name == name)
            {
                return Err(TableError::Column {
                    code: "42701",
                    message: format!("column \"{name}\" specified more than once"),
                });
            }
            listed.push(c.clone());
        }
        let mut data = def.clone();
        data.columns = listed;
        // Rule 1.
        let reading = crate::import::start_reading(
            &data,
            files,
            options,
            &Arc::new(ImportProgress::default()),
        )?;
        let source = Arc::new(OneScan {
            schema: data.schema(),
            input: Mutex::new(Some(reading.input.clone())),
        });
        let written = async {
            let state = self.ctx.state();
            let (schema, name) = super::split_qualified(table);
            let reference = TableReference::full(super::CATALOG, schema, name);
            let target = state
                .schema_for_ref(reference.clone())?
                .table(name)
                .await?
                .ok_or_else(|| TableError::Schema(format!("table {table} does not exist")))?;
            let scan =
                LogicalPlanBuilder::scan("copy_data", provider_as_source(source), None)?.build()?;
            // Rule 2.
            let plan = super::insert_source::onto_table(
                reference,
                provider_as_source(target),
                scan,
                columns,
            )?;
            let plan = crate::rows::sequence::bind_to_session(plan, &state)?;
            self.run_insert(plan).await
        }
        .await;
        // Rule 4: the reader's error first (it also ended the writer's input).
        reading.finish()?;
        written
    }
}

/// The data being read, as a table scanned once.
#[derive(Debug)]
struct OneScan {
    schema: SchemaRef,
    input: Mutex<Option<Arc<dyn ExecutionPlan>>>,
}

#[async_trait]
impl TableProvider for OneScan {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input =
            self.input.lock().take().ok_or_else(|| {
                DataFusionError::Internal("COPY's data can be read only once".into())
            })?;
        match projection {
            Some(p)
                if p.len() != self.schema.fields().len()
                    || p.iter().enumerate().any(|(i, &j)| i != j) =>
            {
                Err(DataFusionError::Internal(
                    "COPY's data is read whole, every listed column".into(),
                ))
            }
            _ => Ok(input),
        }
    }
}
