//! ALTER TABLE on the catalog: RENAME TO, ADD COLUMN, DROP COLUMN, ALTER COLUMN SET/DROP
//! NOT NULL; and COMMENT ON TABLE / COLUMN. Each is one atomic
//! catalog commit that touches no segment file, so it takes the same time on any table.
//!
//! Invariants:
//!
//! 1. Segment files are never rewritten here. A segment is read by column name: a column
//!    added later is missing from older files and reads as NULL; a dropped column stays in
//!    older files, unread.
//! 2. The extent map stays aligned with the columns: the same commit gives every segment
//!    an entry for an added column (no min/max, all rows NULL) and takes the dropped
//!    column's entry out.
//! 3. A dropped name is remembered ([`TableDef::dropped`]) and cannot be added again, or
//!    older files would answer for it.
//! 4. A transaction that wrote rows with the table's old columns cannot commit them after
//!    another session's change (40001; `Tables::commit_writes`); after its own, they
//!    follow the change (`ownddl.rs`).
//! 6. ADD COLUMN … DEFAULT gives the rows already there the default's value, evaluated
//!    once, as PostgreSQL 11 and later do: a row table keeps it in the definition
//!    ([`TableDef::missing`]) and its older, shorter rows read it (`rows/format.rs`
//!    invariant 1), nothing rewritten. A columnar table's segments cannot read it, so
//!    there a non-NULL default is refused while the table has rows (0A000: add the
//!    column, then UPDATE it), as is a volatile default on any table with rows.
//! 5. SET NOT NULL holds for the rows already there: the extent map's exact null counts
//!    say whether any committed value is NULL (23502 if one is); rows written meanwhile by
//!    other transactions cannot commit (rule 4). On a row table (rows in the KV engine, no
//!    counts) every committed row is read while no row commit can run (the row commit
//!    gate, held for the whole ALTER); a transaction that wrote rows of the table before
//!    cannot commit them after (40001; `rows::index::check_tables`).

use crate::catalog::{self, CatalogBatch, ColumnDef, ColumnStats, TableDef};
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// One change of ALTER TABLE.
#[derive(Debug, Clone)]
pub enum TableChange {
    RenameTo(String),
    AddColumn {
        column: ColumnDef,
        if_not_exists: bool,
        /// ADD COLUMN … DEFAULT (rule 6).
        default: Option<AddedDefault>,
    },
    /// ALTER COLUMN … SET NOT NULL (`true`) or DROP NOT NULL (`false`).
    NotNull {
        name: String,
        not_null: bool,
    },
    DropColumn {
        name: String,
        if_exists: bool,
    },
    /// RENAME COLUMN `from` TO `to` (row tables: their rows hold columns by position).
    RenameColumn {
        from: String,
        to: String,
    },
    /// ALTER COLUMN … SET DEFAULT (the expression's SQL text, planned once to check it) or
    /// DROP DEFAULT (`None`).
    Default {
        name: String,
        sql: Option<String>,
    },
    /// COMMENT ON TABLE (`column` None) or COLUMN … IS 'text' (`text` None: IS NULL, the
    /// description removed).
    Comment {
        column: Option<String>,
        text: Option<String>,
    },
}

/// The DEFAULT of a column ADD COLUMN adds (rule 6).
#[derive(Debug, Clone)]
pub struct AddedDefault {
    /// The expression's SQL text, kept as the column's DEFAULT.
    pub sql: String,
    /// Its value, evaluated once when the column is added, in the column's type.
    pub value: datafusion::common::ScalarValue,
    /// Whether it may change from row to row (`random()`, `nextval`).
    pub volatile: bool,
}

fn column_error(code: &'static str, message: String) -> TableError {
    TableError::Column { code, message }
}

impl Tables {
    /// Applies `changes` to table `name` in one atomic catalog commit (all or none).
    pub async fn alter_table(&self, name: &str, changes: &[TableChange]) -> Result<()> {
        let kv = self.kv_writer()?;
        // No row commit runs while the table changes (rule 5), taken before the commit
        // lock as a transaction's commit takes them.
        let _gate = self.row_state().gate.write().await;
        let _guard = self.commit_lock.lock().await;
        let old = self.require(name).await?;
        let mut def = old.clone();
        let mut segments = self.segments(&old).await?;
        for change in changes {
            apply(self, &mut def, &mut segments, change).await?;
        }
        def.validate()?;
        let mut b = CatalogBatch::default();
        if def.name != old.name {
            b.delete_table(&old.name);
        }
        b.put_table(&def);
        // The table's sequences follow a renamed table and renamed columns, in the same
        // commit (they are dropped with the table they name).
        let renames: Vec<(&String, &String)> = changes
            .iter()
            .filter_map(|c| match c {
                TableChange::RenameColumn { from, to } => Some((from, to)),
                _ => None,
            })
            .collect();
        if def.name != old.name || !renames.is_empty() {
            for mut s in self.sequences().await? {
                if s.owned_by.as_deref() != Some(old.name.as_str()) {
                    continue;
                }
                s.owned_by = Some(def.name.clone());
                for (from, to) in &renames {
                    if s.owned_column.as_deref() == Some(from.as_str()) {
                        s.owned_column = Some((*to).clone());
                    }
                }
                b.put_sequence(&s);
            }
        }
        if def.columns != old.columns {
            for s in &segments {
                b.put_segment(def.id, s);
            }
        }
        if def.name != old.name {
            // Views that read it follow (viewdeps.rs invariant 2).
            let renames = std::collections::HashMap::from([(old.name.clone(), def.name.clone())]);
            crate::viewdeps::follow(&self.views().await?, &renames, &mut b);
        }
        self.commit_catalog(kv, b).await?;
        Ok(())
    }
}

