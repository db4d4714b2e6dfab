//! `pg_attribute` with the column types tierdb tables declare. datafusion-pg-catalog
//! derives a column's type from its Arrow type, so `VARCHAR(20)` reads as `text` and
//! `NUMERIC(10,2)` as `numeric` with no typmod: psql's `\d` showed the wrong types and a
//! pg_dump restored `numeric(10,2)` as `numeric` (other scale, other answers). Here each
//! column of a tierdb table that declares a length, precision or scale gets PostgreSQL's
//! type oid and typmod for it (`character varying(20)`: 1043 and 24; `numeric(10,2)`: 1700
//! and 655366); every other row is datafusion-pg-catalog's.
//!
//! Views are declared too: [`view_definitions`] is `pg_catalog.tierdb_viewdefs(oid,
//! definition)`, the stored query of each view by its `pg_class` oid, which
//! `pg_get_viewdef(oid)` reads (`catalogsql.rs` rewrites the call into a lookup); and
//! [`with_view_dependencies`] adds to `pg_depend` that each view depends on the relations
//! its query reads, so pg_dump creates those first.

use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::TableProvider;
use datafusion::catalog::{MemTable, view::ViewTable};
use datafusion::common::{Column, Result};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlanBuilder, cast, col};
use tierdb_tables::catalog::ColumnType;

/// `class` (a `pg_class`) with `relname` replaced by the name tierdb's catalog gives the
/// relation: `t` in `public`, `s.t` in schema s (`tierdb_tables::sql::qualified`), so the
/// rows of a table, view or column of another schema match its catalog entry by name.
/// Its columns: `oid`, `relname`, `relkind`.
pub(crate) fn by_catalog_name(
    class: Arc<dyn TableProvider>,
    namespace: Arc<dyn TableProvider>,
) -> Result<Arc<dyn TableProvider>> {
    use datafusion::logical_expr::{lit, when};
    let c = |name: &str| col(Column::new(Some("c"), name));
    let nspname = cast(col(Column::new(Some("n"), "nspname")), DataType::Utf8);
    let relname = cast(c("relname"), DataType::Utf8);
    let name = when(
        nspname.clone().eq(lit(tierdb_tables::sql::SCHEMA)),
        relname.clone(),
    )
    .otherwise(datafusion::functions::string::expr_fn::concat(vec![
        nspname,
        lit("."),
        relname,
    ]))?;
    let plan = LogicalPlanBuilder::scan("c", provider_as_source(class), None)?
        .join(
            LogicalPlanBuilder::scan("n", provider_as_source(namespace), None)?.build()?,
            JoinType::Inner,
            (
                vec![Column::new(Some("c"), "relnamespace")],
                vec![Column::new(Some("n"), "oid")],
            ),
            None,
        )?
        .project(vec![
            c("oid").alias("oid"),
            name.alias("relname"),
            c("relkind").alias("relkind"),
        ])?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// PostgreSQL's type oid and typmod of a declared type with a modifier; `None` for types
/// whose Arrow type says everything.
pub(crate) fn type_and_typmod(ty: ColumnType) -> Option<(i32, i32)> {
    // A typmod is the modifier plus VARHDRSZ (4); numeric packs (precision << 16) | scale.
    Some(match ty {
        ColumnType::Varchar { len } => (1043, i32::try_from(len).ok()?.checked_add(4)?),
        ColumnType::Char { len } => (1042, i32::try_from(len).ok()?.checked_add(4)?),
        ColumnType::Decimal { precision, scale } => (
            1700,
            ((i32::from(precision) << 16) | i32::from(scale.max(0))) + 4,
        ),
        // Stored as text (`tierdb_tables::pgtext`); no typmod.
        ColumnType::Uuid => (2950, -1),
        ColumnType::VarcharUnbounded => (1043, -1),
        ColumnType::Json => (114, -1),
        ColumnType::Jsonb => (3802, -1),
        // NUMERIC without precision: no typmod (Arrow's Decimal256(76, 20) would say one).
        ColumnType::Numeric => (1700, -1),
        _ => return None,
    })
}

/// `pg_type.typstorage` of a declared type's oid, which a column's `attstorage` is unless
/// altered: pg_dump writes `ALTER COLUMN … SET STORAGE` for a column whose storage differs
/// from its type's (datafusion-pg-catalog gives a column it has no type for text's `x`).
fn type_storage(typid: i32) -> &'static str {
    match typid {
        1700 => "m", // numeric
        2950 => "p", // uuid
        _ => "x",    // varchar, bpchar, json, jsonb
    }
}

