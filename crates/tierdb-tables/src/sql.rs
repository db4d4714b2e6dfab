//! The SQL engine: a DataFusion session over the catalog. CREATE TABLE and DROP TABLE are
//! carried out here (they change the catalog in the KV engine); everything else is
//! DataFusion's, with tierdb tables as its only tables.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::common::tree_node::TreeNode;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::provider_as_source;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::dml::{InsertOp, WriteOp};
use datafusion::logical_expr::{DdlStatement, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, OneOrManyWithParens, Statement as SqlStatement,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;

use crate::catalog::{ColumnDef, ColumnType};
use crate::error::{Result, TableError};
use crate::joinorder::{Cardinalities, JoinReorder};
use crate::provider::{STORE_URL, ScanCounters, ScanOptions, TierSchema, TierTable};
use crate::tables::{NewTable, Tables};
use crate::txn::{Transaction, TxSlot};

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
    /// Worker processes (`tierdb worker`) to spread queries over; none: this process runs
    /// every query alone (see `distributed.rs`).
    pub workers: Vec<url::Url>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            memory_limit: 2 << 30,
            spill_dir: None,
            join_reorder: true,
            metadata_cache_bytes: 256 << 20,
            workers: Vec::new(),
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
    /// The engine's own session (the `tierdb sql` shell's, and what new sessions copy).
    session: SqlSession,
}

impl std::fmt::Debug for SqlEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEngine")
            .field("tables", &self.tables)
            .finish_non_exhaustive()
    }
}

/// A query runtime with `options`' memory pool, spill directory and Parquet metadata cache
/// (one per process: every session of the process shares it).
pub(crate) fn runtime_env(
    options: &EngineOptions,
) -> Result<Arc<datafusion::execution::runtime_env::RuntimeEnv>> {
    let mut disk = DiskManagerBuilder::default();
    if let Some(dir) = &options.spill_dir {
        disk = disk.with_mode(DiskManagerMode::Directories(vec![dir.clone()]));
    }
    Ok(RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(options.memory_limit)))
        .with_disk_manager_builder(disk)
        .with_cache_manager(
            CacheManagerConfig::default().with_metadata_cache_limit(options.metadata_cache_bytes),
        )
        .build_arc()?)
}

/// DataFusion's own physical planner, with no distributed stages.
#[derive(Debug)]
struct LocalPlanner;

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for LocalPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        state: &dyn datafusion::catalog::Session,
    ) -> datafusion::common::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::physical_planner::PhysicalPlanner;
        datafusion::physical_planner::DefaultPhysicalPlanner::default()
            .create_physical_plan(plan, state)
            .await
    }
}

impl SqlEngine {
    pub fn new(tables: Arc<Tables>, options: &EngineOptions) -> Result<Self> {
        let slot = Arc::new(TxSlot::default());
        let config = SessionConfig::new()
            .with_target_partitions(options.threads.max(1))
            .with_information_schema(true)
            // Hash joins collect their (build) left side once instead of repartitioning both
            // sides by key: with the join order below, the left sides are the filtered
            // dimensions and the fact table streams through without a shuffle.
            .with_repartition_joins(false)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(CATALOG, SCHEMA)
            .with_extension(slot.clone());
        let runtime = runtime_env(options)?;
        // PostgreSQL's arithmetic: integer overflow fails, sum(bigint) is numeric (`checked.rs`).
        let mut analyzer = datafusion::optimizer::Analyzer::new().rules;
        analyzer.push(Arc::new(crate::checked::CheckedArithmetic::default()));
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_analyzer_rules(analyzer);
        let cards = options
            .join_reorder
            .then(|| Arc::new(Cardinalities::default()));
        if let Some(cards) = &cards {
            // Right after filters are pushed down (the estimates read them), before
            // projections are pruned.
            let mut rules = datafusion::optimizer::Optimizer::new().rules;
            let at = rules
                .iter()
                .position(|r| r.name() == "push_down_filter")
                .map_or(rules.len(), |i| i + 1);
            rules.insert(at, Arc::new(JoinReorder::new(cards.clone())));
            state = state.with_optimizer_rules(rules);
        }
        let state = crate::distributed::coordinate(state, &options.workers);
        let ctx = SessionContext::new_with_state(state.build());
        for f in crate::checked::functions() {
            ctx.register_udf(f.as_ref().clone());
        }
        ctx.register_udaf(crate::checked::SumAsNumeric::udaf());
        let url = url::Url::parse(STORE_URL).map_err(|e| TableError::Schema(e.to_string()))?;
        ctx.register_object_store(&url, Arc::new(tables.df_store().clone()));
        let counters = Arc::new(ScanCounters::default());
        let schema = Arc::new(TierSchema::new(tables.clone(), counters.clone()));
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(SCHEMA, schema.clone())?;
        ctx.register_catalog(CATALOG, Arc::new(catalog));
        Ok(SqlEngine {
            tables: tables.clone(),
            session: SqlSession {
                tables,
                ctx,
                schema,
                counters,
                slot,
                aborted: Default::default(),
                cards,
                distributed: !options.workers.is_empty(),
            },
        })
    }

    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    pub fn context(&self) -> &SessionContext {
        &self.session.ctx
    }

