//! What views read, and how they follow it: PostgreSQL binds a view to the relations it
//! reads by OID, so a view keeps working after `ALTER TABLE … RENAME TO` or `SET SCHEMA`
//! of what it reads, and `DROP` of a relation a view reads is refused unless `CASCADE`
//! drops the view too. tierdb keeps a view as its query's text with every name resolved
//! (`views.rs`, `docs/design/schemas.md`), so it gets the same by rewriting that text.
//!
//! Invariants:
//!
//! 1. A view *reads* a relation when its stored query names it (its catalog name, as
//!    `sql::relation_name` resolves it) as a relation outside the reach of a `WITH` name
//!    of that name (`views.rs` invariant 3).
//! 2. A commit that renames or moves tables or views (`RENAME TO`, `SET SCHEMA`,
//!    `ALTER SCHEMA … RENAME TO`) writes again, in the same commit, every view that reads
//!    one of them, naming the new names, and every moved view under its new name: a view
//!    reads after the move what it read before it ([`follow`]).
//! 3. `DROP TABLE|VIEW` without `CASCADE` of a relation that a view outside the statement
//!    reads fails with 2BP01 and drops nothing; with `CASCADE` those views, and the views
//!    that read them, are dropped in the same commit ([`Dependents`]).
//! 4. A stored query that does not parse is left as it is (a damaged view is reported
//!    when it is read, not by an unrelated rename); it reads nothing as far as a DROP can
//!    tell.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, Query, Statement, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

use crate::catalog::CatalogBatch;
use crate::error::{Result, TableError};
use crate::sql::{relation_name, split_qualified};
use crate::views::ViewDef;

/// What a DROP does with the views that read what it drops (invariant 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dependents {
    /// Refuse the DROP (2BP01): `DROP … RESTRICT`, the default.
    Restrict,
    /// Drop them too: `DROP … CASCADE`.
    Cascade,
    /// Leave them (they fail when read until the name is back): the drops tierdb makes
    /// itself, such as `CREATE OR REPLACE TABLE` replacing a table under its name.
    Keep,
}

impl Dependents {
    /// The behaviour a statement's `CASCADE` flag asks for.
    pub fn cascade_if(cascade: bool) -> Self {
        if cascade {
            Dependents::Cascade
        } else {
            Dependents::Restrict
        }
    }

    /// The views of `views` to drop with the relations `dropped` (invariant 3): empty for
    /// [`Dependents::Keep`]; the error for [`Dependents::Restrict`] if there are any.
    /// `kind` names what is dropped in the message (`table`, `view`).
    pub(crate) fn resolve(
        self,
        views: &[ViewDef],
        dropped: &[String],
        kind: &str,
    ) -> Result<Vec<String>> {
        if self == Dependents::Keep {
            return Ok(Vec::new());
        }
        let found = dependents(views, dropped);
        match (self, found.first()) {
            (Dependents::Restrict, Some((view, read))) => Err(TableError::Column {
                code: "2BP01",
                message: format!(
                    "cannot drop {kind} {read} because other objects depend on it (view \
                     {view} depends on {kind} {read}); use DROP … CASCADE to drop the \
                     dependent objects too"
                ),
            }),
            _ => Ok(found.into_iter().map(|(view, _)| view).collect()),
        }
    }
}

/// What a DROP of tables or views did: which of the names existed, and the views it
/// dropped with them because they read them (`CASCADE`), in the order found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dropped {
    pub existed: Vec<bool>,
    pub cascaded: Vec<String>,
}

