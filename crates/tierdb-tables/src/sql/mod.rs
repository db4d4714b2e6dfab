//! The SQL engine: a DataFusion session over the catalog. CREATE TABLE and DROP TABLE are
//! carried out here (they change the catalog in the KV engine); everything else is
//! DataFusion's, with tierdb tables as its only tables.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::CatalogProvider;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::GenericDialect;

use crate::error::{Result, TableError};
use crate::interrupt::{Interrupt, InterruptCheck, interleave};
use crate::joinorder::{Cardinalities, JoinReorder};
use crate::provider::{STORE_URL, ScanCounters, ScanOptions, TierSchema};
use crate::semijoin::SemiJoinReduction;
use crate::tables::Tables;
use crate::txn::TxSlot;

mod alter_stmt;
mod alter_type;
mod casts;
pub mod colnames;
mod colstorage_stmt;
mod copy_columns;
mod ddl;
mod execute;
mod explain;
mod insert_source;
mod isolation;
mod namespaces;
mod plancache;
mod returning;
mod searchpath;
mod seqstmt;
mod serial;
mod session;
mod setschema_stmt;
mod temp;
mod temp_stmt;
mod upsert;
pub(crate) mod withnames;

pub use plancache::PlanCache;
use session::Abort;
pub(crate) use session::analyzed;
pub use session::{Batch, Notice, Outcome, Rows, SqlSession};

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
    /// Filter the input of a grouped aggregate joined on its group column by the keys the
    /// other side of the join can hold (see `semijoin.rs`).
    pub semi_join_reduction: bool,
    /// Compute a subplan a query repeats (a CTE or view read twice) once and read its
    /// rows again (see `shared.rs`). Never with workers.
    pub share_subplans: bool,
    /// Sort the rows a write puts in a table's order in memory on every core while they
    /// fit the memory pool (see `parsort.rs`); off: DataFusion's sort and merge.
    pub parallel_sort: bool,
    /// DRAM for parsed Parquet footers and page indexes, kept across queries.
    pub metadata_cache_bytes: usize,
    /// Worker processes (`tierdb worker`) to spread queries over; none: this process runs
    /// every query alone (see `distributed.rs`).
    pub workers: Vec<url::Url>,
    /// How far segment scans read ahead (see `readahead.rs`).
    pub read_ahead: crate::readahead::ReadAheadMode,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            memory_limit: 2 << 30,
            spill_dir: None,
            join_reorder: true,
            semi_join_reduction: true,
            share_subplans: true,
            parallel_sort: true,
            metadata_cache_bytes: 256 << 20,
            workers: Vec::new(),
            read_ahead: Default::default(),
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
    pub(crate) fn command(tag: impl Into<String>) -> Self {
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

/// DataFusion's own physical planner, with no distributed stages; repeated subplans are
/// computed once where the session allows it (`shared.rs`).
#[derive(Debug)]
pub(crate) struct LocalPlanner;

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for LocalPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        state: &dyn datafusion::catalog::Session,
    ) -> datafusion::common::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        use datafusion::physical_planner::PhysicalPlanner;
        let share = state
            .config()
            .get_extension::<crate::shared::ShareSubplans>()
            .is_some_and(|s| s.0);
        let shared;
        let plan = if share {
            shared = crate::shared::share_repeated(plan.clone())?;
            &shared
        } else {
            plan
        };
        datafusion::physical_planner::DefaultPhysicalPlanner::with_extension_planners(vec![
            Arc::new(crate::shared::SharedPlanner::default()),
        ])
        .create_physical_plan(plan, state)
        .await
    }
}

