//! Schemas other than `public` (`docs/design/schemas.md`).
//!
//! Invariants:
//!
//! 1. A schema is one catalog record (`Tk` + name, [`SchemaDef`]); `public` always exists
//!    and has none. `pg_catalog`, `information_schema`, `pg_temp` and schemas whose names
//!    start with `pg_` are the system's and cannot be created or dropped.
//! 2. A relation (table, view, sequence) in schema `s` is keyed by its qualified name
//!    `s.name` ([`crate::sql::qualified`]); neither part contains a dot, so the name of every
//!    relation maps to one key and back.
//! 3. A relation is created only in a schema that exists ([`Tables::require_namespace`],
//!    under the commit lock, so a concurrent `DROP SCHEMA` cannot leave it orphaned).
//! 4. `DROP SCHEMA s` without CASCADE fails with 2BP01 while `s` holds a relation, and
//!    changes nothing; with CASCADE its views, tables (with their rows, indexes and owned
//!    sequences) and other sequences go, then the schema: each step is one atomic commit,
//!    so a crash in between leaves a schema with fewer relations, never a relation without
//!    its schema (repeat the statement).

use crate::catalog::{self, CatalogBatch, SchemaDef};
use crate::error::{Result, TableError};
use crate::sql::{SCHEMA, check_new_name, split_qualified};
use crate::tables::Tables;
use crate::viewdeps::Dependents;

/// The schema a database's object store is shown in (`tierdb-objects-sql`): reserved in
/// every database, so adding an object store to one never hides a user's schema.
pub const OBJECTS_SCHEMA: &str = "zodb";

/// Schemas that are the system's (invariant 1).
pub fn is_system(name: &str) -> bool {
    name == SCHEMA
        || name == "information_schema"
        || name.starts_with("pg_")
        || name == OBJECTS_SCHEMA
}

fn missing(name: &str) -> TableError {
    TableError::Column {
        code: "3F000",
        message: format!("schema \"{name}\" does not exist"),
    }
}

impl Tables {
    /// The stored schemas (not `public`), by name.
    pub async fn schemas(&self) -> Result<Vec<SchemaDef>> {
        catalog::list_schemas(self.reader.as_ref()).await
    }

    pub async fn schema_def(&self, name: &str) -> Result<Option<SchemaDef>> {
        catalog::get_schema(self.reader.as_ref(), name).await
    }

    /// Invariant 3: the schema of relation `name` (qualified) exists and its own name is
    /// one a relation may take. Called under the commit lock by whatever creates `name`.
    pub(crate) async fn require_namespace(&self, name: &str) -> Result<()> {
        let (schema, own) = split_qualified(name);
        check_new_name("relation", own)?;
        if schema != SCHEMA && self.schema_def(schema).await?.is_none() {
            return Err(missing(schema));
        }
        Ok(())
    }

    /// `CREATE SCHEMA [IF NOT EXISTS] name`; returns whether it was created (false: it
    /// existed and `if_not_exists`).
    pub async fn create_schema(&self, name: &str, if_not_exists: bool) -> Result<bool> {
        let exists = || TableError::Column {
            code: "42P06",
            message: format!("schema \"{name}\" already exists"),
        };
        if name == SCHEMA || self.schema_def(name).await?.is_some() {
            return if if_not_exists {
                Ok(false)
            } else {
                Err(exists())
            };
        }
        if is_system(name) {
            return Err(TableError::Column {
                code: "42939",
                message: format!(
                    "unacceptable schema name \"{name}\": the prefix \"pg_\" and the names \
                     information_schema and {OBJECTS_SCHEMA} are reserved for system schemas"
                ),
            });
        }
        check_new_name("schema", name)?;
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        if self.schema_def(name).await?.is_some() {
            return if if_not_exists {
                Ok(false)
            } else {
                Err(exists())
            };
        }
        let mut b = CatalogBatch::default();
        b.put_schema(&SchemaDef {
            name: name.to_string(),
            comment: None,
        });
        self.commit_catalog(kv, b).await?;
        Ok(true)
    }