    /// The engine's own session.
    pub fn session(&self) -> &SqlSession {
        &self.session
    }

    /// A new session for one client: its own DataFusion context (settings, transaction)
    /// over the same catalog, store, caches and memory pool as every other session.
    /// Functions and schemas registered on the engine's context before are there too.
    pub fn new_session(&self) -> SqlSession {
        let slot = Arc::new(TxSlot::default());
        let base = self.session.ctx.state();
        let config = base.config().clone().with_extension(slot.clone());
        let state = datafusion::execution::SessionStateBuilder::new_from_existing(base)
            .with_config(config)
            .build();
        SqlSession {
            tables: self.tables.clone(),
            ctx: SessionContext::new_with_state(state),
            schema: self.session.schema.clone(),
            counters: self.session.counters.clone(),
            slot,
            aborted: Default::default(),
            cards: self.session.cards.clone(),
            distributed: self.session.distributed,
        }
    }

    /// Extent elimination counters over every scan of this session.
    pub fn scan_counters(&self) -> &Arc<ScanCounters> {
        &self.session.counters
    }

    pub fn set_scan_options(&self, options: ScanOptions) {
        self.session.schema.set_options(options);
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
        self.session.ctx.register_object_store(&url, Arc::new(fs));
        Ok(())
    }

    /// Splits `sql` into statements; a syntax error names the line and column.
    pub fn parse(&self, sql: &str) -> Result<Vec<DfStatement>> {
        parse(sql)
    }

    /// Runs every statement of `sql` in order in the engine's session, stopping at the
    /// first error (see [`SqlSession::run`] for which query strings are one transaction).
    pub async fn sql(&self, sql: &str) -> Result<Vec<StatementResult>> {
        self.session.sql(sql).await
    }

    /// [`SqlSession::run`] in the engine's session.
    pub async fn run(
        &self,
        statements: Vec<DfStatement>,
    ) -> (Vec<StatementResult>, Option<TableError>) {
        self.session.run(statements).await
    }

    /// Runs one statement (committing what it writes unless a transaction is open).
    pub async fn execute(&self, stmt: DfStatement) -> Result<StatementResult> {
        self.session.execute(stmt).await
    }
}

/// Splits `sql` into statements; a syntax error names the line and column.
pub fn parse(sql: &str) -> Result<Vec<DfStatement>> {
    Ok(DFParser::parse_sql_with_dialect(sql, &GenericDialect {})?
        .into_iter()
        .map(|mut s| {
            if let DfStatement::Statement(st) = &mut s {
                crate::parsefix::repair(st);
            }
            s
        })
        .collect())
}

/// What a statement produced: rows still to be read, or a command tag.
#[derive(Debug)]
pub enum Outcome {
    /// A query's rows, computed as they are read.
    Rows(DataFrame),
    /// `"INSERT 0 5"`, `"UPDATE 3"`, `"BEGIN"`…
    Command(String),
}

