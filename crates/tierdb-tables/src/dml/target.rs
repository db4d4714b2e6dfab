//! An UPDATE or DELETE turned into the query that names the rows it changes.
//!
//! `DELETE FROM t [AS a] [USING u, …] [WHERE w]` becomes
//! `SELECT a.__tierdb_segment, a.__tierdb_row FROM __tierdb_rows_of_t AS a [, u, …] [WHERE w]`
//! and `UPDATE t [AS a] SET c = e, … [FROM u, …] [WHERE w]` becomes the same with every
//! column of `t` after the two ids: `e AS c` where assigned, `a.c` where not. The WHERE
//! clause, its subqueries (correlated or not), the USING/FROM lists and the assigned
//! expressions are the user's own syntax trees, untouched; only the target relation is
//! renamed, to the row-id view of the same table (`rowid.rs`), under the name (or alias)
//! the statement's expressions use for it. A subquery that names `t` again reads `t`
//! itself, as of the statement's start, as in PostgreSQL.
//!
//! Whatever DataFusion can plan as a query is therefore a filter DML can use, and the
//! rows changed are exactly the rows that query returns. What this module cannot express
//! (RETURNING, tuple assignments, MySQL's multi-table DELETE, ORDER BY/LIMIT) is refused
//! before anything is read or written.

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Delete, Expr as SqlExpr, FromTable, Ident, ObjectName, ObjectNamePart,
    SelectItem, SetExpr, Statement as SqlStatement, TableAlias, TableFactor, TableWithJoins,
    Update, UpdateTableFromKind,
};

use crate::error::{Result, TableError};

/// The name prefix under which the schema provider serves a table's row-id view. Reserved:
/// no table may be created with it, no statement may name it.
pub(crate) const ROWS_PREFIX: &str = "__tierdb_rows_of_";
/// The row-id view's segment column: the index of the segment in the scan's segment list.
pub(crate) const SEGMENT_COLUMN: &str = "__tierdb_segment";
/// The row-id view's row column: the row's position in its segment (0-based).
pub(crate) const ROW_COLUMN: &str = "__tierdb_row";

/// Which statement it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmlKind {
    Delete,
    Update,
}

/// An UPDATE or DELETE, read off its syntax tree.
#[derive(Debug, Clone)]
pub(crate) struct DmlTarget {
    pub kind: DmlKind,
    /// The target table's name as the catalog knows it (identifiers normalized).
    pub table: String,
    /// UPDATE: (column name as written, normalized; assigned expression), in statement order.
    pub assignments: Vec<(String, SqlExpr)>,
    relation: TableFactor,
    /// The name the statement's expressions use for the target (its alias, or its name).
    qualifier: Ident,
    from: Vec<TableWithJoins>,
    selection: Option<SqlExpr>,
    /// RETURNING: the query also carries every column's value (DELETE: as the row was),
    /// which `sql/dml_returning.rs` projects the items over. Row tables only.
    pub returning: bool,
}

/// Whether `stmt` is an UPDATE or DELETE (run by this module, never by DataFusion's DML).
pub(crate) fn is_update_or_delete(stmt: &DfStatement) -> bool {
    matches!(
        stmt,
        DfStatement::Statement(s) if matches!(s.as_ref(), SqlStatement::Update(_) | SqlStatement::Delete(_))
    )
}

