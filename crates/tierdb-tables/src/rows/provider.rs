//! DataFusion's view of a row table: scans that read only the keys the WHERE clause allows
//! (point gets for an equality on the whole primary key, a key range for a range or an
//! equality on its leading columns), and INSERT.
//!
//! A filter stays above the scan (pushdown is "inexact") unless `exact.rs` answers it: the
//! key range only narrows what is read, so a filter the range does not capture exactly
//! still decides. A literal that cannot be cast to the key column's type without loss
//! narrows nothing. The scan itself, bound now or at each execution of a kept plan, is
//! `scan.rs`'s.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{ScalarValue, project_schema};
use datafusion::datasource::TableProvider;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{
    BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};

use super::scan::{RowScanExec, ScanInput};
use super::{key_columns, keys, table_prefix, table_range};
use crate::catalog::{ColumnType, TableDef};
use crate::error::TableError;
use crate::tables::Tables;

/// The row-id column of a row table's DML view: the row's key.
pub(crate) const KEY_COLUMN: &str = "__tierdb_key";

/// A row table, as queries and INSERT see it; with `with_key`, also the key column that
/// UPDATE and DELETE read (`dml.rs`).
#[derive(Debug)]
pub(crate) struct RowTable {
    tables: Arc<Tables>,
    def: TableDef,
    schema: SchemaRef,
    with_key: bool,
    defaults: std::collections::HashMap<String, Expr>,
}

impl RowTable {
    pub(crate) fn new(
        tables: Arc<Tables>,
        def: TableDef,
        with_key: bool,
        defaults: std::collections::HashMap<String, Expr>,
    ) -> Self {
        // Every column nullable as DataFusion sees it: NOT NULL is checked by the sink, with
        // PostgreSQL's 23502 naming the column (DataFusion's own check names the input's).
        let mut fields: Vec<Arc<Field>> = def
            .schema()
            .fields()
            .iter()
            .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
            .collect();
        if with_key {
            fields.push(Arc::new(Field::new(KEY_COLUMN, DataType::Binary, false)));
        }
        let schema = Arc::new(Schema::new(fields));
        RowTable {
            tables,
            def,
            schema,
            with_key,
            defaults,
        }
    }

    pub(crate) fn def(&self) -> &TableDef {
        &self.def
    }

    /// Whether this is the key view UPDATE and DELETE read.
    pub(crate) fn has_key(&self) -> bool {
        self.with_key
    }
}

/// What a scan reads.
#[derive(Debug, Clone)]
pub(crate) enum Access {
    /// These keys, each a whole primary key.
    Points(Vec<Bytes>),
    /// These key ranges.
    Ranges(Vec<(Bound<Bytes>, Bound<Bytes>)>),
    /// The rows of the entries under these prefixes of this index.
    Index(String, Vec<Bytes>),
}

impl Access {
    pub(crate) fn describe(&self) -> String {
        match self {
            Access::Points(p) => format!("primary key lookup ×{}", p.len()),
            Access::Ranges(r) if r.len() == 1 && r[0].0 == Bound::Unbounded => "full scan".into(),
            Access::Ranges(r) => format!("primary key range ×{}", r.len()),
            Access::Index(name, p) => format!("index {name} lookup ×{}", p.len()),
        }
    }
}

/// Most keys an IN-list or a product of equalities is turned into.
const MAX_POINTS: usize = 1024;

/// The keys `filters` (a conjunction) allow reading: through the primary key, or, where it
/// would read the whole table, through an index with equalities on its leading columns.
pub(crate) fn access(def: &TableDef, filters: &[Expr]) -> Access {
    let by_key = key_access(def, filters);
    let full = matches!(&by_key, Access::Ranges(r) if r.len() == 1 && r[0] == table_range(def.id));
    if !full {
        return by_key;
    }
    let mut conjuncts = Vec::new();
    for f in filters {
        split_and(f, &mut conjuncts);
    }
    for index in &def.indexes {
        let mut prefixes = vec![super::index::index_prefix(index.id)];
        for c in &index.columns {
            let Some(ci) = def.column_index(c) else { break };
            let col = &def.columns[ci];
            if matches!(col.ty, ColumnType::Char { .. }) {
                break;
            }
            let Some(values) = equalities(&conjuncts, c, col.ty) else {
                break;
            };
            if prefixes.len() * values.len() > MAX_POINTS {
                break;
            }
            let mut next = Vec::new();
            for p in &prefixes {
                for v in &values {
                    let mut k = p.clone();
                    if keys::encode(&mut k, col.ty, v, true).is_err() {
                        return by_key;
                    }
                    next.push(k);
                }
            }
            prefixes = next;
        }
        if prefixes[0].len() > 9 {
            let mut p: Vec<Bytes> = prefixes.into_iter().map(Bytes::from).collect();
            p.sort();
            p.dedup();
            return Access::Index(index.name.clone(), p);
        }
    }
    by_key
}

