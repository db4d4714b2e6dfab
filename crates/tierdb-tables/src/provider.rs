//! DataFusion's view of tierdb tables: a [`TableProvider`] that skips segments with the
//! extent map before opening any file (then Parquet skips row groups and pages), an INSERT
//! sink, and a schema provider backed by the catalog.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::stats::ColumnStatistics;
use datafusion::common::stats::Precision;
use datafusion::common::{Column, DFSchema, ScalarValue, Statistics};
use datafusion::datasource::TableProvider;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use parking_lot::RwLock;

use crate::catalog::{SegmentMeta, TableDef};
use crate::tables::{PendingWrite, Tables};
use crate::write::{sorted_plan, write_stream};

/// The object store URL segments are read through (registered on every session).
pub const STORE_URL: &str = "tierdb://store";

pub fn store_url() -> ObjectStoreUrl {
    // A constant, well-formed URL.
    ObjectStoreUrl::parse(STORE_URL).unwrap_or_else(|_| ObjectStoreUrl::local_filesystem())
}

/// Extent elimination counters, over all scans of a session.
#[derive(Debug, Default)]
pub struct ScanCounters {
    pub segments_total: AtomicU64,
    pub segments_skipped: AtomicU64,
    pub bytes_total: AtomicU64,
    pub bytes_skipped: AtomicU64,
}

impl ScanCounters {
    pub fn snapshot(&self) -> [u64; 4] {
        [
            self.segments_total.load(Ordering::Relaxed),
            self.segments_skipped.load(Ordering::Relaxed),
            self.bytes_total.load(Ordering::Relaxed),
            self.bytes_skipped.load(Ordering::Relaxed),
        ]
    }
}

/// Knobs of the scan.
#[derive(Debug, Clone, Copy)]
pub struct ScanOptions {
    /// Skip segments with the extent map (off only to measure what it saves).
    pub extent_elimination: bool,
    /// Tell the physical planner the scan's row count and column ranges, summed from the
    /// extent map (`scan_statistics`); off only to measure what they buy.
    pub scan_statistics: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            extent_elimination: true,
            scan_statistics: true,
        }
    }
}

/// One table as of the moment it was looked up (its segments are a consistent snapshot: a
/// load commits all its segments in one KV batch).
#[derive(Debug)]
pub struct TierTable {
    tables: Arc<Tables>,
    def: TableDef,
    schema: SchemaRef,
    segments: Vec<SegmentMeta>,
    counters: Arc<ScanCounters>,
    options: ScanOptions,
    /// Column DEFAULTs, which an INSERT that leaves their column out fills in.
    defaults: std::collections::HashMap<String, Expr>,
}

impl TierTable {
    pub async fn load(
        tables: Arc<Tables>,
        def: TableDef,
        counters: Arc<ScanCounters>,
        options: ScanOptions,
    ) -> crate::Result<Self> {
        let segments = tables.segments(&def).await?;
        Ok(TierTable {
            schema: def.schema(),
            tables,
            def,
            segments,
            counters,
            options,
            defaults: Default::default(),
        })
    }

    /// This table with its column DEFAULTs as expressions.
    pub fn with_defaults(mut self, defaults: std::collections::HashMap<String, Expr>) -> Self {
        self.defaults = defaults;
        self
    }

    pub fn rows(&self) -> u64 {
        self.segments.iter().map(|s| s.rows).sum()
    }