    /// The relations of schema `name`: (views, tables, sequences), qualified names.
    async fn schema_contents(&self, name: &str) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
        let inside = |n: &str| split_qualified(n).0 == name && n.contains('.');
        let views = self
            .views()
            .await?
            .into_iter()
            .map(|v| v.name)
            .filter(|n| inside(n))
            .collect();
        let tables = self
            .tables()
            .await?
            .into_iter()
            .map(|t| t.name)
            .filter(|n| inside(n))
            .collect();
        let sequences = self
            .sequences()
            .await?
            .into_iter()
            .map(|s| s.name)
            .filter(|n| inside(n))
            .collect();
        Ok((views, tables, sequences))
    }

    /// `DROP SCHEMA [IF EXISTS] names [CASCADE]` (invariant 4). Every schema is checked
    /// before any is changed.
    pub async fn drop_schemas(
        &self,
        names: &[String],
        if_exists: bool,
        cascade: bool,
    ) -> Result<SchemasDropped> {
        let mut out = SchemasDropped::default();
        let mut found = Vec::new();
        for name in names {
            if is_system(name) {
                return Err(TableError::Column {
                    code: "2BP01",
                    message: format!(
                        "cannot drop schema {name} because the database system requires it"
                    ),
                });
            }
            if self.schema_def(name).await?.is_none() {
                if if_exists {
                    out.missing.push(name.clone());
                    continue;
                }
                return Err(missing(name));
            }
            let contents = self.schema_contents(name).await?;
            let count = contents.0.len() + contents.1.len() + contents.2.len();
            if count > 0 && !cascade {
                let first = contents
                    .0
                    .first()
                    .map(|v| format!("view {v}"))
                    .or_else(|| contents.1.first().map(|t| format!("table {t}")))
                    .or_else(|| contents.2.first().map(|s| format!("sequence {s}")))
                    .unwrap_or_default();
                return Err(TableError::Column {
                    code: "2BP01",
                    message: format!(
                        "cannot drop schema {name} because other objects depend on it \
                         ({first} depends on schema {name}, {count} objects in all); use \
                         DROP ... CASCADE to drop the dependent objects too"
                    ),
                });
            }
            found.push((name.clone(), contents));
        }
        for (name, (views, tables, _)) in found {
            out.cascaded.extend(self.contents_in_order(&name).await?);
            let mut elsewhere = Vec::new();
            if !views.is_empty() {
                elsewhere.extend(self.drop_views(&views, true, Dependents::Cascade).await?);
            }
            if !tables.is_empty() {
                let dropped = self.drop_tables(&tables, true, Dependents::Cascade).await?;
                elsewhere.extend(dropped.cascaded);
            }
            // Views of other schemas that read what it held (viewdeps.rs invariant 3).
            out.cascaded.extend(
                elsewhere
                    .into_iter()
                    .filter(|v| split_qualified(v).0 != name || !v.contains('.'))
                    .map(|v| format!("view {v}")),
            );
            // Sequences no table owned (owned ones went with their tables).
            let (_, _, sequences) = self.schema_contents(&name).await?;
            if !sequences.is_empty() {
                self.drop_sequences(&sequences, true).await?;
            }
            let kv = self.kv_writer()?;
            let _guard = self.commit_lock.lock().await;
            let mut b = CatalogBatch::default();
            b.delete_schema(&name);
            self.commit_catalog(kv, b).await?;
        }
        Ok(out)
    }

    /// What schema `name` holds, as PostgreSQL's NOTICE of `DROP SCHEMA … CASCADE` names
    /// it (`table s.t`, `view s.v`, `sequence s.q`; a SERIAL column's sequence goes with
    /// its table unnamed), in the order it was created (tables before sequences before
    /// views made in the same millisecond).
    async fn contents_in_order(&self, name: &str) -> Result<Vec<String>> {
        let inside = |n: &str| split_qualified(n).0 == name && n.contains('.');
        let mut all: Vec<(u64, u8, String)> = Vec::new();
        for t in self.tables().await? {
            if inside(&t.name) {
                all.push((t.created_ms, 0, format!("table {}", t.name)));
            }
        }
        for s in self.sequences().await? {
            if inside(&s.name) && s.owned_by.is_none() {
                all.push((s.created_ms, 1, format!("sequence {}", s.name)));
            }
        }
        for v in self.views().await? {
            if inside(&v.name) {
                all.push((v.created_ms, 2, format!("view {}", v.name)));
            }
        }
        all.sort();
        Ok(all.into_iter().map(|(_, _, d)| d).collect())
    }
}