fn key_access(def: &TableDef, filters: &[Expr]) -> Access {
    let full = || {
        let (s, e) = table_range(def.id);
        Access::Ranges(vec![(s, e)])
    };
    let Ok(cols) = key_columns(def) else {
        return full();
    };
    let mut conjuncts = Vec::new();
    for f in filters {
        split_and(f, &mut conjuncts);
    }
    let mut prefixes: Vec<Vec<u8>> = vec![table_prefix(def.id)];
    for (n, &ci) in cols.iter().enumerate() {
        let c = &def.columns[ci];
        if matches!(c.ty, ColumnType::Char { .. }) {
            break; // CHAR compares without its padding: no byte range says that
        }
        let eq = equalities(&conjuncts, &c.name, c.ty);
        if let Some(values) = eq {
            if prefixes.len() * values.len() > MAX_POINTS {
                break;
            }
            let mut next = Vec::with_capacity(prefixes.len() * values.len());
            for p in &prefixes {
                for v in &values {
                    let mut k = p.clone();
                    if keys::encode(&mut k, c.ty, v, false).is_err() {
                        return full();
                    }
                    next.push(k);
                }
            }
            prefixes = next;
            if n + 1 == cols.len() {
                let mut points: Vec<Bytes> = prefixes.into_iter().map(Bytes::from).collect();
                points.sort();
                points.dedup();
                return Access::Points(points);
            }
            continue;
        }
        // A range on this column, under each prefix.
        let (lo, hi) = bounds(&conjuncts, &c.name, c.ty);
        let mut ranges = Vec::with_capacity(prefixes.len());
        for p in &prefixes {
            let enc = |v: &ScalarValue| {
                let mut k = p.clone();
                keys::encode(&mut k, c.ty, v, false).ok().map(|()| k)
            };
            let after = |k: Vec<u8>| tierdb_kv::prefix_end(&k);
            let start = match &lo {
                Some((v, true)) => enc(v).map(|k| Bound::Included(Bytes::from(k))),
                Some((v, false)) => enc(v).and_then(after).map(Bound::Included),
                None => Some(Bound::Included(Bytes::from(p.clone()))),
            };
            let end = match &hi {
                Some((v, true)) => enc(v).and_then(after).map(Bound::Excluded),
                Some((v, false)) => enc(v).map(|k| Bound::Excluded(Bytes::from(k))),
                None => Some(after(p.clone()).map_or(Bound::Unbounded, Bound::Excluded)),
            };
            match (start, end) {
                (Some(s), Some(e)) => ranges.push((s, e)),
                _ => return full(),
            }
        }
        return Access::Ranges(ranges);
    }
    // Every key column had equalities but a product grew too large, or a CHAR column: the
    // prefixes read so far.
    Access::Ranges(
        prefixes
            .into_iter()
            .map(|p| {
                let end = tierdb_kv::prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
                (Bound::Included(Bytes::from(p)), end)
            })
            .collect(),
    )
}

/// The conjuncts of `e` (`a AND b AND c`: a, b, c) appended to `out`.
pub(super) fn split_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            split_and(left, out);
            split_and(right, out);
        }
        other => out.push(other),
    }
}

fn is_column(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Column(c) if c.name == name)
}

/// `e` as a value of the column type, if it is a literal that casts there without loss.
fn literal(e: &Expr, ty: ColumnType) -> Option<ScalarValue> {
    let v = match e {
        Expr::Literal(v, _) => v.clone(),
        Expr::Cast(c) => literal(&c.expr, ty)?.cast_to(c.field.data_type()).ok()?,
        _ => return None,
    };
    if v.is_null() {
        return None;
    }
    let target = ty.arrow();
    if v.data_type() == target {
        return Some(v);
    }
    let cast = v.cast_to(&target).ok()?;
    let back = cast.cast_to(&v.data_type()).ok()?;
    (back == v).then_some(cast)
}

