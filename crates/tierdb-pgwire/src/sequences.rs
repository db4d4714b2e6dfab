//! Sequences in `pg_catalog`: a row per sequence in `pg_class` (`relkind` `S`) and in
//! `pg_sequence`, and in `pg_depend` what pg_dump reads to write `ALTER SEQUENCE … OWNED BY`
//! and to add a SERIAL column's default after its sequence exists.
//!
//! pg_dump 15 finds sequences in `pg_class`, their parameters in `pg_sequence`, their
//! value with `SELECT last_value, is_called FROM <sequence>` (a relation in tierdb too,
//! `tierdb_tables::provider`), their owning column through `pg_depend` (`deptype` `a`), and
//! orders a default that calls `nextval` after the sequence through `pg_depend` (`n`).
//! Without these rows a dump did not recreate a SERIAL column's sequence.
//!
//! Rules:
//!
//! 1. A sequence's oid is [`SEQUENCE_OID_BASE`] plus a hash of its name below
//!    [`SEQUENCE_OID_SPAN`] (sequences have no catalog id); names whose hashes collide
//!    take the next free oid in name order, so an oid depends only on the set of names.
//! 2. Its schema is `public`, its type the smallest of smallint, integer and bigint its
//!    bounds fit (`SequenceDef::type_name`), its cache 1 and it never cycles (tierdb's
//!    sequences do not).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::catalog::{TableProvider, view::ViewTable};
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::LogicalPlanBuilder;
use tierdb_tables::catalog::TableDef;
use tierdb_tables::rows::sequence::SequenceDef;

use crate::keys::{FromTable, Keys, Relations, Row, stored};

/// Rule 1.
pub(crate) const SEQUENCE_OID_BASE: i64 = 2_000_000_000;
/// Rule 1.
pub(crate) const SEQUENCE_OID_SPAN: u32 = 100_000_000;

/// `pg_class`'s and `pg_attrdef`'s oids in `pg_class` (`classid` in `pg_depend`).
const PG_CLASS_OID: i32 = 1259;
const PG_ATTRDEF_OID: i32 = 2604;

/// A sequence as the catalog tables show it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SequenceEntry {
    pub oid: i32,
    pub def: SequenceDef,
    /// PostgreSQL's oid of its type (21, 23 or 20; rule 2).
    pub type_oid: i32,
    /// The table and column number (from 1) that own it.
    pub owner: Option<(String, i16)>,
}

fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The entries of `sequences`, owners resolved against `defs` (rule 1 for the oids).
pub(crate) fn entries(sequences: &[SequenceDef], defs: &[TableDef]) -> Vec<SequenceEntry> {
    let mut by_name: BTreeMap<&str, &SequenceDef> = BTreeMap::new();
    for s in sequences {
        by_name.insert(&s.name, s);
    }
    let mut taken: HashMap<u32, ()> = HashMap::new();
    let mut out = Vec::new();
    for (name, def) in by_name {
        let mut slot = fnv1a(name) % SEQUENCE_OID_SPAN;
        while taken.contains_key(&slot) {
            slot = (slot + 1) % SEQUENCE_OID_SPAN;
        }
        taken.insert(slot, ());
        let Ok(oid) = i32::try_from(SEQUENCE_OID_BASE + i64::from(slot)) else {
            continue;
        };
        let owner = def.owned_by.as_ref().and_then(|t| {
            let table = defs.iter().find(|d| &d.name == t)?;
            let column = def.owner_column(table)?;
            let n = table.column_index(&column)?;
            Some((table.name.clone(), i16::try_from(n + 1).ok()?))
        });
        let type_oid = match def.type_name() {
            "smallint" => 21,
            "integer" => 23,
            _ => 20,
        };
        out.push(SequenceEntry {
            oid,
            def: def.clone(),
            type_oid,
            owner,
        });
    }
    out
}