/// What `DROP SCHEMA` did: the schemas of `IF EXISTS` that were not there, and every
/// object CASCADE took (`kind name`, as PostgreSQL's NOTICE names it).
#[derive(Debug, Default, PartialEq)]
pub struct SchemasDropped {
    pub missing: Vec<String>,
    pub cascaded: Vec<String>,
}

impl Tables {
    /// `COMMENT ON SCHEMA name IS …` (`None`: remove it). `public`'s comment is not kept.
    pub async fn comment_on_schema(&self, name: &str, comment: Option<String>) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let Some(mut def) = self.schema_def(name).await? else {
            return Err(missing(name));
        };
        def.comment = comment;
        let mut b = CatalogBatch::default();
        b.put_schema(&def);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_schemas_are_reserved() {
        assert!(is_system("public"));
        assert!(is_system("pg_catalog"));
        assert!(is_system("pg_temp"));
        assert!(is_system("information_schema"));
        assert!(!is_system("analytics"));
        assert!(!is_system("pgx"));
    }

    #[test]
    fn relation_names_map_to_one_key_and_back() {
        use crate::sql::{qualified, quoted_relation};
        assert_eq!(qualified("public", "t"), "t");
        assert_eq!(qualified("an", "t"), "an.t");
        assert_eq!(split_qualified("t"), ("public", "t"));
        assert_eq!(split_qualified("an.t"), ("an", "t"));
        for (schema, table) in [("public", "t"), ("an", "T x"), ("a\"b", "t")] {
            assert_eq!(split_qualified(&qualified(schema, table)), (schema, table));
        }
        assert_eq!(quoted_relation("t"), "\"t\"");
        assert_eq!(quoted_relation("a\"b.T"), "\"a\"\"b\".\"T\"");
        assert!(check_new_name("relation", "a.b").is_err());
        assert!(check_new_name("schema", "").is_err());
        assert!(check_new_name("relation", "ok").is_ok());
    }

    #[test]
    fn names_resolve_in_their_schema() {
        use crate::sql::relation_name;
        use datafusion::sql::sqlparser::ast::{Ident, ObjectName};
        let name = |parts: &[Ident]| ObjectName::from(parts.to_vec());
        assert_eq!(
            relation_name(&name(&[Ident::new("T")])).as_deref(),
            Some("t")
        );
        assert_eq!(
            relation_name(&name(&[Ident::new("An"), Ident::with_quote('"', "T")])).as_deref(),
            Some("an.T")
        );
        assert_eq!(
            relation_name(&name(&[Ident::new("public"), Ident::new("t")])).as_deref(),
            Some("t")
        );
        assert_eq!(
            relation_name(&name(&[
                Ident::new("tierdb"),
                Ident::new("an"),
                Ident::new("t")
            ]))
            .as_deref(),
            Some("an.t")
        );
        assert_eq!(
            relation_name(&name(&[
                Ident::new("other"),
                Ident::new("an"),
                Ident::new("t")
            ])),
            None
        );
        assert_eq!(
            relation_name(&name(&[Ident::with_quote('"', "an.t")])),
            None
        );
    }
}
