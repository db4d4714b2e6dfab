//! The short path for key lookups: `SELECT <columns> FROM t WHERE <every primary key
//! column> = <literal or $n>` on a row table is planned here, from its syntax tree, as one
//! [`Lookup`] node (no SQL-to-plan translation, no optimizer passes, no physical plan) and
//! run as one KV read: the statement sysbench's point selects and pgbench's select-only
//! send, prepared or not. Anything else (another shape, a view, a function, a CHAR key) is
//! left to DataFusion, which answers it the same way, only slower.
//!
//! The node is an ordinary logical-plan extension, so the extended protocol describes its
//! columns and infers and binds its parameters as for any plan.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::common::{DFSchema, DFSchemaRef, ScalarValue, TableReference};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr as SqlExpr, GroupByExpr, SelectItem, SetExpr, Statement, TableFactor,
    Value,
};

use super::{RowReader, format, key_columns, row_key};
use crate::catalog::{ColumnType, TableDef};
use crate::error::{Result, TableError};
use crate::sql::{ident_name, relation_name};
use crate::tables::Tables;

/// A primary-key lookup of one row table.
#[derive(Debug, Clone)]
pub(crate) struct Lookup {
    def: Arc<TableDef>,
    /// One per primary key column, in key order: a literal, or a parameter until bound.
    keys: Vec<Expr>,
    /// The table's columns the statement returns, in order.
    columns: Vec<usize>,
    /// Whether the row's key follows them (the key view UPDATE and DELETE read:
    /// `fastdml.rs`).
    with_key: bool,
    schema: DFSchemaRef,
}

impl PartialEq for Lookup {
    fn eq(&self, o: &Self) -> bool {
        self.def.id == o.def.id
            && self.keys == o.keys
            && self.columns == o.columns
            && self.with_key == o.with_key
    }
}
impl Eq for Lookup {}
impl Hash for Lookup {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.def.id.hash(h);
        self.keys.hash(h);
        self.columns.hash(h);
        self.with_key.hash(h);
    }
}
impl PartialOrd for Lookup {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        (self.def.id, &self.columns).partial_cmp(&(o.def.id, &o.columns))
    }
}

impl UserDefinedLogicalNodeCore for Lookup {
    fn name(&self) -> &str {
        "RowLookup"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.keys.clone()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "RowLookup: table={} (row store: KV engine), primary key lookup{}",
            self.def.name,
            if self.with_key { ", with key" } else { "" }
        )
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        _inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(Lookup {
            keys: exprs,
            ..self.clone()
        })
    }
}

impl Lookup {
    pub(crate) fn def(&self) -> &TableDef {
        &self.def
    }

    /// The table's columns the lookup returns (their numbers in the table, from 0).
    pub(crate) fn columns(&self) -> &[usize] {
        &self.columns
    }
}

/// The lookup `plan` is, if it is one.
pub(crate) fn as_lookup(plan: &LogicalPlan) -> Option<&Lookup> {
    match plan {
        LogicalPlan::Extension(Extension { node }) => node.as_any().downcast_ref::<Lookup>(),
        _ => None,
    }
}

/// `stmt` as a [`Lookup`], if it has the shape (see the module doc).
pub(crate) async fn plan(tables: &Tables, stmt: &DfStatement) -> Result<Option<LogicalPlan>> {
    let Some(shape) = Shape::of(stmt) else {
        return Ok(None);
    };
    let Some(def) = tables.table(&shape.table).await? else {
        return Ok(None);
    };
    if !def.is_row_table() {
        return Ok(None);
    }
    let Some(keys) = pinned_keys(&def, &shape.equalities)? else {
        return Ok(None);
    };
    let mut columns = Vec::new();
    let mut names = Vec::new();
    for item in &shape.items {
        match item {
            Item::All => {
                columns.extend(0..def.columns.len());
                names.extend(def.columns.iter().map(|c| c.name.clone()));
            }
            Item::Column(name, alias) => {
                let Some(i) = def.column_index(name) else {
                    return Ok(None); // DataFusion words the error
                };
                columns.push(i);
                names.push(alias.clone().unwrap_or_else(|| name.clone()));
            }
        }
    }
    let table_schema = def.schema();
    let fields: Vec<Field> = columns
        .iter()
        .zip(&names)
        .map(|(&i, n)| {
            table_schema
                .field(i)
                .as_ref()
                .clone()
                .with_name(n)
                .with_nullable(true)
        })
        .collect();
    let qualifier = TableReference::bare(shape.qualifier.clone());
    let schema = DFSchema::try_from_qualified_schema(qualifier, &Schema::new(fields))?;
    Ok(Some(LogicalPlan::Extension(Extension {
        node: Arc::new(Lookup {
            def: Arc::new(def),
            keys,
            columns,
            with_key: false,
            schema: Arc::new(schema),
        }),
    })))
}

