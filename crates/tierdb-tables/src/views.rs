//! Views: a name for a query, kept in the catalog (`Tv` + name) as the query's text, and
//! expanded into every statement that reads it before the statement is planned, as
//! PostgreSQL's rewriter does. A view so always reads the tables as they are when the
//! statement runs (a plan kept from `CREATE VIEW` would hold that moment's segments).
//!
//! Invariants:
//!
//! 1. Tables and views share one namespace: neither is created over the other's name.
//! 2. A view is checked when it is created: its query (views in it expanded) must plan.
//! 3. A name a `WITH` clause defines hides a view of that name inside that query.
//! 4. Views nest at most [`MAX_DEPTH`] deep (a view cannot name itself through others).
//! 5. Views are read-only: INSERT, UPDATE and DELETE naming one are refused (0A000).

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Ident, Query, Statement, TableAlias, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut,
};
use serde::{Deserialize, Serialize};

use crate::catalog::{self, CatalogBatch};
use crate::error::{Result, TableError};
use crate::sql::relation_name;
use crate::tables::Tables;

/// How deep views may nest (invariant 4).
pub const MAX_DEPTH: usize = 16;

/// A stored view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewDef {
    pub name: String,
    /// Column names given in `CREATE VIEW v (a, b)`; empty: the query's own.
    pub columns: Vec<String>,
    /// The query, as sqlparser writes it back.
    pub query: String,
    pub created_ms: u64,
    /// Its columns as of CREATE VIEW (names and types), for catalog listings only (psql
    /// `\dv`, `information_schema.views`): a statement reading the view plans its query
    /// again. A type tierdb does not store is listed as text.
    #[serde(default)]
    pub fields: Vec<crate::catalog::ColumnDef>,
    /// COMMENT ON VIEW and COMMENT ON COLUMN of its columns (kept through CREATE OR
    /// REPLACE for the columns it still has, as PostgreSQL keeps them).
    #[serde(default, skip_serializing_if = "catalog::Comments::is_empty")]
    pub comments: catalog::Comments,
}

impl ViewDef {
    fn parsed(&self) -> Result<Query> {
        match crate::sql::parse(&self.query)?.pop() {
            Some(DfStatement::Statement(s)) => match *s {
                Statement::Query(q) => Ok(*q),
                other => Err(damaged(&self.name, &format!("not a query: {other}"))),
            },
            _ => Err(damaged(&self.name, "no query")),
        }
    }
}

fn damaged(name: &str, why: &str) -> TableError {
    TableError::Damaged {
        key: format!("view {name}"),
        reason: why.to_string(),
    }
}

impl Tables {
    pub async fn view(&self, name: &str) -> Result<Option<ViewDef>> {
        catalog::get_view(self.reader.as_ref(), name).await
    }

    pub async fn views(&self) -> Result<Vec<ViewDef>> {
        catalog::list_views(self.reader.as_ref()).await
    }