impl Outcome {
    pub async fn collect(self) -> Result<StatementResult> {
        Ok(match self {
            Outcome::Rows(df) => {
                let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
                StatementResult {
                    schema,
                    batches: df.collect().await?,
                    command: None,
                }
            }
            Outcome::Command(tag) => StatementResult::command(tag),
        })
    }
}

/// How a statement is run in a session (decided from its syntax, before planning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    Begin,
    Commit,
    Rollback,
    Savepoint,
    Release,
    /// ROLLBACK TO SAVEPOINT.
    RollbackTo,
    /// CREATE TABLE, DROP TABLE: committed at once, also inside a transaction.
    Ddl,
    /// VACUUM: deletes unreferenced segment files.
    Vacuum,
    /// INSERT, UPDATE, DELETE.
    Write,
    /// Everything else DataFusion plans (queries, EXPLAIN, SHOW TABLES…).
    Query,
}

impl StatementKind {
    pub fn of(stmt: &DfStatement) -> Self {
        let DfStatement::Statement(s) = stmt else {
            return StatementKind::Query;
        };
        match s.as_ref() {
            SqlStatement::StartTransaction { .. } => StatementKind::Begin,
            SqlStatement::Commit { .. } => StatementKind::Commit,
            SqlStatement::Rollback {
                savepoint: Some(_), ..
            } => StatementKind::RollbackTo,
            SqlStatement::Rollback { .. } => StatementKind::Rollback,
            SqlStatement::Savepoint { .. } => StatementKind::Savepoint,
            SqlStatement::ReleaseSavepoint { .. } => StatementKind::Release,
            SqlStatement::CreateTable(_) | SqlStatement::Drop { .. } => StatementKind::Ddl,
            SqlStatement::Vacuum(_) => StatementKind::Vacuum,
            SqlStatement::Insert(_) | SqlStatement::Update(_) | SqlStatement::Delete(_) => {
                StatementKind::Write
            }
            _ => StatementKind::Query,
        }
    }
}

/// One client's session: a DataFusion context of its own (settings, prepared plans) over
/// the engine's catalog, and the transaction it is in, if any.
///
/// Outside a transaction every statement commits what it writes on its own (autocommit).
/// Between `BEGIN` and `COMMIT`, INSERT, UPDATE and DELETE write their segments but commit
/// nothing; the session's reads see them; `COMMIT` makes all of them visible in one atomic
/// catalog commit and `ROLLBACK` (or dropping the session without a commit) deletes them.
/// CREATE TABLE and DROP TABLE are committed at once, also inside a transaction. After a
/// statement fails inside a transaction, every statement but `ROLLBACK` (or `COMMIT`, which
/// then rolls back) fails with SQLSTATE 25P02, as in PostgreSQL.
pub struct SqlSession {
    tables: Arc<Tables>,
    ctx: SessionContext,
    schema: Arc<TierSchema>,
    counters: Arc<ScanCounters>,
    slot: Arc<TxSlot>,
    aborted: std::sync::atomic::AtomicBool,
    /// Measured join-input counts for the join order (`None`: join reordering is off).
    cards: Option<Arc<Cardinalities>>,
    /// Queries are spread over worker processes (`EngineOptions::workers`).
    distributed: bool,
}

impl std::fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSession")
            .field("in_transaction", &self.in_transaction())
            .finish_non_exhaustive()
    }
}

impl Drop for SqlSession {
    fn drop(&mut self) {
        // A session that ends inside a transaction (a dropped connection) rolls it back:
        // its segment files were never committed.
        if let Some(tx) = self.slot.set(None)
            && !tx.is_empty()
        {
            let tables = self.tables.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { tx.rollback(&tables).await });
            }
        }
    }
}

impl SqlSession {
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    pub fn in_transaction(&self) -> bool {
        self.slot.current().is_some()
    }

    /// The open transaction, if any.
    pub fn transaction(&self) -> Option<Arc<Transaction>> {
        self.slot.current()
    }