/// `attribute` (datafusion-pg-catalog's `pg_attribute`) with the declared types of
/// `defs`' columns and of `views`' (a view's column of a VARCHAR(20) column is one too),
/// matched by relation name through `class` (its `pg_class`).
pub(crate) fn with_declared_types(
    attribute: Arc<dyn TableProvider>,
    class: Arc<dyn TableProvider>,
    defs: &[tierdb_tables::catalog::TableDef],
    views: &[tierdb_tables::views::ViewDef],
) -> Result<Arc<dyn TableProvider>> {
    let schema = attribute.schema();
    let (Ok(typid), Ok(typmod)) = (
        schema.field_with_name("atttypid"),
        schema.field_with_name("atttypmod"),
    ) else {
        return Ok(attribute);
    };
    let (typid_ty, typmod_ty) = (typid.data_type().clone(), typmod.data_type().clone());
    let (mut tables, mut columns, mut ids, mut mods) = (vec![], vec![], vec![], vec![]);
    let (mut not_null, mut has_default, mut storage) = (vec![], vec![], vec![]);
    for def in defs {
        for c in &def.columns {
            let (id, m) = type_and_typmod(c.ty).unzip();
            tables.push(def.name.clone());
            columns.push(c.name.clone());
            ids.push(id);
            mods.push(m);
            storage.push(id.map(type_storage));
            // Row tables show DataFusion every column nullable (NOT NULL is theirs to
            // check): what was declared is in the catalog, and a key column is NOT NULL.
            not_null.push(!c.nullable || def.primary_key.contains(&c.name));
            // `pg_attrdef` lists it (`keys.rs`); psql's `\d` looks there only if this says so.
            has_default.push(def.defaults.iter().any(|(d, _)| *d == c.name));
        }
    }
    for view in views {
        for c in &view.fields {
            let Some((id, m)) = type_and_typmod(c.ty) else {
                continue;
            };
            tables.push(view.name.clone());
            columns.push(c.name.clone());
            ids.push(Some(id));
            mods.push(Some(m));
            storage.push(Some(type_storage(id)));
            not_null.push(false);
            has_default.push(false);
        }
    }
    if tables.is_empty() {
        return Ok(attribute);
    }
    let declared_schema = Arc::new(Schema::new(vec![
        Field::new("d_relname", DataType::Utf8, false),
        Field::new("d_attname", DataType::Utf8, false),
        Field::new("d_typid", DataType::Int32, true),
        Field::new("d_typmod", DataType::Int32, true),
        Field::new("d_notnull", DataType::Boolean, false),
        Field::new("d_hasdef", DataType::Boolean, false),
        Field::new("d_storage", DataType::Utf8, true),
    ]));
    let rows = RecordBatch::try_new(
        declared_schema.clone(),
        vec![
            Arc::new(StringArray::from(tables)),
            Arc::new(StringArray::from(columns)),
            Arc::new(Int32Array::from(ids)),
            Arc::new(Int32Array::from(mods)),
            Arc::new(datafusion::arrow::array::BooleanArray::from(not_null)),
            Arc::new(datafusion::arrow::array::BooleanArray::from(has_default)),
            Arc::new(StringArray::from(storage)),
        ],
    )?;
    let declared = Arc::new(MemTable::try_new(declared_schema, vec![vec![rows]])?);
    let relations = LogicalPlanBuilder::scan("c", provider_as_source(class), None)?
        .project(vec![
            col(Column::new(Some("c"), "oid")).alias("c_oid"),
            col(Column::new(Some("c"), "relname")).alias("c_relname"),
        ])?
        .build()?;
    let declared = LogicalPlanBuilder::scan("d", provider_as_source(declared), None)?.build()?;
    let a = |name: &str| col(Column::new(Some("a"), name));
    let kept = schema.fields().iter().map(|f| match f.name().as_str() {
        "atttypid" => cast(
            datafusion::functions::core::expr_fn::coalesce(vec![
                cast(col("d_typid"), typid_ty.clone()),
                a("atttypid"),
            ]),
            typid_ty.clone(),
        )
        .alias("atttypid"),
        "atttypmod" => cast(
            datafusion::functions::core::expr_fn::coalesce(vec![
                cast(col("d_typmod"), typmod_ty.clone()),
                a("atttypmod"),
            ]),
            typmod_ty.clone(),
        )
        .alias("atttypmod"),
        "attnotnull" => {
            datafusion::functions::core::expr_fn::coalesce(vec![col("d_notnull"), a("attnotnull")])
                .alias("attnotnull")
        }
        "attstorage" => {
            datafusion::functions::core::expr_fn::coalesce(vec![col("d_storage"), a("attstorage")])
                .alias("attstorage")
        }
        "atthasdef" => {
            datafusion::functions::core::expr_fn::coalesce(vec![col("d_hasdef"), a("atthasdef")])
                .alias("atthasdef")
        }
        name => a(name).alias(name),
    });
    let plan = LogicalPlanBuilder::scan("a", provider_as_source(attribute), None)?
        .join(
            relations,
            JoinType::Left,
            (
                vec![Column::new(Some("a"), "attrelid")],
                vec![Column::from_name("c_oid")],
            ),
            None,
        )?
        .join(
            declared,
            JoinType::Left,
            (
                vec![
                    Column::from_name("c_relname"),
                    Column::new(Some("a"), "attname"),
                ],
                vec![
                    Column::new(Some("d"), "d_relname"),
                    Column::new(Some("d"), "d_attname"),
                ],
            ),
            None,
        )?
        .project(kept.collect::<Vec<_>>())?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// The name `pg_get_viewdef` is answered from.
pub(crate) const VIEW_DEFINITIONS: &str = "tierdb_viewdefs";

/// `tierdb_viewdefs(oid, definition)`: each view of `views` by the oid `class` (its
/// `pg_class`) gives it, its definition as PostgreSQL's `pg_get_viewdef` writes one (the
/// query, then `;`); a view declared with column names selects its query under them.
pub(crate) fn view_definitions(
    class: Arc<dyn TableProvider>,
    views: &[tierdb_tables::views::ViewDef],
) -> Result<Arc<dyn TableProvider>> {
    let definitions: Vec<String> = views
        .iter()
        .map(|v| {
            if v.columns.is_empty() {
                format!(" {};", v.query)
            } else {
                format!(
                    " SELECT * FROM ({}) AS {}({});",
                    v.query,
                    crate::keys::own(&v.name),
                    v.columns.join(", ")
                )
            }
        })
        .collect();
    let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("v_name", DataType::Utf8, false),
        Field::new("definition", DataType::Utf8, false),
    ]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(definitions)),
        ],
    )?;
    let stored = Arc::new(MemTable::try_new(schema, vec![vec![rows]])?);
    let plan = LogicalPlanBuilder::scan("c", provider_as_source(class), None)?
        .filter(col(Column::new(Some("c"), "relkind")).eq(datafusion::logical_expr::lit("v")))?
        .join(
            LogicalPlanBuilder::scan("s", provider_as_source(stored), None)?.build()?,
            JoinType::Inner,
            (
                vec![Column::new(Some("c"), "relname")],
                vec![Column::new(Some("s"), "v_name")],
            ),
            None,
        )?
        .project(vec![
            col(Column::new(Some("c"), "oid")).alias("oid"),
            col(Column::new(Some("s"), "definition")).alias("definition"),
        ])?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// The oid of a view's `_RETURN` rule: this plus the view's `pg_class` oid (those are
