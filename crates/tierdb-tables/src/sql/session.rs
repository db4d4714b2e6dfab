//! One client's session and the transaction rules every front end shares: implicit
//! transactions, aborting on error, the notices of BEGIN/COMMIT misuse.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::dataframe::DataFrame;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use futures::StreamExt;

use super::{LocalPlanner, StatementKind, StatementResult, parse};
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
///    deletes them. DDL (CREATE, DROP, ALTER, TRUNCATE, COMMENT of stored tables, views,
///    indexes, sequences, schemas) is committed when its statement ends, with undo records
///    that `ROLLBACK` (or `ROLLBACK TO SAVEPOINT`, or a failed `COMMIT`) follows to put the
///    catalog back, and that `COMMIT` forgets (`ddlundo.rs`); other sessions see it before
///    the COMMIT. A transaction's writes follow their table through a rename. Temporary
///    tables' changes are undone by the session itself (`temp.rs`).
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
    /// Bumped by every change of the session's settings (`plancache.rs`, invariant 3).
    pub(super) settings: std::sync::atomic::AtomicU64,
    /// The schemas unqualified names are looked up in (`searchpath.rs`).
    pub(super) search_path: Arc<super::searchpath::SearchPath>,
    pub(super) plan_cache: super::plancache::PlanCacheStats,
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
    /// PostgreSQL's DETAIL line(s), if any.
    pub detail: Option<String>,
}

impl Notice {
    /// PostgreSQL's severity of it: `WARNING` for warnings (class 01) and transaction-state
    /// misuse (class 25: BEGIN in a transaction, COMMIT outside one), `NOTICE` for the rest
    /// (`… does not exist, skipping`, `… already exists, skipping`).
    pub fn severity(&self) -> &'static str {
        if self.code.starts_with("01") || self.code.starts_with("25") {
            "WARNING"
        } else {
            "NOTICE"
        }
    }
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
    pub(super) source: Source,
    pub(super) abort: Abort,
}

/// Where a query's rows come from.
#[derive(Debug)]
pub(super) enum Source {
    /// A DataFusion plan, run as the rows are read.
    Plan(DataFrame),
    /// A kept plan, analyzed and optimized already (`plancache.rs`): only its physical
    /// plan is made, in this state, as the rows are read.
    Optimized(Box<datafusion::execution::SessionState>, LogicalPlan),
    /// A kept physical plan, its values bound into the node (`plancache.rs`, invariant
    /// 6): a copy bound to them runs as the rows are read.
    Physical(Box<super::plancache::KeptPhysical>),
    /// Rows read already (a key lookup's: `rows/fast.rs`).
    Ready(datafusion::common::DFSchemaRef, Vec<RecordBatch>),
}

impl Rows {
    pub fn schema(&self) -> &DFSchema {
        match &self.source {
            Source::Plan(df) => df.schema(),
            Source::Optimized(_, plan) => plan.schema(),
            Source::Physical(kept) => kept.logical().schema(),
            Source::Ready(schema, _) => schema,
        }
    }

    /// Where each column comes from (`origin.rs`): for RowDescription's table OID and
    /// column number. Rows a key lookup read already have none.
    pub fn origins(&self) -> Vec<Option<crate::origin::Origin>> {
        match &self.source {
            Source::Plan(df) => crate::origin::origins(df.logical_plan()),
            Source::Optimized(_, plan) => crate::origin::origins(plan),
            Source::Physical(kept) => crate::origin::origins(kept.logical()),
            Source::Ready(schema, _) => vec![None; schema.fields().len()],
        }
    }

    /// Whether each column keeps its type's modifier (`origin::modifiers`); a key
    /// lookup's columns are the table's.
    pub fn modifiers(&self) -> Vec<bool> {
        match &self.source {
            Source::Plan(df) => crate::origin::modifiers(df.logical_plan()),
            Source::Optimized(_, plan) => crate::origin::modifiers(plan),
            Source::Physical(kept) => crate::origin::modifiers(kept.logical()),
            Source::Ready(schema, _) => vec![true; schema.fields().len()],
        }
    }