    /// Inside a transaction that a failed statement aborted.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs every statement of `sql` in order, stopping at the first error.
    pub async fn sql(&self, sql: &str) -> Result<Vec<StatementResult>> {
        let (out, error) = self.run(parse(sql)?).await;
        match error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Runs statements in order, stopping at the first error; returns the results of the
    /// statements that ran and that error.
    ///
    /// Outside a transaction, several statements with no BEGIN, COMMIT or ROLLBACK among
    /// them are one implicit transaction, as a multi-statement query string is in
    /// PostgreSQL: their writes are committed together after the last one, and if any
    /// fails none is. (If the commit itself fails, its outcome may be unknown: see
    /// [`Tables::commit_writes`].)
    pub async fn run(
        &self,
        statements: Vec<DfStatement>,
    ) -> (Vec<StatementResult>, Option<TableError>) {
        let implicit = statements.len() > 1
            && !self.in_transaction()
            && statements.iter().all(|s| {
                !matches!(
                    StatementKind::of(s),
                    StatementKind::Begin | StatementKind::Commit | StatementKind::Rollback
                )
            });
        if implicit {
            self.slot.set(Some(Arc::new(Transaction::default())));
        }
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            let r = match self.execute_outcome(stmt, None).await {
                Ok(o) => o.collect().await,
                Err(e) => Err(e),
            };
            match r {
                Ok(r) => out.push(r),
                Err(e) => {
                    if implicit {
                        self.rollback().await;
                    } else {
                        self.fail();
                    }
                    return (out, Some(e));
                }
            }
        }
        if implicit && let Err(e) = self.commit().await {
            return (out, Some(e));
        }
        (out, None)
    }

    /// Runs one statement and reads all its rows.
    pub async fn execute(&self, stmt: DfStatement) -> Result<StatementResult> {
        match self.execute_outcome(stmt, None).await {
            Ok(o) => o.collect().await,
            Err(e) => {
                self.fail();
                Err(e)
            }
        }
    }

