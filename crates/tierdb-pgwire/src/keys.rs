//! The keys, indexes and column defaults of row tables in `pg_catalog`: `pg_index`,
//! `pg_constraint`, `pg_attrdef`, an index's row in `pg_class`, and what
//! `pg_get_indexdef`, `pg_get_constraintdef` and `pg_get_expr` answer about them.
//!
//! psql's `\d` lists a table's indexes only when `pg_class.relhasindex` says it has some,
//! and its defaults from `pg_attrdef`; pg_dump writes `ADD CONSTRAINT … PRIMARY KEY` and
//! `CREATE INDEX` from `pg_index`, `pg_constraint` and the two definition functions;
//! pgjdbc's `getPrimaryKeys`, `getIndexInfo` and `getBestRowIdentifier` join `pg_index`
//! with `pg_class`. datafusion-pg-catalog's tables of these are those of the PostgreSQL it
//! was exported from (system catalogs' indexes, whose tables its `pg_class` does not list),
//! so they are replaced here by tierdb's own.
//!
//! Rules:
//!
//! 1. A row table's PRIMARY KEY is an index named `<table>_pkey` (PostgreSQL's default
//!    name) with a constraint of that name (`contype` `p`); a UNIQUE constraint is its
//!    unique index and a constraint of that name (`u`); each `CREATE [UNIQUE] INDEX` is an
//!    index without a constraint, as in PostgreSQL. Every index is `btree`.
//! 2. Oids are fixed by tierdb's catalog ids, never by the order of a listing: a primary
//!    key's index is [`INDEX_OID_BASE`] + its table's id, another index
//!    [`INDEX_OID_BASE`] + its own id (tables and indexes draw ids from one counter, so
//!    these never collide), a primary key constraint [`CONSTRAINT_OID_BASE`] + its
//!    table's id, a UNIQUE constraint [`CONSTRAINT_OID_BASE`] + its index's id, a default [`DEFAULT_OID_BASE`] + table id × 1,600 (PostgreSQL's column
//!    limit) + column number. datafusion-pg-catalog numbers tables and schemas from 16,384
//!    up, far below. An object whose oid would not fit an int4 is left out.
//! 3. A table's oid and schema are its `pg_class` row's, found by schema and name when a
//!    query names the catalog table ([`stored_relations`]), so they agree with `pg_class`.
//!    Outside `public` the catalog keys a table, index or constraint as `schema.name`; the
//!    catalog tables show its own name ([`own`]) in its schema.
//! 4. `indkey` is `int2vector` text (`1 2`), as pg_dump parses it; `indoption`, `conkey`
//!    and `confkey` are `int2[]` (pgjdbc subscripts them; `indoption` is all zeros: every
//!    column ascending, NULLs last, so its subscripts from 0 or 1 read alike).
//! 5. `pg_attrdef.adbin` holds the default's SQL text, and `pg_get_expr(adbin, rel)`
//!    answers it as given (no node trees are kept).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{MemTable, TableProvider, view::ViewTable};
use datafusion::common::{Column, Result, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, col, lit};
use tierdb_tables::catalog::TableDef;

/// Rule 2.
pub(crate) const INDEX_OID_BASE: i64 = 1_000_000_000;
/// Rule 2.
pub(crate) const CONSTRAINT_OID_BASE: i64 = 1_400_000_000;
/// Rule 2.
pub(crate) const DEFAULT_OID_BASE: i64 = 1_800_000_000;

/// PostgreSQL's btree access method (`pg_am`).
const BTREE_OID: i32 = 403;

/// The lookup `pg_get_indexdef` and `pg_get_constraintdef` become (`catalogsql.rs`).
pub(crate) const DEFINITIONS: &str = "tierdb_definitions";

/// An index (rule 1).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexEntry {
    pub oid: i32,
    pub name: String,
    pub table: String,
    /// The indexed columns' names and numbers (from 1, as `pg_attribute.attnum`).
    pub columns: Vec<(String, i16)>,
    pub unique: bool,
    pub primary: bool,
}