    /// Names the committed rows this table holds: its segments' ids, hashed (FNV-1a). Any
    /// commit that changes the table changes its segment set, so a value derived from the
    /// rows (a measured count) stays valid while this does.
    pub fn snapshot_id(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for s in &self.segments {
            for b in s.id.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }

    pub fn def(&self) -> &TableDef {
        &self.def
    }

    /// The segments of this snapshot of the table.
    pub fn segments(&self) -> &[SegmentMeta] {
        &self.segments
    }

    /// The table's segments as the session's transaction (if any) sees them.
    pub(crate) async fn visible(&self, state: &dyn Session) -> crate::Result<Vec<SegmentMeta>> {
        match crate::txn::current(state.config()) {
            Some(tx) => {
                let committed = tx
                    .committed(&self.tables, &self.def, &self.segments)
                    .await?;
                Ok(tx.visible(&self.def, &committed))
            }
            None => Ok(self.segments.clone()),
        }
    }

    /// Which of `segments` may hold rows matching `predicate`, by the extent map (all of
    /// them without a predicate, or one the pruner cannot use, or with elimination off).
    pub(crate) fn prune(
        &self,
        predicate: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        segments: &[SegmentMeta],
    ) -> Vec<bool> {
        let all = vec![true; segments.len()];
        let Some(p) = predicate.filter(|_| self.options.extent_elimination) else {
            return all;
        };
        let Ok(pruning) = PruningPredicateBuilder::new()
            .with_file_schema(self.schema.clone())
            .try_build(p.clone())
        else {
            return all;
        };
        let map = ExtentMap {
            def: &self.def,
            segments,
        };
        pruning.prune(&map).unwrap_or(all)
    }

    /// A Parquet scan of `segments`, spread over `partitions`.
    pub(crate) fn segments_exec(
        &self,
        state: &dyn Session,
        mut kept: Vec<&SegmentMeta>,
        partitions: usize,
        projection: Option<&Vec<usize>>,
        predicate: Option<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // Kept segments spread over the partitions, largest first onto the lightest group.
        kept.sort_by_key(|s| std::cmp::Reverse(s.bytes));
        let mut groups: Vec<(u64, Vec<PartitionedFile>)> = (0..partitions.min(kept.len().max(1)))
            .map(|_| (0, Vec::new()))
            .collect();
        for seg in kept {
            self.tables
                .df_store()
                .register_checksums(&seg.path, &seg.checksums);
            if let Some(g) = groups.iter_mut().min_by_key(|g| g.0) {
                g.0 += seg.bytes;
                let mut file = PartitionedFile::new(seg.path.clone(), seg.bytes);
                // The extent map also lets DataFusion skip whole segments at run time
                // (dynamic filters from hash joins); not when elimination is off.
                if self.options.extent_elimination {
                    file = file.with_statistics(Arc::new(self.segment_statistics(seg)));
                }
                g.1.push(file);
            }
        }
        for (_, files) in &groups {
            let order: Vec<(String, u64)> = files
                .iter()
                .map(|f| (f.object_meta.location.to_string(), f.object_meta.size))
                .collect();
            self.tables.df_store().follow(&order);
        }
        // Footers and page indexes are parsed once per process and kept in the session's
        // file metadata cache (`EngineOptions::metadata_cache_bytes`), not re-read per query.
        let runtime = state.runtime_env();
        let reader_factory = CachedParquetFileReaderFactory::new(
            runtime.object_store(store_url())?,
            runtime.cache_manager.get_file_metadata_cache(),
        );
        // The session's Parquet options as they are (DataFusion's defaults unless a `SET`
        // changed them): no row-level filter pushdown. Pushed down, every hash join's
        // dynamic filter is evaluated a second time inside the decoder, predicate by
        // predicate, each with its own decode pass: measured slower on the star joins
        // (docs/benchmarks.md, "Analytic speed"). Predicates and dynamic filters still prune
        // segments (extent map), row groups (statistics) and pages (page index).
        let mut source = ParquetSource::new(self.schema.clone())
            .with_table_parquet_options(state.table_options().parquet.clone())
            .with_parquet_file_reader_factory(Arc::new(reader_factory))
            .with_enable_page_index(true)
            .with_metadata_size_hint(64 * 1024);
        if let Some(p) = predicate {
            source = source.with_predicate(p);
        }
        let mut file_groups: Vec<FileGroup> =
            groups.into_iter().map(|g| FileGroup::new(g.1)).collect();
        let table_stats = if self.options.extent_elimination && self.options.scan_statistics {
            Some(scan_statistics(&mut file_groups, &self.schema)?)
        } else {
            None
        };
        let mut config = FileScanConfigBuilder::new(store_url(), Arc::new(source))
            .with_file_groups(file_groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit);
        if let Some(stats) = table_stats {
            config = config.with_statistics(stats);
        }
        Ok(DataSourceExec::from_data_source(config.build()))
    }

    /// Per-file statistics from the extent map (exact: computed from the rows).
    fn segment_statistics(&self, seg: &SegmentMeta) -> Statistics {
        let mut st = Statistics::new_unknown(&self.schema)
            .with_num_rows(Precision::Exact(seg.rows as usize))
            .with_total_byte_size(Precision::Inexact(seg.bytes as usize));
        st.column_statistics = self
            .def
            .columns
            .iter()
            .zip(&seg.columns)
            .map(|(c, s)| {
                let bound = |v: &Option<crate::catalog::StatValue>| {
                    v.as_ref()
                        .and_then(|v| v.to_scalar(c.ty))
                        .map_or(Precision::Absent, Precision::Exact)
                };
                ColumnStatistics::new_unknown()
                    .with_null_count(Precision::Exact(s.nulls as usize))
                    .with_min_value(bound(&s.min))
                    .with_max_value(bound(&s.max))
            })
            .collect();
        // A column added after the segment was written has no entry in its extent map.
        st.column_statistics
            .resize_with(self.def.columns.len(), ColumnStatistics::new_unknown);
        st
    }
}

/// The statistics of a scan, for the physical planner: each partition's (its group's
/// segments summed) and the whole scan's, returned. Without them DataFusion sees every
/// tierdb scan as of unknown size, and `JoinSelection` cannot put the smaller input of a
/// hash join on its build side: TPC-H Q12 built its hash table from all 1.5 M orders
/// instead of the 31 K lineitem rows its filters keep. Row and null counts stay exact
/// (the extent map counted the rows, and a segment is immutable), so `count(*)` over a
/// table is answered from them; minimums and maximums are passed on as inexact, so that
/// `min()` and `max()` are still computed by the engine's own comparison (text collation,
/// NaN, CHAR padding) and never answered from a stored bound.
fn scan_statistics(groups: &mut [FileGroup], schema: &SchemaRef) -> DfResult<Statistics> {
    let mut per_group = Vec::with_capacity(groups.len());
    for g in groups.iter_mut() {
        if g.is_empty() {
            continue;
        }
        let mut merged =
            Statistics::try_merge_iter(g.iter().filter_map(|f| f.statistics.as_deref()), schema)?;
        inexact_bounds(&mut merged);
        per_group.push(merged.clone());
        *g = std::mem::replace(g, FileGroup::new(Vec::new())).with_statistics(Arc::new(merged));
    }
    let mut table = if per_group.is_empty() {
        Statistics::new_unknown(schema).with_num_rows(Precision::Exact(0))
    } else {
        Statistics::try_merge_iter(&per_group, schema)?
    };
    inexact_bounds(&mut table);
    Ok(table)
}

fn inexact_bounds(stats: &mut Statistics) {
    for c in &mut stats.column_statistics {
        c.min_value = std::mem::take(&mut c.min_value).to_inexact();
        c.max_value = std::mem::take(&mut c.max_value).to_inexact();
    }
}

/// The extent map of a list of segments, as DataFusion's pruning predicate reads it.
struct ExtentMap<'a> {
    def: &'a TableDef,
    segments: &'a [SegmentMeta],
}