    /// Notes that a statement failed: inside a transaction, the transaction is aborted.
    pub fn fail(&self) {
        if self.in_transaction() {
            self.aborted
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Starts a transaction (a no-op inside one, as PostgreSQL only warns).
    pub fn begin(&self) {
        if !self.in_transaction() {
            self.slot.set(Some(Arc::new(Transaction::default())));
            self.aborted
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Commits the transaction; an aborted one is rolled back instead (returns `false`).
    pub async fn commit(&self) -> Result<bool> {
        let aborted = self
            .aborted
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        let Some(tx) = self.slot.set(None) else {
            return Ok(true);
        };
        if aborted {
            tx.rollback(&self.tables).await;
            return Ok(false);
        }
        tx.commit(&self.tables).await?;
        Ok(true)
    }

    pub async fn rollback(&self) {
        self.aborted
            .store(false, std::sync::atomic::Ordering::Release);
        if let Some(tx) = self.slot.set(None) {
            tx.rollback(&self.tables).await;
        }
    }

    async fn savepoint(&self, kind: StatementKind, stmt: &DfStatement) -> Result<Outcome> {
        let name = match stmt {
            DfStatement::Statement(s) => match s.as_ref() {
                SqlStatement::Savepoint { name } | SqlStatement::ReleaseSavepoint { name } => {
                    name.value.clone()
                }
                SqlStatement::Rollback {
                    savepoint: Some(name),
                    ..
                } => name.value.clone(),
                _ => String::new(),
            },
            _ => String::new(),
        };
        let Some(tx) = self.transaction() else {
            return Err(TableError::Transaction {
                code: "25P01",
                message: format!(
                    "{} can only be used in transaction blocks",
                    match kind {
                        StatementKind::Savepoint => "SAVEPOINT",
                        StatementKind::Release => "RELEASE SAVEPOINT",
                        _ => "ROLLBACK TO SAVEPOINT",
                    }
                ),
            });
        };
        Ok(Outcome::Command(match kind {
            StatementKind::Savepoint => {
                tx.savepoint(&name);
                "SAVEPOINT".into()
            }
            StatementKind::Release => {
                tx.release(&name)?;
                "RELEASE".into()
            }
            _ => {
                tx.rollback_to(&name, &self.tables).await?;
                self.aborted
                    .store(false, std::sync::atomic::Ordering::Release);
                "ROLLBACK".into()
            }
        }))
    }

    /// The plan of a statement DataFusion plans (a query, INSERT, UPDATE, DELETE), with
    /// its parameters (`$1`…) still in it; `None` for statements tierdb runs itself.
    pub async fn plan(&self, stmt: &DfStatement) -> Result<Option<LogicalPlan>> {
        if !matches!(
            StatementKind::of(stmt),
            StatementKind::Query | StatementKind::Write
        ) {
            return Ok(None);
        }
        self.schema.refresh().await?;
        let state = self.ctx.state();
        self.require_tables(&state, stmt)?;
        if crate::dml::is_update_or_delete(stmt) {
            return Ok(Some(crate::dml::plan(&state, &self.tables, stmt).await?));
        }
        crate::guard::check(stmt)?;
        Ok(Some(state.statement_to_plan(stmt.clone()).await?))
    }

    /// Runs one statement; `plan` is its plan from [`SqlSession::plan`] with the
    /// parameters bound (planned again from the statement if `None`). Does not mark the
    /// transaction aborted on failure: the caller calls [`SqlSession::fail`].
    pub async fn execute_outcome(
        &self,
        mut stmt: DfStatement,
        plan: Option<LogicalPlan>,
    ) -> Result<Outcome> {
        let kind = StatementKind::of(&stmt);
        if self.is_aborted()
            && !matches!(
                kind,
                StatementKind::Commit | StatementKind::Rollback | StatementKind::RollbackTo
            )
        {
            return Err(TableError::Transaction {
                code: "25P02",
                message: "current transaction is aborted, commands ignored until end of \
                          transaction block (send ROLLBACK)"
                    .into(),
            });
        }
        match kind {
            StatementKind::Begin => {
                self.begin();
                return Ok(Outcome::Command("BEGIN".into()));
            }
            StatementKind::Commit => {
                let committed = self.commit().await?;
                return Ok(Outcome::Command(
                    if committed { "COMMIT" } else { "ROLLBACK" }.into(),
                ));
            }
            StatementKind::Rollback => {
                self.rollback().await;
                return Ok(Outcome::Command("ROLLBACK".into()));
            }
            StatementKind::Savepoint | StatementKind::Release | StatementKind::RollbackTo => {
                return self.savepoint(kind, &stmt).await;
            }
            StatementKind::Vacuum => {
                let plan = self.tables.vacuum(DEFAULT_VACUUM_RETAIN).await?;
                return Ok(Outcome::Command(format!("VACUUM {}", plan.delete.len())));
            }
            _ => {}
        }
        self.schema.refresh().await?;
        if crate::dml::is_update_or_delete(&stmt) {
            let state = self.ctx.state();
            let plan = match plan {
                Some(p) => p,
                None => {
                    self.require_tables(&state, &stmt)?;
                    crate::dml::plan(&state, &self.tables, &stmt).await?
                }
            };
            let n = crate::dml::execute(&self.local_ctx(), &self.tables, &stmt, plan).await?;
            return Ok(Outcome::Command(format!("{} {n}", crate::dml::verb(&stmt))));
        }
        let mut keys = None;
        if let DfStatement::Statement(s) = &mut stmt
            && let SqlStatement::CreateTable(ct) = s.as_mut()
        {
            let order = ct.order_by.take();
            let part = ct.partition_by.take();
            keys = Some((order, part));
        }
        let state = self.ctx.state();
        let plan = match plan {
            Some(p) => p,
            None => {
                self.require_tables(&state, &stmt)?;
                crate::guard::check(&stmt)?;
                state.statement_to_plan(stmt).await?
            }
        };
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                let (order, part) = keys.unwrap_or((None, None));
                self.create_table(c, order, part).await
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d)) => {
                let name = d.name.table().to_string();
                let dropped = self.tables.drop_table(&name, d.if_exists).await?;
                self.schema.refresh().await?;
                Ok(Outcome::Command(
                    if dropped {
                        "DROP TABLE"
                    } else {
                        "DROP TABLE (did not exist)"
                    }
                    .into(),
                ))
            }
            LogicalPlan::Ddl(other) => Err(TableError::Schema(format!(
                "{} is not supported: tierdb keeps tables only (CREATE TABLE, DROP TABLE)",
                other.name()
            ))),
            LogicalPlan::Dml(dml) => {
                let op = match &dml.op {
                    WriteOp::Insert(_) => "INSERT 0",
                    other => {
                        return Err(TableError::Schema(format!(
                            "{other} is not supported: use INSERT, UPDATE or DELETE"
                        )));
                    }
                };
                let df = self
                    .exec_ctx()
                    .execute_logical_plan(LogicalPlan::Dml(dml))
                    .await?;
                let n = inserted(&df.collect().await?);
                Ok(Outcome::Command(format!("{op} {n}")))
            }
            plan => {
                self.measure_join_inputs(&plan).await;
                Ok(Outcome::Rows(
                    self.exec_ctx().execute_logical_plan(plan).await?,
                ))
            }
        }
    }

    /// The context a statement runs in: the session's, or, when queries are spread over
    /// workers and this session's open transaction has written segments (which its scans
    /// read and no worker can: they are in no catalog yet), the same without the
    /// distributed planner, so the statement runs in this process alone.
    fn exec_ctx(&self) -> SessionContext {
        if !self.distributed || self.slot.current().is_none_or(|tx| tx.is_empty()) {
            return self.ctx.clone();
        }
        self.local_ctx()
    }

    /// The session's context without the distributed planner: everything runs here.
    fn local_ctx(&self) -> SessionContext {
        if !self.distributed {
            return self.ctx.clone();
        }
        let state = datafusion::execution::SessionStateBuilder::new_from_existing(self.ctx.state())
            .with_query_planner(Arc::new(LocalPlanner))
            .build();
        SessionContext::new_with_state(state)
    }

    /// Counts the rows of the filtered dimension scans of `plan`'s joins that the join
    /// order has no measurement for yet (see `joinorder.rs`). Best effort: a count that
    /// fails leaves that input to the estimate.
    async fn measure_join_inputs(&self, plan: &LogicalPlan) {
        let Some(cards) = &self.cards else {
            return;
        };
        let mut scans = 0;
        let _ = plan.apply(|n| {
            if matches!(n, LogicalPlan::TableScan(_)) {
                scans += 1;
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        });
        if scans < 3 {
            return;
        }
        let optimized = match self.ctx.state().optimize(plan) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("join inputs not measured: {e}");
                return;
            }
        };
        for (key, input) in crate::joinorder::unmeasured(&optimized, cards) {
            match self.count_rows(input).await {
                Ok(n) => cards.insert(key, n),
                Err(e) => tracing::debug!("join input {key} not measured: {e}"),
            }
        }
    }