/// A constraint (rule 1: primary keys and UNIQUE constraints).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConstraintEntry {
    pub oid: i32,
    pub name: String,
    /// `p` (primary key) or `u` (unique).
    pub kind: &'static str,
    pub table: String,
    pub index_oid: i32,
    pub columns: Vec<(String, i16)>,
}

/// A column DEFAULT.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DefaultEntry {
    pub oid: i32,
    pub table: String,
    pub column: i16,
    pub sql: String,
}

/// What `pg_catalog` says of the keys, indexes and defaults of a database's tables.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Keys {
    pub indexes: Vec<IndexEntry>,
    pub constraints: Vec<ConstraintEntry>,
    pub defaults: Vec<DefaultEntry>,
}

fn oid(base: i64, offset: u64) -> Option<i32> {
    i32::try_from(base.checked_add(i64::try_from(offset).ok()?)?).ok()
}

impl Keys {
    pub(crate) fn of(defs: &[TableDef]) -> Self {
        let mut keys = Keys::default();
        for def in defs {
            let attnum = |name: &str| -> Option<i16> {
                let i = def.columns.iter().position(|c| c.name == name)?;
                i16::try_from(i + 1).ok()
            };
            let numbered = |names: &[String]| -> Option<Vec<(String, i16)>> {
                names
                    .iter()
                    .map(|n| Some((n.clone(), attnum(n)?)))
                    .collect()
            };
            if !def.primary_key.is_empty()
                && let (Some(index_oid), Some(con_oid), Some(columns)) = (
                    oid(INDEX_OID_BASE, def.id),
                    oid(CONSTRAINT_OID_BASE, def.id),
                    numbered(&def.primary_key),
                )
            {
                let name = format!("{}_pkey", def.name);
                keys.indexes.push(IndexEntry {
                    oid: index_oid,
                    name: name.clone(),
                    table: def.name.clone(),
                    columns: columns.clone(),
                    unique: true,
                    primary: true,
                });
                keys.constraints.push(ConstraintEntry {
                    oid: con_oid,
                    name,
                    kind: "p",
                    table: def.name.clone(),
                    index_oid,
                    columns,
                });
            }
            for index in &def.indexes {
                if let (Some(index_oid), Some(columns)) =
                    (oid(INDEX_OID_BASE, index.id), numbered(&index.columns))
                {
                    if index.constraint
                        && let Some(con_oid) = oid(CONSTRAINT_OID_BASE, index.id)
                    {
                        keys.constraints.push(ConstraintEntry {
                            oid: con_oid,
                            name: index.name.clone(),
                            kind: "u",
                            table: def.name.clone(),
                            index_oid,
                            columns: columns.clone(),
                        });
                    }
                    keys.indexes.push(IndexEntry {
                        oid: index_oid,
                        name: index.name.clone(),
                        table: def.name.clone(),
                        columns,
                        unique: index.unique,
                        primary: false,
                    });
                }
            }
            for (column, sql) in &def.defaults {
                if let Some(n) = attnum(column)
                    && let Some(base) = def.id.checked_mul(1_600)
                    && let Some(o) = oid(DEFAULT_OID_BASE, base + u64::from(n.unsigned_abs()))
                {
                    keys.defaults.push(DefaultEntry {
                        oid: o,
                        table: def.name.clone(),
                        column: n,
                        sql: as_postgresql_writes(sql),
                    });
                }
            }
        }
        keys
    }

    /// The tables that have an index (`pg_class.relhasindex`).
    pub(crate) fn indexed_tables(&self) -> Vec<String> {
        let mut t: Vec<String> = self.indexes.iter().map(|i| i.table.clone()).collect();
        t.sort();
        t.dedup();
        t
    }