/// The lookup of the row of `def` whose key `equalities` (`column = value` conjuncts,
/// nothing else) pin, returning every column and the key, under `schema` (the key view's
/// scan, as the DML query names it); `None` if they do not pin exactly one key.
pub(crate) fn key_view_lookup(
    def: &TableDef,
    equalities: &[(String, SqlExpr)],
    schema: DFSchemaRef,
) -> Result<Option<LogicalPlan>> {
    if schema.fields().len() != def.columns.len() + 1 {
        return Ok(None);
    }
    let Some(keys) = pinned_keys(def, equalities)? else {
        return Ok(None);
    };
    Ok(Some(LogicalPlan::Extension(Extension {
        node: Arc::new(Lookup {
            def: Arc::new(def.clone()),
            keys,
            columns: (0..def.columns.len()).collect(),
            with_key: true,
            schema,
        }),
    })))
}

/// The key values (one per primary key column, in key order) `equalities` pin, if they
/// pin every key column once and say nothing else, with values the short path can take.
fn pinned_keys(def: &TableDef, equalities: &[(String, SqlExpr)]) -> Result<Option<Vec<Expr>>> {
    let key_cols = key_columns(def)?;
    if key_cols
        .iter()
        .any(|&i| matches!(def.columns[i].ty, ColumnType::Char { .. }))
    {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(key_cols.len());
    for &i in &key_cols {
        let c = &def.columns[i];
        let mut found = equalities.iter().filter(|(n, _)| *n == c.name);
        let (Some((_, v)), None) = (found.next(), found.next()) else {
            return Ok(None);
        };
        let Some(e) = value(v, c.ty) else {
            return Ok(None);
        };
        keys.push(e);
    }
    if equalities.len() != key_cols.len() {
        return Ok(None);
    }
    Ok(Some(keys))
}

/// Runs a lookup (its parameters bound) in the session's transaction, if any.
fn reader(
    tables: &Tables,
    lookup: &Lookup,
    tx: Option<&Arc<crate::txn::Transaction>>,
) -> Result<(RowReader, bytes::Bytes)> {
    let def = &lookup.def;
    let key_cols = key_columns(def)?;
    let mut values = vec![ScalarValue::Null; def.columns.len()];
    for (&i, e) in key_cols.iter().zip(&lookup.keys) {
        values[i] = literal(e).ok_or_else(|| {
            TableError::Schema(format!(
                "a key of the lookup in {} is not a value: {e}",
                def.name
            ))
        })?;
    }
    let key = row_key(def, &key_cols, &values)?;
    let snapshot = match tx {
        Some(t) => t.snapshot(tables)?.map(|s| s.kv.clone()),
        None => None,
    };
    let rows = tx.map(|t| t.rows.lock());
    let reader = RowReader::new(tables, def, rows.as_deref(), snapshot)?;
    Ok((reader, key))
}

/// The lookup's answer: no row, or one.
pub(crate) async fn run(
    tables: &Tables,
    lookup: &Lookup,
    tx: Option<&Arc<crate::txn::Transaction>>,
) -> Result<(DFSchemaRef, Vec<RecordBatch>)> {
    // `key = NULL` holds for no row.
    if lookup
        .keys
        .iter()
        .any(|e| literal(e).is_some_and(|v| v.is_null()))
    {
        return Ok((lookup.schema.clone(), Vec::new()));
    }
    let (reader, key) = reader(tables, lookup, tx)?;
    let schema = Arc::new(lookup.schema.as_arrow().clone());
    let Some(v) = reader.get(&key).await? else {
        return Ok((lookup.schema.clone(), Vec::new()));
    };
    let row = format::decode_row(&lookup.def, &key, &v)?;
    let mut arrays = Vec::with_capacity(schema.fields().len());
    for (&i, f) in lookup.columns.iter().zip(schema.fields()) {
        let a = row[i].to_array()?;
        arrays.push(if a.data_type() == f.data_type() {
            a
        } else {
            datafusion::arrow::compute::cast(&a, f.data_type())?
        });
    }
    if lookup.with_key {
        arrays.push(Arc::new(datafusion::arrow::array::BinaryArray::from_vec(
            vec![&key[..]],
        )));
    }
    Ok((
        lookup.schema.clone(),
        vec![RecordBatch::try_new(schema, arrays)?],
    ))
}

/// A bound key value.
fn literal(e: &Expr) -> Option<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v.clone()),
        Expr::Cast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        // A bound parameter keeps its name as an alias.
        Expr::Alias(a) => literal(&a.expr),
        _ => None,
    }
}

