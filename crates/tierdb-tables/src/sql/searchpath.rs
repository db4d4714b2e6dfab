//! The session's `search_path`: the schemas an unqualified relation name is looked up in,
//! and the schema an unqualified CREATE puts its relation in.
//!
//! The catalog keys a relation of schema `s` as `s.name` and one of `public` as `name`
//! (`schemas.rs` invariant 2), and every part of tierdb that names relations (DDL, the
//! targets of writes, views, the row-table short paths, DataFusion's planner) reads those
//! keys. So the path is applied once, to the statement, before it is planned or run: each
//! unqualified relation name is written as the qualified name the path resolves it to.
//!
//! Invariants:
//!
//! 1. With a path that names no stored schema (the default, `"$user", public`) no
//!    statement is touched: unqualified names are `public`'s, as they always were.
//! 2. A name the statement's own `WITH` defines (in scope where it is used) and a
//!    session's temporary table are never rewritten: both come before any schema, as in
//!    PostgreSQL (`pg_temp` is searched first).
//! 3. Any other unqualified name of a relation the statement reads or changes resolves to
//!    the first schema of the path that holds a table, view or sequence of that name, as
//!    of the session's last catalog refresh (the statement refreshes it first). A name
//!    only `public` holds while `public` is not on the path does not exist (42P01), as in
//!    PostgreSQL; a name no schema holds is left as written and fails where it is used.
//! 4. An unqualified CREATE TABLE, VIEW or SEQUENCE creates in the first schema of the path
//!    that exists; a path where none exists refuses it (3F000), as PostgreSQL does.
//! 5. Schemas of the path that do not exist are skipped, not refused, and count once they
//!    are created. `"$user"` is left out (tierdb has no per-user schemas).
//! 6. A change of the path is a change of the session's settings: the plans kept for
//!    prepared statements are made again (`plancache.rs` invariant 3).
//!
//! Sequence functions (`nextval('s')`, `currval`, `setval`) find an unqualified sequence
//! by the path when they run ([`sequence_resolver`]). Not rewritten: other relation names
//! inside strings (`'t'::regclass`, ALTER SEQUENCE's), which stay `public`'s unless
//! qualified.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, ListBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::catalog::SchemaProvider;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    CommentObject, Ident, ObjectName, ObjectNamePart, ObjectType, Query, Statement, VisitMut,
    VisitorMut,
};

use super::{SCHEMA, SqlSession, ident_name, qualified};
use crate::error::{Result, TableError};
use crate::provider::TierSchema;

/// What the path resolution needs to know of the catalog and the session.
pub(crate) trait Relations {
    /// Whether catalog name `name` ([`qualified`]) is a stored table, view or sequence.
    fn exists(&self, name: &str) -> bool;
    /// Whether stored schema `schema` (not `public`) exists.
    fn schema_exists(&self, schema: &str) -> bool;
    /// Whether the session has a temporary table `name`.
    fn is_temp(&self, name: &str) -> bool;
}