    async fn count_rows(&self, input: LogicalPlan) -> Result<u64> {
        let counted = LogicalPlanBuilder::from(input)
            .aggregate(
                Vec::<datafusion::logical_expr::Expr>::new(),
                vec![datafusion::functions_aggregate::count::count_all()],
            )?
            .build()?;
        let batches = self
            .exec_ctx()
            .execute_logical_plan(counted)
            .await?
            .collect()
            .await?;
        batches
            .first()
            .filter(|b| b.num_rows() == 1)
            .and_then(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::Int64Array>()
                    .map(|a| a.value(0).max(0) as u64)
            })
            .ok_or_else(|| TableError::Schema("count(*) returned no row".into()))
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
            if r.table().starts_with(crate::dml::ROWS_PREFIX) {
                return Err(TableError::NoTable(r.table().to_string()));
            }
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
    ) -> Result<Outcome> {
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
            return Ok(Outcome::Command("CREATE TABLE".into()));
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
            let df = self.exec_ctx().execute_logical_plan(insert).await?;
            Ok::<_, TableError>(df.collect().await?)
        };
        match run.await {
            Ok(batches) => Ok(Outcome::Command(format!("SELECT {}", inserted(&batches)))),
            Err(e) => {
                self.tables.drop_table(&name, true).await?;
                self.schema.refresh().await?;
                Err(e)
            }
        }
    }
}

/// How long VACUUM keeps a file after it left the catalog, for readers that planned before
/// (queries, followers) still reading it.
pub const DEFAULT_VACUUM_RETAIN: std::time::Duration = std::time::Duration::from_secs(600);

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