impl ExtentMap<'_> {
    fn values(&self, column: &Column, max: bool) -> Option<ArrayRef> {
        let i = self.def.column_index(&column.name)?;
        let ty = self.def.columns[i].ty;
        let null = ScalarValue::try_from(&ty.arrow()).ok()?;
        let values = self.segments.iter().map(|s| {
            let c = &s.columns.get(i)?;
            let v = if max { &c.max } else { &c.min };
            v.as_ref()?.to_scalar(ty)
        });
        let values: Vec<ScalarValue> = values.map(|v| v.unwrap_or_else(|| null.clone())).collect();
        ScalarValue::iter_to_array(values).ok()
    }
}

impl PruningStatistics for ExtentMap<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, false)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.values(column, true)
    }

    fn num_containers(&self) -> usize {
        self.segments.len()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let i = self.def.column_index(&column.name)?;
        Some(Arc::new(UInt64Array::from_iter_values(
            self.segments
                .iter()
                .map(|s| s.columns.get(i).map_or(0, |c| c.nulls)),
        )))
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(UInt64Array::from_iter_values(
            self.segments.iter().map(|s| s.rows),
        )))
    }

    #[allow(clippy::mutable_key_type)]
    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

#[async_trait]
impl TableProvider for TierTable {
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
        // Segments, row groups and pages are skipped, but surviving rows are still filtered
        // above the scan.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    fn statistics(&self) -> Option<Statistics> {
        Some(
            Statistics::new_unknown(&self.schema)
                .with_num_rows(Precision::Exact(self.rows() as usize)),
        )
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let segments = self.visible(state).await?;
        let df_schema = DFSchema::try_from(self.schema.clone())?;
        let predicate = conjunction(filters.to_vec())
            .map(|p| state.create_physical_expr(p, &df_schema))
            .transpose()?;
        let keep = self.prune(predicate.as_ref(), &segments);
        let c = &self.counters;
        for (seg, k) in segments.iter().zip(&keep) {
            c.segments_total.fetch_add(1, Ordering::Relaxed);
            c.bytes_total.fetch_add(seg.bytes, Ordering::Relaxed);
            if !k {
                c.segments_skipped.fetch_add(1, Ordering::Relaxed);
                c.bytes_skipped.fetch_add(seg.bytes, Ordering::Relaxed);
            }
        }
        let kept: Vec<&SegmentMeta> = segments
            .iter()
            .zip(&keep)
            .filter_map(|(s, k)| k.then_some(s))
            .collect();
        let partitions = state.config().target_partitions().max(1);
        self.segments_exec(state, kept, partitions, projection, predicate, limit)
    }

    // UPDATE and DELETE never come here: DataFusion's DML planning hands a provider only
    // the filters it could lift off the plan (subqueries and joins are dropped), which
    // would change rows the statement did not name. The session runs them (`dml`).
    async fn delete_from(
        &self,
        _state: &dyn Session,
        _filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::NotImplemented(
            "DELETE through this path (e.g. EXPLAIN ANALYZE DELETE) is not supported; \
             run the DELETE itself"
                .into(),
        ))
    }

    async fn update(
        &self,
        _state: &dyn Session,
        _assignments: Vec<(String, Expr)>,
        _filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::NotImplemented(
            "UPDATE through this path (e.g. EXPLAIN ANALYZE UPDATE) is not supported; \
             run the UPDATE itself"
                .into(),
        ))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let replace = match insert_op {
            InsertOp::Append => false,
            InsertOp::Overwrite => true,
            InsertOp::Replace => {
                return Err(DataFusionError::NotImplemented(
                    "REPLACE INTO: tierdb tables have no primary key; use INSERT or \
                     INSERT OVERWRITE"
                        .into(),
                ));
            }
        };
        let input = sorted_plan(&self.def, input)?;
        // Every column nullable as the sink tells DataFusion: NOT NULL is checked where the
        // rows are written (`write::conform`), with PostgreSQL's 23502 naming the column
        // (DataFusion's own check names its position).
        let fields: Vec<_> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let sink = TierSink {
            tables: self.tables.clone(),
            def: self.def.clone(),
            schema: Arc::new(datafusion::arrow::datatypes::Schema::new(fields)),
            replace,
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// INSERT's sink: writes segments, then commits them all at once (or leaves the commit to
/// the session's transaction, see [`crate::txn`]).
#[derive(Debug)]
struct TierSink {
    tables: Arc<Tables>,
    def: TableDef,
    schema: SchemaRef,
    replace: bool,
}

impl DisplayAs for TierSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TierSink: table={}", self.def.name)
    }
}