/// The schemas of a path that exist, in order (`public` always exists).
fn existing(path: &[String], schema_exists: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in path {
        if (s == SCHEMA || schema_exists(s)) && !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// Whether `path` changes how any statement resolves (invariant 1).
pub(crate) fn is_default(path: &[String], rel: &dyn Relations) -> bool {
    existing(path, &|s| rel.schema_exists(s)) == [SCHEMA.to_string()]
}

/// Qualifies the unqualified relation names of `stmt` by `path` (see the module doc).
pub(crate) fn qualify(stmt: &mut DfStatement, path: &[String], rel: &dyn Relations) -> Result<()> {
    if is_default(path, rel) {
        return Ok(());
    }
    let schemas = existing(path, &|s| rel.schema_exists(s));
    let mut q = Qualifier {
        schemas: &schemas,
        rel,
        ctes: Default::default(),
        error: None,
    };
    match stmt {
        DfStatement::Statement(s) => q.statement(s),
        DfStatement::Explain(e) => return qualify(&mut e.statement, path, rel),
        _ => {}
    }
    match q.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Qualifier<'a> {
    schemas: &'a [String],
    rel: &'a dyn Relations,
    /// The names `WITH` clauses define where the visitor is.
    ctes: super::withnames::WithNames,
    error: Option<TableError>,
}

fn part(name: &str) -> ObjectNamePart {
    ObjectNamePart::Identifier(Ident::with_quote('"', name))
}

impl Qualifier<'_> {
    fn statement(&mut self, s: &mut Statement) {
        match s {
            Statement::CreateTable(ct) => {
                self.create(&mut ct.name);
                if let Some(q) = ct.query.as_mut() {
                    let _ = q.visit(self);
                }
                if let Some(like) = ct.like.as_mut() {
                    let _ = like.visit(self);
                }
            }
            Statement::CreateView(v) => {
                self.create(&mut v.name);
                let _ = v.query.visit(self);
            }
            Statement::CreateSequence { name, .. } => self.create(name),
            Statement::Drop {
                object_type: ObjectType::Table | ObjectType::View | ObjectType::Sequence,
                names,
                ..
            } => names.iter_mut().for_each(|n| self.reference(n)),
            Statement::Comment {
                object_type,
                object_name,
                ..
            } => match object_type {
                CommentObject::Table | CommentObject::View => self.reference(object_name),
                CommentObject::Column if object_name.0.len() == 2 => {
                    // `t.c`: the table part is resolved, the column kept.
                    let column = object_name.0.pop();
                    self.reference(object_name);
                    object_name.0.extend(column);
                }
                _ => {}
            },
            other => {
                let _ = other.visit(self);
            }
        }
    }

    /// Invariant 4.
    fn create(&mut self, name: &mut ObjectName) {
        if name.0.len() != 1 {
            return;
        }
        match self.schemas.first() {
            Some(s) => name.0.insert(0, part(s)),
            None => {
                self.error.get_or_insert(TableError::Column {
                    code: "3F000",
                    message: "no schema has been selected to create in: the search_path \
                              names no schema that exists; SET search_path or qualify the \
                              name"
                        .into(),
                });
            }
        }
    }

    /// Invariants 2 and 3.
    fn reference(&mut self, name: &mut ObjectName) {
        let [ObjectNamePart::Identifier(id)] = name.0.as_slice() else {
            return;
        };
        let own = ident_name(id);
        if self.ctes.defines(&own) || self.rel.is_temp(&own) {
            return;
        }
        for s in self.schemas {
            if self.rel.exists(&qualified(s, &own)) {
                if s != SCHEMA {
                    name.0.insert(0, part(s));
                }
                return;
            }
        }
        if self.rel.exists(&own) {
            self.error.get_or_insert(TableError::Column {
                code: "42P01",
                message: format!(
                    "relation \"{own}\" does not exist: it is in schema public, which the \
                     search_path ({}) leaves out; qualify it as public.{own}",
                    self.schemas.join(", ")
                ),
            });
        }
    }
}

impl VisitorMut for Qualifier<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.ctes.enter(query);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.ctes.leave();
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, name: &mut ObjectName) -> ControlFlow<()> {
        self.reference(name);
        ControlFlow::Continue(())
    }
}

/// A session's path (`["public"]` until `SET search_path`).
#[derive(Debug)]
pub(crate) struct SearchPath(parking_lot::RwLock<Arc<Vec<String>>>);

impl Default for SearchPath {
    fn default() -> Self {
        SearchPath(parking_lot::RwLock::new(Arc::new(vec![SCHEMA.to_string()])))
    }
}

/// The sequence an unqualified `name` (`nextval('s')`) means: in the first schema of the
/// path holding a relation of that name; `public`'s otherwise.
pub(crate) fn sequence_resolver(
    path: &Arc<SearchPath>,
    stored: &Arc<TierSchema>,
) -> crate::rows::sequence::Resolve {
    let path = path.clone();
    let stored = stored.clone();
    Arc::new(move |name: &str| {
        let path = path.0.read().clone();
        if path.len() == 1 && path[0] == SCHEMA {
            return name.to_string();
        }
        for s in existing_now(&stored, &path) {
            let q = qualified(&s, name);
            if SchemaProvider::table_exist(stored.as_ref(), &q) {
                return q;
            }
        }
        name.to_string()
    })
}

/// The session's view of the catalog, for the resolution.
struct SessionRelations<'a>(&'a SqlSession);

