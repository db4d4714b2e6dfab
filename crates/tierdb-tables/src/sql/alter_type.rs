//! `ALTER TABLE t ALTER COLUMN c [SET DATA] TYPE ty [USING expr]` (Django's AlterField,
//! Rails' change_column): every row is read through one query that casts the column as
//! `CAST(expr AS ty)` casts (PostgreSQL's rules: 22P02 for text that is no number, 22003
//! out of range, 22001 too long for `VARCHAR(n)`), and written again in the new type.
//! `ALTER TABLE t DROP COLUMN c` on a row table is the same rewrite without the column
//! (its rows hold their columns by position).
//!
//! Invariants:
//!
//! 1. All or nothing: the table's new definition and its rewritten rows (new segments, or
//!    every KV row with its index entries) go in one catalog commit; a value the cast
//!    refuses fails the statement before that commit, and segments already written are
//!    deleted (`write.rs`). Readers see the table before or after.
//! 2. No row is lost or doubled. A columnar table commits only if its segments are still
//!    those the query read, else 40001 and nothing changes (the client retries); background
//!    merges of the table wait meanwhile. A row table holds the row commit gate from before
//!    the query until its commit: no row commit runs in between, so the query read every
//!    committed row and nothing else (`rows/retype.rs`).
//! 3. A transaction that wrote rows of the table with its old columns cannot commit them
//!    after (40001: `alter.rs` rule 4). A transaction that has written rows of the table
//!    may not run it: the query would read its uncommitted rows into the committed table
//!    (its writes of other tables and its DDL are no hindrance: the query reads this
//!    table only); nor may a REPEATABLE READ transaction that has read: the query would
//!    read its snapshot and drop the rows committed since (0A000).
//! 4. Keys and indexes follow the new type: each row's key and index entries are encoded
//!    again; two rows whose keys (or unique index values) become equal fail with 23505.
//! 5. The other columns, NOT NULL, the DEFAULT text, comments and the ingest order are
//!    kept; a column's DEFAULT is cast to the new type when rows are inserted, as before.
//! 6. Without USING, only PostgreSQL's assignment casts are taken (numbers among numbers,
//!    anything to text, dates and timestamps among themselves, JSON and JSONB); others
//!    fail with 42804 and ask for USING. A value too long for `VARCHAR(n)`/`CHAR(n)` fails
//!    with 22001, as an assignment does, where `CAST` would cut it. With USING, the
//!    expression's value is cast as `CAST` casts it (PostgreSQL refuses a USING result
//!    with no assignment cast to the type; tierdb converts it).

use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast};
use datafusion::sql::sqlparser::ast::{DataType, Expr as SqlExpr};

use super::{SqlSession, ident_name, quoted_relation};
use crate::catalog::ColumnType;
use crate::error::{Result, TableError};

