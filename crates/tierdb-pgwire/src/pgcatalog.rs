//! What tierdb adds to datafusion-pg-catalog's `pg_catalog`: the one role and who owns
//! what, and the catalog tables it lacks.
//!
//! A `tierdb serve` has one user (`--user`). Tools look owners up: pg_dump loads
//! `pg_roles` and stops at the first owner it cannot name ("role with OID 10 does not
//! exist"), psql's `\l`, `\dn` and `\dt` print the owner with `pg_get_userbyid`.
//! datafusion-pg-catalog 0.19 lists no role with an oid (its `pg_roles` rows all have oid
//! 0, and it has none unless told), says databases and schemas are owned by 10 and
//! relations by 0. So the `pg_catalog` schema is wrapped:
//!
//! 1. `pg_roles` has one row: the server's user, oid [`OWNER_OID`] (PostgreSQL's bootstrap
//!    superuser's oid, which datafusion-pg-catalog already gives databases and schemas), a
//!    superuser that can log in.
//! 2. `pg_class.relowner` is [`OWNER_OID`] (a view over datafusion-pg-catalog's table with
//!    that one column replaced; every other column and table is theirs), and the columns
//!    pg_dump reads that their tables lack or type otherwise are NULL `text[]`: `relacl`,
//!    `reloptions`, `attoptions`, `attfdwoptions` (no privileges granted beyond the
//!    owner's, no options), and `partclass`, `polroles`, `protrftypes` NULL `oid[]`:
//!    [`patches`].
//! 3. `acldefault(kind, owner)` is NULL: the owner's default privileges, which are all
//!    there are.
//! 4. `pg_namespace` lists `information_schema` (oid [`INFORMATION_SCHEMA_OID`], the oid
//!    datafusion-pg-catalog's `pg_proc` and `pg_type` rows of its functions and types
//!    carry), so pg_dump can name the schema of every function and type it lists.
//! 5. The catalog tables of [`ADDED_TABLES`], which pg_dump reads and datafusion-pg-catalog
//!    does not have, are there and empty (tierdb has no transforms or security labels); a
//!    query naming them
//!    without `pg_catalog.` finds them too (`catalogsql.rs`).
//! 6. The tables of [`EMPTIED_TABLES`] have no rows: datafusion-pg-catalog's rows of them
//!    are those of the PostgreSQL it was exported from and name its system views, which
//!    its `pg_class` does not list (pg_dump: "parent table with OID 12000 of pg_rewrite
//!    entry with OID 12003 not found"); tierdb has no rules.
//! 7. `pg_settings` lists the settings `current_setting` answers (`catalogfns.rs`).
//! 8. `pg_index`, `pg_constraint` and `pg_attrdef` hold the keys, indexes and defaults of
//!    tierdb's tables, and `pg_class` their indexes (`keys.rs`, `keyed.rs`), in place of
//!    datafusion-pg-catalog's rows, which describe the system catalogs of another server.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{MemTable, view::ViewTable};
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{LogicalPlanBuilder, col, lit};

/// The oid of the one role (PostgreSQL's bootstrap superuser has oid 10).
pub(crate) const OWNER_OID: i32 = 10;

/// Rule 4: the oid datafusion-pg-catalog's static `pg_proc` and `pg_type` give
/// `information_schema`'s objects (those of the PostgreSQL it was exported from).
pub(crate) const INFORMATION_SCHEMA_OID: i32 = 13283;

/// Rule 6.
pub(crate) const EMPTIED_TABLES: [&str; 1] = ["pg_rewrite"];

/// The catalog tables of features tierdb does not have (row security policies, event
/// triggers, triggers, foreign data, publications, subscriptions, security labels, rules,
/// transforms): they have no rows, so a query joining one has none either (`catalogsql.rs`
/// answers such queries' subqueries with NULL without planning them).
pub(crate) const FEATURES_ABSENT: [&str; 14] = [
    "pg_policy",
    "pg_event_trigger",
    "pg_trigger",
    "pg_foreign_data_wrapper",
    "pg_foreign_server",
    "pg_foreign_table",
    "pg_user_mapping",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_subscription",
    "pg_seclabel",
    "pg_rewrite",
    "pg_transform",
];

