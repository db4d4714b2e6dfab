//! One client's session and the transaction rules every front end shares: implicit
//! transactions, aborting on error, the notices of BEGIN/COMMIT misuse.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::TreeNode;
use datafusion::dataframe::DataFrame;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::dml::WriteOp;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use futures::StreamExt;

use super::{CATALOG, LocalPlanner, SCHEMA, StatementKind, StatementResult, parse};
use crate::error::{Result, TableError};
use crate::joinorder::Cardinalities;
use crate::provider::{ScanCounters, TierSchema};
use crate::tables::Tables;
use crate::txn::{Transaction, TxSlot};

/// One client's session: a DataFusion context of its own (settings, prepared plans) over
/// the engine's catalog, and the transaction it is in, if any.
///
/// The session alone keeps the transaction rules; front ends (the `tierdb sql` shell, the
/// PostgreSQL server, Python) only pass statements in:
///
/// 1. Outside a transaction every statement commits what it writes on its own
///    (autocommit). Several statements sent as one batch with no BEGIN, COMMIT or ROLLBACK
///    among them are one implicit transaction ([`SqlSession::begin_batch`]).
/// 2. Between `BEGIN` and `COMMIT`, INSERT, UPDATE and DELETE write their segments but
///    commit nothing; the session's reads see them; `COMMIT` makes all of them visible in
///    one atomic catalog commit and `ROLLBACK` (or dropping the session without a commit)
///    deletes them. DDL (CREATE, DROP, ALTER, TRUNCATE of stored tables, views, indexes,
///    sequences) is committed at once, also inside a transaction, with a warning saying
///    so; a transaction's writes follow their table through a rename. Temporary tables
///    are the exception: ROLLBACK undoes their changes (`temp.rs`).
/// 3. A statement that fails inside a transaction aborts it, whether it failed planning,
///    running, streaming its rows, or was abandoned (a timeout or cancel drops it): every
///    call that runs work does so under [`SqlSession::guarded`]. Every later statement but
///    `ROLLBACK` (or `COMMIT`, which then rolls back) fails with SQLSTATE 25P02, as in
///    PostgreSQL.
/// 4. `BEGIN` inside a transaction and `COMMIT`/`ROLLBACK` outside one are not errors; they
///    leave a warning ([`SqlSession::take_notices`]).
pub struct SqlSession {
    pub(super) tables: Arc<Tables>,
    pub(super) ctx: SessionContext,
    pub(super) schema: Arc<TierSchema>,
    pub(super) counters: Arc<ScanCounters>,
    pub(super) abort: Abort,
    /// Warnings of the statements run since the last [`SqlSession::take_notices`].
    pub(super) notices: std::sync::Mutex<Vec<Notice>>,
    /// Measured join-input counts for the join order (`None`: join reordering is off).
    pub(super) cards: Option<Arc<Cardinalities>>,
    /// Queries are spread over worker processes (`EngineOptions::workers`).
    pub(super) distributed: bool,
    /// The stop flag in this session's options (`interrupt.rs`), kept here to be read
    /// without copying the session's state for every statement.
    pub(super) interrupt: crate::interrupt::Interrupt,
    /// This session's temporary tables (`temp.rs`).
    pub(super) temp: Arc<super::temp::TempTables>,
}

/// The session's transaction slot and its aborted flag: what a failure anywhere (also in a
/// row stream the session handed out) marks.
#[derive(Debug, Clone)]
pub(crate) struct Abort {
    pub(crate) slot: Arc<TxSlot>,
    aborted: Arc<AtomicBool>,
}

impl Abort {
    pub(super) fn new(slot: Arc<TxSlot>) -> Self {
        Abort {
            slot,
            aborted: Default::default(),
        }
    }

    fn fail(&self) {
        if self.slot.current().is_some() {
            self.aborted.store(true, Ordering::Release);
        }
    }

    fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    fn clear(&self) -> bool {
        self.aborted.swap(false, Ordering::AcqRel)
    }
}

/// Fails the session when dropped armed: the work it guards failed or was abandoned.
struct FailUnlessDone<'a>(Option<&'a Abort>);

impl Drop for FailUnlessDone<'_> {
    fn drop(&mut self) {
        if let Some(abort) = self.0 {
            abort.fail();
        }
    }
}