    /// Stores `def` (replacing a view of that name with `or_replace`); the caller has
    /// checked that its query plans (invariant 2).
    pub async fn create_view(&self, def: ViewDef, or_replace: bool) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        self.require_namespace(&def.name).await?;
        if self.table(&def.name).await?.is_some()
            || (!or_replace && self.view(&def.name).await?.is_some())
        {
            return Err(TableError::TableExists(def.name));
        }
        let mut def = def;
        if let Some(old) = self.view(&def.name).await? {
            def.comments.table = old.comments.table;
            for (column, text) in old.comments.columns {
                if def.fields.iter().any(|f| f.name == column) {
                    def.comments.set_column(&column, Some(text));
                }
            }
        }
        let mut b = CatalogBatch::default();
        b.put_view(&def);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }

    /// COMMENT ON VIEW (`column` None) or COMMENT ON COLUMN of a view's column: `text`
    /// None removes it. One commit.
    pub async fn comment_on_view(
        &self,
        name: &str,
        column: Option<&str>,
        text: Option<String>,
    ) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let Some(mut def) = self.view(name).await? else {
            if column.is_none() && self.table(name).await?.is_some() {
                return Err(TableError::Column {
                    code: "42809",
                    message: format!("\"{name}\" is not a view"),
                });
            }
            return Err(TableError::NoTable(format!("{name} (no such view)")));
        };
        match column {
            None => def.comments.table = text,
            Some(c) if def.fields.iter().any(|f| f.name == c) => def.comments.set_column(c, text),
            Some(c) => {
                return Err(TableError::Column {
                    code: "42703",
                    message: format!("column \"{c}\" of relation \"{name}\" does not exist"),
                });
            }
        }
        let mut b = CatalogBatch::default();
        b.put_view(&def);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }

    /// Renames view `name` to `new` (`ALTER TABLE|VIEW … RENAME TO`, as PostgreSQL allows
    /// both on a view), one commit; the views that read it follow (`viewdeps.rs`
    /// invariant 2).
    pub async fn rename_view(&self, name: &str, new: &str) -> Result<()> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        if self.view(name).await?.is_none() {
            return Err(TableError::NoTable(format!("{name} (no such view)")));
        }
        if self.table(new).await?.is_some() || self.view(new).await?.is_some() {
            return Err(TableError::TableExists(new.to_string()));
        }
        let mut b = CatalogBatch::default();
        let renames = HashMap::from([(name.to_string(), new.to_string())]);
        crate::viewdeps::follow(&self.views().await?, &renames, &mut b);
        self.commit_catalog(kv, b).await?;
        Ok(())
    }

    /// Drops the views of `names` in one commit: all of them or, if one does not exist
    /// and not `if_exists`, none; the views that read them as `dependents` says
    /// (`viewdeps.rs` invariant 3). Returns the views dropped because they read them.
    pub async fn drop_views(
        &self,
        names: &[String],
        if_exists: bool,
        dependents: crate::viewdeps::Dependents,
    ) -> Result<Vec<String>> {
        let kv = self.kv_writer()?;
        let _guard = self.commit_lock.lock().await;
        let mut b = CatalogBatch::default();
        let mut dropped = Vec::new();
        for name in names {
            match self.view(name).await? {
                Some(_) => dropped.push(name.clone()),
                None if if_exists => {}
                None => {
                    return Err(TableError::NoTable(format!("{name} (no such view)")));
                }
            }
        }
        let cascaded = dependents.resolve(&self.views().await?, &dropped, "view")?;
        for name in dropped.iter().chain(&cascaded) {
            b.delete_view(name);
        }
        self.commit_catalog(kv, b).await?;
        Ok(cascaded)
    }
}

/// Replaces every view `stmt` reads with its query (recursively), as a derived table
/// named like the view. Fails with 0A000 when a view is the target of a write. `known`
/// is the schema's list of views as of its last refresh: a statement naming none of them
/// costs no catalog read.
pub async fn expand(
    tables: &Tables,
    known: &crate::provider::TierSchema,
    stmt: &mut DfStatement,
) -> Result<()> {
    let s = match stmt {
        DfStatement::Statement(s) => s,
        // EXPLAIN plans the statement it names, views expanded as when it runs.
        DfStatement::Explain(e) => return Box::pin(expand(tables, known, &mut e.statement)).await,
        _ => return Ok(()),
    };
    let names = named_relations(s.as_mut());
    if !names.iter().any(|n| known.has_view(n)) {
        return Ok(());
    }
    let stored = tables.views().await?;
    if stored.is_empty() {
        return Ok(());
    }
    let views: HashMap<String, ViewDef> = stored.into_iter().map(|v| (v.name.clone(), v)).collect();
    refuse_write_targets(s, &views)?;
    let mut expanded = HashMap::new();
    for name in names {
        if views.contains_key(&name) {
            expand_view(&name, &views, &mut expanded, 0)?;
        }
    }
    rewrite(s.as_mut(), &expanded);
    Ok(())
}

/// `name`'s query with the views in it expanded, into `done` (invariant 4 bounds it).
fn expand_view(
    name: &str,
    views: &HashMap<String, ViewDef>,
    done: &mut HashMap<String, (Query, Vec<String>)>,
    depth: usize,
) -> Result<()> {
    if done.contains_key(name) {
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(TableError::Schema(format!(
            "view {name}: views nest more than {MAX_DEPTH} deep (or refer to themselves)"
        )));
    }
    let Some(def) = views.get(name) else {
        return Ok(());
    };
    let mut query = def.parsed()?;
    let mut inner = HashMap::new();
    for n in named_relations(&mut query) {
        if views.contains_key(&n) {
            expand_view(&n, views, &mut inner, depth + 1)?;
        }
    }
    rewrite(&mut query, &inner);
    done.extend(inner);
    done.insert(name.to_string(), (query, def.columns.clone()));
    Ok(())
}