enum Item {
    All,
    /// A column, and the name it is returned under.
    Column(String, Option<String>),
}

/// What the short path reads off a SELECT.
struct Shape {
    table: String,
    qualifier: String,
    items: Vec<Item>,
    /// `column = value` conjuncts of the WHERE.
    equalities: Vec<(String, SqlExpr)>,
}

impl Shape {
    fn of(stmt: &DfStatement) -> Option<Shape> {
        let DfStatement::Statement(s) = stmt else {
            return None;
        };
        let Statement::Query(q) = s.as_ref() else {
            return None;
        };
        if q.with.is_some()
            || q.order_by.is_some()
            || q.limit_clause.is_some()
            || q.fetch.is_some()
            || !q.locks.is_empty()
        {
            return None;
        }
        let SetExpr::Select(sel) = q.body.as_ref() else {
            return None;
        };
        let plain_group =
            matches!(&sel.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
        if sel.distinct.is_some()
            || sel.top.is_some()
            || sel.into.is_some()
            || !sel.lateral_views.is_empty()
            || !plain_group
            || sel.having.is_some()
            || !sel.named_window.is_empty()
            || sel.qualify.is_some()
            || !sel.cluster_by.is_empty()
            || !sel.distribute_by.is_empty()
            || !sel.sort_by.is_empty()
            || sel.prewhere.is_some()
            || sel.from.len() != 1
            || !sel.from[0].joins.is_empty()
        {
            return None;
        }
        let TableFactor::Table {
            name,
            alias,
            args: None,
            with_hints,
            version: None,
            partitions,
            ..
        } = &sel.from[0].relation
        else {
            return None;
        };
        if !with_hints.is_empty() || !partitions.is_empty() {
            return None;
        }
        if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
            return None;
        }
        let table = relation_name(name)?;
        if table.starts_with("__tierdb_") {
            return None;
        }
        let qualifier = alias
            .as_ref()
            .map_or_else(|| table.clone(), |a| ident_name(&a.name));
        let column = |e: &SqlExpr| column_of(e, &qualifier);
        let mut items = Vec::new();
        for p in &sel.projection {
            items.push(match p {
                SelectItem::Wildcard(o)
                    if o.opt_exclude.is_none()
                        && o.opt_except.is_none()
                        && o.opt_replace.is_none()
                        && o.opt_rename.is_none()
                        && o.opt_ilike.is_none() =>
                {
                    Item::All
                }
                SelectItem::UnnamedExpr(e) => Item::Column(column(e)?, None),
                SelectItem::ExprWithAlias { expr, alias } => {
                    Item::Column(column(expr)?, Some(ident_name(alias)))
                }
                _ => return None,
            });
        }
        let equalities = equalities(sel.selection.as_ref()?, &qualifier)?;
        Some(Shape {
            table,
            qualifier,
            items,
            equalities,
        })
    }
}