/// A warning a statement left (PostgreSQL's NoticeResponse, severity WARNING).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// SQLSTATE, e.g. `25001`.
    pub code: &'static str,
    pub message: String,
}

/// A batch of statements sent together (a multi-statement query string); see
/// [`SqlSession::begin_batch`].
#[derive(Debug)]
#[must_use = "end the batch with SqlSession::end_batch"]
pub struct Batch {
    implicit: bool,
}

/// What a statement produced: rows still to be read, or a command tag.
#[derive(Debug)]
pub enum Outcome {
    /// A query's rows, computed as they are read.
    Rows(Rows),
    /// `"INSERT 0 5"`, `"UPDATE 3"`, `"BEGIN"`…
    Command(String),
}

impl Outcome {
    pub async fn collect(self) -> Result<StatementResult> {
        Ok(match self {
            Outcome::Rows(rows) => {
                let schema = Arc::new(rows.schema().as_arrow().clone());
                StatementResult {
                    schema,
                    batches: rows.collect().await?,
                    command: None,
                }
            }
            Outcome::Command(tag) => StatementResult::command(tag),
        })
    }
}

/// A query's rows, not yet computed. An error while they are computed aborts the session's
/// transaction, as any failed statement does (rule 3 of [`SqlSession`]).
#[derive(Debug)]
pub struct Rows {
    source: Source,
    abort: Abort,
}

/// Where a query's rows come from.
#[derive(Debug)]
enum Source {
    /// A DataFusion plan, run as the rows are read.
    Plan(DataFrame),
    /// Rows read already (a key lookup's: `rows/fast.rs`).
    Ready(datafusion::common::DFSchemaRef, Vec<RecordBatch>),
}

impl Rows {
    pub fn schema(&self) -> &DFSchema {
        match &self.source {
            Source::Plan(df) => df.schema(),
            Source::Ready(schema, _) => schema,
        }
    }

    /// Where each column comes from (`origin.rs`): for RowDescription's table OID and
    /// column number. Rows a key lookup read already have none.
    pub fn origins(&self) -> Vec<Option<crate::origin::Origin>> {
        match &self.source {
            Source::Plan(df) => crate::origin::origins(df.logical_plan()),
            Source::Ready(schema, _) => vec![None; schema.fields().len()],
        }
    }