impl Relations for SessionRelations<'_> {
    fn exists(&self, name: &str) -> bool {
        SchemaProvider::table_exist(self.0.schema.as_ref(), name)
    }
    fn schema_exists(&self, schema: &str) -> bool {
        self.0.schema.schema_names().iter().any(|s| s == schema)
    }
    fn is_temp(&self, name: &str) -> bool {
        self.0.temp.has(name)
    }
}

impl SqlSession {
    /// `SET search_path`: `schemas` in order, lower-cased unless quoted, without `"$user"`
    /// (invariant 5). Plans kept for prepared statements are made again (invariant 6);
    /// `current_schema()` and `current_schemas()` answer from it.
    pub fn set_search_path(&self, schemas: Vec<String>) {
        let path = Arc::new(schemas);
        *self.search_path.0.write() = path.clone();
        self.settings_changed();
        self.ctx
            .register_udf(current_schema_udf(self.schema.clone(), path.clone()));
        self.ctx
            .register_udf(current_schemas_udf(self.schema.clone(), path));
    }

    /// The path as set (`SHOW search_path`, `current_setting`).
    pub fn search_path(&self) -> Vec<String> {
        self.search_path.0.read().as_ref().clone()
    }

    /// Qualifies `stmt`'s relation names by the path (the module doc); called after the
    /// catalog refresh of the statement.
    pub(super) fn qualify(&self, stmt: &mut DfStatement) -> Result<()> {
        let path = self.search_path.0.read().clone();
        if path.len() == 1 && path[0] == SCHEMA {
            return Ok(());
        }
        qualify(stmt, &path, &SessionRelations(self))
    }

    /// The catalog name ([`qualified`]) relation `name` resolves to (COPY's table).
    pub async fn resolve_relation(&self, name: &ObjectName) -> Result<String> {
        self.schema.refresh().await?;
        let path = self.search_path.0.read().clone();
        let mut name = name.clone();
        let rel = SessionRelations(self);
        if !is_default(&path, &rel) {
            let schemas = existing(&path, &|s| rel.schema_exists(s));
            let mut q = Qualifier {
                schemas: &schemas,
                rel: &rel,
                ctes: Default::default(),
                error: None,
            };
            q.reference(&mut name);
            if let Some(e) = q.error {
                return Err(e);
            }
        }
        super::relation_name(&name).ok_or_else(|| TableError::NoTable(name.to_string()))
    }
}

/// The existing schemas of `path` now (schemas created after the SET count).
fn existing_now(stored: &TierSchema, path: &[String]) -> Vec<String> {
    let schemas = stored.schema_names();
    existing(path, &|s| schemas.iter().any(|n| n == s))
}

/// `current_schema()`: the first schema of the path that exists (NULL if none does).
fn current_schema_udf(stored: Arc<TierSchema>, path: Arc<Vec<String>>) -> ScalarUDF {
    create_udf(
        "current_schema",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_: &[ColumnarValue]| {
            let first = existing_now(&stored, &path).into_iter().next();
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(first)))
        }),
    )
}

