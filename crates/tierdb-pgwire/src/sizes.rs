//! Relation sizes for `pg_table_size`, `pg_relation_size` and `pg_total_relation_size`
//! (psql's `\dt+`, `\l+`; DBeaver's and DataGrip's table lists), which datafusion-pg-catalog
//! answers with 0: a columnar table's size is the bytes of its committed segment files,
//! from the catalog. A row table keeps its rows in the KV engine, whose files are shared by
//! every row table: its size is NULL, not a made-up number. `catalogsql.rs` turns each
//! call into a lookup in `pg_catalog.tierdb_sizes(oid, bytes)`, built here per query.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{MemTable, TableProvider, view::ViewTable};
use datafusion::common::{Column, DataFusionError, Result};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{JoinType, LogicalPlanBuilder, col};

/// The table the size functions are answered from.
pub(crate) const SIZES: &str = "tierdb_sizes";

/// The functions answered from [`SIZES`].
pub(crate) const SIZE_FUNCTIONS: [&str; 3] = [
    "pg_table_size",
    "pg_relation_size",
    "pg_total_relation_size",
];

/// `tierdb_sizes(oid, bytes)`: each columnar table of `tables` by the oid `class` (its
/// `pg_class`) gives it, and the bytes of its segments; each view, and 0.
pub(crate) async fn sizes(
    class: Arc<dyn TableProvider>,
    tables: &tierdb_tables::Tables,
) -> Result<Arc<dyn TableProvider>> {
    let external = |e: tierdb_tables::TableError| DataFusionError::External(Box::new(e));
    let (mut names, mut bytes) = (Vec::new(), Vec::new());
    for def in tables.tables().await.map_err(external)? {
        if def.is_row_table() {
            continue;
        }
        let segments = tables.segments(&def).await.map_err(external)?;
        names.push(def.name.clone());
        bytes.push(segments.iter().map(|s| s.bytes as i64).sum::<i64>());
    }
    // A view stores no rows: 0 bytes, as PostgreSQL says (psql's `\dv+`).
    for view in tables.views().await.map_err(external)? {
        names.push(view.name);
        bytes.push(0);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("s_name", DataType::Utf8, false),
        Field::new("bytes", DataType::Int64, false),
    ]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(Int64Array::from(bytes)),
        ],
    )?;
    let stored = Arc::new(MemTable::try_new(schema, vec![vec![rows]])?);
    let plan = LogicalPlanBuilder::scan("c", provider_as_source(class), None)?
        .join(
            LogicalPlanBuilder::scan("s", provider_as_source(stored), None)?.build()?,
            JoinType::Inner,
            (
                vec![Column::new(Some("c"), "relname")],
                vec![Column::new(Some("s"), "s_name")],
            ),
            None,
        )?
        .filter({
            use datafusion::logical_expr::lit;
            let kind = || col(Column::new(Some("c"), "relkind"));
            kind().eq(lit("r")).or(kind().eq(lit("v")))
        })?
        .project(vec![
            col(Column::new(Some("c"), "oid")).alias("oid"),
            col(Column::new(Some("s"), "bytes")).alias("bytes"),
        ])?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}
