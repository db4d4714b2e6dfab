//! The SQL engine: a DataFusion session over the catalog. CREATE TABLE and DROP TABLE are
//! carried out here (they change the catalog in the KV engine); everything else is
//! DataFusion's, with tierdb tables as its only tables.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::datasource::provider_as_source;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, OneOrManyWithParens, Statement as SqlStatement,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;

use crate::catalog::{ColumnDef, ColumnType};
use crate::error::{Result, TableError};
use crate::provider::{
    DeferredWrites, STORE_URL, ScanCounters, ScanOptions, TierSchema, TierTable,
};
use crate::tables::{NewTable, Tables};

pub const CATALOG: &str = "tierdb";
pub const SCHEMA: &str = "public";

/// How a session runs.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Parallel partitions per query (DataFusion's target_partitions).
    pub threads: usize,
    /// Memory for sorts, joins and aggregations before they spill to disk.
    pub memory_limit: usize,
    /// Where spills go (the OS temporary directory if `None`).
    pub spill_dir: Option<PathBuf>,
    /// Reorder inner joins by catalog statistics (see `joinorder.rs`).
    pub join_reorder: bool,
    /// DRAM for parsed Parquet footers and page indexes, kept across queries.
    pub metadata_cache_bytes: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            memory_limit: 2 << 30,
            spill_dir: None,
            join_reorder: true,
            metadata_cache_bytes: 256 << 20,
        }
    }
}

/// What a statement returned: rows, or a command tag (as PostgreSQL names them).
#[derive(Debug)]
pub struct StatementResult {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// `Some("CREATE TABLE")`, `Some("INSERT 0 5")`…: no rows to show.
    pub command: Option<String>,
}

impl StatementResult {
    fn command(tag: impl Into<String>) -> Self {
        StatementResult {
            schema: Arc::new(Schema::empty()),
            batches: Vec::new(),
            command: Some(tag.into()),
        }
    }

    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

pub struct SqlEngine {
    tables: Arc<Tables>,
    ctx: SessionContext,
    schema: Arc<TierSchema>,
    counters: Arc<ScanCounters>,
}

impl std::fmt::Debug for SqlEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEngine")
            .field("tables", &self.tables)
            .finish_non_exhaustive()
    }
}

