//! Running one statement in a session (`SqlSession::execute_outcome`'s body): the
//! transaction statements, the statements tierdb runs itself (DDL, temporary tables,
//! UPDATE/DELETE, LOCK TABLE) and those DataFusion plans; and the checks around them.

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::dml::WriteOp;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;

use super::session::DEFAULT_VACUUM_RETAIN;
use super::session::{Outcome, Rows, Source, analyzed, inserted};
use super::{CATALOG, SCHEMA, SqlSession, StatementKind};
use crate::error::{Result, TableError};

impl SqlSession {
    pub(super) async fn execute_unguarded(
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
        self.schema.refresh().await?;
        self.qualify(&mut stmt)?;
        if let DfStatement::Statement(s) = &stmt
            && let SqlStatement::Lock(lock) = s.as_ref()
        {
            return self.lock_tables(lock).await;
        }
        let mut plan = plan;
        if let Some(outcome) = self.temp_statement(&stmt, &mut plan).await? {
            return Ok(outcome);
        }
        if let Some(outcome) = self.drop_or_truncate(&stmt).await? {
            return Ok(outcome);
        }
        let temp = self.temp.named_in(&stmt);
        // Every statement that can read a view (queries, writes, CREATE TABLE … AS).
        crate::views::expand(&self.tables, &self.schema, &mut stmt).await?;
        if let Some(outcome) = Box::pin(self.explain_dml(&stmt)).await? {
            return Ok(outcome);
        }
        if let Some(clause) = super::upsert::take(&mut stmt)? {
            return self.upsert(&stmt, plan, clause).await;
        }
        if let Some(returning) = super::returning::take(&mut stmt) {
            let insert = self.insert_plan(&stmt).await?;
            let plan = match plan {
                Some(p) => p,
                None => self.returning_plan(insert.clone(), &returning)?,
            };
            return self.insert_returning(insert, plan).await;
        }
        if crate::dml::is_update_or_delete(&stmt) {
            // No segment merge of the target commits from planning to the end (merge.rs).
            let _merges_wait = crate::merge::DmlGuard::of_statement(&self.tables, &stmt).await;
            let plan = match plan {
                Some(p) => p,
                None => {
                    let state = self.ctx.state();
                    self.require_tables(&state, &stmt)?;
                    let (tables, stmt) = (self.tables.clone(), stmt.clone());
                    crate::interrupt::off_task(async move {
                        crate::dml::plan(&state, &tables, &stmt).await
                    })
                    .await?
                }
            };
            let plan = match super::returning::of_dml(&stmt) {
                Some(r) if super::returning::with_returning(&plan).is_none() => {
                    let table = crate::dml::target_table(&stmt).unwrap_or_default();
                    self.dml_returning_plan(plan, &table, &r).await?
                }
                _ => plan,
            };
            if let Some(w) = super::returning::with_returning(&plan) {
                return self.dml_returning(&stmt, w).await;
            }
            let n = crate::dml::execute(&self.local_ctx(), &self.tables, &stmt, plan).await?;
            return Ok(Outcome::Command(format!("{} {n}", crate::dml::verb(&stmt))));
        }
        let mut keys = None;
        let mut declared = Vec::new();
        let mut sequences = Vec::new();
        let mut uniques = Vec::new();
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
            uniques = super::ddl::unique_constraints(ct, &table)?;
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
            // What the Arrow schema does not carry: VARCHAR(n), CHAR(n), and the types
            // stored as text (UUID, JSON, JSONB), which DataFusion plans as TEXT.
            declared = ct.columns.iter().map(|c| c.data_type.clone()).collect();
            for c in &mut ct.columns {
                if let Some(stored) = crate::pgtext::stored_sql_type(&c.data_type) {
                    c.data_type = stored;
                }
            }
        }
        // The session state is cloned (all its function maps) only where a plan is made.
        let plan = match plan {
            Some(p) => p,
            None if keys.is_none()
                && !temp
                && let Some(p) = crate::rows::fast::plan(&self.tables, &stmt).await? =>
            {
                p
            }
            None => {
                let state = self.ctx.state();
                self.require_tables(&state, &stmt)?;
                crate::guard::check(&stmt)?;
                let planning = state.clone();
                let plan = crate::interrupt::off_task(async move {
                    super::colnames::statement_to_plan(&planning, stmt).await
                })
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
        if let Some(kept) = super::plancache::as_kept_physical(&plan) {
            // A prepared query's kept physical plan (`plancache.rs`, invariant 6).
            return Ok(Outcome::Rows(Rows {
                source: Source::Physical(Box::new(kept.clone())),
                abort: self.abort.clone(),
            }));
        }
        if let Some(optimized) = super::plancache::as_optimized(&plan) {
            // A prepared query's kept plan, analyzed and optimized already, its values
            // bound (`plancache.rs`, invariant 5): only its physical plan is made.
            return Ok(Outcome::Rows(Rows {
                source: Source::Optimized(Box::new(self.exec_ctx().state()), optimized.clone()),
                abort: self.abort.clone(),
            }));
        }
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) if temporary => {
                let (order, part) = keys.unwrap_or((None, None));
                let extras = order.is_some()
                    || part.is_some()
                    || !sequences.is_empty()
                    || !uniques.is_empty();
                self.create_temp(c, extras).await
            }
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                let (order, part) = keys.unwrap_or((None, None));
                self.create_table(c, &declared, order, part, sequences, uniques)
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
                let name = match super::stored_table(&d.name) {
                    Ok(name) => name.to_string(),
                    // PostgreSQL: a notice "schema … does not exist, skipping".
                    Err(_) if d.if_exists => {
                        return Ok(Outcome::Command("DROP TABLE (did not exist)".into()));
                    }
                    Err(e) => return Err(e),
                };
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
            plan @ LogicalPlan::Dml(_) => {
                let n = self.run_insert(plan).await?;
                Ok(Outcome::Command(format!("INSERT 0 {n}")))
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

    /// Runs an INSERT plan (into a temporary table, a row table by VALUES, or through
    /// the table's sink); returns how many rows it inserted.
    pub(super) async fn run_insert(&self, plan: LogicalPlan) -> Result<u64> {
        if self.inserts_into_temp(&plan) {
            return self.insert_into_temp(plan).await;
        }
        if let Some(n) = Box::pin(crate::rows::fastdml::insert(
            &self.ctx,
            &self.tables,
            &plan,
            self.abort.slot.current().as_ref(),
        ))
        .await?
        {
            return Ok(n);
        }
        let LogicalPlan::Dml(dml) = plan else {
            return Err(TableError::Schema("not an INSERT".into()));
        };
        if !matches!(dml.op, WriteOp::Insert(_)) {
            return Err(TableError::Schema(format!(
                "{} is not supported: use INSERT, UPDATE or DELETE",
                dml.op
            )));
        }
        let df = self
            .exec_ctx()
            .execute_logical_plan(LogicalPlan::Dml(dml))
            .await?;
        Ok(inserted(&crate::interrupt::off_task(df.collect()).await?))
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

    /// Counts the rows of the filtered dimension scans of `plan`'s joins that the join
    /// order has no measurement for yet (see `joinorder.rs`). Best effort: a count that
    /// fails leaves that input to the estimate.
    pub(super) async fn measure_join_inputs(&self, plan: &LogicalPlan) {
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
    pub(super) fn require_tables(
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
            let public = r.schema().is_none_or(|s| s == SCHEMA);
            let ours = r.catalog().is_none_or(|c| c == CATALOG)
                && (public
                    || r.schema()
                        .is_some_and(|s| self.schema.schema_names().iter().any(|n| n == s)))
                && !state.table_functions().contains_key(r.table());
            let key = super::qualified(r.schema().unwrap_or(SCHEMA), r.table());
            // A schema that does not exist: PostgreSQL says the relation does not.
            if r.catalog().is_none_or(|c| c == CATALOG)
                && let Some(s) = r.schema()
                // (DataFusion adds information_schema itself, registered or not.)
                && s != "information_schema"
                && state
                    .catalog_list()
                    .catalog(CATALOG)
                    .is_some_and(|c| c.schema(s).is_none())
            {
                return Err(TableError::NoTable(key));
            }
            if ours
                && !(public && self.temp.has(r.table()))
                && (r.table().contains('.')
                    || !datafusion::catalog::SchemaProvider::table_exist(
                        self.schema.as_ref(),
                        &key,
                    ))
            {
                return Err(TableError::NoTable(key));
            }
        }
        Ok(())
    }
}
