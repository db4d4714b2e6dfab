//! The names PostgreSQL gives a query's result columns, sent in RowDescription in place
//! of DataFusion's (`count` for `count(*)`, `?column?` for `1 + 1`; the rules are
//! `tierdb_tables::sql::colnames`).
//!
//! Invariants:
//! 1. Only names change, never the plan: PostgreSQL allows two columns of one name, a
//!    DataFusion projection does not, so the names are applied to the RowDescription.
//! 2. An aliased item keeps its alias; a `*` stands for columns whose names DataFusion
//!    gives: items before the first `*` are matched from the left, items after the last
//!    from the right, and if the counts cannot match nothing is renamed.
//! 3. Applied to catalog queries too, as `catalogsql.rs` rewrote them: an item the rewrite
//!    left (`count(*)`, `c.relname`) gets PostgreSQL's name (`count`, as drivers read it
//!    by name; DataFusion's was `count(*)`); an item it replaced is named after what
//!    replaced it, as DataFusion named it before. Aliased items keep their aliases.

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::results::FieldInfo;
use tierdb_tables::sql::colnames::{ResultNames, of_statement};

/// The names to send for a result's columns.
#[derive(Debug, PartialEq)]
pub(crate) struct Names(ResultNames);

/// The names to send for `stmt`'s rows: PostgreSQL's (invariant 3); `None` keeps
/// DataFusion's.
pub(crate) fn for_client(stmt: &Statement) -> Option<Names> {
    of_statement(stmt).map(Names)
}

impl Names {
    /// The new name of column `i` of `n` (invariant 2).
    fn at(&self, i: usize, n: usize) -> Option<&str> {
        if !self.0.wildcard {
            return self.0.front.get(i)?.as_deref();
        }
        if i < self.0.front.len() {
            return self.0.front[i].as_deref();
        }
        let from_end = n - 1 - i;
        let k = self.0.back.len().checked_sub(1 + from_end)?;
        self.0.back.get(k)?.as_deref()
    }

    /// `fields` with PostgreSQL's names (unchanged if the counts cannot match).
    pub(crate) fn apply(&self, fields: Vec<FieldInfo>) -> Vec<FieldInfo> {
        let n = fields.len();
        let fits = if self.0.wildcard {
            self.0.front.len() + self.0.back.len() <= n
        } else {
            self.0.front.len() == n
        };
        if !fits {
            return fields;
        }
        fields
            .into_iter()
            .enumerate()
            .map(|(i, f)| match self.at(i, n) {
                Some(name) if name != f.name() => FieldInfo::new(
                    name.to_string(),
                    f.table_id(),
                    f.column_id(),
                    f.datatype().clone(),
                    f.format(),
                )
                .with_format_options(f.format_options().clone())
                .with_type_size(f.type_size())
                .with_type_modifier(f.type_modifier()),
                _ => f,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