impl SqlEngine {
    pub fn new(tables: Arc<Tables>, options: &EngineOptions) -> Result<Self> {
        tables.df_store().set_read_ahead(options.read_ahead);
        let slot = Arc::new(TxSlot::default());
        let mut config = SessionConfig::new()
            .with_target_partitions(options.threads.max(1))
            .with_information_schema(true)
            // Hash joins collect their (build) left side once instead of repartitioning both
            // sides by key: with the join order below, the left sides are the filtered
            // dimensions and the fact table streams through without a shuffle.
            .with_repartition_joins(false)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(CATALOG, SCHEMA)
            .with_extension(slot.clone())
            // Plans sent to workers hold no SharedExec (they could not be encoded).
            .with_extension(Arc::new(crate::shared::ShareSubplans(
                options.share_subplans && options.workers.is_empty(),
            )))
            .with_extension(Arc::new(crate::parsort::ParallelSort(
                options.parallel_sort,
            )));
        // TIMESTAMPTZ and now() are instants in UTC (PostgreSQL's timestamptz); without a
        // zone DataFusion would make both zone-less timestamps.
        config.options_mut().execution.time_zone = Some(crate::catalog::UTC.into());
        // A number with a point or an exponent is NUMERIC, as in PostgreSQL (`0.1 + 0.2`
        // is 0.3, `pg_typeof(1.5)` numeric), not DOUBLE PRECISION.
        config.options_mut().sql_parser.parse_float_as_decimal = true;
        // A statement timeout or cancel stops planning at the next rule (`interrupt.rs`).
        let interrupt = Interrupt::fresh();
        config.options_mut().extensions.insert(interrupt.clone());
        let runtime = runtime_env(options)?;
        // PostgreSQL's arithmetic: integer overflow fails, sum(bigint) is numeric (`checked.rs`).
        let mut analyzer = datafusion::optimizer::Analyzer::new().rules;
        // CHAR(n)'s trailing spaces are insignificant (`bpchar.rs`): before type coercion,
        // which would wrap the literals it pads in casts.
        let at = analyzer
            .iter()
            .position(|r| r.name() == "type_coercion")
            .unwrap_or(0);
        analyzer.insert(at, Arc::new(crate::bpchar::CharSemantics));
        analyzer.push(Arc::new(crate::checked::CheckedArithmetic::default()));
        // NUMERIC quotients, DATE ± INTERVAL and casts to integers as PostgreSQL computes
        // them (`pgarith.rs`).
        analyzer.push(Arc::new(crate::pgarith::PgArithmetic::default()));
        // Three-valued logic the simplifier's IN-list algebra would lose (`inlist.rs`).
        analyzer.push(Arc::new(crate::inlist::NullSafeInLists));
        // Text read into dates, times, timestamps and NUMERIC as PostgreSQL reads it, in
        // the session's TimeZone (`textin`).
        analyzer.push(Arc::new(crate::textin::PgTextInput::default()));
        let check = || Arc::new(InterruptCheck);
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_query_planner(Arc::new(LocalPlanner))
            .with_analyzer_rules(interleave(analyzer, check() as _))
            .with_physical_optimizer_rules(interleave(
                datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules,
                check() as _,
            ));
        // PostgreSQL's JSON operators (`jsonops.rs`, `jsonpath.rs`).
        if let Some(planners) = state.expr_planners() {
            planners.insert(0, Arc::new(crate::jsonops::JsonOperators));
        }
        let cards = options
            .join_reorder
            .then(|| Arc::new(Cardinalities::default()));
        let mut rules = datafusion::optimizer::Optimizer::new().rules;
        // PostgreSQL's sum types must survive the DISTINCT rewrite (`checked::KeepTypes`).
        for r in rules.iter_mut() {
            if r.name() == "single_distinct_aggregation_to_group_by" {
                *r = Arc::new(crate::checked::KeepTypes(r.clone()));
            }
        }
        if let Some(cards) = &cards {
            // Right after filters are pushed down (the estimates read them), before
            // projections are pruned.
            let at = rules
                .iter()
                .position(|r| r.name() == "push_down_filter")
                .map_or(rules.len(), |i| i + 1);
            rules.insert(at, Arc::new(JoinReorder::new(cards.clone())));
        }
        if options.semi_join_reduction {
            // After filters are pushed down and joins reordered: the keys it copies are
            // filtered scans.
            let after = |name: &str| rules.iter().position(|r| r.name() == name);
            let at = after("tierdb_join_reorder")
                .or_else(|| after("push_down_filter"))
                .map_or(rules.len(), |i| i + 1);
            let cards = cards.clone().unwrap_or_default();
            rules.insert(at, Arc::new(SemiJoinReduction::new(cards)));
        }
        state = state.with_optimizer_rules(interleave(rules, check() as _));
        let state = crate::distributed::coordinate(state, &options.workers);
        let ctx = SessionContext::new_with_state(state.build());
        for f in crate::checked::functions()
            .into_iter()
            .chain(crate::intervalmul::functions())
            .chain(crate::pgarith::functions())
        {
            ctx.register_udf(f.as_ref().clone());
        }
        ctx.register_udaf(crate::checked::SumAsNumeric::udaf());
        for f in crate::unknowntext::functions() {
            ctx.register_udf(f);
        }
        for f in crate::pgtext::functions()
            .into_iter()
            .chain(crate::charcast::functions())
        {
            ctx.register_udf(f);
        }
        for f in crate::jsonops::functions()
            .into_iter()
            .chain(crate::jsonpath::functions())
        {
            ctx.register_udf(f);
        }
        for f in crate::rows::sequence::functions(&tables) {
            ctx.register_udf(f);
        }
        ctx.register_udf(crate::sleep::function());
        ctx.register_udf(crate::tochar::function());
        for f in crate::textin::functions() {
            ctx.register_udf(f);
        }
        let url = url::Url::parse(STORE_URL).map_err(|e| TableError::Schema(e.to_string()))?;
        ctx.register_object_store(&url, Arc::new(tables.df_store().clone()));
        let counters = Arc::new(ScanCounters::default());
        let schema = Arc::new(TierSchema::new(tables.clone(), counters.clone()));
        let temp = Arc::new(temp::TempTables::new(&ctx.runtime_env().memory_pool));
        let catalog = namespaces::TierCatalog::new(schema.clone());
        catalog.register_schema(SCHEMA, session_schema(&schema, &temp))?;
        catalog.register_schema(temp::TEMP_SCHEMA, Arc::new(temp::TempSchema(temp.clone())))?;
        ctx.register_catalog(CATALOG, Arc::new(catalog));
        // Small segments are merged in the engine's session (`merge.rs`).
        crate::merge::attach(&tables, &ctx.state());
        Ok(SqlEngine {
            tables: tables.clone(),
            session: SqlSession {
                tables,
                ctx,
                schema,
                counters,
                abort: Abort::new(slot),
                notices: Default::default(),
                cards,
                distributed: !options.workers.is_empty(),
                interrupt,
                temp,
                settings: Default::default(),
                search_path: Default::default(),
                plan_cache: Default::default(),
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
        let mut config = base.config().clone().with_extension(slot.clone());
        // Its own stop flag (invariant 1 of `interrupt.rs`).
        let interrupt = Interrupt::fresh();
        config.options_mut().extensions.insert(interrupt.clone());
        // Its own temporary tables, so its own `public` and `pg_temp` schemas.
        use datafusion::catalog::CatalogProviderList;
        let temp = Arc::new(temp::TempTables::new(&base.runtime_env().memory_pool));
        let catalogs = datafusion::catalog::MemoryCatalogProviderList::new();
        for name in base.catalog_list().catalog_names() {
            let Some(catalog) = base.catalog_list().catalog(&name) else {
                continue;
            };
            if name != CATALOG {
                catalogs.register_catalog(name, catalog);
                continue;
            }
            // The fixed schemas the server registered (pg_catalog, zodb…); the stored ones
            // are listed by the new catalog itself.
            let own = namespaces::TierCatalog::new(self.session.schema.clone());
            if let Some(tier) = catalog.as_ref().downcast_ref::<namespaces::TierCatalog>() {
                for (schema_name, schema) in tier.fixed_schemas() {
                    let _ = own.register_schema(&schema_name, schema);
                }
            }
            let _ = own.register_schema(SCHEMA, session_schema(&self.session.schema, &temp));
            let _ =
                own.register_schema(temp::TEMP_SCHEMA, Arc::new(temp::TempSchema(temp.clone())));
            catalogs.register_catalog(name, Arc::new(own));
        }
        let state = datafusion::execution::SessionStateBuilder::new_from_existing(base)
            .with_config(config)
            .with_catalog_list(Arc::new(catalogs))
            .build();
        let ctx = SessionContext::new_with_state(state);
        // currval() is the session's own, and nextval('s') finds `s` by its search path.
        let search_path = Arc::new(searchpath::SearchPath::default());
        let resolve = searchpath::sequence_resolver(&search_path, &self.session.schema);
        for f in crate::rows::sequence::functions_resolving(&self.tables, Some(resolve)) {
            ctx.register_udf(f);
        }
        SqlSession {
            tables: self.tables.clone(),
            ctx,
            schema: self.session.schema.clone(),
            counters: self.session.counters.clone(),
            abort: Abort::new(slot),
            notices: Default::default(),
            cards: self.session.cards.clone(),
            distributed: self.session.distributed,
            interrupt,
            temp,
            settings: Default::default(),
            search_path,
            plan_cache: Default::default(),
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

/// An identifier as the catalog keys it: lower case unless quoted (as DataFusion
/// normalizes it).
pub fn ident_name(id: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// A session's `public` schema: its temporary tables, then the stored ones.
fn session_schema(
    stored: &Arc<TierSchema>,
    temp: &Arc<temp::TempTables>,
) -> Arc<dyn datafusion::catalog::SchemaProvider> {
    Arc::new(temp::SessionSchema {
        stored: stored.clone(),
        temp: temp.clone(),
    })
}

/// The catalog name of relation `table` in `schema`: the name alone in `public`,
/// `schema.table` in any other schema (`docs/design/schemas.md`: a relation's own name
/// never contains a dot, so the first dot separates the two).
pub fn qualified(schema: &str, table: &str) -> String {
    if schema == SCHEMA {
        table.to_string()
    } else {
        format!("{schema}.{table}")
    }
}

/// Catalog name `name` ([`qualified`]) as SQL names it: `"t"`, or `"s"."t"` outside
/// `public`, each part quoted.
pub fn quoted_relation(name: &str) -> String {
    let quote = |p: &str| format!("\"{}\"", p.replace('"', "\"\""));
    match split_qualified(name) {
        (SCHEMA, t) if !name.contains('.') => quote(t),
        (s, t) => format!("{}.{}", quote(s), quote(t)),
    }
}

/// The schema and the relation's own name of catalog name `name` (see [`qualified`]).
pub fn split_qualified(name: &str) -> (&str, &str) {
    match name.split_once('.') {
        Some((schema, table)) => (schema, table),
        None => (SCHEMA, name),
    }
}

/// A name a new relation or schema may take: not empty and without a dot (the separator
/// of [`qualified`] names).
pub(crate) fn check_new_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('.') {
        return Err(TableError::Column {
            code: "42602",
            message: format!(
                "invalid {kind} name \"{name}\": tierdb does not allow a dot (or nothing) in \
                 the name of a {kind}; choose another name"
            ),
        });
    }
    Ok(())
}

/// The stored relation a planned name refers to, as the catalog names it ([`qualified`]):
/// unqualified names are in `public` (the search path is `public`). A name in another
/// catalog does not exist (3F000).
pub(crate) fn stored_table(name: &datafusion::common::TableReference) -> Result<String> {
    let catalog_ok = name.catalog().is_none_or(|c| c == CATALOG);
    check_new_name("relation", name.table())?;
    match name.schema() {
        Some(s) if s.contains('.') => Err(TableError::Column {
            code: "3F000",
            message: format!("schema \"{s}\" does not exist"),
        }),
        Some(s) if !catalog_ok => Err(TableError::Column {
            code: "3F000",
            message: format!("schema \"{s}\" does not exist"),
        }),
        Some(s) => Ok(qualified(s, name.table())),
        None => Ok(name.table().to_string()),
    }
}

/// A one-part name (a schema's) as the catalog keys it; a longer name as written.
pub fn ident_name_of(name: &datafusion::sql::sqlparser::ast::ObjectName) -> String {
    match name.0.as_slice() {
        [p] => p.as_ident().map_or_else(|| name.to_string(), ident_name),
        _ => name.to_string(),
    }
}

/// The catalog name ([`qualified`]) of a table, view or sequence name: `t`, `s.t` or
/// `tierdb.s.t`; `None` for a name in another catalog, or with a dot inside a part.
pub fn relation_name(name: &datafusion::sql::sqlparser::ast::ObjectName) -> Option<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(ident_name))
        .collect::<Option<_>>()?;
    // A quoted "a.b" names no relation: no part of a catalog name contains a dot.
    if parts.iter().any(|p| p.contains('.')) {
        return None;
    }
    match parts.as_slice() {
        [t] => Some(t.clone()),
        [s, t] => Some(qualified(s, t)),
        [c, s, t] if c == CATALOG => Some(qualified(s, t)),
        _ => None,
    }
}

/// `ALTER SEQUENCE` statements of `sql` as the CALLs the parser reads (`seqstmt.rs`).
pub fn rewrite_alter_sequence(sql: &str) -> std::borrow::Cow<'_, str> {
    seqstmt::rewrite(sql)
}

/// Splits `sql` into statements; a syntax error names the line and column.
pub fn parse(sql: &str) -> Result<Vec<DfStatement>> {
    let sql = &seqstmt::rewrite(sql);
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
    /// CREATE/DROP TABLE and VIEW, ALTER TABLE, TRUNCATE: committed at once, also inside a
    /// transaction.
    Ddl,
    /// VACUUM: deletes unreferenced segment files.
    Vacuum,
    /// INSERT, UPDATE, DELETE.
    Write,
    /// LOCK TABLE (`SqlSession::lock_tables`): checked, nothing planned.
    Lock,
    /// Everything else DataFusion plans (queries, EXPLAIN, SHOW TABLES…).
    Query,
}

impl StatementKind {
    pub fn of(stmt: &DfStatement) -> Self {
        match stmt {
            DfStatement::Statement(s) => Self::of_sql(s),
            _ => StatementKind::Query,
        }
    }

    /// [`StatementKind::of`] a statement in sqlparser's syntax tree.
    pub fn of_sql(stmt: &SqlStatement) -> Self {
        match stmt {
            SqlStatement::StartTransaction { .. } => StatementKind::Begin,
            SqlStatement::Commit { .. } => StatementKind::Commit,
            SqlStatement::Rollback {
                savepoint: Some(_), ..
            } => StatementKind::RollbackTo,
            SqlStatement::Rollback { .. } => StatementKind::Rollback,
            SqlStatement::Savepoint { .. } => StatementKind::Savepoint,
            SqlStatement::ReleaseSavepoint { .. } => StatementKind::Release,
            SqlStatement::CreateTable(_)
            | SqlStatement::CreateView(_)
            | SqlStatement::AlterTable(_)
            | SqlStatement::CreateSchema { .. }
            | SqlStatement::Comment { .. }
            | SqlStatement::Drop { .. }
            | SqlStatement::Truncate { .. }
            | SqlStatement::CreateIndex(_)
            | SqlStatement::CreateSequence { .. } => StatementKind::Ddl,
            SqlStatement::Call(f) if seqstmt::call_arguments(f).is_some() => StatementKind::Ddl,
            SqlStatement::Call(f) if setschema_stmt::call_arguments(f).is_some() => {
                StatementKind::Ddl
            }
            SqlStatement::Call(f) if colstorage_stmt::call_arguments(f).is_some() => {
                StatementKind::Ddl
            }
            SqlStatement::AlterSchema(_) => StatementKind::Ddl,
            SqlStatement::Vacuum(_) => StatementKind::Vacuum,
            SqlStatement::Lock(_) => StatementKind::Lock,
            SqlStatement::Insert(_) | SqlStatement::Update(_) | SqlStatement::Delete(_) => {
                StatementKind::Write
            }
            _ => StatementKind::Query,
        }
    }
}