impl SqlEngine {
    pub fn new(tables: Arc<Tables>, options: &EngineOptions) -> Result<Self> {
        let config = SessionConfig::new()
            .with_target_partitions(options.threads.max(1))
            .with_information_schema(true)
            // Hash joins collect their (build) left side once instead of repartitioning both
            // sides by key: with the join order below, the left sides are the filtered
            // dimensions and the fact table streams through without a shuffle.
            .with_repartition_joins(false)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(CATALOG, SCHEMA);
        let mut disk = DiskManagerBuilder::default();
        if let Some(dir) = &options.spill_dir {
            disk = disk.with_mode(DiskManagerMode::Directories(vec![dir.clone()]));
        }
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(options.memory_limit)))
            .with_disk_manager_builder(disk)
            .with_cache_manager(
                CacheManagerConfig::default()
                    .with_metadata_cache_limit(options.metadata_cache_bytes),
            )
            .build_arc()?;
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features();
        if options.join_reorder {
            // Right after filters are pushed down (the estimates read them), before
            // projections are pruned.
            let mut rules = datafusion::optimizer::Optimizer::new().rules;
            let at = rules
                .iter()
                .position(|r| r.name() == "push_down_filter")
                .map_or(rules.len(), |i| i + 1);
            rules.insert(at, Arc::new(crate::joinorder::JoinReorder));
            state = state.with_optimizer_rules(rules);
        }
        let ctx = SessionContext::new_with_state(state.build());
        let url = url::Url::parse(STORE_URL).map_err(|e| TableError::Schema(e.to_string()))?;
        ctx.register_object_store(&url, Arc::new(tables.df_store().clone()));
        let counters = Arc::new(ScanCounters::default());
        let schema = Arc::new(TierSchema::new(tables.clone(), counters.clone()));
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(SCHEMA, schema.clone())?;
        ctx.register_catalog(CATALOG, Arc::new(catalog));
        Ok(SqlEngine {
            tables,
            ctx,
            schema,
            counters,
        })
    }

    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Extent elimination counters over every scan of this session.
    pub fn scan_counters(&self) -> &Arc<ScanCounters> {
        &self.counters
    }

    pub fn set_scan_options(&self, options: ScanOptions) {
        self.schema.set_options(options);
    }

    /// Makes this session read segment files straight from the local filesystem, where
    /// `root` is the directory the database's store is rooted at, instead of through the
    /// tiered store and the checksum check: the same plans with none of tierdb's store
    /// layers, to measure what they cost. Only for a database in a local directory, and
    /// only for measuring: nothing read this way is verified.
    pub fn read_files_directly(&self, root: &std::path::Path) -> Result<()> {
        let fs = object_store_df::local::LocalFileSystem::new_with_prefix(root)
            .map_err(|e| TableError::Schema(format!("{}: {e}", root.display())))?;
        let url = url::Url::parse(STORE_URL).map_err(|e| TableError::Schema(e.to_string()))?;
        self.ctx.register_object_store(&url, Arc::new(fs));
        Ok(())
    }

    /// Splits `sql` into statements; a syntax error names the line and column.
    pub fn parse(&self, sql: &str) -> Result<Vec<DfStatement>> {
        Ok(DFParser::parse_sql_with_dialect(sql, &GenericDialect {})?
            .into_iter()
            .collect())
    }

    /// Runs every statement of `sql` in order, stopping at the first error (see
    /// [`SqlEngine::run`] for which query strings are one transaction).
    pub async fn sql(&self, sql: &str) -> Result<Vec<StatementResult>> {
        let (out, error) = self.run(self.parse(sql)?).await;
        match error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Runs statements in order, stopping at the first error; returns the results of the
    /// statements that ran and that error.
    ///
    /// Several statements that are all `INSERT … VALUES` are one implicit transaction, as in
    /// PostgreSQL: their rows are committed together in one atomic catalog commit after the
    /// last one, and if any fails none is committed and the segments already written are
    /// deleted. (If the commit itself fails, its outcome may be unknown: see
    /// [`Tables::commit_writes`].) Other statement mixes run one commit per statement
    /// (transactions over DDL and reads of a transaction's own writes: docs/design/tables.md).
    pub async fn run(
        &self,
        statements: Vec<DfStatement>,
    ) -> (Vec<StatementResult>, Option<TableError>) {
        let atomic = statements.len() > 1 && statements.iter().all(is_insert_values);
        let deferred = atomic.then(|| Arc::new(DeferredWrites::default()));
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            match self.execute_in(stmt, deferred.clone()).await {
                Ok(r) => out.push(r),
                Err(e) => {
                    if let Some(d) = &deferred {
                        let pending = std::mem::take(&mut *d.writes.lock());
                        let segments: Vec<_> =
                            pending.into_iter().flat_map(|w| w.segments).collect();
                        self.tables.discard(&segments).await;
                    }
                    return (out, Some(e));
                }
            }
        }
        if let Some(d) = deferred {
            let pending = std::mem::take(&mut *d.writes.lock());
            // On failure commit_writes deletes the files if nothing was committed.
            if let Err(e) = self.tables.commit_writes(pending).await {
                return (out, Some(e));
            }
        }
        (out, None)
    }

    /// Runs one statement (committing what it writes).
    pub async fn execute(&self, stmt: DfStatement) -> Result<StatementResult> {
        self.execute_in(stmt, None).await
    }

    /// Runs one statement; with `deferred`, an INSERT's rows are written but left for the
    /// caller to commit.
    async fn execute_in(
        &self,
        mut stmt: DfStatement,
        deferred: Option<Arc<DeferredWrites>>,
    ) -> Result<StatementResult> {
        self.schema.refresh().await?;
        let mut keys = None;
        if let DfStatement::Statement(s) = &mut stmt
            && let SqlStatement::CreateTable(ct) = s.as_mut()
        {
            let order = ct.order_by.take();
            let part = ct.partition_by.take();
            keys = Some((order, part));
        }
        let state = self.ctx.state();
        self.require_tables(&state, &stmt)?;
        let plan = state.statement_to_plan(stmt).await?;
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                let (order, part) = keys.unwrap_or((None, None));
                self.create_table(c, order, part).await
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d)) => {
                let name = d.name.table().to_string();
                let dropped = self.tables.drop_table(&name, d.if_exists).await?;
                self.schema.refresh().await?;
                Ok(StatementResult::command(if dropped {
                    "DROP TABLE"
                } else {
                    "DROP TABLE (did not exist)"
                }))
            }
            LogicalPlan::Ddl(other) => Err(TableError::Schema(format!(
                "{} is not supported: tierdb keeps tables only (CREATE TABLE, DROP TABLE)",
                other.name()
            ))),
            plan => {
                let insert = matches!(plan, LogicalPlan::Dml(_));
                let df = match (&deferred, insert) {
                    (Some(d), true) => {
                        let mut state = self.ctx.state();
                        state.config_mut().set_extension(d.clone());
                        datafusion::dataframe::DataFrame::new(state, plan)
                    }
                    _ => self.ctx.execute_logical_plan(plan).await?,
                };
                let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
                let batches = df.collect().await?;
                if insert {
                    let n = inserted(&batches);
                    return Ok(StatementResult::command(format!("INSERT 0 {n}")));
                }
                Ok(StatementResult {
                    schema,
                    batches,
                    command: None,
                })
            }
        }
    }

    /// Fails with [`TableError::NoTable`] (kind NotFound, SQLSTATE 42P01) when a statement
    /// reads or writes a table of ours that does not exist, instead of DataFusion's untyped
    /// planning error. DDL names its own targets and is left to its own checks.
    fn require_tables(
        &self,
        state: &datafusion::execution::SessionState,
        stmt: &DfStatement,
    ) -> Result<()> {
        let DfStatement::Statement(s) = stmt else {
            return Ok(());
        };
        if matches!(
            s.as_ref(),
            SqlStatement::CreateTable(_)
                | SqlStatement::Drop { .. }
                | SqlStatement::CreateView { .. }
        ) {
            return Ok(());
        }
        for r in state.resolve_table_references(stmt)? {
            let ours = r.catalog().is_none_or(|c| c == CATALOG)
                && r.schema().is_none_or(|s| s == SCHEMA)
                && !state.table_functions().contains_key(r.table());
            if ours
                && !datafusion::catalog::SchemaProvider::table_exist(
                    self.schema.as_ref(),
                    r.table(),
                )
            {
                return Err(TableError::NoTable(r.table().to_string()));
            }
        }
        Ok(())
    }

    async fn create_table(
        &self,
        c: datafusion::logical_expr::CreateMemoryTable,
        order: Option<OneOrManyWithParens<SqlExpr>>,
        part: Option<Box<SqlExpr>>,
    ) -> Result<StatementResult> {
        if c.temporary {
            return Err(TableError::Schema(
                "CREATE TEMPORARY TABLE is not supported: every tierdb table is stored".into(),
            ));
        }
        if !c.column_defaults.is_empty() {
            return Err(TableError::Schema(
                "column DEFAULT values are not supported".into(),
            ));
        }
        let name = c.name.table().to_string();
        let schema = c.input.schema();
        let mut columns = Vec::new();
        for f in schema.fields() {
            columns.push(ColumnDef {
                name: f.name().clone(),
                ty: ColumnType::from_arrow(f.name(), f.data_type())?,
                nullable: f.is_nullable(),
            });
        }
        let sort_key = match order {
            None => Vec::new(),
            Some(OneOrManyWithParens::One(e)) => vec![key_column(&e, "ORDER BY")?],
            Some(OneOrManyWithParens::Many(es)) => es
                .iter()
                .map(|e| key_column(e, "ORDER BY"))
                .collect::<Result<_>>()?,
        };
        let partition_key = part.map(|e| key_column(&e, "PARTITION BY")).transpose()?;
        if c.or_replace {
            self.tables.drop_table(&name, true).await?;
        }
        let existed = self.tables.table(&name).await?.is_some();
        let def = self
            .tables
            .create_table(
                NewTable {
                    name: name.clone(),
                    columns,
                    sort_key,
                    partition_key,
                },
                c.if_not_exists,
            )
            .await?;
        self.schema.refresh().await?;
        let is_ctas = !matches!(c.input.as_ref(), LogicalPlan::EmptyRelation(_));
        if !is_ctas || existed {
            return Ok(StatementResult::command("CREATE TABLE"));
        }
        // CREATE TABLE … AS SELECT: the rows go in like an INSERT … SELECT. If that fails
        // the new (empty) table is dropped again.
        let table = TierTable::load(
            self.tables.clone(),
            def,
            self.counters.clone(),
            ScanOptions::default(),
        )
        .await?;
        let insert = LogicalPlanBuilder::insert_into(
            c.input.as_ref().clone(),
            name.as_str(),
            provider_as_source(Arc::new(table)),
            InsertOp::Append,
        )?
        .build()?;
        let run = async {
            let df = self.ctx.execute_logical_plan(insert).await?;
            Ok::<_, TableError>(df.collect().await?)
        };
        match run.await {
            Ok(batches) => Ok(StatementResult::command(format!(
                "SELECT {}",
                inserted(&batches)
            ))),
            Err(e) => {
                self.tables.drop_table(&name, true).await?;
                self.schema.refresh().await?;
                Err(e)
            }
        }
    }
}