    /// The rows as a stream.
    pub async fn execute_stream(self) -> Result<SendableRecordBatchStream> {
        let df = match self.source {
            Source::Plan(df) => df,
            Source::Ready(schema, batches) => {
                let schema = Arc::new(schema.as_arrow().clone());
                let rows = futures::stream::iter(batches.into_iter().map(Ok));
                return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)));
            }
        };
        let mut guard = FailUnlessDone(Some(&self.abort));
        // Physical planning (the optimizer's rules) off this task (`interrupt.rs`).
        let stream = crate::interrupt::off_task(df.execute_stream()).await?;
        guard.0 = None; // started: errors from here on are the stream's (below)
        let abort = self.abort.clone();
        let schema = stream.schema();
        let stream = stream.inspect(move |r| {
            if r.is_err() {
                abort.fail();
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    /// All the rows.
    pub async fn collect(self) -> Result<Vec<RecordBatch>> {
        let stream = self.execute_stream().await?;
        Ok(datafusion::physical_plan::common::collect(stream).await?)
    }
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
        if let Some(tx) = self.abort.slot.set(None)
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
    /// This session's stop flag: raised by whoever gives up on the running statement
    /// (a statement timeout, a cancel request), it stops planning at the next rule.
    pub fn interrupt(&self) -> crate::interrupt::Interrupt {
        self.interrupt.clone()
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Sets the session's time zone (`SET TIME ZONE`): `now()` and TIMESTAMPTZ values
    /// written without an offset are in it. Stored TIMESTAMPTZ values stay UTC instants.
    /// Fails with 22023 for a zone Arrow does not know (an IANA name or `+hh:mm`).
    pub fn set_time_zone(&self, tz: &str) -> Result<()> {
        let tz = if tz.eq_ignore_ascii_case("utc") || tz.eq_ignore_ascii_case("gmt") {
            crate::catalog::UTC
        } else {
            tz
        };
        if self.time_zone() == tz {
            return Ok(());
        }
        if tz
            .parse::<datafusion::arrow::array::timezone::Tz>()
            .is_err()
        {
            return Err(TableError::Column {
                code: "22023",
                message: format!("invalid value for parameter \"TimeZone\": \"{tz}\""),
            });
        }
        self.ctx
            .state_ref()
            .write()
            .config_mut()
            .options_mut()
            .execution
            .time_zone = Some(tz.to_string());
        Ok(())
    }

    /// The session's time zone (`+00:00` unless `SET TIME ZONE` changed it).
    pub fn time_zone(&self) -> String {
        self.ctx
            .state_ref()
            .read()
            .config()
            .options()
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| crate::catalog::UTC.into())
    }

    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    pub fn in_transaction(&self) -> bool {
        self.abort.slot.current().is_some()
    }

    /// The open transaction, if any.
    pub fn transaction(&self) -> Option<Arc<Transaction>> {
        self.abort.slot.current()
    }

    /// Inside a transaction that a failed statement aborted.
    pub fn is_aborted(&self) -> bool {
        self.abort.is_aborted()
    }

    /// The warnings left since the last call (oldest first).
    pub fn take_notices(&self) -> Vec<Notice> {
        self.notices
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }

    pub(super) fn notice(&self, code: &'static str, message: &str) {
        if let Ok(mut n) = self.notices.lock() {
            n.push(Notice {
                code,
                message: message.into(),
            });
        }
    }

    /// Runs every statement of `sql` in order, stopping at the first error.
    pub async fn sql(&self, sql: &str) -> Result<Vec<StatementResult>> {
        let (out, error) = self.run(parse(sql)?).await;
        match error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Runs statements in order as one batch ([`SqlSession::begin_batch`]), stopping at
    /// the first error; returns the results of the statements that ran and that error.
    pub async fn run(
        &self,
        statements: Vec<DfStatement>,
    ) -> (Vec<StatementResult>, Option<TableError>) {
        let kinds: Vec<_> = statements.iter().map(StatementKind::of).collect();
        let batch = self.begin_batch(&kinds);
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            let r = match self.execute_outcome(stmt, None).await {
                Ok(o) => o.collect().await,
                Err(e) => Err(e),
            };
            match r {
                Ok(r) => out.push(r),
                Err(e) => {
                    let _ = self.end_batch(batch, false).await;
                    return (out, Some(e));
                }
            }
        }
        match self.end_batch(batch, true).await {
            Ok(()) => (out, None),
            Err(e) => (out, Some(e)),
        }
    }

    /// Starts a batch of statements sent together, of these kinds. Outside a transaction,
    /// several statements with no BEGIN, COMMIT or ROLLBACK among them are one implicit
    /// transaction, as a multi-statement query string is in PostgreSQL: their writes are
    /// committed together by [`SqlSession::end_batch`] after the last one, and if any
    /// fails none is.
    pub fn begin_batch(&self, kinds: &[StatementKind]) -> Batch {
        let implicit = kinds.len() > 1
            && !self.in_transaction()
            && kinds.iter().all(|k| {
                !matches!(
                    k,
                    StatementKind::Begin | StatementKind::Commit | StatementKind::Rollback
                )
            });
        if implicit {
            self.abort.slot.set(Some(self.abort.slot.new_transaction()));
        }
        Batch { implicit }
    }

    /// Ends a batch: `ok` (every statement ran) commits its implicit transaction, else it
    /// is rolled back. (If the commit itself fails, its outcome may be unknown: see
    /// [`Tables::commit_writes`].)
    pub async fn end_batch(&self, batch: Batch, ok: bool) -> Result<()> {
        if !batch.implicit {
            return Ok(());
        }
        if ok && !self.is_aborted() {
            self.commit().await.map(|_| ())
        } else {
            self.rollback().await;
            Ok(())
        }
    }

    /// Runs one statement and reads all its rows.
    pub async fn execute(&self, stmt: DfStatement) -> Result<StatementResult> {
        self.guarded(async {
            match self.execute_outcome(stmt, None).await {
                Ok(o) => o.collect().await,
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Runs `work` for this session: if it fails, or is dropped before it finishes (a
    /// statement timeout, a cancel, a closed connection), the open transaction is
    /// aborted. Front ends wrap in it what they do for a statement outside the session's
    /// own calls (a COPY's data, binding parameters).
    pub async fn guarded<T, E>(
        &self,
        work: impl Future<Output = std::result::Result<T, E>>,
    ) -> std::result::Result<T, E> {
        let mut guard = FailUnlessDone(Some(&self.abort));
        let r = work.await;
        if r.is_ok() {
            guard.0 = None;
        }
        r
    }

    /// Notes that a statement failed: inside a transaction, the transaction is aborted.
    /// For failures no guarded call saw (a COPY's data stream).
    pub fn fail(&self) {
        self.abort.fail();
    }

    /// Starts a transaction (a no-op inside one, as PostgreSQL only warns).
    pub fn begin(&self) {
        if self.in_transaction() {
            return;
        }
        self.abort.slot.set(Some(self.abort.slot.new_transaction()));
        self.abort.clear();
    }

    /// Commits the transaction; an aborted one is rolled back instead (returns `false`).
    pub async fn commit(&self) -> Result<bool> {
        let aborted = self.abort.clear();
        let Some(tx) = self.abort.slot.set(None) else {
            return Ok(true);
        };
        if aborted {
            tx.rollback(&self.tables).await;
            self.temp.end_transaction(false)?;
            return Ok(false);
        }
        let committed = tx.commit(&self.tables).await;
        self.temp.end_transaction(committed.is_ok())?;
        committed.map(|_| true)
    }

    pub async fn rollback(&self) {
        self.abort.clear();
        if let Some(tx) = self.abort.slot.set(None) {
            tx.rollback(&self.tables).await;
            if let Err(e) = self.temp.end_transaction(false) {
                tracing::warn!(error = %e, "cannot restore the temporary tables at ROLLBACK");
            }
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
                self.temp.savepoint(&name).await;
                "SAVEPOINT".into()
            }
            StatementKind::Release => {
                tx.release(&name)?;
                self.temp.release(&name);
                "RELEASE".into()
            }
            _ => {
                tx.rollback_to(&name, &self.tables).await?;
                self.temp.rollback_to(&name)?;
                self.abort.clear();
                "ROLLBACK".into()
            }
        }))
    }

    /// The plan of a statement DataFusion plans (a query, INSERT, UPDATE, DELETE), with
    /// its parameters (`$1`…) still in it; `None` for statements tierdb runs itself.
    /// Refused in an aborted transaction unless the statement ends it; a statement that
    /// cannot be planned aborts the transaction.
    pub async fn plan(&self, stmt: &DfStatement) -> Result<Option<LogicalPlan>> {
        self.guarded(async {
            self.refuse_if_aborted(StatementKind::of(stmt))?;
            self.plan_unguarded(stmt).await
        })
        .await
    }

    /// The columns a planned query returns, as its rows will have them: the plan's own
    /// schema is the one from before type coercion, which can change a type (`sum` of a
    /// `CASE … ELSE 0` over an INT column is BIGINT before, NUMERIC after), and a client told
    /// the other type cannot read the rows. The plan's own schema if it cannot be analyzed
    /// yet (a parameter whose type is not known until Bind).
    pub fn described_schema(&self, plan: &LogicalPlan) -> datafusion::common::DFSchemaRef {
        match analyzed(&self.ctx.state(), plan.clone()) {
            Ok(p) => p.schema().clone(),
            Err(_) => plan.schema().clone(),
        }
    }

    /// Fails with 25P02 in an aborted transaction, unless `kind` ends it.
    pub fn refuse_if_aborted(&self, kind: StatementKind) -> Result<()> {
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
        Ok(())
    }

    async fn plan_unguarded(&self, stmt: &DfStatement) -> Result<Option<LogicalPlan>> {
        if !matches!(
            StatementKind::of(stmt),
            StatementKind::Query | StatementKind::Write
        ) {
            return Ok(None);
        }
        self.schema.refresh().await?;
        let mut stmt = stmt.clone();
        crate::views::expand(&self.tables, &self.schema, &mut stmt).await?;
        let stmt = &stmt;
        let state = self.ctx.state();
        self.require_tables(&state, stmt)?;
        let temp = self.temp.named_in(stmt);
        if crate::dml::is_update_or_delete(stmt) {
            if temp
                && let (Some(t), DfStatement::Statement(s)) = (crate::dml::target_table(stmt), stmt)
                && self.temp.has(&t)
            {
                super::temp::check_dml(s)?;
                return Ok(Some(state.statement_to_plan(stmt.clone()).await?));
            }
            return Ok(Some(crate::dml::plan(&state, &self.tables, stmt).await?));
        }
        if !temp && let Some(lookup) = crate::rows::fast::plan(&self.tables, stmt).await? {
            return Ok(Some(lookup));
        }
        crate::guard::check(stmt)?;
        let plan = state.statement_to_plan(stmt.clone()).await?;
        let plan = crate::rows::sequence::bind_to_session(plan, &state)?;
        Ok(Some(crate::literals::int4_literals(plan)?))
    }

    /// Runs one statement; `plan` is its plan from [`SqlSession::plan`] with the
    /// parameters bound (planned again from the statement if `None`). A failure (or
    /// dropping the call) aborts the open transaction (rule 3 of [`SqlSession`]).
    pub async fn execute_outcome(
        &self,
        stmt: DfStatement,
        plan: Option<LogicalPlan>,
    ) -> Result<Outcome> {
        self.guarded(self.execute_unguarded(stmt, plan)).await
    }

    async fn execute_unguarded(
        &self,
        mut stmt: DfStatement,
        plan: Option<LogicalPlan>,
    ) -> Result<Outcome> {
        let kind = StatementKind::of(&stmt);
        self.refuse_if_aborted(kind)?;
        self.interrupt.clear(); // invariant 2 of `interrupt.rs`
        match kind {
            StatementKind::Begin if self.in_transaction() => {
                self.notice("25001", "there is already a transaction in progress");
                return Ok(Outcome::Command("BEGIN".into()));
            }
            StatementKind::Commit | StatementKind::Rollback if !self.in_transaction() => {
                self.notice("25P01", "there is no transaction in progress");
            }
            _ => {}
        }
        match kind {
            StatementKind::Begin => {
                self.begin();
                self.begin_modes(&stmt)?;
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
        if let Some(outcome) = self.set_transaction(&stmt)? {
            return Ok(outcome);
        }
        if let DfStatement::Statement(s) = &stmt
            && let SqlStatement::Lock(lock) = s.as_ref()
        {
            return self.lock_tables(lock).await;
        }
        self.schema.refresh().await?;
        let mut plan = plan;
        if let Some(outcome) = self.temp_statement(&stmt, &mut plan).await? {
            return Ok(outcome);
        }
        if let Some(outcome) = self.drop_or_truncate(&stmt).await? {
            return Ok(outcome);
        }
        let temp = self.temp.named_in(&stmt);
        if kind == StatementKind::Ddl && self.in_transaction() && !temp && !creates_temp(&stmt) {
            // Rule 2: said where it happens, not only in the documentation.
            let verb: Vec<String> = stmt
                .to_string()
                .split_whitespace()
                .take(2)
                .map(str::to_uppercase)
                .collect();
            self.notice(
                "01000",
                &format!(
                    "{} in a transaction block takes effect at once: ROLLBACK does not undo \
                     it (tierdb does not keep DDL in transactions yet)",
                    verb.join(" ")
                ),
            );
        }
        // Every statement that can read a view (queries, writes, CREATE TABLE … AS).
        crate::views::expand(&self.tables, &self.schema, &mut stmt).await?;
        if crate::dml::is_update_or_delete(&stmt) {
            // No segment merge of the target commits from planning to the end (merge.rs).
            let _merges_wait = crate::merge::DmlGuard::of_statement(&self.tables, &stmt);
            let state = self.ctx.state();
            let plan = match plan {
                Some(p) => p,
                None => {
                    self.require_tables(&state, &stmt)?;
                    let (tables, stmt) = (self.tables.clone(), stmt.clone());
                    crate::interrupt::off_task(async move {
                        crate::dml::plan(&state, &tables, &stmt).await
                    })
                    .await?
                }
            };
            let n = crate::dml::execute(&self.local_ctx(), &self.tables, &stmt, plan).await?;
            return Ok(Outcome::Command(format!("{} {n}", crate::dml::verb(&stmt))));
        }
        let mut keys = None;
        let mut declared = Vec::new();
        let mut sequences = Vec::new();
        let mut temporary = false;
        if let DfStatement::Statement(s) = &mut stmt
            && let SqlStatement::CreateTable(ct) = s.as_mut()
        {
            // DataFusion plans no temporary tables: tierdb keeps them (`temp.rs`).
            temporary = std::mem::take(&mut ct.temporary);
            if temporary && ct.on_commit.is_some() {
                return Err(TableError::Unsupported(
                    "ON COMMIT on a temporary table is not supported: it lives until the \
                     session ends (drop it with DROP TABLE)"
                        .into(),
                ));
            }
            let order = ct.order_by.take();
            let part = ct.partition_by.take();
            // PostgreSQL's storage parameters (fillfactor, autovacuum_*) mean nothing to
            // segments: accepted with a warning, as the issue of tools that send them asks.
            if let datafusion::sql::sqlparser::ast::CreateTableOptions::With(options) =
                std::mem::take(&mut ct.table_options)
            {
                let names: Vec<String> = options.iter().map(|o| o.to_string()).collect();
                self.notice(
                    "01000",
                    &format!(
                        "storage parameters ({}) are ignored: tierdb tables are Parquet segments",
                        names.join(", ")
                    ),
                );
            }
            let table = super::relation_name(&ct.name).unwrap_or_default();
            sequences = super::serial::rewrite(ct, &table);
            keys = Some((order, part));
            // PostgreSQL's long names of VARCHAR(n) and CHAR(n) (pg_dump writes them).
            for c in &mut ct.columns {
                use datafusion::sql::sqlparser::ast::DataType as T;
                c.data_type = match std::mem::replace(&mut c.data_type, T::Text) {
                    T::CharacterVarying(n) | T::CharVarying(n) => T::Varchar(n),
                    T::Character(n) => T::Char(n),
                    other => other,
                };
            }
            // What the Arrow schema does not carry: VARCHAR(n), CHAR(n).
            declared = ct.columns.iter().map(|c| c.data_type.clone()).collect();
        }
        let state = self.ctx.state();
        let plan = match plan {
            Some(p) => p,
            None if keys.is_none()
                && !temp
                && let Some(p) = crate::rows::fast::plan(&self.tables, &stmt).await? =>
            {
                p
            }
            None => {
                self.require_tables(&state, &stmt)?;
                crate::guard::check(&stmt)?;
                let planning = state.clone();
                let plan =
                    crate::interrupt::off_task(
                        async move { planning.statement_to_plan(stmt).await },
                    )
                    .await?;
                let plan = crate::rows::sequence::bind_to_session(plan, &state)?;
                crate::literals::int4_literals(plan)?
            }
        };
        if let Some(lookup) = crate::rows::fast::as_lookup(&plan) {
            let tx = self.abort.slot.current();
            let (schema, batches) =
                crate::rows::fast::run(&self.tables, lookup, tx.as_ref()).await?;
            return Ok(Outcome::Rows(Rows {
                source: Source::Ready(schema, batches),
                abort: self.abort.clone(),
            }));
        }
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) if temporary => {
                let (order, part) = keys.unwrap_or((None, None));
                let extras = order.is_some() || part.is_some() || !sequences.is_empty();
                self.create_temp(c, extras).await
            }
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                let (order, part) = keys.unwrap_or((None, None));
                self.create_table(c, &declared, order, part, sequences)
                    .await
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d))
                if d.name
                    .schema()
                    .is_none_or(|s| s == super::temp::TEMP_SCHEMA)
                    && self.temp.has(d.name.table()) =>
            {
                let before = self.temp.before_change(self.in_transaction()).await;
                self.temp.drop_table(d.name.table());
                self.temp.after_change(before).await?;
                Ok(Outcome::Command("DROP TABLE".into()))
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
            plan @ LogicalPlan::Dml(_) if self.inserts_into_temp(&plan) => {
                let n = self.insert_into_temp(plan).await?;
                Ok(Outcome::Command(format!("INSERT 0 {n}")))
            }
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
                let n = inserted(&crate::interrupt::off_task(df.collect()).await?);
                Ok(Outcome::Command(format!("{op} {n}")))
            }
            // SQL-level PREPARE (pg_dump prepares its per-object queries): the statement is
            // kept in the session for EXECUTE, and answered with its command tag, not rows.
            plan @ LogicalPlan::Statement(datafusion::logical_expr::Statement::Prepare(_)) => {
                self.ctx.execute_logical_plan(plan).await?;
                Ok(Outcome::Command("PREPARE".into()))
            }
            plan => {
                self.measure_join_inputs(&plan).await;
                let ctx = self.exec_ctx();
                let state = ctx.state();
                let plan =
                    crate::interrupt::off_task(async move { analyzed(&state, plan) }).await?;
                Ok(Outcome::Rows(Rows {
                    source: Source::Plan(ctx.execute_logical_plan(plan).await?),
                    abort: self.abort.clone(),
                }))
            }
        }
    }

    /// `LOCK TABLE … IN ACCESS SHARE MODE` (pg_dump locks every table it dumps): the lock
    /// keeps the table from changing shape under the transaction, and what it reads is
    /// its snapshot anyway (REPEATABLE READ) or each statement's. Accepted for existing
    /// tables inside a transaction, as PostgreSQL does; tierdb takes no table locks, so a
    /// DROP or ALTER of the table by another session is not held off. The stronger modes,
    /// which would hold off writers, are refused (0A000) rather than silently not held.
    async fn lock_tables(&self, lock: &datafusion::sql::sqlparser::ast::Lock) -> Result<Outcome> {
        use datafusion::sql::sqlparser::ast::LockTableMode;
        if !self.in_transaction() {
            return Err(TableError::Transaction {
                code: "25P01",
                message: "LOCK TABLE can only be used in transaction blocks".into(),
            });
        }
        match &lock.lock_mode {
            // ACCESS EXCLUSIVE is PostgreSQL's default mode.
            Some(LockTableMode::AccessShare) => {}
            other => {
                let mode = other
                    .as_ref()
                    .map_or("ACCESS EXCLUSIVE".to_string(), |m| m.to_string());
                return Err(TableError::Unsupported(format!(
                    "LOCK TABLE … IN {mode} MODE is not supported: tierdb takes no table \
                     locks that hold off other writers (IN ACCESS SHARE MODE is accepted)"
                )));
            }
        }
        for target in &lock.tables {
            let name = super::relation_name(&target.name)
                .ok_or_else(|| TableError::NoTable(target.name.to_string()))?;
            self.tables.require(&name).await?;
        }
        Ok(Outcome::Command("LOCK TABLE".into()))
    }

    /// The context a statement runs in: the session's, or, when queries are spread over
    /// workers and this session's open transaction has written segments (which its scans
    /// read and no worker can: they are in no catalog yet), the same without the
    /// distributed planner, so the statement runs in this process alone.
    pub(super) fn exec_ctx(&self) -> SessionContext {
        if !self.distributed || self.abort.slot.current().is_none_or(|tx| tx.is_empty()) {
            return self.ctx.clone();
        }
        self.local_ctx()
    }

    /// The session's context without the distributed planner: everything runs here.
    pub(super) fn local_ctx(&self) -> SessionContext {
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
        let (state, plan) = (self.ctx.state(), plan.clone());
        let optimized = match crate::interrupt::off_task(async move { state.optimize(&plan) }).await
        {
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
                && !self.temp.has(r.table())
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
}

/// How long VACUUM keeps a file after it left the catalog, for readers that planned before
/// (queries, followers) still reading it.
pub const DEFAULT_VACUUM_RETAIN: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether `stmt` is CREATE TEMP TABLE (kept by the session, undone by ROLLBACK), or DDL
/// that changes nothing stored (COMMENT ON is not kept; the one schema exists).
fn creates_temp(stmt: &DfStatement) -> bool {
    matches!(stmt, DfStatement::Statement(s)
        if matches!(s.as_ref(), SqlStatement::CreateTable(ct) if ct.temporary)
            || matches!(s.as_ref(), SqlStatement::Comment { .. } | SqlStatement::CreateSchema { .. }))
}

/// The row count an INSERT plan returns (one UInt64 "count" value).
pub(super) fn inserted(batches: &[RecordBatch]) -> u64 {
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

/// `plan` after the session's analyzer rules (type coercion, tierdb's checked arithmetic
/// and numeric sums): the types its rows will have. Running the query analyzes it again,
/// which changes nothing more.
fn analyzed(state: &datafusion::execution::SessionState, plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})?)
}