    /// `(oid, n, definition)`: each index's `pg_get_indexdef(oid)` (n = 0) and the name of
    /// its n-th column (`pg_get_indexdef(oid, n, pretty)`), each constraint's
    /// `pg_get_constraintdef(oid)` (n = 0).
    pub(crate) fn definitions(&self) -> Vec<(i32, i32, String)> {
        let mut out = Vec::new();
        for i in &self.indexes {
            let names: Vec<String> = i.columns.iter().map(|(c, _)| quote_ident(c)).collect();
            out.push((
                i.oid,
                0,
                format!(
                    "CREATE {}INDEX {} ON {} USING btree ({})",
                    if i.unique { "UNIQUE " } else { "" },
                    quote_ident(own(&i.name)),
                    quote_qualified(&i.table),
                    names.join(", ")
                ),
            ));
            for (n, name) in (1..).zip(names) {
                out.push((i.oid, n, name));
            }
        }
        for c in &self.constraints {
            let names: Vec<String> = c.columns.iter().map(|(c, _)| quote_ident(c)).collect();
            let kind = match c.kind {
                "p" => "PRIMARY KEY",
                _ => "UNIQUE",
            };
            out.push((c.oid, 0, format!("{kind} ({})", names.join(", "))));
        }
        out
    }
}

/// A default as PostgreSQL writes it back: a sequence's name in `nextval` as a `regclass`
/// (`nextval('t_id_seq'::regclass)`: psql's `\d`, pg_dump). tierdb reads that form back
/// (`tierdb_tables::parsefix` rule 2).
fn as_postgresql_writes(sql: &str) -> String {
    match sql
        .strip_prefix("nextval('")
        .and_then(|rest| rest.strip_suffix("')"))
    {
        // A name in the search path is written bare, as PostgreSQL's regclass output is.
        Some(name) if !name.contains('\'') => {
            let name = name.strip_prefix("public.").unwrap_or(name);
            format!("nextval('{name}'::regclass)")
        }
        _ => sql.to_string(),
    }
}

