//! Rule 8 of `pgcatalog.rs`: `pg_class`, `pg_index`, `pg_constraint` and `pg_attrdef` with
//! the keys, indexes and defaults of tierdb's tables (`keys.rs`), `pg_class` and
//! `pg_sequence` with its sequences (`sequences.rs`), `pg_depend` with what depends on
//! what among them and views, and `pg_description` with the tables' comments
//! (`comments.rs`), as tables whose rows are built when a query scans them, not when it
//! names them.
//!
//! Why lazily: the rows need each table's `pg_class` oid, so building them scans
//! datafusion-pg-catalog's `pg_class`; that scan asks every catalog table for its schema,
//! these among them. Built when named, each would scan `pg_class` again, without end.
//! Asked only for its schema, a [`KeyedTable`] answers at once.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use tierdb_tables::tables::Tables;

use crate::keys::{self, Keys, Relations};

/// The catalog tables of rule 8.
pub(crate) const KEYED_TABLES: [&str; 7] = [
    "pg_class",
    "pg_index",
    "pg_constraint",
    "pg_attrdef",
    "pg_sequence",
    "pg_depend",
    "pg_description",
];

/// One of [`KEYED_TABLES`].
#[derive(Debug)]
pub(crate) struct KeyedTable {
    name: &'static str,
    schema: SchemaRef,
    table_type: TableType,
    /// datafusion-pg-catalog's `pg_catalog`.
    inner: Arc<dyn SchemaProvider>,
    tables: Arc<Tables>,
}

impl KeyedTable {
    /// `name` (one of [`KEYED_TABLES`]); `None` if datafusion-pg-catalog lacks it.
    pub(crate) async fn new(
        name: &str,
        inner: Arc<dyn SchemaProvider>,
        tables: Arc<Tables>,
    ) -> Result<Option<Self>> {
        let Some(name) = KEYED_TABLES.iter().copied().find(|t| *t == name) else {
            return Ok(None);
        };
        let Some(table) = inner.table(name).await? else {
            return Ok(None);
        };
        let (schema, table_type) = match name {
            // pg_class is patched (rule 2): a view with the patch's columns.
            "pg_class" => (
                crate::pgcatalog::patched(name, table)?.schema(),
                TableType::View,
            ),
            "pg_constraint" => (keys::constraint_schema(&table.schema()), table.table_type()),
            "pg_index" => (keys::index_schema(&table.schema()), table.table_type()),
            _ => (table.schema(), table.table_type()),
        };
        Ok(Some(Self {
            name,
            schema,
            table_type,
            inner,
            tables,
        }))
    }

    /// The table with its rows.
    async fn build(&self) -> Result<Arc<dyn TableProvider>> {
        let defs = self
            .tables
            .tables()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let keys = Keys::of(&defs);
        let sequences = self
            .tables
            .sequences()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let sequences = crate::sequences::entries(&sequences, &defs);
        let missing = || DataFusionError::Plan(format!("pg_catalog.{} is missing", self.name));
        let table = self.inner.table(self.name).await?.ok_or_else(missing)?;
        let namespace = || async { self.inner.table("pg_namespace").await?.ok_or_else(missing) };
        let described = self.name == "pg_description";
        let relations = match keys == Keys::default() && !described {
            true => Relations::new(),
            false => {
                let class = self.inner.table("pg_class").await?.ok_or_else(missing)?;
                keys::stored_relations(class, namespace().await?).await?
            }
        };
        let schema = table.schema();
        Ok(match self.name {
            "pg_class" => {
                let namespaces = match sequences.is_empty() {
                    true => Default::default(),
                    false => keys::namespaces(namespace().await?).await?,
                };
                crate::pgcatalog::patched(
                    self.name,
                    crate::sequences::with_sequences(
                        keys::with_indexes(table, &keys, &relations)?,
                        &sequences,
                        &namespaces,
                    )?,
                )?
            }
            "pg_sequence" => crate::sequences::pg_sequence(&schema, &sequences)?,
            "pg_depend" => {
                let class = self.inner.table("pg_class").await?.ok_or_else(missing)?;
                let views = self
                    .tables
                    .views()
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                let more = match sequences.is_empty() {
                    true => Vec::new(),
                    false => {
                        let relations =
                            keys::stored_relations(class.clone(), namespace().await?).await?;
                        crate::sequences::dependencies(&sequences, &keys, &relations)
                    }
                };
                let named = crate::declared::by_catalog_name(class, namespace().await?)?;
                keys::with_dependencies(
                    crate::declared::with_view_dependencies(table, named, &views)?,
                    &keys,
                    more,
                )?
            }
            "pg_description" => {
                let namespaces = keys::namespaces(namespace().await?).await?;
                let schemas = self
                    .tables
                    .schemas()
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                let views = self
                    .tables
                    .views()
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                crate::comments::pg_description(
                    table,
                    &defs,
                    &views,
                    &relations,
                    &namespaces,
                    &schemas,
                )?
            }
            "pg_index" => keys::pg_index(&schema, &keys, &relations)?,
            "pg_constraint" => keys::pg_constraint(&schema, &keys, &relations)?,
            _ => keys::pg_attrdef(&schema, &keys, &relations)?,
        })
    }
}

#[async_trait]
impl TableProvider for KeyedTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        self.table_type
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.build()
            .await?
            .scan(state, projection, filters, limit)
            .await
    }
}