/// Rule 5: the tables added, with their columns (oids as int4, as datafusion-pg-catalog
/// types them).
pub(crate) const ADDED_TABLES: [(&str, &[(&str, DataType)]); 2] = [
    (
        "pg_transform",
        &[
            ("oid", DataType::Int32),
            ("trftype", DataType::Int32),
            ("trflang", DataType::Int32),
            ("trffromsql", DataType::Int32),
            ("trftosql", DataType::Int32),
        ],
    ),
    (
        "pg_seclabels",
        &[
            ("objoid", DataType::Int32),
            ("classoid", DataType::Int32),
            ("objsubid", DataType::Int32),
            ("objtype", DataType::Utf8),
            ("objnamespace", DataType::Int32),
            ("objname", DataType::Utf8),
            ("provider", DataType::Utf8),
            ("label", DataType::Utf8),
        ],
    ),
];

/// datafusion-pg-catalog's `pg_catalog` schema with the owners of rules 1 and 2.
#[derive(Debug)]
pub(crate) struct Owned {
    inner: Arc<dyn SchemaProvider>,
    user: String,
    /// The tables whose declared column types `pg_attribute` reports (`declared.rs`).
    tables: Option<Arc<tierdb_tables::tables::Tables>>,
}

impl Owned {
    pub(crate) fn new(inner: Arc<dyn SchemaProvider>, user: &str) -> Self {
        Self {
            inner,
            user: user.to_string(),
            tables: None,
        }
    }

    /// `class` named by catalog name (`declared::by_catalog_name`).
    async fn by_catalog_name(
        &self,
        class: Arc<dyn TableProvider>,
    ) -> Result<Arc<dyn TableProvider>> {
        let namespace =
            self.inner.table("pg_namespace").await?.ok_or_else(|| {
                DataFusionError::Plan("pg_catalog.pg_namespace is missing".into())
            })?;
        crate::declared::by_catalog_name(class, namespace)
    }
}