#[async_trait]
impl DataSink for TierSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        let segments = write_stream(&self.tables, &self.def, data, &|_| {}).await?;
        let rows = segments.iter().map(|s| s.rows).sum();
        if let Some(tx) = crate::txn::current(context.session_config()) {
            // Part of a transaction: its commit makes these rows visible.
            tx.push(PendingWrite {
                table: self.def.clone(),
                segments,
                replace: self.replace,
                removed: Vec::new(),
            });
            return Ok(rows);
        }
        // On failure commit_segments deletes the files if nothing was committed.
        self.tables
            .commit_segments(&self.def, segments, self.replace)
            .await?;
        Ok(rows)
    }
}

/// The catalog as a DataFusion schema. Table names are listed from a cache the engine
/// refreshes before each statement (DataFusion asks for them synchronously); tables
/// themselves are read from the KV engine when a statement is planned.
#[derive(Debug)]
pub struct TierSchema {
    tables: Arc<Tables>,
    names: RwLock<Vec<String>>,
    /// The views among `names` (listed, never scanned: see `views.rs`).
    views: RwLock<std::collections::HashSet<String>>,
    /// The sequences, which a query may read as relations but which are not listed as
    /// tables.
    sequences: RwLock<std::collections::HashSet<String>>,
    /// The stored schemas (not `public`): `crate::schemas`.
    schemas: RwLock<Vec<String>>,
    counters: Arc<ScanCounters>,
    options: RwLock<ScanOptions>,
    /// [`Tables::generation`] + 1 as of the last listing (0: never listed).
    listed: AtomicU64,
    /// Where row tables' DEFAULT expressions are planned (built on first use).
    expr_state: std::sync::OnceLock<datafusion::execution::SessionState>,
}