/// The values an equality or IN-list among `conjuncts` pins `column` to.
fn equalities(conjuncts: &[&Expr], column: &str, ty: ColumnType) -> Option<Vec<ScalarValue>> {
    for e in conjuncts {
        match e {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => {
                let v = if is_column(left, column) {
                    literal(right, ty)
                } else if is_column(right, column) {
                    literal(left, ty)
                } else {
                    None
                };
                if let Some(v) = v {
                    return Some(vec![v]);
                }
            }
            Expr::InList(l) if !l.negated && is_column(&l.expr, column) => {
                let values: Option<Vec<ScalarValue>> =
                    l.list.iter().map(|e| literal(e, ty)).collect();
                if let Some(v) = values {
                    return Some(v);
                }
            }
            _ => {}
        }
    }
    None
}

type Bound1 = Option<(ScalarValue, bool)>;

/// The tightest lower and upper bounds (value, inclusive) `conjuncts` put on `column`.
fn bounds(conjuncts: &[&Expr], column: &str, ty: ColumnType) -> (Bound1, Bound1) {
    let (mut lo, mut hi): (Bound1, Bound1) = (None, None);
    let mut tighten = |is_lo: bool, v: ScalarValue, incl: bool| {
        let slot = if is_lo { &mut lo } else { &mut hi };
        let better = match slot {
            None => true,
            Some((old, old_incl)) => match v.partial_cmp(old) {
                Some(std::cmp::Ordering::Greater) => is_lo,
                Some(std::cmp::Ordering::Less) => !is_lo,
                Some(std::cmp::Ordering::Equal) => *old_incl && !incl,
                None => false,
            },
        };
        if better {
            *slot = Some((v, incl));
        }
    };
    for e in conjuncts {
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (v, op) = if is_column(left, column) {
                    (literal(right, ty), *op)
                } else if is_column(right, column) {
                    match op.swap() {
                        Some(o) => (literal(left, ty), o),
                        None => continue,
                    }
                } else {
                    continue;
                };
                let Some(v) = v else { continue };
                match op {
                    Operator::Gt => tighten(true, v, false),
                    Operator::GtEq => tighten(true, v, true),
                    Operator::Lt => tighten(false, v, false),
                    Operator::LtEq => tighten(false, v, true),
                    _ => {}
                }
            }
            Expr::Between(b) if !b.negated && is_column(&b.expr, column) => {
                if let (Some(l), Some(h)) = (literal(&b.low, ty), literal(&b.high, ty)) {
                    tighten(true, l, true);
                    tighten(false, h, true);
                }
            }
            _ => {}
        }
    }
    (lo, hi)
}

#[async_trait]
impl TableProvider for RowTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Comparisons of an integer key with a value are answered by the key range read
        // (`exact.rs`): DataFusion plans no filter for them.
        Ok(filters
            .iter()
            .map(|f| {
                if super::exact::is_exact(&self.def, f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // A plan made to be kept (`sql/plancache.rs`, invariant 6) binds its scans at
        // each execution (`scan.rs`); any other is bound now.
        let input = if super::scan::defers(state.config())
            || filters.iter().any(super::scan::has_placeholder)
        {
            ScanInput::Unbound {
                tables: self.tables.clone(),
                filters: filters.to_vec(),
            }
        } else {
            ScanInput::bind(&self.tables, &self.def, filters, state.config())?
        };
        let projected = project_schema(&self.schema, projection)?;
        Ok(Arc::new(RowScanExec::new(
            self.def.clone(),
            self.schema.clone(),
            projected,
            projection.cloned(),
            input,
            limit,
            self.with_key,
        )))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} into a row table ({}) is not supported: use INSERT, UPDATE or \
                 DELETE",
                self.def.name
            )));
        }
        let sink = RowSink {
            tables: self.tables.clone(),
            def: self.def.clone(),
            // What DataFusion hands the sink: the columns as the provider shows them.
            schema: Arc::new(Schema::new(
                self.schema.fields()[..self.def.columns.len()].to_vec(),
            )),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// INSERT's sink for a row table: rows go into the session's transaction, or (outside
/// one) are committed together when the statement's last row is in.
#[derive(Debug)]
struct RowSink {
    tables: Arc<Tables>,
    def: TableDef,
    schema: SchemaRef,
}

impl DisplayAs for RowSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RowSink: table={} (row store: KV engine)", self.def.name)
    }
}

#[async_trait]
impl DataSink for RowSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        if self.tables.is_read_only() {
            return Err(TableError::ReadOnly {
                db: self.tables.name().to_string(),
            }
            .into());
        }
        let tx = crate::txn::current(context.session_config());
        let n = super::insert_stream(&self.tables, &self.def, data, tx.as_ref(), &|_| {}).await?;
        Ok(n)
    }
}
