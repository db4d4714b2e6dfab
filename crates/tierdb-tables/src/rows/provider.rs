//! DataFusion's view of a row table: scans that read only the keys the WHERE clause allows
//! (point gets for an equality on the whole primary key, a key range for a range or an
//! equality on its leading columns), and INSERT.
//!
//! Every filter stays above the scan (pushdown is "inexact"): the key range only narrows
//! what is read, so a filter the range does not capture exactly still decides. A literal
//! that cannot be cast to the key column's type without loss narrows nothing.

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::arrow::array::{ArrayRef, BinaryArray, RecordBatch};
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
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use super::exact::Within;
use super::{RowReader, format, key_columns, keys, table_prefix, table_range};
use crate::catalog::{ColumnType, TableDef};
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// The row-id column of a row table's DML view: the row's key.
pub(crate) const KEY_COLUMN: &str = "__tierdb_key";

/// Rows decoded per batch of a scan.
const BATCH_ROWS: usize = 4096;

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
    fn describe(&self) -> String {
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
        let within = super::exact::within(&self.def, filters)?;
        let access = match within {
            Within::Nothing => Access::Ranges(Vec::new()),
            _ => access(&self.def, filters),
        };
        let tx = crate::txn::current(state.config());
        let snapshot = match &tx {
            Some(t) => t.snapshot(&self.tables)?.map(|s| s.kv.clone()),
            None => None,
        };
        let reader = {
            let rows = tx.as_ref().map(|t| t.rows.lock());
            RowReader::new(&self.tables, &self.def, rows.as_deref(), snapshot)?
        };
        let projected = project_schema(&self.schema, projection)?;
        Ok(Arc::new(RowScanExec::new(
            self.def.clone(),
            self.schema.clone(),
            projected,
            projection.cloned(),
            access,
            within,
            Arc::new(reader),
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

/// The scan of a row table: reads `access` through one reader, in key order.
#[derive(Debug)]
pub(crate) struct RowScanExec {
    def: TableDef,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    access: Access,
    /// The keys the exact filters allow (`exact.rs`, invariant 2).
    within: Within,
    reader: Arc<RowReader>,
    limit: Option<usize>,
    with_key: bool,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for RowReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowReader").finish_non_exhaustive()
    }
}

impl RowScanExec {
    #[allow(clippy::too_many_arguments)]
    fn new(
        def: TableDef,
        schema: SchemaRef,
        projected: SchemaRef,
        projection: Option<Vec<usize>>,
        access: Access,
        within: Within,
        reader: Arc<RowReader>,
        limit: Option<usize>,
        with_key: bool,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(projected),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        RowScanExec {
            def,
            schema,
            projection,
            access,
            within,
            reader,
            limit,
            with_key,
            properties,
        }
    }
}

impl DisplayAs for RowScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RowScanExec: table={} (row store: KV engine), {}",
            self.def.name,
            self.access.describe()
        )?;
        if let Some(l) = self.limit {
            write!(f, ", fetch={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for RowScanExec {
    fn name(&self) -> &str {
        "RowScanExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let out_schema = self.properties.eq_properties.schema().clone();
        let scan = Scan {
            def: self.def.clone(),
            schema: self.schema.clone(),
            projection: self.projection.clone(),
            reader: self.reader.clone(),
            within: self.within.clone(),
            with_key: self.with_key,
            left: self.limit.unwrap_or(usize::MAX),
        };
        let stream = futures::stream::unfold(
            (
                scan,
                self.access.clone(),
                0usize,
                None::<Bound<Bytes>>,
                false,
            ),
            |(scan, access, at, resume, done)| async move {
                if done {
                    return None;
                }
                match scan.next(&access, at, resume).await {
                    Ok(Some((batch, at, resume))) => {
                        Some((Ok(batch), (scan, access, at, resume, false)))
                    }
                    Ok(None) => None,
                    Err(e) => Some((
                        Err(DataFusionError::from(e)),
                        (scan, access, at, None, true),
                    )),
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            out_schema,
            stream.boxed(),
        )))
    }
}

struct Scan {
    def: TableDef,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    reader: Arc<RowReader>,
    within: Within,
    with_key: bool,
    left: usize,
}

impl Scan {
    /// The next batch: from range/point `at`, resuming a range at `resume`.
    async fn next(
        &self,
        access: &Access,
        mut at: usize,
        mut resume: Option<Bound<Bytes>>,
    ) -> Result<Option<(RecordBatch, usize, Option<Bound<Bytes>>)>> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut rows: Vec<(Bytes, Bytes)> = Vec::new();
        match access {
            Access::Points(points) => {
                while at < points.len() && rows.len() < BATCH_ROWS {
                    if !self.within.contains(&points[at]) {
                        at += 1;
                        continue;
                    }
                    if let Some(v) = self.reader.get(&points[at]).await? {
                        rows.push((points[at].clone(), v));
                    }
                    at += 1;
                }
            }
            Access::Index(_, prefixes) => {
                while at < prefixes.len() && rows.is_empty() {
                    let p = &prefixes[at];
                    let end = tierdb_kv::prefix_end(p).map_or(Bound::Unbounded, Bound::Excluded);
                    let start = resume.take().unwrap_or_else(|| Bound::Included(p.clone()));
                    let (page, next) = self.reader.scan((start, end), BATCH_ROWS).await?;
                    for (_, row_key) in page {
                        if !self.within.contains(&row_key) {
                            continue;
                        }
                        if let Some(v) = self.reader.get(&row_key).await? {
                            rows.push((row_key, v));
                        }
                    }
                    match next {
                        Some(r) => resume = Some(r),
                        None => at += 1,
                    }
                }
            }
            Access::Ranges(ranges) => {
                while at < ranges.len() && rows.is_empty() {
                    let (s, e) = &ranges[at];
                    let start = resume.take().unwrap_or_else(|| s.clone());
                    let (page, next) = self.reader.scan((start, e.clone()), BATCH_ROWS).await?;
                    rows = page;
                    rows.retain(|(k, _)| self.within.contains(k));
                    match next {
                        Some(r) => resume = Some(r),
                        None => at += 1,
                    }
                }
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let rows: Vec<(Bytes, Bytes)> = rows.into_iter().take(self.left).collect();
        let batch = self.decode(&rows)?;
        Ok(Some((batch, at, resume)))
    }

    fn decode(&self, rows: &[(Bytes, Bytes)]) -> Result<RecordBatch> {
        let decoded = rows
            .iter()
            .map(|(k, v)| format::decode_row(&self.def, k, v))
            .collect::<Result<Vec<_>>>()?;
        let table_schema = self.def.schema();
        let batch = format::to_batch(&self.def, &table_schema, decoded)?;
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        if self.with_key {
            columns.push(Arc::new(BinaryArray::from_iter_values(
                rows.iter().map(|(k, _)| k.as_ref()),
            )));
        }
        let full = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(match &self.projection {
            Some(p) => full.project(p)?,
            None => full,
        })
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