impl TierSchema {
    pub fn new(tables: Arc<Tables>, counters: Arc<ScanCounters>) -> Self {
        TierSchema {
            tables,
            names: RwLock::new(Vec::new()),
            views: RwLock::new(Default::default()),
            sequences: RwLock::new(Default::default()),
            schemas: RwLock::new(Vec::new()),
            counters,
            options: RwLock::new(ScanOptions::default()),
            expr_state: Default::default(),
            listed: AtomicU64::new(0),
        }
    }

    /// Lists the catalog's tables and views again, unless this process is the writer and
    /// has committed no catalog change since the last listing (nobody else can).
    pub async fn refresh(&self) -> crate::Result<()> {
        let generation = self.tables.generation();
        let writer = !self.tables.is_read_only();
        if writer && self.listed.load(Ordering::Acquire) == generation + 1 {
            return Ok(());
        }
        let mut names: Vec<String> = self
            .tables
            .tables()
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        let views: std::collections::HashSet<String> = self
            .tables
            .views()
            .await?
            .into_iter()
            .map(|v| v.name)
            .collect();
        names.extend(views.iter().cloned());
        let sequences = self
            .tables
            .sequences()
            .await?
            .into_iter()
            .map(|s| s.name)
            .collect();
        let schemas = self
            .tables
            .schemas()
            .await?
            .into_iter()
            .map(|s| s.name)
            .collect();
        *self.names.write() = names;
        *self.sequences.write() = sequences;
        *self.schemas.write() = schemas;
        *self.views.write() = views;
        // generation + 1: 0 means never listed.
        self.listed.store(generation + 1, Ordering::Release);
        Ok(())
    }

    /// The stored schemas (not `public`) at the last [`TierSchema::refresh`].
    pub fn schema_names(&self) -> Vec<String> {
        self.schemas.read().clone()
    }

    /// The relations (tables and views) of every schema, by catalog name
    /// ([`crate::sql::qualified`]), at the last [`TierSchema::refresh`].
    pub fn all_names(&self) -> Vec<String> {
        self.names.read().clone()
    }