/// One `ALTER COLUMN … TYPE` of a statement.
pub(super) struct Retype<'a> {
    pub column: &'a datafusion::sql::sqlparser::ast::Ident,
    pub data_type: &'a DataType,
    pub using: Option<&'a SqlExpr>,
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl SqlSession {
    /// Changes the types of the columns `retypes` names in table `name` (invariants above).
    pub(super) async fn alter_column_types(
        &self,
        name: &str,
        retypes: &[Retype<'_>],
    ) -> Result<()> {
        if self.temp.has(name) {
            return Err(TableError::Unsupported(format!(
                "ALTER COLUMN … TYPE on the temporary table {name} is not supported: create it \
                 again with the new type"
            )));
        }
        let before = self.tables.require(name).await?;
        self.refuse_rewrite_in_transaction("ALTER COLUMN … TYPE", &before)?;
        let mut after = before.clone();
        // Every row is written again with all its columns: none reads a missing value.
        after.missing.clear();
        let mut items: Vec<Option<String>> = vec![None; before.columns.len()];
        for r in retypes {
            let column = ident_name(r.column);
            let Some(i) = before.column_index(&column) else {
                return Err(TableError::Column {
                    code: "42703",
                    message: format!("column \"{column}\" of relation \"{name}\" does not exist"),
                });
            };
            if items[i].is_some() {
                return Err(TableError::Column {
                    code: "42601",
                    message: format!("column \"{column}\" is altered twice"),
                });
            }
            let probe = datafusion::sql::sqlparser::ast::ColumnDef {
                name: r.column.clone(),
                data_type: r.data_type.clone(),
                options: Vec::new(),
            };
            let (from, to) = (before.columns[i].ty, self.column_def(&probe).await?.ty);
            after.columns[i].ty = to;
            if r.using.is_none() && !assignable(from, to) {
                return Err(TableError::Column {
                    code: "42804",
                    message: format!(
                        "column \"{column}\" cannot be cast automatically to type {}; add \
                         USING {}::{}",
                        pg_name(to),
                        quoted(&column),
                        r.data_type
                    ),
                });
            }
            let value = r
                .using
                .map_or_else(|| quoted(&column), |e| format!("({e})"));
            // A length is checked, not cut to (rule 6): the values go to TEXT, and the
            // write checks VARCHAR(n)/CHAR(n) as every INSERT does.
            let target = match to {
                ColumnType::Varchar { .. } | ColumnType::Char { .. } => "TEXT".to_string(),
                _ => r.data_type.to_string(),
            };
            items[i] = Some(format!("CAST({value} AS {target}) AS {}", quoted(&column)));
        }
        if after == before && retypes.iter().all(|r| r.using.is_none()) {
            return Ok(());
        }
        let select: Vec<String> = before
            .columns
            .iter()
            .zip(items)
            .map(|(c, item)| item.unwrap_or_else(|| quoted(&c.name)))
            .collect();
        self.rewrite(&before, &after, &select).await
    }

    /// `ALTER TABLE … DROP COLUMN` on a row table: its rows hold their columns by
    /// position (`rows/format.rs`), so they are written again without the dropped ones
    /// (invariants above). Indexes over a dropped column go with it, as in PostgreSQL; a
    /// primary key column cannot be dropped (0A000: the table's rows are keyed by it).
    pub(super) async fn drop_row_columns(
        &self,
        name: &str,
        columns: &[(String, bool)],
    ) -> Result<()> {
        let before = self.tables.require(name).await?;
        self.refuse_rewrite_in_transaction("DROP COLUMN", &before)?;
        let mut after = before.clone();
        // Every row is written again with all its columns: none reads a missing value.
        after.missing.clear();
        for (column, if_exists) in columns {
            let Some(i) = after.column_index(column) else {
                if *if_exists {
                    self.notice(
                        "00000",
                        &format!(
                            "column \"{column}\" of relation \"{name}\" does not exist, skipping"
                        ),
                    );
                    continue;
                }
                return Err(TableError::Column {
                    code: "42703",
                    message: format!("column \"{column}\" of relation \"{name}\" does not exist"),
                });
            };
            if after.primary_key.contains(column) {
                return Err(TableError::Unsupported(format!(
                    "column {column} is in the primary key of {name}, by which its rows are \
                     kept; it cannot be dropped"
                )));
            }
            if after.columns.len() == 1 {
                return Err(TableError::Column {
                    code: "0A000",
                    message: format!("column {column} is the only column of {name}"),
                });
            }
            after.columns.remove(i);
            after.indexes.retain(|x| !x.columns.contains(column));
            after.defaults.retain(|(c, _)| c != column);
            after.missing.retain(|(c, _)| c != column);
            after.comments.set_column(column, None);
        }
        if after == before {
            return Ok(());
        }
        let select: Vec<String> = after.columns.iter().map(|c| quoted(&c.name)).collect();
        self.rewrite(&before, &after, &select).await?;
        // A SERIAL column's sequence goes with it, as in PostgreSQL (a commit of its own:
        // a crash in between leaves the sequence, unused).
        let owned: Vec<String> = self
            .tables
            .sequences()
            .await?
            .into_iter()
            .filter(|q| {
                q.owned_by.as_deref() == Some(name)
                    && q.owned_column
                        .as_ref()
                        .is_some_and(|c| after.column_index(c).is_none())
            })
            .map(|q| q.name)
            .collect();
        if !owned.is_empty() {
            self.tables.drop_sequences(&owned, true).await?;
        }
        Ok(())
    }

    /// Invariant 3: the query must read every committed row and nothing else.
    fn refuse_rewrite_in_transaction(
        &self,
        what: &str,
        def: &crate::catalog::TableDef,
    ) -> Result<()> {
        let Some(tx) = self.abort.slot.current() else {
            return Ok(());
        };
        if tx.wrote(def.id) {
            return Err(TableError::Unsupported(format!(
                "{what} of {} in a transaction that has written rows of it is not supported \
                 (it would read them before they are committed): COMMIT first, or run it \
                 before the transaction writes the table",
                def.name
            )));
        }
        if tx.reads_a_snapshot() {
            return Err(TableError::Unsupported(format!(
                "{what} in a REPEATABLE READ transaction that has read is not supported (it \
                 would rewrite the table as of the transaction's snapshot, without the rows \
                 committed since): run it outside the transaction or under READ COMMITTED"
            )));
        }
        Ok(())
    }

    /// Writes every row of `before` again as `after`'s, each column's value given by
    /// `select`'s item (SQL over the table), and commits the two together.
    async fn rewrite(
        &self,
        before: &crate::catalog::TableDef,
        after: &crate::catalog::TableDef,
        select: &[String],
    ) -> Result<()> {
        let name = before.name.as_str();
        let sql = format!(
            "SELECT {} FROM {}",
            select.join(", "),
            quoted_relation(name)
        );
        // Merges of the table's segments wait (a merge's commit would make ours fail).
        let _merges = crate::merge::DmlGuard::acquire(self.tables.merge_state(), name).await;
        // Row tables: no row commit until ours (invariant 2).
        let _gate = if before.is_row_table() {
            Some(self.tables.row_state().gate.write().await)
        } else {
            None
        };
        let segments = self.tables.segments(before).await?;
        let stmt = super::parse(&sql)?
            .pop()
            .ok_or_else(|| TableError::Schema(format!("ALTER TABLE: cannot plan {sql}")))?;
        let plan = self
            .plan_unguarded(&stmt)
            .await?
            .ok_or_else(|| TableError::Schema(format!("ALTER TABLE: cannot plan {sql}")))?;
        // Each column exactly as the table now declares it (the cast's own type can be a
        // wider one, e.g. Utf8View for VARCHAR(n)).
        let schema = after.schema();
        let exprs: Vec<Expr> = schema
            .fields()
            .iter()
            .zip(plan.schema().columns())
            .map(|(f, c)| cast(Expr::Column(c), f.data_type().clone()).alias(f.name()))
            .collect();
        let plan = LogicalPlanBuilder::from(plan).project(exprs)?.build()?;
        let ctx = self.local_ctx();
        let df = ctx.execute_logical_plan(plan).await?;
        if before.is_row_table() {
            let stream = df.execute_stream().await?;
            let rows = crate::rows::retype::rows(&self.tables, before, after, stream).await?;
            self.tables
                .commit_rewrite(before, after, &segments, Vec::new(), rows)
                .await?;
        } else {
            let physical = df.create_physical_plan().await?;
            let sorted = crate::write::sorted_plan(after, physical)?;
            let written =
                crate::write::write_plan(&self.tables, after, sorted, ctx.task_ctx(), &|_| {})
                    .await?;
            self.tables
                .commit_rewrite(before, after, &segments, written, Default::default())
                .await?;
        }
        self.schema.refresh().await?;
        Ok(())
    }
}

/// Whether PostgreSQL converts a `from` column to `to` without USING: an implicit or
/// assignment cast exists (`pg_cast.castcontext` `i` or `a`) for these types.
fn assignable(from: ColumnType, to: ColumnType) -> bool {
    use ColumnType as T;
    let number = |t| {
        matches!(
            t,
            T::Int16
                | T::Int32
                | T::Int64
                | T::Float32
                | T::Float64
                | T::Decimal { .. }
                | T::Numeric
        )
    };
    let text = |t| {
        matches!(
            t,
            T::Utf8 | T::VarcharUnbounded | T::Varchar { .. } | T::Char { .. }
        )
    };
    let time = |t| matches!(t, T::Date32 | T::Timestamp | T::TimestampTz);
    let json = |t| matches!(t, T::Json | T::Jsonb);
    from == to
        || text(to)
        || (number(from) && number(to))
        || (time(from) && time(to))
        || (matches!(from, T::Timestamp | T::TimestampTz) && to == T::Time)
        || (json(from) && json(to))
}

/// PostgreSQL's name of a column type (`format_type`), for messages.
fn pg_name(t: ColumnType) -> String {
    use ColumnType as T;
    match t {
        T::Boolean => "boolean".into(),
        T::Int16 => "smallint".into(),
        T::Int32 => "integer".into(),
        T::Int64 => "bigint".into(),
        T::Float32 => "real".into(),
        T::Float64 => "double precision".into(),
        T::Utf8 => "text".into(),
        T::VarcharUnbounded => "character varying".into(),
        T::Varchar { len } => format!("character varying({len})"),
        T::Char { len } => format!("character({len})"),
        T::Date32 => "date".into(),
        T::Decimal { precision, scale } => format!("numeric({precision},{scale})"),
        T::Numeric => "numeric".into(),
        T::Timestamp => "timestamp without time zone".into(),
        T::TimestampTz => "timestamp with time zone".into(),
        T::Time => "time without time zone".into(),
        T::Binary => "bytea".into(),
        T::Uuid => "uuid".into(),
        T::Json => "json".into(),
        T::Jsonb => "jsonb".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_casts_are_postgresqls() {
        use ColumnType as T;
        assert!(assignable(T::Int32, T::Int64));
        assert!(assignable(
            T::Decimal {
                precision: 10,
                scale: 2
            },
            T::Int16
        ));
        assert!(assignable(T::Boolean, T::Utf8));
        assert!(assignable(T::Utf8, T::Varchar { len: 3 }));
        assert!(assignable(T::Date32, T::TimestampTz));
        assert!(assignable(T::Json, T::Jsonb));
        assert!(!assignable(T::Utf8, T::Int32));
        assert!(!assignable(T::Int32, T::Boolean));
        assert!(!assignable(T::Boolean, T::Int32));
        assert!(!assignable(T::Utf8, T::Uuid));
        assert!(!assignable(T::Time, T::Timestamp));
    }
}