/// PostgreSQL's NOTICE for the objects a `DROP … CASCADE` took with it (each as `kind
/// name`: `view v`, `table s.t`): the message and, for more than one, the DETAIL listing
/// each; `None` when it took none.
pub fn cascade_notice(cascaded: &[String]) -> Option<(String, Option<String>)> {
    match cascaded {
        [] => None,
        [one] => Some((format!("drop cascades to {one}"), None)),
        many => Some((
            format!("drop cascades to {} other objects", many.len()),
            Some(
                many.iter()
                    .map(|v| format!("drop cascades to {v}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        )),
    }
}

/// The relations `view` reads (invariant 1; none if its query does not parse).
pub fn reads(view: &ViewDef) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    if let Some(mut query) = parsed(&view.query) {
        let _ = query.visit(&mut Names {
            renames: &HashMap::new(),
            ctes: Default::default(),
            found: &mut found,
            changed: false,
        });
    }
    found
}

/// The views that read any of `dropped` and are not dropped themselves, with what each
/// reads that goes, then the views that read those, and so on (invariant 3); in the order
/// found, each once.
fn dependents(views: &[ViewDef], dropped: &[String]) -> Vec<(String, String)> {
    let reading: Vec<(&str, BTreeSet<String>)> =
        views.iter().map(|v| (v.name.as_str(), reads(v))).collect();
    let mut gone: HashSet<String> = dropped.iter().cloned().collect();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for (view, read) in &reading {
            if gone.contains(*view) {
                continue;
            }
            if let Some(r) = read.iter().find(|r| gone.contains(*r)) {
                out.push((view.to_string(), r.clone()));
                gone.insert(view.to_string());
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Puts into `b` what makes `views` follow `renames` (old catalog name → new, of the
/// tables and views one commit renames or moves; invariant 2): each view that moves is
/// deleted under its old name and written under its new one, each that reads a renamed
/// relation is written with its query naming the new name.
pub(crate) fn follow(views: &[ViewDef], renames: &HashMap<String, String>, b: &mut CatalogBatch) {
    if renames.is_empty() {
        return;
    }
    for view in views {
        let query = renamed_query(&view.query, renames);
        let name = renames.get(&view.name);
        if query.is_none() && name.is_none() {
            continue;
        }
        let mut def = view.clone();
        if let Some(q) = query {
            def.query = q;
        }
        if let Some(n) = name {
            b.delete_view(&view.name);
            def.name = n.clone();
        }
        b.put_view(&def);
    }
}

/// `query` naming the new names of `renames` wherever it reads an old one; `None` if it
/// reads none of them (or does not parse: invariant 4).
fn renamed_query(query: &str, renames: &HashMap<String, String>) -> Option<String> {
    let mut q = parsed(query)?;
    let mut found = BTreeSet::new();
    let mut names = Names {
        renames,
        ctes: Default::default(),
        found: &mut found,
        changed: false,
    };
    let _ = q.visit(&mut names);
    names.changed.then(|| q.to_string())
}

fn parsed(query: &str) -> Option<Query> {
    match crate::sql::parse(query).ok()?.pop()? {
        DfStatement::Statement(s) => match *s {
            Statement::Query(q) => Some(*q),
            _ => None,
        },
        _ => None,
    }
}

/// Catalog name `name` as a SQL name: `t` or `s.t`, a part quoted only where it must be
/// (not lower-case letters, digits and `_`, or a keyword).
fn sql_name(name: &str) -> ObjectName {
    let part = |p: &str| {
        let plain = p
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && ALL_KEYWORDS
                .binary_search(&p.to_ascii_uppercase().as_str())
                .is_err();
        if plain {
            Ident::new(p)
        } else {
            Ident::with_quote('"', p)
        }
    };
    let parts = if name.contains('.') {
        let (s, t) = split_qualified(name);
        vec![part(s), part(t)]
    } else {
        vec![part(name)]
    };
    ObjectName::from(parts)
}

/// Finds (and renames) the relations a query reads, minding `WITH` names (invariant 1).
struct Names<'a> {
    renames: &'a HashMap<String, String>,
    /// The names `WITH` clauses define where the visitor is.
    ctes: crate::sql::withnames::WithNames,
    found: &'a mut BTreeSet<String>,
    changed: bool,
}

impl VisitorMut for Names<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.ctes.enter(query);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.ctes.leave();
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name, args: None, ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some(key) = relation_name(name) else {
            return ControlFlow::Continue(());
        };
        if name.0.len() == 1 && self.ctes.defines(&key) {
            return ControlFlow::Continue(());
        }
        if let Some(new) = self.renames.get(&key) {
            *name = sql_name(new);
            self.changed = true;
        }
        self.found.insert(key);
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, query: &str) -> ViewDef {
        ViewDef {
            name: name.into(),
            columns: vec![],
            query: query.into(),
            created_ms: 0,
            fields: vec![],
            comments: Default::default(),
        }
    }

    fn renames(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_view_reads_what_it_names_outside_with_names() {
        let v = view(
            "v",
            "WITH t AS (SELECT 1 AS x) SELECT * FROM t, u JOIN an.w ON true \
             WHERE u.a IN (SELECT a FROM \"Mixed\")",
        );
        let got: Vec<String> = reads(&v).into_iter().collect();
        assert_eq!(got, ["Mixed", "an.w", "u"]);
        // A WITH name hides only the unqualified name, and only inside its query.
        let v = view(
            "v",
            "SELECT * FROM (WITH t AS (SELECT 1) SELECT * FROM t) s, t",
        );
        assert_eq!(reads(&v).into_iter().collect::<Vec<_>>(), ["t"]);
        assert!(reads(&view("v", "not sql at all")).is_empty());
    }

    #[test]
    fn renamed_names_are_written_back_quoted_only_where_needed() {
        let r = renames(&[("t", "an.t2"), ("u", "Big"), ("w", "order")]);
        let got = renamed_query("SELECT t.a, u.b FROM t, u, public.w AS x", &r).unwrap();
        assert_eq!(got, "SELECT t.a, u.b FROM an.t2, \"Big\", \"order\" AS x");
        // Nothing renamed: nothing to write.
        assert_eq!(renamed_query("SELECT * FROM other", &r), None);
        // A WITH name is not the table.
        assert_eq!(
            renamed_query("WITH t AS (SELECT 1) SELECT * FROM t", &r),
            None
        );
    }

    #[test]
    fn dependents_are_found_through_views_once_each() {
        let views = [
            view("a", "SELECT * FROM t"),
            view("b", "SELECT * FROM a"),
            view("c", "SELECT * FROM b JOIN t ON true"),
            view("d", "SELECT * FROM other"),
        ];
        let got = dependents(&views, &["t".to_string()]);
        let names: Vec<&str> = got.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        // Views dropped by the statement itself are no obstacle.
        assert!(dependents(&views, &["d".into(), "other".into()]).is_empty());
        let err = Dependents::Restrict
            .resolve(&views, &["t".to_string()], "table")
            .unwrap_err();
        assert!(
            err.to_string().contains("view a depends on table t"),
            "{err}"
        );
        assert_eq!(
            Dependents::Cascade
                .resolve(&views, &["a".to_string()], "view")
                .unwrap(),
            ["b", "c"]
        );
        assert!(
            Dependents::Keep
                .resolve(&views, &["t".to_string()], "table")
                .unwrap()
                .is_empty()
        );
    }
}