    /// Whether `name` was a view at the last [`TierSchema::refresh`].
    pub fn has_view(&self, name: &str) -> bool {
        self.views.read().contains(name)
    }

    pub fn set_options(&self, options: ScanOptions) {
        *self.options.write() = options;
    }

    /// A table's column DEFAULTs as expressions.
    fn defaults(&self, def: &TableDef) -> DfResult<std::collections::HashMap<String, Expr>> {
        let mut out = std::collections::HashMap::new();
        if def.defaults.is_empty() {
            return Ok(out);
        }
        let state = self.expr_state.get_or_init(|| {
            let state = datafusion::execution::SessionStateBuilder::new()
                .with_default_features()
                .build();
            let ctx = datafusion::prelude::SessionContext::new_with_state(state);
            for f in crate::rows::sequence::functions(&self.tables) {
                ctx.register_udf(f);
            }
            ctx.state()
        });
        let empty = DFSchema::empty();
        for (column, sql) in &def.defaults {
            out.insert(column.clone(), state.create_logical_expr(sql, &empty)?);
        }
        Ok(out)
    }
}

#[async_trait]
impl SchemaProvider for TierSchema {
    /// `public`'s relations (those of other schemas: `sql/namespaces.rs`). A relation of
    /// any schema is found by [`SchemaProvider::table`] under its catalog name.
    fn table_names(&self) -> Vec<String> {
        self.names
            .read()
            .iter()
            .filter(|n| !n.contains('.'))
            .cloned()
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        // The reserved name of a table's row-id view, which UPDATE and DELETE read.
        let (rows_of, name) = match name.strip_prefix(crate::dml::ROWS_PREFIX) {
            Some(table) => (true, table),
            None => (false, name),
        };
        let Some(def) = self.tables.table(name).await? else {
            if !rows_of && let Some(view) = self.tables.view(name).await? {
                return Ok(Some(Arc::new(crate::views::ViewListing::new(view))));
            }
            if !rows_of && let Some(seq) = self.tables.sequence(name).await? {
                return Ok(Some(sequence_relation(&self.tables, &seq)?));
            }
            return Ok(None);
        };
        if def.is_row_table() {
            let defaults = self.defaults(&def)?;
            return Ok(Some(Arc::new(crate::rows::provider::RowTable::new(
                self.tables.clone(),
                def,
                rows_of,
                defaults,
            ))));
        }
        let options = *self.options.read();
        let defaults = self.defaults(&def)?;
        let t = TierTable::load(self.tables.clone(), def, self.counters.clone(), options)
            .await?
            .with_defaults(defaults);
        if rows_of {
            return Ok(Some(Arc::new(crate::dml::RowIdTable::new(t))));
        }
        Ok(Some(Arc::new(t)))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.names.read().iter().any(|n| n == name) || self.sequences.read().contains(name)
    }
}

/// A sequence read as a relation, as in PostgreSQL (`SELECT last_value, is_called FROM
/// s`: pg_dump reads it to write `setval`): one row of its state now
/// ([`Tables::sequence_state`]); `log_cnt` is 0 (tierdb reserves values in blocks instead).
fn sequence_relation(
    tables: &Tables,
    seq: &crate::rows::sequence::SequenceDef,
) -> DfResult<Arc<dyn TableProvider>> {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let (last, called) = tables.sequence_state(seq);
    let schema = Arc::new(Schema::new(vec![
        Field::new("last_value", DataType::Int64, false),
        Field::new("log_cnt", DataType::Int64, false),
        Field::new("is_called", DataType::Boolean, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![last])),
        Arc::new(Int64Array::from(vec![0])),
        Arc::new(BooleanArray::from(vec![called])),
    ];
    let batch = datafusion::arrow::array::RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Arc::new(datafusion::catalog::MemTable::try_new(
        schema,
        vec![vec![batch]],
    )?))
}