/// `current_schemas(include_implicit)`: the existing schemas of the path, `pg_catalog`
/// first when asked for the implicit ones (as PostgreSQL lists them).
fn current_schemas_udf(stored: Arc<TierSchema>, path: Arc<Vec<String>>) -> ScalarUDF {
    let item = Arc::new(Field::new("item", DataType::Utf8, true));
    create_udf(
        "current_schemas",
        vec![DataType::Boolean],
        DataType::List(item.clone()),
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let implicit = arrays[0].as_boolean();
            let mut lists = ListBuilder::new(StringBuilder::new()).with_field(item.clone());
            for i in 0..implicit.len() {
                if implicit.is_null(i) {
                    lists.append_null();
                    continue;
                }
                if implicit.value(i) && !path.iter().any(|s| s == "pg_catalog") {
                    lists.values().append_value("pg_catalog");
                }
                for s in existing_now(&stored, &path) {
                    lists.values().append_value(s);
                }
                lists.append(true);
            }
            Ok(ColumnarValue::Array(Arc::new(lists.finish())))
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        names: Vec<&'static str>,
        schemas: Vec<&'static str>,
        temp: Vec<&'static str>,
    }

    impl Relations for Fake {
        fn exists(&self, name: &str) -> bool {
            self.names.contains(&name)
        }
        fn schema_exists(&self, schema: &str) -> bool {
            self.schemas.contains(&schema)
        }
        fn is_temp(&self, name: &str) -> bool {
            self.temp.contains(&name)
        }
    }

    fn fake() -> Fake {
        Fake {
            names: vec!["a", "b", "s1.a", "s1.c", "s2.c", "s2.d"],
            schemas: vec!["s1", "s2"],
            temp: vec!["tmp"],
        }
    }

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    fn run(sql: &str, p: &[&str]) -> Result<String> {
        let mut stmt = crate::sql::parse(sql)?.remove(0);
        qualify(&mut stmt, &path(p), &fake())?;
        Ok(stmt.to_string())
    }

    #[test]
    fn the_default_path_touches_nothing() {
        for p in [
            &["public"][..],
            &["public", "nosuch"],
            &["nosuch", "public"],
        ] {
            assert_eq!(run("SELECT * FROM c", p).unwrap(), "SELECT * FROM c");
        }
    }

    #[test]
    fn a_name_resolves_to_the_first_schema_holding_it() {
        assert_eq!(
            run(
                "SELECT * FROM a JOIN c ON true JOIN d ON true",
                &["s1", "s2", "public"]
            )
            .unwrap(),
            "SELECT * FROM \"s1\".a JOIN \"s1\".c ON true JOIN \"s2\".d ON true"
        );
        assert_eq!(
            run("SELECT * FROM a, b", &["public", "s1"]).unwrap(),
            "SELECT * FROM a, b"
        );
        // Qualified names, CTEs and temporary tables are kept.
        assert_eq!(
            run(
                "WITH c AS (SELECT 1) SELECT * FROM c, public.a, tmp, (SELECT * FROM c) x",
                &["s1", "public"]
            )
            .unwrap(),
            "WITH c AS (SELECT 1) SELECT * FROM c, public.a, tmp, (SELECT * FROM c) x"
        );
        // A CTE's name is its own only in its scope.
        assert_eq!(
            run(
                "SELECT * FROM (WITH c AS (SELECT 1) SELECT * FROM c) x, c",
                &["s2", "public"]
            )
            .unwrap(),
            "SELECT * FROM (WITH c AS (SELECT 1) SELECT * FROM c) x, \"s2\".c"
        );
    }

    #[test]
    fn writes_and_ddl_name_the_resolved_relation() {
        let p = &["s1", "public"];
        assert_eq!(
            run("INSERT INTO c SELECT * FROM b", p).unwrap(),
            "INSERT INTO \"s1\".c SELECT * FROM b"
        );
        assert_eq!(
            run("UPDATE a SET x = 1", p).unwrap(),
            "UPDATE \"s1\".a SET x = 1"
        );
        assert_eq!(run("DROP TABLE a, b", p).unwrap(), "DROP TABLE \"s1\".a, b");
        assert_eq!(
            run("COMMENT ON COLUMN c.x IS 'y'", p).unwrap(),
            "COMMENT ON COLUMN \"s1\".c.x IS 'y'"
        );
        assert_eq!(
            run("ALTER TABLE c RENAME TO e", p).unwrap(),
            "ALTER TABLE \"s1\".c RENAME TO e"
        );
    }

    #[test]
    fn create_goes_to_the_first_existing_schema() {
        assert_eq!(
            run("CREATE TABLE a (x INT)", &["nosuch", "s2", "s1"]).unwrap(),
            "CREATE TABLE \"s2\".a (x INT)"
        );
        assert_eq!(
            run("CREATE VIEW v AS SELECT * FROM c", &["s2"]).unwrap(),
            "CREATE VIEW \"s2\".v AS SELECT * FROM \"s2\".c"
        );
        let e = run("CREATE TABLE z (x INT)", &["nosuch"]).unwrap_err();
        assert!(e.to_string().contains("no schema has been selected"), "{e}");
    }

    #[test]
    fn public_left_off_the_path_hides_its_relations() {
        let e = run("SELECT * FROM b", &["s1"]).unwrap_err();
        assert!(
            e.to_string().contains("relation \"b\" does not exist"),
            "{e}"
        );
        // A name nobody holds is left to fail where it is used.
        assert_eq!(
            run("SELECT * FROM zz", &["s1"]).unwrap(),
            "SELECT * FROM zz"
        );
    }
}