    /// The rows as a stream.
    pub async fn execute_stream(self) -> Result<SendableRecordBatchStream> {
        let mut guard = FailUnlessDone(Some(&self.abort));
        // Physical planning (the optimizer's rules) off this task (`interrupt.rs`).
        let stream = match self.source {
            Source::Plan(df) => crate::interrupt::off_task(df.execute_stream()).await?,
            Source::Optimized(state, plan) => {
                crate::interrupt::off_task(async move {
                    let physical = state
                        .query_planner()
                        .create_physical_plan(&plan, state.as_ref())
                        .await?;
                    datafusion::physical_plan::execute_stream(physical, state.task_ctx())
                })
                .await?
            }
            Source::Physical(kept) => {
                let (plan, task) = kept.bound()?;
                datafusion::physical_plan::execute_stream(plan, task)?
            }
            Source::Ready(schema, batches) => {
                guard.0 = None;
                let schema = Arc::new(schema.as_arrow().clone());
                let rows = futures::stream::iter(batches.into_iter().map(Ok));
                return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)));
            }
        };
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
                rt.spawn(async move {
                    for what in tx.rollback(&tables).await {
                        tracing::warn!(%what, "a closed session's ROLLBACK could not undo DDL");
                    }
                });
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
        self.settings_changed();
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

    /// Warns of the DDL a rollback left in place (`ddlundo.rs` invariant 3).
    fn not_undone(&self, left: &[String]) {
        for what in left {
            self.notice(
                "01000",
                &format!("ROLLBACK did not undo this transaction's change of {what}"),
            );
        }
    }

    pub(super) fn notice(&self, code: &'static str, message: &str) {
        self.notice_with_detail(code, message, None);
    }

    fn notice_with_detail(&self, code: &'static str, message: &str, detail: Option<String>) {
        if let Ok(mut n) = self.notices.lock() {
            n.push(Notice {
                code,
                message: message.into(),
                detail,
            });
        }
    }

    /// PostgreSQL's "drop cascades to …" NOTICE for the views a DROP … CASCADE took.
    /// The NOTICE of the views a DROP … CASCADE took with it.
    pub(super) fn cascade_notice(&self, views: &[String]) {
        let views: Vec<String> = views.iter().map(|v| format!("view {v}")).collect();
        self.objects_notice(&views);
    }

    /// The NOTICE of the objects (`kind name`) a DROP … CASCADE took with it.
    pub(super) fn objects_notice(&self, cascaded: &[String]) {
        if let Some((message, detail)) = crate::viewdeps::cascade_notice(cascaded) {
            self.notice_with_detail("00000", &message, detail);
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
            let left = tx.rollback(&self.tables).await;
            self.not_undone(&left);
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
            let left = tx.rollback(&self.tables).await;
            self.not_undone(&left);
            if let Err(e) = self.temp.end_transaction(false) {
                tracing::warn!(error = %e, "cannot restore the temporary tables at ROLLBACK");
            }
        }
    }

    pub(super) async fn savepoint(
        &self,
        kind: StatementKind,
        stmt: &DfStatement,
    ) -> Result<Outcome> {
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
                let left = tx.rollback_to(&name, &self.tables).await?;
                self.not_undone(&left);
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

    pub(super) async fn plan_unguarded(&self, stmt: &DfStatement) -> Result<Option<LogicalPlan>> {
        if !matches!(
            StatementKind::of(stmt),
            StatementKind::Query | StatementKind::Write
        ) {
            return Ok(None);
        }
        self.schema.refresh().await?;
        let mut stmt = stmt.clone();
        self.qualify(&mut stmt)?;
        crate::views::expand(&self.tables, &self.schema, &mut stmt).await?;
        if let Some(clause) = super::upsert::take(&mut stmt)? {
            return Ok(Some(self.upsert_plan(&stmt, &clause).await?));
        }
        if let Some(returning) = super::returning::take(&mut stmt) {
            let insert = self.insert_plan(&stmt).await?;
            return Ok(Some(self.returning_plan(insert, &returning)?));
        }
        let stmt = &stmt;
        {
            // Read in place: a clone of the session state (all its function maps) per
            // Execute was a tenth of a point select's CPU.
            let state = self.ctx.state_ref();
            self.require_tables(&state.read(), stmt)?;
        }
        let temp = self.temp.named_in(stmt);
        if !temp
            && !crate::dml::is_update_or_delete(stmt)
            && let Some(lookup) = crate::rows::fast::plan(&self.tables, stmt).await?
        {
            return Ok(Some(lookup));
        }
        let state = self.ctx.state();
        if crate::dml::is_update_or_delete(stmt) {
            if temp
                && let (Some(t), DfStatement::Statement(s)) = (crate::dml::target_table(stmt), stmt)
                && self.temp.has(&t)
            {
                super::temp::check_dml(s)?;
                return Ok(Some(state.statement_to_plan(stmt.clone()).await?));
            }
            let plan = crate::dml::plan(&state, &self.tables, stmt).await?;
            if let Some(r) = super::returning::of_dml(stmt) {
                let table = crate::dml::target_table(stmt).unwrap_or_default();
                return Ok(Some(self.dml_returning_plan(plan, &table, &r).await?));
            }
            return Ok(Some(plan));
        }
        crate::guard::check(stmt)?;
        let plan = super::colnames::statement_to_plan(&state, stmt.clone()).await?;
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
        // Boxed: the statement's future is large (every kind of statement in one state
        // machine); callers' futures stay small, and debug builds' stacks with them.
        let recorder = match StatementKind::of(&stmt) {
            StatementKind::Begin | StatementKind::Commit | StatementKind::Rollback => None,
            _ => self.transaction().map(|tx| tx.undo_recorder()),
        };
        let run = self.guarded(Box::pin(self.execute_unguarded(stmt, plan)));
        match recorder {
            // Its catalog commits can be undone (`ddlundo.rs`).
            Some(r) => crate::ddlundo::recording(r, run).await,
            None => run.await,
        }
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
}

/// How long VACUUM keeps a file after it left the catalog, for readers that planned before
/// (queries, followers) still reading it.
pub const DEFAULT_VACUUM_RETAIN: std::time::Duration = std::time::Duration::from_secs(600);

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
pub(crate) fn analyzed(
    state: &datafusion::execution::SessionState,
    plan: LogicalPlan,
) -> Result<LogicalPlan> {
    Ok(state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})?)
}