/// `name` as PostgreSQL's `quote_ident` writes it: bare when it is a lower-case identifier
/// that is not a reserved word, else in double quotes.
pub(crate) fn quote_ident(name: &str) -> String {
    // PostgreSQL's reserved key words (those that cannot be a column name unquoted).
    const RESERVED: [&str; 77] = [
        "all",
        "analyse",
        "analyze",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "asymmetric",
        "both",
        "case",
        "cast",
        "check",
        "collate",
        "column",
        "constraint",
        "create",
        "current_catalog",
        "current_date",
        "current_role",
        "current_time",
        "current_timestamp",
        "current_user",
        "default",
        "deferrable",
        "desc",
        "distinct",
        "do",
        "else",
        "end",
        "except",
        "false",
        "fetch",
        "for",
        "foreign",
        "from",
        "grant",
        "group",
        "having",
        "in",
        "initially",
        "intersect",
        "into",
        "lateral",
        "leading",
        "limit",
        "localtime",
        "localtimestamp",
        "not",
        "null",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "placing",
        "primary",
        "references",
        "returning",
        "select",
        "session_user",
        "some",
        "symmetric",
        "table",
        "then",
        "to",
        "trailing",
        "true",
        "union",
        "unique",
        "user",
        "using",
        "variadic",
        "when",
        "where",
        "window",
        "with",
    ];
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$')
        && !RESERVED.contains(&name);
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// `int2vector` text: `1 2`.
fn int2vector(values: impl IntoIterator<Item = i16>) -> String {
    values
        .into_iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn int2_array(values: &[(String, i16)]) -> ScalarValue {
    ScalarValue::List(ScalarValue::new_list_nullable(
        &values
            .iter()
            .map(|(_, n)| ScalarValue::Int16(Some(*n)))
            .collect::<Vec<_>>(),
        &DataType::Int16,
    ))
}

/// A row of a catalog table: its table (rule 3) and the values of the columns it sets.
pub(crate) type Row = (String, Vec<(&'static str, ScalarValue)>);

/// What a column of `filled` takes from its row's table (rule 3).
#[derive(Clone, Copy)]
pub(crate) enum FromTable {
    Oid,
    Namespace,
}

/// A table of `schema`'s columns holding `rows`, each value cast to its column's type, the
/// columns of `filled` taken from the row's table in `relations`; a column a row does not
/// set is NULL, or zero, false or empty where NULL is not allowed. A row whose table is not
/// in `relations` is left out.
pub(crate) fn stored(
    schema: &SchemaRef,
    rows: &[Row],
    filled: &[(&'static str, FromTable)],
    relations: &Relations,
) -> Result<Arc<dyn TableProvider>> {
    let rows: Vec<Vec<(&'static str, ScalarValue)>> = rows
        .iter()
        .filter_map(|(table, values)| {
            let (oid, namespace) = relations.get(table)?;
            let mut values = values.clone();
            for (c, from) in filled {
                values.push((
                    c,
                    ScalarValue::Int32(Some(match from {
                        FromTable::Oid => *oid,
                        FromTable::Namespace => *namespace,
                    })),
                ));
            }
            Some(values)
        })
        .collect();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for f in schema.fields() {
        let values = rows
            .iter()
            .map(|values| {
                let v = values
                    .iter()
                    .find(|(c, _)| *c == f.name())
                    .map(|(_, v)| v.clone());
                match v {
                    Some(v) if v.data_type() == *f.data_type() => Ok(v),
                    Some(v) => v.cast_to(f.data_type()),
                    None if f.is_nullable() => ScalarValue::try_from(f.data_type()),
                    None => zero(f.data_type()),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        columns.push(if values.is_empty() {
            new_null_array(f.data_type(), 0)
        } else {
            ScalarValue::iter_to_array(values)?
        });
    }
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Arc::new(MemTable::try_new(
        schema.clone(),
        vec![vec![batch]],
    )?))
}

fn zero(ty: &DataType) -> Result<ScalarValue> {
    Ok(match ty {
        DataType::Boolean => ScalarValue::Boolean(Some(false)),
        DataType::Utf8 => ScalarValue::Utf8(Some(String::new())),
        DataType::Float64 => ScalarValue::Float64(Some(0.0)),
        DataType::Float32 => ScalarValue::Float32(Some(0.0)),
        other => ScalarValue::Int64(Some(0)).cast_to(other)?,
    })
}

/// `pg_index` (in `schema`, datafusion-pg-catalog's columns) with the indexes of `keys`.
pub(crate) fn pg_index(
    schema: &SchemaRef,
    keys: &Keys,
    relations: &Relations,
) -> Result<Arc<dyn TableProvider>> {
    let rows: Vec<Row> = keys
        .indexes
        .iter()
        .map(|i| {
            let n = i16::try_from(i.columns.len()).unwrap_or(i16::MAX);
            let zeros = || int2vector(i.columns.iter().map(|_| 0));
            let t = |b: bool| ScalarValue::Boolean(Some(b));
            let s = |v: String| ScalarValue::Utf8(Some(v));
            (
                i.table.clone(),
                vec![
                    ("indexrelid", ScalarValue::Int32(Some(i.oid))),
                    ("indnatts", ScalarValue::Int16(Some(n))),
                    ("indnkeyatts", ScalarValue::Int16(Some(n))),
                    ("indisunique", t(i.unique)),
                    ("indnullsnotdistinct", t(false)),
                    ("indisprimary", t(i.primary)),
                    ("indisexclusion", t(false)),
                    ("indimmediate", t(true)),
                    ("indisclustered", t(false)),
                    ("indisvalid", t(true)),
                    ("indcheckxmin", t(false)),
                    ("indisready", t(true)),
                    ("indislive", t(true)),
                    ("indisreplident", t(false)),
                    ("indkey", s(int2vector(i.columns.iter().map(|(_, n)| *n)))),
                    ("indcollation", s(zeros())),
                    // The default btree operator class of each column's type is not
                    // recorded; 0 names none (pg_dump reads indclass only for its
                    // non-default classes, which it finds by joining pg_opclass).
                    ("indclass", s(zeros())),
                    (
                        "indoption",
                        int2_array(
                            &i.columns
                                .iter()
                                .map(|(c, _)| (c.clone(), 0))
                                .collect::<Vec<_>>(),
                        ),
                    ),
                ],
            )
        })
        .collect();
    stored(
        &index_schema(schema),
        &rows,
        &[("indrelid", FromTable::Oid)],
        relations,
    )
}

/// `schema` with `columns` as `int2[]`.
fn with_int2_arrays(schema: &SchemaRef, columns: &[&str]) -> SchemaRef {
    let int2_array = DataType::List(Arc::new(Field::new_list_field(DataType::Int16, true)));
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| match columns.contains(&f.name().as_str()) {
                true => Field::new(f.name(), int2_array.clone(), true),
                false => f.as_ref().clone(),
            })
            .collect::<Vec<_>>(),
    ))
}

/// `pg_constraint`'s columns: datafusion-pg-catalog's, with `conkey` and `confkey` as
/// `int2[]` (rule 4).
pub(crate) fn constraint_schema(schema: &SchemaRef) -> SchemaRef {
    with_int2_arrays(schema, &["conkey", "confkey"])
}

/// `pg_index`'s columns: datafusion-pg-catalog's, with `indoption` as `int2[]` (rule 4).
pub(crate) fn index_schema(schema: &SchemaRef) -> SchemaRef {
    with_int2_arrays(schema, &["indoption"])
}

/// `pg_constraint` with the constraints of `keys`.
pub(crate) fn pg_constraint(
    schema: &SchemaRef,
    keys: &Keys,
    relations: &Relations,
) -> Result<Arc<dyn TableProvider>> {
    let schema = constraint_schema(schema);
    let rows: Vec<Row> = keys
        .constraints
        .iter()
        .map(|c| {
            let t = |b: bool| ScalarValue::Boolean(Some(b));
            let s = |v: &str| ScalarValue::Utf8(Some(v.to_string()));
            (
                c.table.clone(),
                vec![
                    ("oid", ScalarValue::Int32(Some(c.oid))),
                    ("conname", s(own(&c.name))),
                    ("contype", s(c.kind)),
                    ("condeferrable", t(false)),
                    ("condeferred", t(false)),
                    ("convalidated", t(true)),
                    ("conindid", ScalarValue::Int32(Some(c.index_oid))),
                    ("confupdtype", s(" ")),
                    ("confdeltype", s(" ")),
                    ("confmatchtype", s(" ")),
                    ("conislocal", t(true)),
                    ("connoinherit", t(true)),
                    ("conkey", int2_array(&c.columns)),
                ],
            )
        })
        .collect();
    stored(
        &schema,
        &rows,
        &[
            ("conrelid", FromTable::Oid),
            ("connamespace", FromTable::Namespace),
        ],
        relations,
    )
}

/// `pg_attrdef` with the defaults of `keys`.
pub(crate) fn pg_attrdef(
    schema: &SchemaRef,
    keys: &Keys,
    relations: &Relations,
) -> Result<Arc<dyn TableProvider>> {
    let rows: Vec<Row> = keys
        .defaults
        .iter()
        .map(|d| {
            (
                d.table.clone(),
                vec![
                    ("oid", ScalarValue::Int32(Some(d.oid))),
                    ("adnum", ScalarValue::Int16(Some(d.column))),
                    ("adbin", ScalarValue::Utf8(Some(d.sql.clone()))),
                ],
            )
        })
        .collect();
    stored(schema, &rows, &[("adrelid", FromTable::Oid)], relations)
}

/// `class` (`pg_class`) with a row per index of `keys` (`relkind` `i`, in its table's
/// schema) and `relhasindex` true for the tables that have one.
pub(crate) fn with_indexes(
    class: Arc<dyn TableProvider>,
    keys: &Keys,
    relations: &Relations,
) -> Result<Arc<dyn TableProvider>> {
    if keys.indexes.is_empty() {
        return Ok(class);
    }
    let schema = class.schema();
    let rows: Vec<Row> = keys
        .indexes
        .iter()
        .map(|i| {
            let n = i16::try_from(i.columns.len()).unwrap_or(i16::MAX);
            let s = |v: &str| ScalarValue::Utf8(Some(v.to_string()));
            (
                i.table.clone(),
                vec![
                    ("oid", ScalarValue::Int32(Some(i.oid))),
                    ("relname", s(own(&i.name))),
                    ("relam", ScalarValue::Int32(Some(BTREE_OID))),
                    ("relfilenode", ScalarValue::Int32(Some(i.oid))),
                    ("relpages", ScalarValue::Int32(Some(1))),
                    ("relpersistence", s("p")),
                    ("relkind", s("i")),
                    ("relnatts", ScalarValue::Int16(Some(n))),
                    ("relispopulated", ScalarValue::Boolean(Some(true))),
                    ("relreplident", s("n")),
                ],
            )
        })
        .collect();
    let added = stored(
        &schema,
        &rows,
        &[("relnamespace", FromTable::Namespace)],
        relations,
    )?;
    let indexed: Vec<Expr> = keys
        .indexed_tables()
        .iter()
        .map(|t| lit(own(t).to_string()))
        .collect();
    let projection: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "relhasindex" => (col("relhasindex").or(col("relkind")
                .eq(lit("r"))
                .and(col("relname").in_list(indexed.clone(), false))))
            .alias("relhasindex"),
            name => col(Column::from_name(name)).alias(name),
        })
        .collect();
    let plan = LogicalPlanBuilder::scan("pg_class", provider_as_source(class), None)?
        .project(projection)?
        .union(
            LogicalPlanBuilder::scan("pg_class_indexes", provider_as_source(added), None)?
                .build()?,
        )?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// `pg_constraint`'s oid in `pg_class` (`classid` and `refclassid` in `pg_depend`).
const PG_CONSTRAINT_OID: i32 = 2606;

/// `depend` (`pg_depend`) and a dependency (`n`) of each UNIQUE constraint on its table's
/// primary key constraint: in tierdb a unique index's entries end with the row's key, and
/// a table is a row table only once it has a primary key. pg_dump orders its statements by
/// these dependencies, so a restore adds the primary key before the UNIQUE constraints
/// (by name alone, `t_email_key` would come before `t_pkey`, and be refused on a table
/// that has no key yet).
pub(crate) fn with_dependencies(
    depend: Arc<dyn TableProvider>,
    keys: &Keys,
    more: Vec<Row>,
) -> Result<Arc<dyn TableProvider>> {
    let primary: HashMap<&str, i32> = keys
        .constraints
        .iter()
        .filter(|c| c.kind == "p")
        .map(|c| (c.table.as_str(), c.oid))
        .collect();
    let mut rows: Vec<Row> = keys
        .constraints
        .iter()
        .filter(|c| c.kind == "u")
        .filter_map(|c| {
            let pk = *primary.get(c.table.as_str())?;
            let i = |v: i32| ScalarValue::Int32(Some(v));
            Some((
                c.table.clone(),
                vec![
                    ("classid", i(PG_CONSTRAINT_OID)),
                    ("objid", i(c.oid)),
                    ("objsubid", i(0)),
                    ("refclassid", i(PG_CONSTRAINT_OID)),
                    ("refobjid", i(pk)),
                    ("refobjsubid", i(0)),
                    ("deptype", ScalarValue::Utf8(Some("n".into()))),
                ],
            ))
        })
        .collect();
    rows.extend(more);
    if rows.is_empty() {
        return Ok(depend);
    }
    let schema = depend.schema();
    // No column is filled from a table: every row's table is "found" (rule 3 is not needed).
    let everywhere: Relations = rows.iter().map(|(t, _)| (t.clone(), (0, 0))).collect();
    let added = stored(&schema, &rows, &[], &everywhere)?;
    let plan = LogicalPlanBuilder::scan("pg_depend", provider_as_source(depend), None)?
        .union(
            LogicalPlanBuilder::scan("key_dependencies", provider_as_source(added), None)?
                .build()?,
        )?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// `tierdb_definitions(tierdb_def_oid, tierdb_def_n, tierdb_definition)`
/// ([`Keys::definitions`]; the column names are unlike any a catalog query uses, so the
/// lookups of `keysql.rs` can name the outer query's columns unqualified).
pub(crate) fn definitions(keys: &Keys) -> Result<Arc<dyn TableProvider>> {
    use datafusion::arrow::array::{Int32Array, StringArray};
    let schema = Arc::new(Schema::new(vec![
        Field::new("tierdb_def_oid", DataType::Int32, false),
        Field::new("tierdb_def_n", DataType::Int32, false),
        Field::new("tierdb_definition", DataType::Utf8, false),
    ]));
    let rows = keys.definitions();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int32Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(Int32Array::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.2.as_str()).collect::<Vec<_>>(),
            )),
        ],
    )?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

mod relations;
pub(crate) use relations::{Relations, namespaces, own, quote_qualified, stored_relations};

#[cfg(test)]
mod tests;