#[async_trait]
impl SchemaProvider for Owned {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(ADDED_TABLES.iter().map(|(t, _)| t.to_string()));
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name == crate::declared::VIEW_DEFINITIONS
            && let (Some(tables), Some(class)) = (&self.tables, self.inner.table("pg_class").await?)
        {
            let views = tables
                .views()
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let class = self.by_catalog_name(class).await?;
            return Ok(Some(crate::declared::view_definitions(class, &views)?));
        }
        if name == crate::sizes::SIZES
            && let (Some(tables), Some(class)) = (&self.tables, self.inner.table("pg_class").await?)
        {
            let class = self.by_catalog_name(class).await?;
            return Ok(Some(crate::sizes::sizes(class, tables).await?));
        }
        if let Some(tables) = &self.tables {
            if name == crate::keys::DEFINITIONS {
                let defs = tables
                    .tables()
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                let keys = crate::keys::Keys::of(&defs);
                return Ok(Some(crate::keys::definitions(&keys)?));
            }
            if let Some(t) =
                crate::keyed::KeyedTable::new(name, self.inner.clone(), tables.clone()).await?
            {
                return Ok(Some(Arc::new(t)));
            }
        }
        if let Some((_, columns)) = ADDED_TABLES.iter().find(|(t, _)| *t == name) {
            let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(
                columns
                    .iter()
                    .map(|(c, ty)| datafusion::arrow::datatypes::Field::new(*c, ty.clone(), true))
                    .collect::<Vec<_>>(),
            ));
            return Ok(Some(Arc::new(MemTable::try_new(schema, vec![vec![]])?)));
        }
        let Some(table) = self.inner.table(name).await? else {
            return Ok(None);
        };
        if EMPTIED_TABLES.contains(&name) {
            return Ok(Some(Arc::new(MemTable::try_new(
                table.schema(),
                vec![vec![]],
            )?)));
        }
        Ok(Some(match name {
            "pg_roles" => one_role(table.schema(), &self.user)?,
            "pg_settings" => crate::catalogfns::settings_table(table.schema())?,
            "pg_attribute" => {
                let table = patched(name, table)?;
                match (&self.tables, self.inner.table("pg_class").await?) {
                    (Some(tables), Some(class)) => {
                        let defs = tables
                            .tables()
                            .await
                            .map_err(|e| DataFusionError::External(Box::new(e)))?;
                        let views = tables
                            .views()
                            .await
                            .map_err(|e| DataFusionError::External(Box::new(e)))?;
                        let class = self.by_catalog_name(class).await?;
                        crate::declared::with_declared_types(table, class, &defs, &views)?
                    }
                    _ => table,
                }
            }
            "pg_class" | "pg_partitioned_table" | "pg_policy" | "pg_proc" => patched(name, table)?,
            "pg_namespace" => with_information_schema(table)?,
            _ => table,
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        ADDED_TABLES.iter().any(|(t, _)| *t == name)
            || ((name == crate::declared::VIEW_DEFINITIONS
                || name == crate::sizes::SIZES
                || name == crate::keys::DEFINITIONS)
                && self.tables.is_some())
            || self.inner.table_exist(name)
    }
}

/// Rule 1: `pg_roles` (in datafusion-pg-catalog's columns) with the one role.
fn one_role(schema: SchemaRef, user: &str) -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::array::{BooleanArray, Int32Array, StringArray};
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> Result<ArrayRef> {
            Ok(match (f.name().as_str(), f.data_type()) {
                ("rolname", DataType::Utf8) => Arc::new(StringArray::from(vec![user])),
                ("oid", DataType::Int32) => Arc::new(Int32Array::from(vec![OWNER_OID])),
                ("rolconnlimit", DataType::Int32) => Arc::new(Int32Array::from(vec![-1])),
                ("rolpassword", DataType::Utf8) => Arc::new(StringArray::from(vec!["********"])),
                ("rolreplication" | "rolbypassrls", DataType::Boolean) => {
                    Arc::new(BooleanArray::from(vec![false]))
                }
                (_, DataType::Boolean) => Arc::new(BooleanArray::from(vec![true])),
                (_, other) => new_null_array(other, 1),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

/// What a patched column of a catalog table holds (rule 2).
#[derive(Clone, Copy)]
enum Patch {
    /// This int4 in every row.
    Int(i32),
    /// A NULL `text[]` (no options, no privileges beyond the owner's).
    NoTextArray,
    /// A NULL `oid[]`.
    NoOidArray,
}

/// Rule 2: the columns of datafusion-pg-catalog's tables that tierdb patches, each
/// replaced where the table has it and added where it lacks it.
fn patches(table: &str) -> &'static [(&'static str, Patch)] {
    match table {
        "pg_class" => &[
            ("relowner", Patch::Int(OWNER_OID)),
            ("relacl", Patch::NoTextArray),
            ("reloptions", Patch::NoTextArray),
        ],
        "pg_attribute" => &[
            ("attoptions", Patch::NoTextArray),
            ("attfdwoptions", Patch::NoTextArray),
        ],
        "pg_partitioned_table" => &[("partclass", Patch::NoOidArray)],
        "pg_policy" => &[("polroles", Patch::NoOidArray)],
        "pg_proc" => &[("protrftypes", Patch::NoOidArray)],
        _ => &[],
    }
}

/// Rule 2: `table` with its [`patches`].
pub(crate) fn patched(name: &str, table: Arc<dyn TableProvider>) -> Result<Arc<dyn TableProvider>> {
    let patches = patches(name);
    if patches.is_empty() {
        return Ok(table);
    }
    let text_array = DataType::List(Arc::new(
        datafusion::arrow::datatypes::Field::new_list_field(DataType::Utf8, true),
    ));
    let oid_array = DataType::List(Arc::new(
        datafusion::arrow::datatypes::Field::new_list_field(DataType::Int32, true),
    ));
    let null = |ty: &DataType| {
        datafusion::logical_expr::cast(lit(datafusion::common::ScalarValue::Null), ty.clone())
    };
    let value = |column: &str, patch: Patch| {
        match patch {
            Patch::Int(v) => lit(v),
            Patch::NoTextArray => null(&text_array),
            Patch::NoOidArray => null(&oid_array),
        }
        .alias(column)
    };
    let schema = table.schema();
    let kept = schema
        .fields()
        .iter()
        .map(|f| match patches.iter().find(|(c, _)| c == f.name()) {
            Some((c, p)) => value(c, *p),
            None => col(datafusion::common::Column::new_unqualified(f.name())),
        });
    let added = patches
        .iter()
        .filter(|(c, _)| schema.field_with_name(c).is_err())
        .map(|(c, p)| value(c, *p));
    let plan = LogicalPlanBuilder::scan(name, provider_as_source(table), None)?
        .project(kept.chain(added).collect::<Vec<_>>())?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// Rule 4: `pg_namespace` and a row for `information_schema`.
fn with_information_schema(table: Arc<dyn TableProvider>) -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::array::{Int32Array, StringArray};
    let schema = table.schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match (f.name().as_str(), f.data_type()) {
                ("oid", DataType::Int32) => {
                    Arc::new(Int32Array::from(vec![INFORMATION_SCHEMA_OID]))
                }
                ("nspowner", DataType::Int32) => Arc::new(Int32Array::from(vec![OWNER_OID])),
                ("nspname", DataType::Utf8) => {
                    Arc::new(StringArray::from(vec!["information_schema"]))
                }
                (_, other) => new_null_array(other, 1),
            }
        })
        .collect();
    let row = RecordBatch::try_new(schema.clone(), columns)?;
    let extra = Arc::new(MemTable::try_new(schema, vec![vec![row]])?);
    let plan = LogicalPlanBuilder::scan("pg_namespace", provider_as_source(table), None)?
        .union(
            LogicalPlanBuilder::scan("information_schema_row", provider_as_source(extra), None)?
                .build()?,
        )?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// An `ALTER TABLE … OWNER TO` or `ALTER SCHEMA … OWNER TO` (every pg_dump writes them).
pub(crate) struct OwnerChange<'a> {
    owners: Vec<&'a datafusion::sql::sqlparser::ast::Owner>,
    /// The table (or view) or the schema named.
    name: &'a datafusion::sql::sqlparser::ast::ObjectName,
    schema: bool,
}

