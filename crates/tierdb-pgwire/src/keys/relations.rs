//! Where tierdb's relations are in `pg_class` and `pg_namespace` (rule 3 of `keys.rs`):
//! by catalog name (`t` in `public`, `s.t` in schema s; `tierdb_tables::sql::qualified`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::TableProvider;
use datafusion::common::Result;
use datafusion::logical_expr::{JoinType, cast, col, lit};

use super::quote_ident;

/// The name of a relation (or index, or constraint) within its schema, as `pg_class` and
/// `pg_constraint` list it (the catalog keys one outside `public` by `schema.name`:
/// `tierdb_tables::sql::qualified`).
pub(crate) fn own(name: &str) -> &str {
    tierdb_tables::sql::split_qualified(name).1
}

/// A relation's name with its schema, each part as `quote_ident` writes it
/// (`public.t`, `an."T"`).
pub(crate) fn quote_qualified(name: &str) -> String {
    let (schema, table) = tierdb_tables::sql::split_qualified(name);
    format!("{}.{}", quote_ident(schema), quote_ident(table))
}

/// The stored tables and views by catalog name (`t` in `public`, `s.t` in schema s):
/// their `pg_class` oid and schema oid (rule 3).
pub(crate) type Relations = HashMap<String, (i32, i32)>;

/// Schemas whose relations are not stored tables.
fn system_schema(name: &str) -> bool {
    name == "information_schema" || name.starts_with("pg_")
}

/// [`Relations`] as `class` (`pg_class`) and `namespace` (`pg_namespace`) list them now.
/// Read once per catalog table a query names, so every row built from it agrees with the
/// `pg_class` of that query (datafusion-pg-catalog keeps a relation's oid while it exists).
pub(crate) async fn stored_relations(
    class: Arc<dyn TableProvider>,
    namespace: Arc<dyn TableProvider>,
) -> Result<Relations> {
    use datafusion::arrow::array::AsArray;
    let ctx = datafusion::prelude::SessionContext::new();
    let n = ctx.read_table(namespace)?.select(vec![
        col("oid").alias("kn_oid"),
        cast(col("nspname"), DataType::Utf8).alias("kn_name"),
    ])?;
    let batches = ctx
        .read_table(class)?
        .filter(col("relkind").eq(lit("r")).or(col("relkind").eq(lit("v"))))?
        .join(n, JoinType::Inner, &["relnamespace"], &["kn_oid"], None)?
        .select(vec![
            cast(col("oid"), DataType::Int32).alias("oid"),
            cast(col("relname"), DataType::Utf8).alias("relname"),
            cast(col("relnamespace"), DataType::Int32).alias("relnamespace"),
            col("kn_name"),
        ])?
        .collect()
        .await?;
    let mut out = Relations::new();
    for b in &batches {
        let oids = b
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let names = b.column(1).as_string::<i32>();
        let spaces = b
            .column(2)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let schemas = b.column(3).as_string::<i32>();
        for r in 0..b.num_rows() {
            if system_schema(schemas.value(r)) {
                continue;
            }
            out.insert(
                tierdb_tables::sql::qualified(schemas.value(r), names.value(r)),
                (oids.value(r), spaces.value(r)),
            );
        }
    }
    Ok(out)
}

/// The oid of every schema as `namespace` (`pg_namespace`) lists it, by name.
pub(crate) async fn namespaces(namespace: Arc<dyn TableProvider>) -> Result<HashMap<String, i32>> {
    use datafusion::arrow::array::AsArray;
    let ctx = datafusion::prelude::SessionContext::new();
    let batches = ctx
        .read_table(namespace)?
        .select(vec![
            cast(col("nspname"), DataType::Utf8).alias("nspname"),
            cast(col("oid"), DataType::Int32).alias("oid"),
        ])?
        .collect()
        .await?;
    let mut out = HashMap::new();
    for b in &batches {
        let names = b.column(0).as_string::<i32>();
        let oids = b
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        for r in 0..b.num_rows() {
            out.insert(names.value(r).to_string(), oids.value(r));
        }
    }
    Ok(out)
}