/// The column `e` names, if it is a column of the relation called `qualifier`.
fn column_of(e: &SqlExpr, qualifier: &str) -> Option<String> {
    match e {
        SqlExpr::Identifier(i) => Some(ident_name(i)),
        SqlExpr::CompoundIdentifier(parts) if parts.len() == 2 => {
            (ident_name(&parts[0]) == qualifier).then(|| ident_name(&parts[1]))
        }
        _ => None,
    }
}

/// `selection` as `column = value` conjuncts over the relation called `qualifier`, if it
/// is nothing else.
pub(crate) fn equalities(selection: &SqlExpr, qualifier: &str) -> Option<Vec<(String, SqlExpr)>> {
    let mut conjuncts = Vec::new();
    split(selection, &mut conjuncts);
    let mut out = Vec::new();
    for c in conjuncts {
        let SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = c
        else {
            return None;
        };
        match (column_of(left, qualifier), column_of(right, qualifier)) {
            (Some(n), None) => out.push((n, right.as_ref().clone())),
            (None, Some(n)) => out.push((n, left.as_ref().clone())),
            _ => return None,
        }
    }
    Some(out)
}

fn split<'a>(e: &'a SqlExpr, out: &mut Vec<&'a SqlExpr>) {
    match e {
        SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split(left, out);
            split(right, out);
        }
        SqlExpr::Nested(inner) => split(inner, out),
        other => out.push(other),
    }
}

/// A key value from the syntax tree: an integer or string literal of the column's kind, or
/// a parameter (typed as the column). Anything else is DataFusion's to plan.
fn value(e: &SqlExpr, ty: ColumnType) -> Option<Expr> {
    let integer = matches!(
        ty,
        ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64
    );
    let text = matches!(
        ty,
        ColumnType::Utf8 | ColumnType::VarcharUnbounded | ColumnType::Varchar { .. }
    );
    match e {
        SqlExpr::Value(v) => match &v.value {
            Value::Number(n, _) if integer => {
                let n: i64 = n.parse().ok()?;
                let v = ScalarValue::Int64(Some(n)).cast_to(&ty.arrow()).ok()?;
                // Out of the column's range: no such row, but DataFusion words it.
                (v != ScalarValue::try_from(ty.arrow()).ok()?).then_some(Expr::Literal(v, None))
            }
            Value::SingleQuotedString(s) if text => {
                Some(Expr::Literal(ScalarValue::Utf8(Some(s.clone())), None))
            }
            Value::Placeholder(p) if p.starts_with('$') => Some(Expr::Placeholder(Placeholder {
                id: p.clone(),
                field: Some(Arc::new(Field::new(p, ty.arrow(), true))),
            })),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(sql: &str) -> Option<Shape> {
        Shape::of(&crate::sql::parse(sql).ok()?.pop()?)
    }

    #[test]
    fn only_plain_key_lookups_take_the_short_path() {
        let s = shape("SELECT c FROM sbtest1 WHERE id=$1").unwrap();
        assert_eq!(s.table, "sbtest1");
        assert_eq!(s.equalities.len(), 1);
        assert!(shape("SELECT abalance FROM pgbench_accounts WHERE aid = 5").is_some());
        assert!(shape("SELECT t.c AS x FROM t WHERE t.id = 1 AND t.k = 2").is_some());
        for sql in [
            "SELECT c FROM t WHERE id > 1",
            "SELECT c FROM t WHERE id = 1 OR id = 2",
            "SELECT c FROM t, u WHERE id = 1",
            "SELECT c FROM t WHERE id = 1 ORDER BY c",
            "SELECT c FROM t WHERE id = 1 LIMIT 1",
            "SELECT upper(c) FROM t WHERE id = 1",
            "SELECT count(*) FROM t WHERE id = 1",
            "SELECT DISTINCT c FROM t WHERE id = 1",
            "SELECT c FROM t",
            "SELECT c FROM t WHERE id = 1 FOR UPDATE",
            "WITH x AS (SELECT 1) SELECT c FROM t WHERE id = 1",
        ] {
            assert!(shape(sql).is_none(), "{sql}");
        }
    }
}