impl<'a> OwnerChange<'a> {
    /// `stmt` if it only changes owners.
    pub(crate) fn of(stmt: &'a datafusion::sql::sqlparser::ast::Statement) -> Option<Self> {
        use datafusion::sql::sqlparser::ast::{
            AlterSchemaOperation, AlterTableOperation, Statement,
        };
        let (owners, name, schema): (Option<Vec<_>>, _, _) = match stmt {
            Statement::AlterTable(at) => (
                at.operations
                    .iter()
                    .map(|op| match op {
                        AlterTableOperation::OwnerTo { new_owner } => Some(new_owner),
                        _ => None,
                    })
                    .collect(),
                &at.name,
                false,
            ),
            Statement::AlterSchema(s) => (
                s.operations
                    .iter()
                    .map(|op| match op {
                        AlterSchemaOperation::OwnerTo { owner } => Some(owner),
                        _ => None,
                    })
                    .collect(),
                &s.name,
                true,
            ),
            _ => return None,
        };
        let owners = owners.filter(|o| !o.is_empty())?;
        Some(Self {
            owners,
            name,
            schema,
        })
    }

    /// The one role owns everything already, so naming it (or CURRENT_USER, SESSION_USER,
    /// CURRENT_ROLE) changes nothing and is answered with the command's tag; another role
    /// is 42704, as PostgreSQL answers a role that does not exist; a missing table or
    /// schema is 42P01 or 3F000.
    pub(crate) async fn check(
        &self,
        user: &str,
        session: &tierdb_tables::sql::SqlSession,
    ) -> Result<&'static str, tierdb_tables::error::TableError> {
        use datafusion::sql::sqlparser::ast::Owner;
        use tierdb_tables::error::TableError;
        let is_user = |o: &Owner| match o {
            Owner::Ident(i) => i.value == user,
            Owner::CurrentRole | Owner::CurrentUser | Owner::SessionUser => true,
        };
        if let Some(other) = self.owners.iter().find(|o| !is_user(o)) {
            return Err(TableError::Column {
                code: "42704",
                message: format!(
                    "role \"{other}\" does not exist (tierdb serve has one role, \"{user}\", \
                     which owns everything)"
                ),
            });
        }
        if self.schema {
            let schema = tierdb_tables::sql::ident_name_of(self.name);
            if schema != tierdb_tables::sql::SCHEMA
                && !matches!(session.tables().schema_def(&schema).await, Ok(Some(_)))
            {
                return Err(TableError::Column {
                    code: "3F000",
                    message: format!("schema \"{schema}\" does not exist"),
                });
            }
            return Ok("ALTER SCHEMA");
        }
        let table =
            tierdb_tables::sql::relation_name(self.name).unwrap_or_else(|| self.name.to_string());
        // PostgreSQL takes ALTER TABLE … OWNER TO for views and sequences too (pg_dump
        // writes it so).
        if !matches!(session.tables().view(&table).await, Ok(Some(_)))
            && !matches!(session.tables().sequence(&table).await, Ok(Some(_)))
        {
            session.tables().require(&table).await?;
        }
        Ok("ALTER TABLE")
    }
}

