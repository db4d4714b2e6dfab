//! A transaction's own DDL over the rows it already wrote. DDL in a transaction commits
//! to the catalog at once, with undo records (`ddlundo.rs`); the transaction's writes of
//! the table were made for its definition before. As in PostgreSQL, where `BEGIN; INSERT
//! INTO t …; CREATE INDEX ON t …; ALTER TABLE t ADD COLUMN …; COMMIT` commits all of it
//! (Alembic runs every migration of an upgrade in one transaction), the writes follow:
//!
//! | the transaction wrote | what follows a change of the table |
//! |---|---|
//! | segments of a columnar table (`txn.rs`) | [`follow_segments`]: the extent map of each written segment gets an all-NULL entry for an added column and loses a dropped one's; a column made NOT NULL is checked against its null counts (23502) |
//! | rows of a row table (`rows/txn.rs`) | `rows/follow.rs`: entries in created indexes (unique ones checked, 23505), those in dropped indexes forgotten, a column made NOT NULL checked (23502) |
//!
//! Invariants:
//!
//! 1. Followed after every DDL statement of the transaction, before it returns, for every
//!    table the transaction wrote; a failure fails the statement (the transaction aborts
//!    and its ROLLBACK undoes the DDL).
//! 2. Only what still means the same is followed: segments are read by column name, so
//!    a segment follows any change that keeps each of its columns' type (a column of the
//!    same name and another type was rewritten: not followed); rows hold their columns by
//!    position, see `rows/follow.rs`. What is not followed fails its COMMIT with 40001 as
//!    before (`Tables::commit_writes`, `rows::index::check_tables`).
//! 3. ROLLBACK TO SAVEPOINT puts back the writes as they were at the savepoint, with the
//!    DDL it undoes (`txn.rs`: the followed writes' earlier forms are kept until then).
//! 4. The segment files are never rewritten: a column added later is missing from them and
//!    reads as NULL (`alter.rs` invariant 1).
//! 5. TRUNCATE takes the transaction's own writes of the table with the committed rows
//!    (`Transaction::truncated`): what the transaction wrote before is gone at COMMIT, as
//!    in PostgreSQL; what it writes after stays. (Segment files it wrote stay until
//!    VACUUM: ROLLBACK TO SAVEPOINT may bring them back.)

use crate::catalog::{ColumnStats, TableDef};
use crate::error::{Result, TableError};
use crate::tables::PendingWrite;

/// `w` (written for `w.table`) as a write of `now`, the same table after DDL; `None` when
/// nothing changed for it or it cannot follow (invariant 2).
pub(crate) fn follow_segments(w: &PendingWrite, now: &TableDef) -> Result<Option<PendingWrite>> {
    let was = &w.table;
    if now.id != was.id
        || now.is_row_table()
        || (now.columns == was.columns && now.primary_key == was.primary_key)
    {
        return Ok(None);
    }
    // Where each column of `now` was in the segments' extent map, if it was there.
    let mut from = Vec::with_capacity(now.columns.len());
    for c in &now.columns {
        match was.column_index(&c.name) {
            Some(i) if was.columns[i].ty == c.ty => from.push(Some(i)),
            Some(_) => return Ok(None),
            None => from.push(None),
        }
    }
    let mut out = w.clone();
    out.table = now.clone();
    for s in &mut out.segments {
        let stats: Vec<ColumnStats> = from
            .iter()
            .map(|i| match i.and_then(|i| s.columns.get(i)) {
                Some(c) => c.clone(),
                // Added since (or missing from an older segment): every row NULL.
                None => ColumnStats {
                    min: None,
                    max: None,
                    nulls: s.rows,
                },
            })
            .collect();
        for (c, st) in now.columns.iter().zip(&stats) {
            if !c.nullable && st.nulls > 0 {
                return Err(TableError::Column {
                    code: "23502",
                    message: format!(
                        "column \"{}\" of relation \"{}\" contains null values",
                        c.name, now.name
                    ),
                });
            }
        }
        s.columns = stats;
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::catalog::{ColumnDef, ColumnType, SegmentMeta, StatValue};

    fn column(name: &str, ty: ColumnType, nullable: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            nullable,
        }
    }

    fn table(columns: Vec<ColumnDef>) -> TableDef {
        TableDef {
            id: 7,
            name: "t".into(),
            columns,
            sort_key: Vec::new(),
            partition_key: None,
            created_ms: 0,
            dropped: Vec::new(),
            primary_key: Vec::new(),
            defaults: Vec::new(),
            indexes: Vec::new(),
            comments: Default::default(),
            missing: Vec::new(),
        }
    }

    fn written(def: &TableDef, stats: Vec<ColumnStats>) -> PendingWrite {
        PendingWrite {
            table: def.clone(),
            segments: vec![SegmentMeta {
                id: 1,
                path: "seg".into(),
                rows: 3,
                bytes: 10,
                columns: stats,
                checksums: crate::checksum::BlockSums::of(b""),
            }],
            replace: false,
            removed: Vec::new(),
        }
    }

    fn stat(min: i64, max: i64, nulls: u64) -> ColumnStats {
        ColumnStats {
            min: Some(StatValue::Int(min)),
            max: Some(StatValue::Int(max)),
            nulls,
        }
    }

    #[test]
    fn added_and_dropped_columns_follow_by_name() {
        let a = column("a", ColumnType::Int64, true);
        let b = column("b", ColumnType::Int64, true);
        let c = column("c", ColumnType::Utf8, true);
        let before = table(vec![a.clone(), b.clone()]);
        let w = written(&before, vec![stat(1, 3, 0), stat(4, 6, 1)]);
        let after = table(vec![b.clone(), c.clone()]);
        let out = follow_segments(&w, &after).unwrap().unwrap();
        assert_eq!(out.table, after);
        assert_eq!(
            out.segments[0].columns,
            vec![
                stat(4, 6, 1),
                ColumnStats {
                    min: None,
                    max: None,
                    nulls: 3
                }
            ]
        );
    }

    #[test]
    fn unchanged_or_retyped_columns_are_not_followed() {
        let before = table(vec![column("a", ColumnType::Int64, true)]);
        let w = written(&before, vec![stat(1, 3, 0)]);
        assert!(follow_segments(&w, &before).unwrap().is_none());
        let retyped = table(vec![column("a", ColumnType::Utf8, true)]);
        assert!(follow_segments(&w, &retyped).unwrap().is_none());
    }

    #[test]
    fn not_null_is_checked_against_the_written_nulls() {
        let before = table(vec![
            column("a", ColumnType::Int64, true),
            column("b", ColumnType::Int64, true),
        ]);
        let w = written(&before, vec![stat(1, 3, 0), stat(4, 6, 1)]);
        let a_not_null = table(vec![
            column("a", ColumnType::Int64, false),
            column("b", ColumnType::Int64, true),
        ]);
        assert!(follow_segments(&w, &a_not_null).unwrap().is_some());
        let b_not_null = table(vec![
            column("a", ColumnType::Int64, true),
            column("b", ColumnType::Int64, false),
        ]);
        let e = follow_segments(&w, &b_not_null).unwrap_err();
        assert!(
            e.to_string()
                .contains("column \"b\" of relation \"t\" contains null values")
        );
    }
}