/// Each sequence by catalog name, at its own oid and its schema's oid in `namespaces` (by
/// name; a sequence whose schema is not listed is left out).
fn as_relations(entries: &[SequenceEntry], namespaces: &HashMap<String, i32>) -> Relations {
    entries
        .iter()
        .filter_map(|e| {
            let (schema, _) = tierdb_tables::sql::split_qualified(&e.def.name);
            let namespace = *namespaces.get(schema)?;
            Some((e.def.name.clone(), (e.oid, namespace)))
        })
        .collect()
}

/// `class` (`pg_class`) with a row per sequence (`relkind` `S`).
pub(crate) fn with_sequences(
    class: Arc<dyn TableProvider>,
    entries: &[SequenceEntry],
    namespaces: &HashMap<String, i32>,
) -> Result<Arc<dyn TableProvider>> {
    if entries.is_empty() {
        return Ok(class);
    }
    let s = |v: &str| ScalarValue::Utf8(Some(v.to_string()));
    let rows: Vec<Row> = entries
        .iter()
        .map(|e| {
            (
                e.def.name.clone(),
                vec![
                    ("relname", s(crate::keys::own(&e.def.name))),
                    ("relpersistence", s("p")),
                    ("relkind", s("S")),
                    ("relnatts", ScalarValue::Int16(Some(3))),
                    ("relpages", ScalarValue::Int32(Some(1))),
                    ("relispopulated", ScalarValue::Boolean(Some(true))),
                    ("relreplident", s("n")),
                ],
            )
        })
        .collect();
    let added = stored(
        &class.schema(),
        &rows,
        &[
            ("oid", FromTable::Oid),
            ("relfilenode", FromTable::Oid),
            ("relnamespace", FromTable::Namespace),
        ],
        &as_relations(entries, namespaces),
    )?;
    let plan = LogicalPlanBuilder::scan("pg_class", provider_as_source(class), None)?
        .union(
            LogicalPlanBuilder::scan("pg_class_sequences", provider_as_source(added), None)?
                .build()?,
        )?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// `pg_sequence` (in `schema`, datafusion-pg-catalog's columns) with a row per sequence.
pub(crate) fn pg_sequence(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    entries: &[SequenceEntry],
) -> Result<Arc<dyn TableProvider>> {
    let i64v = |v: i64| ScalarValue::Int64(Some(v));
    let rows: Vec<Row> = entries
        .iter()
        .map(|e| {
            (
                e.def.name.clone(),
                vec![
                    ("seqtypid", ScalarValue::Int32(Some(e.type_oid))),
                    ("seqstart", i64v(e.def.start)),
                    ("seqincrement", i64v(e.def.increment)),
                    ("seqmax", i64v(e.def.max)),
                    ("seqmin", i64v(e.def.min)),
                    ("seqcache", i64v(1)),
                    ("seqcycle", ScalarValue::Boolean(Some(false))),
                ],
            )
        })
        .collect();
    stored(
        schema,
        &rows,
        &[("seqrelid", FromTable::Oid)],
        &entries
            .iter()
            .map(|e| (e.def.name.clone(), (e.oid, 0)))
            .collect(),
    )
}

/// The `pg_depend` rows of sequences: each owned sequence on its column (`a`), and each
/// default that calls `nextval` of a sequence on that sequence (`n`).
pub(crate) fn dependencies(
    entries: &[SequenceEntry],
    keys: &Keys,
    relations: &Relations,
) -> Vec<Row> {
    let i = |v: i32| ScalarValue::Int32(Some(v));
    let mut rows = Vec::new();
    for e in entries {
        if let Some((table, column)) = &e.owner
            && let Some((table_oid, _)) = relations.get(table)
        {
            rows.push((
                table.clone(),
                vec![
                    ("classid", i(PG_CLASS_OID)),
                    ("objid", i(e.oid)),
                    ("objsubid", i(0)),
                    ("refclassid", i(PG_CLASS_OID)),
                    ("refobjid", i(*table_oid)),
                    ("refobjsubid", i(i32::from(*column))),
                    ("deptype", ScalarValue::Utf8(Some("a".into()))),
                ],
            ));
        }
        for d in &keys.defaults {
            if calls_nextval_of(&d.sql, &e.def.name) {
                rows.push((
                    d.table.clone(),
                    vec![
                        ("classid", i(PG_ATTRDEF_OID)),
                        ("objid", i(d.oid)),
                        ("objsubid", i(0)),
                        ("refclassid", i(PG_CLASS_OID)),
                        ("refobjid", i(e.oid)),
                        ("refobjsubid", i(0)),
                        ("deptype", ScalarValue::Utf8(Some("n".into()))),
                    ],
                ));
            }
        }
    }
    rows
}

/// Whether a default's SQL (as `pg_attrdef` shows it) calls `nextval` of `sequence`.
fn calls_nextval_of(sql: &str, sequence: &str) -> bool {
    ["", "public."].iter().any(|schema| {
        sql.contains(&format!("nextval('{schema}{sequence}'::regclass)"))
            || sql.contains(&format!("nextval('{schema}{sequence}')"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierdb_tables::catalog::{ColumnDef, ColumnType};

    fn table(name: &str, defaults: Vec<(String, String)>) -> TableDef {
        TableDef {
            id: 7,
            name: name.into(),
            columns: vec![
                ColumnDef {
                    name: "id".into(),
                    ty: ColumnType::Int32,
                    nullable: false,
                },
                ColumnDef {
                    name: "v".into(),
                    ty: ColumnType::Utf8,
                    nullable: true,
                },
            ],
            sort_key: vec![],
            partition_key: None,
            created_ms: 0,
            dropped: vec![],
            primary_key: vec!["id".into()],
            defaults,
            indexes: vec![],
            comments: Default::default(),
            missing: Vec::new(),
        }
    }

    #[test]
    fn oids_depend_only_on_names_and_owners_are_found() {
        let mut owned = SequenceDef::new("t_id_seq");
        owned.owned_by = Some("t".into());
        owned.max = i64::from(i32::MAX);
        let free = SequenceDef::new("other");
        let defs = vec![table(
            "t",
            vec![("id".into(), "nextval('t_id_seq')".into())],
        )];
        let a = entries(&[owned.clone(), free.clone()], &defs);
        let b = entries(&[free, owned], &defs);
        assert_eq!(a, b);
        let e = a.iter().find(|e| e.def.name == "t_id_seq").unwrap();
        assert_eq!(e.owner, Some(("t".into(), 1)));
        assert_eq!(e.type_oid, 23);
        assert!(i64::from(e.oid) >= SEQUENCE_OID_BASE);
        let other = a.iter().find(|e| e.def.name == "other").unwrap();
        assert_eq!((other.owner.clone(), other.type_oid), (None, 20));
    }

    #[test]
    fn a_serial_default_depends_on_its_sequence_and_the_sequence_on_its_column() {
        let mut owned = SequenceDef::new("t_id_seq");
        owned.owned_by = Some("t".into());
        owned.owned_column = Some("id".into());
        let defs = vec![table(
            "t",
            vec![("id".into(), "nextval('public.t_id_seq')".into())],
        )];
        let e = entries(&[owned], &defs);
        let keys = Keys::of(&defs);
        let relations: Relations = [("t".to_string(), (16_400, 2_200))].into_iter().collect();
        let rows = dependencies(&e, &keys, &relations);
        let kinds: Vec<String> = rows
            .iter()
            .map(|(_, v)| {
                let get = |c: &str| v.iter().find(|(n, _)| *n == c).unwrap().1.to_string();
                format!(
                    "{}:{}:{}",
                    get("deptype"),
                    get("refobjid"),
                    get("refobjsubid")
                )
            })
            .collect();
        assert_eq!(
            kinds,
            vec!["a:16400:1".to_string(), format!("n:{}:0", e[0].oid)]
        );
    }
}