/// Rule 3: `acldefault("char", oid)`.
pub(crate) fn acldefault() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    let text_array = DataType::List(Arc::new(
        datafusion::arrow::datatypes::Field::new_list_field(DataType::Utf8, true),
    ));
    let out = text_array.clone();
    create_udf(
        "acldefault",
        vec![DataType::Utf8, DataType::Int32],
        text_array,
        Volatility::Immutable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from(&out)?,
            ))
        }),
    )
}

/// Wraps the `pg_catalog` schema of `catalog` (rules 1 and 2).
pub(crate) fn install(
    catalog: &Arc<dyn datafusion::catalog::CatalogProvider>,
    user: &str,
    tables: Option<Arc<tierdb_tables::tables::Tables>>,
) -> Result<()> {
    let inner = catalog.schema("pg_catalog").ok_or_else(|| {
        DataFusionError::Plan("pg_catalog is not set up: nothing to give owners to".into())
    })?;
    let mut owned = Owned::new(inner, user);
    owned.tables = tables;
    catalog.register_schema("pg_catalog", Arc::new(owned))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::prelude::SessionContext;

    #[test]
    fn only_statements_that_change_owners_alone_are_owner_changes() {
        use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
        use datafusion::sql::sqlparser::parser::Parser;
        let of = |sql: &str| {
            let s = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parses");
            OwnerChange::of(&s[0]).map(|c| (c.owners.len(), c.schema))
        };
        assert_eq!(of("ALTER TABLE public.t OWNER TO tierdb"), Some((1, false)));
        assert_eq!(
            of("ALTER SCHEMA public OWNER TO CURRENT_USER"),
            Some((1, true))
        );
        assert_eq!(of("ALTER SCHEMA other RENAME TO x"), None);
        assert_eq!(of("ALTER TABLE t ADD COLUMN c INT"), None);
        assert_eq!(of("SELECT 1"), None);
    }

    #[tokio::test]
    async fn the_one_role_has_oid_10_and_owns_every_relation() {
        let roles = Arc::new(Schema::new(vec![
            Field::new("rolname", DataType::Utf8, true),
            Field::new("rolsuper", DataType::Boolean, true),
            Field::new("rolreplication", DataType::Boolean, true),
            Field::new("rolvaliduntil", DataType::Int64, true),
            Field::new("oid", DataType::Int32, true),
        ]));
        let class = Arc::new(Schema::new(vec![
            Field::new("relname", DataType::Utf8, false),
            Field::new("relowner", DataType::Int32, false),
        ]));
        let inner = datafusion::catalog::MemorySchemaProvider::new();
        inner
            .register_table(
                "pg_roles".into(),
                Arc::new(MemTable::try_new(roles, vec![vec![]]).expect("table")),
            )
            .expect("registered");
        let rows = RecordBatch::try_new(
            class.clone(),
            vec![
                Arc::new(datafusion::arrow::array::StringArray::from(vec!["t"])),
                Arc::new(datafusion::arrow::array::Int32Array::from(vec![0])),
            ],
        )
        .expect("batch");
        inner
            .register_table(
                "pg_class".into(),
                Arc::new(MemTable::try_new(class, vec![vec![rows]]).expect("table")),
            )
            .expect("registered");
        let ctx = SessionContext::new();
        let catalog = ctx.catalog("datafusion").expect("default catalog");
        catalog
            .register_schema("pg_catalog", Arc::new(inner))
            .expect("registered");
        install(&catalog, "alice", None).expect("installed");
        let text = |sql: &'static str| {
            let ctx = ctx.clone();
            async move {
                let batches = ctx.sql(sql).await.expect(sql).collect().await.expect(sql);
                datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .expect("printable")
                    .to_string()
            }
        };
        let roles = text(
            "SELECT oid, rolname, rolsuper, rolreplication, rolvaliduntil FROM pg_catalog.pg_roles",
        )
        .await;
        assert!(
            roles.contains("| 10  | alice   | true     | false          |"),
            "{roles}"
        );
        let class = text("SELECT relname, relowner FROM pg_catalog.pg_class").await;
        assert!(class.contains("| t       | 10       |"), "{class}");
        let none = text("SELECT count(*) AS n FROM pg_catalog.pg_transform").await;
        assert!(none.contains("| 0 |"), "{none}");
    }
}