/// Every plain relation name in `node` (candidates for views).
fn named_relations<T: VisitMut>(node: &mut T) -> HashSet<String> {
    let mut names = HashSet::new();
    let _ = datafusion::sql::sqlparser::ast::visit_relations_mut(node, |n| {
        if let Some(name) = relation_name(n) {
            names.insert(name);
        }
        ControlFlow::<()>::Continue(())
    });
    names
}

/// Invariant 5.
fn refuse_write_targets(stmt: &Statement, views: &HashMap<String, ViewDef>) -> Result<()> {
    let target = match stmt {
        Statement::Insert(i) => match &i.table {
            datafusion::sql::sqlparser::ast::TableObject::TableName(n) => relation_name(n),
            _ => None,
        },
        Statement::Update(u) => match &u.table.relation {
            TableFactor::Table { name, .. } => relation_name(name),
            _ => None,
        },
        Statement::Delete(d) => match &d.from {
            datafusion::sql::sqlparser::ast::FromTable::WithFromKeyword(t)
            | datafusion::sql::sqlparser::ast::FromTable::WithoutKeyword(t) => {
                t.first().and_then(|t| match &t.relation {
                    TableFactor::Table { name, .. } => relation_name(name),
                    _ => None,
                })
            }
        },
        _ => None,
    };
    match target {
        Some(name) if views.contains_key(&name) => Err(TableError::Unsupported(format!(
            "cannot change rows through view {name}: tierdb views are read-only; write to \
             the tables it reads"
        ))),
        _ => Ok(()),
    }
}

/// Replaces the relations `expanded` names in `node` by their queries.
fn rewrite<T: VisitMut>(node: &mut T, expanded: &HashMap<String, (Query, Vec<String>)>) {
    if expanded.is_empty() {
        return;
    }
    let mut v = Expander {
        expanded,
        ctes: Default::default(),
    };
    let _ = node.visit(&mut v);
}

struct Expander<'a> {
    expanded: &'a HashMap<String, (Query, Vec<String>)>,
    /// The names `WITH` clauses define where the visitor is (invariant 3).
    ctes: crate::sql::withnames::WithNames,
}

impl VisitorMut for Expander<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.ctes.enter(query);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.ctes.leave();
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some(key) = relation_name(name) else {
            return ControlFlow::Continue(());
        };
        if self.ctes.defines(&key) {
            return ControlFlow::Continue(());
        }
        let Some((query, columns)) = self.expanded.get(&key) else {
            return ControlFlow::Continue(());
        };
        let named = |name: &str| TableAliasColumnDef {
            name: Ident::new(name),
            data_type: None,
        };
        let alias = match alias.clone() {
            Some(mut a) if a.columns.is_empty() => {
                a.columns = columns.iter().map(|c| named(c)).collect();
                a
            }
            Some(a) => a,
            None => TableAlias {
                explicit: true,
                name: Ident::new(key.clone()),
                columns: columns.iter().map(|c| named(c)).collect(),
                at: None,
            },
        };
        *factor = TableFactor::Derived {
            lateral: false,
            subquery: Box::new(query.clone()),
            alias: Some(alias),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}

/// A view as the catalog listings see it (pg_class, information_schema): its name,
/// columns and query. Never scanned: statements read views through [`expand`].
#[derive(Debug)]
pub struct ViewListing {
    def: ViewDef,
    schema: datafusion::arrow::datatypes::SchemaRef,
}

impl ViewListing {
    pub fn new(def: ViewDef) -> Self {
        let schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(
            def.fields
                .iter()
                .map(|c| {
                    datafusion::arrow::datatypes::Field::new(&c.name, c.ty.arrow(), c.nullable)
                })
                .collect::<Vec<_>>(),
        ));
        ViewListing { def, schema }
    }
}

#[async_trait::async_trait]
impl datafusion::catalog::TableProvider for ViewListing {
    fn schema(&self) -> datafusion::arrow::datatypes::SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> datafusion::datasource::TableType {
        datafusion::datasource::TableType::View
    }

    fn get_table_definition(&self) -> Option<&str> {
        Some(&self.def.query)
    }

    async fn scan(
        &self,
        _state: &dyn datafusion::catalog::Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[datafusion::logical_expr::Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>
    {
        Err(datafusion::error::DataFusionError::Plan(format!(
            "view {} was not expanded before planning (a tierdb bug; please report it)",
            self.def.name
        )))
    }
}