/// Whether a statement is an `INSERT … VALUES`: it reads no table, so deferring the
/// commit of earlier INSERTs cannot change what it writes.
fn is_insert_values(stmt: &DfStatement) -> bool {
    let DfStatement::Statement(s) = stmt else {
        return false;
    };
    let SqlStatement::Insert(ins) = s.as_ref() else {
        return false;
    };
    ins.source.as_ref().is_some_and(|q| {
        q.with.is_none()
            && matches!(
                q.body.as_ref(),
                datafusion::sql::sqlparser::ast::SetExpr::Values(_)
            )
    })
}

/// The row count an INSERT plan returns (one UInt64 "count" value).
fn inserted(batches: &[RecordBatch]) -> u64 {
    batches
        .first()
        .filter(|b| b.num_columns() == 1 && b.num_rows() == 1)
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                .map(|a| a.value(0))
        })
        .unwrap_or(0)
}

/// A key given as a plain column name (normalized as DataFusion does: lowercase unless quoted).
fn key_column(e: &SqlExpr, clause: &str) -> Result<String> {
    match e {
        SqlExpr::Identifier(id) if id.quote_style.is_some() => Ok(id.value.clone()),
        SqlExpr::Identifier(id) => Ok(id.value.to_lowercase()),
        other => Err(TableError::Schema(format!(
            "{clause} {other}: table keys must be column names"
        ))),
    }
}
