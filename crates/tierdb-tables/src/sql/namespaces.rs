//! The `tierdb` catalog as DataFusion sees it: the fixed schemas (`public` with the
//! session's temporary tables, `pg_temp`, and what the server adds: `pg_catalog`,
//! `information_schema`, `zodb`) and one schema per stored schema (`crate::schemas`),
//! listed from the catalog as of the last refresh, so a schema created by any session is
//! seen by every other at its next statement.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;

use super::{ident_name, qualified, split_qualified};
use crate::dml::ROWS_PREFIX;
use crate::error::{Result, TableError};
use crate::provider::TierSchema;

/// The relations of one stored schema: names are its relations' own names, looked up in
/// the catalog by their qualified names.
#[derive(Debug)]
pub(crate) struct SchemaView {
    stored: Arc<TierSchema>,
    schema: String,
}

impl SchemaView {
    fn key(&self, name: &str) -> Option<String> {
        if name.contains('.') {
            return None;
        }
        Some(match name.strip_prefix(ROWS_PREFIX) {
            // UPDATE and DELETE read `s."<prefix>t"` (`dml/target.rs`).
            Some(own) => format!("{ROWS_PREFIX}{}", qualified(&self.schema, own)),
            None => qualified(&self.schema, name),
        })
    }
}

#[async_trait]
impl SchemaProvider for SchemaView {
    fn table_names(&self) -> Vec<String> {
        self.stored
            .all_names()
            .iter()
            .filter(|n| n.contains('.'))
            .filter_map(|n| {
                let (schema, own) = split_qualified(n);
                (schema == self.schema).then(|| own.to_string())
            })
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        match self.key(name) {
            Some(key) => self.stored.table(&key).await,
            None => Ok(None),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.key(name)
            .is_some_and(|key| self.stored.table_exist(&key))
    }
}

/// The `tierdb` catalog of one session.
#[derive(Debug)]
pub(crate) struct TierCatalog {
    fixed: MemoryCatalogProvider,
    stored: Arc<TierSchema>,
}

impl TierCatalog {
    pub(crate) fn new(stored: Arc<TierSchema>) -> Self {
        TierCatalog {
            fixed: MemoryCatalogProvider::new(),
            stored,
        }
    }

    /// The schemas registered with this catalog (not the stored ones).
    pub(crate) fn fixed_schemas(&self) -> Vec<(String, Arc<dyn SchemaProvider>)> {
        self.fixed
            .schema_names()
            .into_iter()
            .filter_map(|n| self.fixed.schema(&n).map(|s| (n, s)))
            .collect()
    }
}

impl CatalogProvider for TierCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.fixed.schema_names();
        for s in self.stored.schema_names() {
            if !names.contains(&s) {
                names.push(s);
            }
        }
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if let Some(s) = self.fixed.schema(name) {
            return Some(s);
        }
        self.stored
            .schema_names()
            .iter()
            .any(|s| s == name)
            .then(|| {
                Arc::new(SchemaView {
                    stored: self.stored.clone(),
                    schema: name.to_string(),
                }) as Arc<dyn SchemaProvider>
            })
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        self.fixed.register_schema(name, schema)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        self.fixed.deregister_schema(name, cascade)
    }
}

/// The catalog name `to` gives relation `from` (`ALTER TABLE s.t RENAME TO u` is `s.u`): a
/// new name stays in the schema of the old one.
pub(super) fn renamed(
    from: &str,
    to: &datafusion::sql::sqlparser::ast::ObjectName,
) -> Result<String> {
    let new = super::relation_name(to).ok_or_else(|| TableError::NoTable(to.to_string()))?;
    let (schema, _) = split_qualified(from);
    if new.contains('.') {
        // Qualified: only with the relation's own schema.
        if split_qualified(&new).0 != schema {
            return Err(TableError::Column {
                code: "42601",
                message: format!(
                    "cannot move {from} to another schema by renaming it ({to}); move it \
                     with ALTER TABLE … SET SCHEMA"
                ),
            });
        }
        return Ok(new);
    }
    Ok(qualified(schema, &new))
}

/// A schema's name: one identifier (or `tierdb.name`, this database's catalog).
pub(super) fn schema_ident(name: &datafusion::sql::sqlparser::ast::ObjectName) -> Result<String> {
    let parts: Option<Vec<String>> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(ident_name))
        .collect();
    match parts.as_deref() {
        Some([s]) => Ok(s.clone()),
        Some([c, s]) if c == super::CATALOG => Ok(s.clone()),
        _ => Err(TableError::Column {
            code: "3F000",
            message: format!("schema \"{name}\" does not exist"),
        }),
    }
}