async fn apply(
    tables: &Tables,
    def: &mut TableDef,
    segments: &mut [catalog::SegmentMeta],
    change: &TableChange,
) -> Result<()> {
    match change {
        TableChange::RenameTo(new) => {
            if tables.table(new).await?.is_some() || tables.view(new).await?.is_some() {
                return Err(TableError::TableExists(new.clone()));
            }
            def.name = new.clone();
        }
        TableChange::AddColumn {
            column,
            if_not_exists,
            default,
        } => {
            if def.column_index(&column.name).is_some() {
                if *if_not_exists {
                    return Ok(());
                }
                return Err(column_error(
                    "42701",
                    format!(
                        "column {} of relation {} already exists",
                        column.name, def.name
                    ),
                ));
            }
            if def.dropped.contains(&column.name) {
                return Err(column_error(
                    "0A000",
                    format!(
                        "column {} of {} was dropped and its old values are still in the \
                         table's segments; add the column under another name",
                        column.name, def.name
                    ),
                ));
            }
            let has_rows = segments.iter().any(|s| s.rows > 0)
                || (def.is_row_table() && crate::rows::any_row(tables, def).await?);
            // Rule 6.
            let value = default.as_ref().map(|d| &d.value).filter(|v| !v.is_null());
            if has_rows && default.as_ref().is_some_and(|d| d.volatile) {
                return Err(column_error(
                    "0A000",
                    format!(
                        "ADD COLUMN {} with a volatile DEFAULT on {}, a table with rows, is not \
                         supported (each row would need its own value): add the column, then \
                         UPDATE it",
                        column.name, def.name
                    ),
                ));
            }
            if has_rows && value.is_some() && !def.is_row_table() {
                return Err(column_error(
                    "0A000",
                    format!(
                        "ADD COLUMN {} with a DEFAULT on {}, a table without a PRIMARY KEY that \
                         has rows, is not supported (its segments cannot read the value): add \
                         the column, then UPDATE it",
                        column.name, def.name
                    ),
                ));
            }
            if !column.nullable && value.is_none() && has_rows {
                return Err(column_error(
                    "23502",
                    format!(
                        "column \"{}\" of relation \"{}\" contains null values",
                        column.name, def.name
                    ),
                ));
            }
            def.columns.push(column.clone());
            if let Some(d) = default {
                def.defaults.push((column.name.clone(), d.sql.clone()));
            }
            if let Some(v) = value
                && def.is_row_table()
            {
                let text = crate::rows::format::missing_text(column.ty, v)?;
                def.missing.push((column.name.clone(), text));
            }
            for s in segments.iter_mut() {
                s.columns.push(ColumnStats {
                    min: None,
                    max: None,
                    nulls: s.rows,
                });
            }
        }
        TableChange::RenameColumn { from, to } => {
            let Some(i) = def.column_index(from) else {
                return Err(column_error(
                    "42703",
                    format!(
                        "column \"{from}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                ));
            };
            if def.column_index(to).is_some() {
                return Err(column_error(
                    "42701",
                    format!(
                        "column \"{to}\" of relation \"{}\" already exists",
                        def.name
                    ),
                ));
            }
            if !def.is_row_table() {
                // Segments name their columns in their Parquet schemas; a renamed column
                // would read as missing (NULL) from every segment written before.
                return Err(column_error(
                    "0A000",
                    format!(
                        "RENAME COLUMN on {}, a table without a PRIMARY KEY (its segments name \
                         their columns), is not supported: add a column, UPDATE it from the old \
                         one, then drop the old one",
                        def.name
                    ),
                ));
            }
            let rename = |c: &mut String| {
                if c == from {
                    *c = to.clone();
                }
            };
            def.columns[i].name = to.clone();
            def.primary_key.iter_mut().for_each(rename);
            for index in &mut def.indexes {
                index.columns.iter_mut().for_each(rename);
            }
            for (c, _) in def.defaults.iter_mut().chain(def.missing.iter_mut()) {
                rename(c);
            }
            def.comments.rename_column(from, to);
        }
        TableChange::Comment { column: None, text } => def.comments.table = text.clone(),
        TableChange::Comment {
            column: Some(c),
            text,
        } => {
            if def.column_index(c).is_none() {
                return Err(column_error(
                    "42703",
                    format!("column \"{c}\" of relation \"{}\" does not exist", def.name),
                ));
            }
            def.comments.set_column(c, text.clone());
        }
        TableChange::Default { name, sql } => {
            if def.column_index(name).is_none() {
                return Err(column_error(
                    "42703",
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                ));
            }
            def.defaults.retain(|(c, _)| c != name);
            if let Some(sql) = sql {
                def.defaults.push((name.clone(), sql.clone()));
            }
        }
        TableChange::NotNull { name, not_null } => {
            let Some(i) = def.column_index(name) else {
                return Err(column_error(
                    "42703",
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                ));
            };
            if !*not_null && def.primary_key.contains(name) {
                return Err(column_error(
                    "42P16",
                    format!("column \"{name}\" is in a primary key"),
                ));
            }
            if *not_null && def.columns[i].nullable {
                // Rule 5. A segment written before the column was added has no entry: all
                // of its rows are NULL there.
                let nulls: u64 = segments
                    .iter()
                    .map(|s| s.columns.get(i).map_or(s.rows, |c| c.nulls))
                    .sum();
                if nulls > 0
                    || (def.is_row_table() && crate::rows::any_null(tables, def, i).await?)
                {
                    return Err(column_error(
                        "23502",
                        format!(
                            "column \"{name}\" of relation \"{}\" contains null values",
                            def.name
                        ),
                    ));
                }
            }
            def.columns[i].nullable = !*not_null;
        }
        TableChange::DropColumn { name, if_exists } => {
            let Some(i) = def.column_index(name) else {
                if *if_exists {
                    return Ok(());
                }
                return Err(column_error(
                    "42703",
                    format!("column {name} of relation {} does not exist", def.name),
                ));
            };
            if def.sort_key.contains(name) || def.partition_key.as_ref() == Some(name) {
                return Err(column_error(
                    "0A000",
                    format!(
                        "column {name} is a key of {} (ORDER BY or PARTITION BY) and cannot \
                         be dropped",
                        def.name
                    ),
                ));
            }
            if def.columns.len() == 1 {
                return Err(column_error(
                    "0A000",
                    format!("column {name} is the only column of {}", def.name),
                ));
            }
            def.columns.remove(i);
            def.dropped.push(name.clone());
            def.comments.set_column(name, None);
            for s in segments.iter_mut() {
                if i < s.columns.len() {
                    s.columns.remove(i);
                }
            }
        }
    }
    Ok(())
}

impl Tables {
    /// Commits a rewrite of `before` (ALTER COLUMN … TYPE, `sql/alter_type.rs`): `after`
    /// in its place, `written` (uploaded segments) in place of `segments`, and `rows` (the
    /// row table's KV rows and entries), if the table and its segments are still `before`
    /// and `segments`; else 40001, nothing committed, `written` deleted. When the commit's
    /// outcome is unknown, `written` stays (the catalog may name it).
    pub(crate) async fn commit_rewrite(
        &self,
        before: &TableDef,
        after: &TableDef,
        segments: &[catalog::SegmentMeta],
        written: Vec<catalog::SegmentMeta>,
        mut rows: CatalogBatch,
    ) -> Result<()> {
        let guard = self.commit_lock.lock().await;
        let prepared = async {
            let kv = self.kv_writer()?;
            let now = self.table(&before.name).await?;
            let current = match &now {
                Some(def) => self.segments(def).await?,
                None => Vec::new(),
            };
            let same = now.as_ref() == Some(before)
                && current.len() == segments.len()
                && current.iter().zip(segments).all(|(a, b)| a.path == b.path);
            if !same {
                return Err(TableError::Conflict(format!(
                    "table {} changed while its rows were being rewritten in the new column \
                     types; nothing was changed, retry",
                    before.name
                )));
            }
            Ok((kv, catalog::next_id(self.reader.as_ref()).await?))
        }
        .await;
        let (kv, mut next) = match prepared {
            Ok(p) => p,
            Err(e) => {
                drop(guard);
                self.discard(&written).await;
                return Err(e);
            }
        };
        let at = tierdb_kv::lease::now_ms();
        for s in segments {
            rows.delete_segment(before.id, s.id);
            rows.retire(s, at);
        }
        let mut kept = Vec::with_capacity(written.len());
        for mut s in written {
            s.id = next;
            next += 1;
            rows.put_segment(after.id, &s);
            kept.push(s);
        }
        rows.set_next_id(next);
        rows.put_table(after);
        let committed = self.commit_catalog(kv, rows).await;
        self.done_writing(&kept);
        drop(guard);
        committed?;
        if !after.is_row_table() {
            self.publish_delta(after, &kept).await;
        }
        Ok(())
    }
}