/// An identifier as DataFusion resolves it: unquoted ones are lower-cased.
pub(crate) fn normalize(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

fn unsupported(what: &str) -> TableError {
    TableError::Unsupported(format!(
        "{what} is not supported by tierdb; nothing was changed"
    ))
}

fn last_ident(name: &ObjectName) -> Result<Ident> {
    match name.0.last().and_then(ObjectNamePart::as_ident) {
        Some(i) => Ok(i.clone()),
        None => Err(TableError::Schema(format!(
            "cannot read the table name {name}"
        ))),
    }
}

impl DmlTarget {
    /// Reads an UPDATE or DELETE; `None` for any other statement.
    pub(crate) fn parse(stmt: &DfStatement) -> Result<Option<Self>> {
        let DfStatement::Statement(s) = stmt else {
            return Ok(None);
        };
        match s.as_ref() {
            SqlStatement::Delete(d) => Self::delete(d).map(Some),
            SqlStatement::Update(u) => Self::update(u).map(Some),
            _ => Ok(None),
        }
    }

    fn delete(d: &Delete) -> Result<Self> {
        if !d.tables.is_empty() {
            return Err(unsupported(
                "DELETE of several tables (DELETE t1, t2 FROM …)",
            ));
        }
        if d.output.is_some() {
            return Err(unsupported("DELETE … OUTPUT"));
        }
        if !d.order_by.is_empty() || d.limit.is_some() {
            return Err(unsupported("DELETE … ORDER BY / LIMIT"));
        }
        let from = match &d.from {
            FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
        };
        let [target] = from.as_slice() else {
            return Err(unsupported(
                "DELETE FROM several tables (name one table; join others with USING)",
            ));
        };
        let mut out = Self::relation(DmlKind::Delete, target)?;
        out.returning = d.returning.is_some();
        out.from = d.using.clone().unwrap_or_default();
        out.selection = d.selection.clone();
        Ok(out)
    }

    fn update(u: &Update) -> Result<Self> {
        if u.output.is_some() {
            return Err(unsupported("UPDATE … OUTPUT"));
        }
        if u.or.is_some() || !u.order_by.is_empty() || u.limit.is_some() {
            return Err(unsupported("UPDATE OR …, UPDATE … ORDER BY / LIMIT"));
        }
        let mut out = Self::relation(DmlKind::Update, &u.table)?;
        out.returning = u.returning.is_some();
        out.from = match &u.from {
            Some(UpdateTableFromKind::BeforeSet(f) | UpdateTableFromKind::AfterSet(f)) => f.clone(),
            None => Vec::new(),
        };
        out.selection = u.selection.clone();
        for a in &u.assignments {
            let AssignmentTarget::ColumnName(name) = &a.target else {
                return Err(unsupported("UPDATE … SET (a, b) = (…)"));
            };
            let column = normalize(&last_ident(name)?);
            if out.assignments.iter().any(|(c, _)| *c == column) {
                return Err(TableError::Transaction {
                    code: "42601",
                    message: format!("multiple assignments to same column \"{column}\""),
                });
            }
            out.assignments.push((column, a.value.clone()));
        }
        Ok(out)
    }

    fn relation(kind: DmlKind, target: &TableWithJoins) -> Result<Self> {
        if !target.joins.is_empty() {
            return Err(unsupported(
                "a join in the target of UPDATE/DELETE (join other tables with FROM/USING)",
            ));
        }
        let TableFactor::Table { name, alias, .. } = &target.relation else {
            return Err(unsupported("UPDATE/DELETE of anything but a table"));
        };
        let ident = last_ident(name)?;
        // The qualified name (`s.t` in schema s): the last part alone would name `public.t`.
        let table =
            crate::sql::relation_name(name).ok_or_else(|| TableError::NoTable(name.to_string()))?;
        if normalize(&ident).starts_with(ROWS_PREFIX) {
            return Err(TableError::NoTable(table));
        }
        let qualifier = alias.as_ref().map_or(ident, |a| a.name.clone());
        Ok(DmlTarget {
            kind,
            table,
            assignments: Vec::new(),
            relation: target.relation.clone(),
            qualifier,
            from: Vec::new(),
            selection: None,
            returning: false,
        })
    }

    /// The WHERE as `column = value` conjuncts on the target, if it is nothing else and the
    /// statement joins no other table: what a row table's short path can take
    /// (`rows/fastdml.rs`).
    pub(crate) fn key_equalities(&self) -> Option<Vec<(String, SqlExpr)>> {
        if !self.from.is_empty() {
            return None;
        }
        let qualifier = crate::sql::ident_name(&self.qualifier);
        crate::rows::fast::equalities(self.selection.as_ref()?, &qualifier)
    }

    /// The query naming the rows to change: the segment and row ids, then (UPDATE) every
    /// column of the table in order, `columns`, with its new value.
    #[cfg(test)]
    pub(crate) fn select(&self, columns: &[String]) -> Result<SqlStatement> {
        self.select_with_ids(columns, &[SEGMENT_COLUMN, ROW_COLUMN])
    }

    /// [`DmlTarget::select`] with other id columns (a row table's key: `rows/dml.rs`).
    pub(crate) fn select_with_ids(&self, columns: &[String], ids: &[&str]) -> Result<SqlStatement> {
        for (c, _) in &self.assignments {
            if !columns.contains(c) {
                return Err(TableError::Transaction {
                    code: "42703",
                    message: format!(
                        "column \"{c}\" of relation \"{}\" does not exist",
                        self.table
                    ),
                });
            }
        }
        let qualified = |column: &str| {
            SelectItem::UnnamedExpr(SqlExpr::CompoundIdentifier(vec![
                self.qualifier.clone(),
                Ident::with_quote('"', column),
            ]))
        };
        let mut projection: Vec<SelectItem> = ids.iter().map(|c| qualified(c)).collect();
        if self.kind == DmlKind::Update || self.returning {
            for c in columns {
                projection.push(match self.assignments.iter().find(|(a, _)| a == c) {
                    Some((_, e)) => SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::with_quote('"', c),
                    },
                    None => qualified(c),
                });
            }
        }
        let mut relation = self.relation.clone();
        if let TableFactor::Table { name, alias, .. } = &mut relation {
            let mut parts = name.0.clone();
            parts.pop();
            parts.push(ObjectNamePart::Identifier(Ident::with_quote(
                '"',
                format!(
                    "{ROWS_PREFIX}{}",
                    crate::sql::split_qualified(&self.table).1
                ),
            )));
            *name = ObjectName(parts);
            if alias.is_none() {
                *alias = Some(TableAlias {
                    explicit: true,
                    name: self.qualifier.clone(),
                    columns: Vec::new(),
                    at: None,
                });
            }
        }
        let mut from = vec![TableWithJoins {
            relation,
            joins: Vec::new(),
        }];
        from.extend(self.from.iter().cloned());
        let mut stmt = crate::sql::parse("SELECT 1")?
            .into_iter()
            .next()
            .ok_or_else(|| TableError::Schema("cannot build the DML query".into()))?;
        let DfStatement::Statement(s) = &mut stmt else {
            return Err(TableError::Schema("cannot build the DML query".into()));
        };
        let SqlStatement::Query(q) = s.as_mut() else {
            return Err(TableError::Schema("cannot build the DML query".into()));
        };
        let SetExpr::Select(select) = q.body.as_mut() else {
            return Err(TableError::Schema("cannot build the DML query".into()));
        };
        select.projection = projection;
        select.from = from;
        select.selection = self.selection.clone();
        Ok(*s.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(sql: &str) -> Result<DmlTarget> {
        let stmt = crate::sql::parse(sql)?.pop().expect("one statement");
        Ok(DmlTarget::parse(&stmt)?.expect("an UPDATE or DELETE"))
    }

    fn select(sql: &str, columns: &[&str]) -> String {
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        target(sql)
            .and_then(|t| t.select(&columns))
            .map(|s| s.to_string())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn delete_keeps_the_whole_where_clause_and_renames_only_the_target() {
        assert_eq!(
            select("DELETE FROM a WHERE id IN (SELECT id FROM b)", &["id", "v"]),
            "SELECT a.\"__tierdb_segment\", a.\"__tierdb_row\" FROM \"__tierdb_rows_of_a\" AS a \
             WHERE id IN (SELECT id FROM b)"
        );
        assert_eq!(
            select(
                "DELETE FROM a AS x USING b WHERE x.id = b.id AND NOT EXISTS (SELECT 1 FROM a WHERE a.id > x.id)",
                &["id"]
            ),
            "SELECT x.\"__tierdb_segment\", x.\"__tierdb_row\" FROM \"__tierdb_rows_of_a\" AS x, b \
             WHERE x.id = b.id AND NOT EXISTS (SELECT 1 FROM a WHERE a.id > x.id)"
        );
        assert_eq!(
            select("DELETE FROM public.\"A\"", &["id"]),
            "SELECT \"A\".\"__tierdb_segment\", \"A\".\"__tierdb_row\" FROM public.\"__tierdb_rows_of_A\" AS \"A\""
        );
    }

    #[test]
    fn update_projects_every_column_with_its_new_value() {
        assert_eq!(
            select(
                "UPDATE a SET v = b.w || 'x' FROM b WHERE a.id = b.id",
                &["id", "v"]
            ),
            "SELECT a.\"__tierdb_segment\", a.\"__tierdb_row\", a.\"id\", b.w || 'x' AS \"v\" \
             FROM \"__tierdb_rows_of_a\" AS a, b WHERE a.id = b.id"
        );
    }

    #[test]
    fn what_cannot_be_done_right_is_refused() {
        for sql in ["UPDATE a SET (id, v) = (1, 2)", "DELETE FROM a, b"] {
            let e = target(sql).err().map(|e| e.sqlstate());
            assert_eq!(e, Some("0A000"), "{sql}");
        }
        let e = target("UPDATE a SET v = 1, v = 2")
            .err()
            .map(|e| e.sqlstate());
        assert_eq!(e, Some("42601"));
        let e = target("UPDATE a SET nope = 1")
            .and_then(|t| t.select(&["id".into()]))
            .err()
            .map(|e| e.sqlstate());
        assert_eq!(e, Some("42703"));
        let e = target("DELETE FROM __tierdb_rows_of_a")
            .err()
            .map(|e| e.sqlstate());
        assert_eq!(e, Some("42P01"));
    }
}