/// datafusion-pg-catalog's, from 16,384 up, so these stay below `keys.rs`'s constraint
/// oids and never reach an index's, which tables' ids would need 200 million to).
const RULE_OID_BASE: i64 = 1_200_000_000;

/// `pg_rewrite`'s oid in `pg_class` (`classid` of a rule's rows in `pg_depend`).
const PG_REWRITE_OID: i64 = 2618;

/// `depend` (datafusion-pg-catalog's `pg_depend`) with the dependencies of each view of
/// `views` on each relation its query reads, by their `class` oids, twice over:
///
/// - as PostgreSQL records them, from the view's `_RETURN` rule (`classid` `pg_rewrite`,
///   `objid` [`RULE_OID_BASE`] + the view's oid): a normal row (`n`) to each relation it
///   reads and an internal row (`i`) to the view itself. dbt's `postgres__get_relations`
///   reads these to learn which views a `DROP … CASCADE` takes with it;
/// - from the view itself (`classid` `pg_class`, `n`), which pg_dump orders a view after
///   what it reads by (it finds no rule: `pg_rewrite` has no rows, and a rule's rows
///   whose object it cannot find are skipped).
pub(crate) fn with_view_dependencies(
    depend: Arc<dyn TableProvider>,
    class: Arc<dyn TableProvider>,
    views: &[tierdb_tables::views::ViewDef],
) -> Result<Arc<dyn TableProvider>> {
    let (mut from, mut to) = (Vec::new(), Vec::new());
    for v in views {
        // What it reads outside its WITH names (tierdb_tables::viewdeps invariant 1).
        for t in tierdb_tables::viewdeps::reads(v) {
            from.push(v.name.clone());
            to.push(t);
        }
    }
    let schema = depend.schema();
    if from.is_empty() || schema.fields().len() != 7 {
        return Ok(depend);
    }
    let pairs = Arc::new(Schema::new(vec![
        Field::new("p_view", DataType::Utf8, false),
        Field::new("p_read", DataType::Utf8, false),
    ]));
    let rows = RecordBatch::try_new(
        pairs.clone(),
        vec![
            Arc::new(StringArray::from(from)),
            Arc::new(StringArray::from(to)),
        ],
    )?;
    let pairs = Arc::new(MemTable::try_new(pairs, vec![vec![rows]])?);
    let names = |alias: &str| -> Result<datafusion::logical_expr::LogicalPlan> {
        LogicalPlanBuilder::scan(alias, provider_as_source(class.clone()), None)?
            .project(vec![
                col(Column::new(Some(alias), "oid")).alias(format!("{alias}_oid")),
                col(Column::new(Some(alias), "relname")).alias(format!("{alias}_name")),
            ])?
            .build()
    };
    // pg_class's oid for classid and refclassid: PostgreSQL's 1259.
    let typed = |name: &str, v: datafusion::logical_expr::Expr| {
        let ty = schema
            .field_with_name(name)
            .map(|f| f.data_type().clone())
            .unwrap_or(DataType::Int32);
        cast(v, ty).alias(name)
    };
    use datafusion::logical_expr::lit;
    let joined = LogicalPlanBuilder::scan("p", provider_as_source(pairs), None)?
        .join(
            names("vw")?,
            JoinType::Inner,
            (
                vec![Column::new(Some("p"), "p_view")],
                vec![Column::from_name("vw_name")],
            ),
            None,
        )?
        .join(
            names("rd")?,
            JoinType::Inner,
            (
                vec![Column::new(Some("p"), "p_read")],
                vec![Column::from_name("rd_name")],
            ),
            None,
        )?
        .build()?;
    let rows = |classid: i64, objid: Expr, refobjid: Expr, deptype: &str| {
        LogicalPlanBuilder::from(joined.clone())
            .project(vec![
                typed("classid", lit(classid)),
                typed("objid", objid),
                typed("objsubid", lit(0)),
                typed("refclassid", lit(1259)),
                typed("refobjid", refobjid),
                typed("refobjsubid", lit(0)),
                typed("deptype", lit(deptype.to_string())),
            ])?
            .distinct()?
            .build()
    };
    let rule = || cast(col("vw_oid"), DataType::Int64) + lit(RULE_OID_BASE);
    let plan = LogicalPlanBuilder::scan("pg_depend", provider_as_source(depend), None)?
        .union(rows(1259, col("vw_oid"), col("rd_oid"), "n")?)?
        .union(rows(PG_REWRITE_OID, rule(), col("rd_oid"), "n")?)?
        .union(rows(PG_REWRITE_OID, rule(), col("vw_oid"), "i")?)?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typmods_are_postgresqls() {
        assert_eq!(
            type_and_typmod(ColumnType::Varchar { len: 20 }),
            Some((1043, 24))
        );
        assert_eq!(
            type_and_typmod(ColumnType::Char { len: 1 }),
            Some((1042, 5))
        );
        assert_eq!(
            type_and_typmod(ColumnType::Decimal {
                precision: 10,
                scale: 2
            }),
            Some((1700, 655_366))
        );
        assert_eq!(type_and_typmod(ColumnType::Int32), None);
    }
}
