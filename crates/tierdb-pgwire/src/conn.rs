//! One connection's state: its session on the live engine (made again after the engine
//! was reopened), its CancelRequest key, a COPY in progress; and running one statement.

use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::QueryHook;
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::hooks::set_show::SetShowHook;
use futures::Sink;
use pgwire::api::portal::Format;
use pgwire::api::results::{QueryResponse, Response, Tag};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use tierdb_tables::sql::{Outcome, SqlSession, StatementKind};
use tierdb_tables::{SqlEngine, TableError};

use crate::Served;
use crate::cancel::Cancels;
use crate::copy::CopyIn;
use crate::encode::{command_tag, encode_rows};
use crate::errors::{notice, table_error, user_error};
use crate::show::{
    is_set_or_show, show_isolation, show_replica, show_server_version, statement_timeout,
};
use crate::stop::Stop;

/// A connection's own state: its session and a COPY in progress.
#[derive(Debug)]
pub struct ConnState {
    database: Arc<Served>,
    pub(crate) parser: PostgresCompatibilityParser,
    current: tokio::sync::Mutex<Option<(Arc<SqlEngine>, Arc<SqlSession>)>>,
    pub(crate) copy: tokio::sync::Mutex<Option<CopyIn>>,
    pub(crate) cancels: Arc<Cancels>,
    /// Bumped by a CancelRequest for this connection: a query's rows stop.
    cancel_gen: Arc<tokio::sync::watch::Sender<u64>>,
    /// This connection's (pid, secret key), once registered with `cancels`.
    key: std::sync::Mutex<Option<(i32, Bytes)>>,
    /// The OIDs RowDescription names tables by (`tableoid.rs`).
    pub(crate) table_oids: crate::tableoid::TableOids,
}

impl Drop for ConnState {
    fn drop(&mut self) {
        let key = self.key.lock().ok().and_then(|mut k| k.take());
        if let Some(k) = key
            && let Ok(mut running) = self.cancels.running.lock()
        {
            running.remove(&k);
        }
    }
}

impl ConnState {
    pub fn new(database: Arc<Served>, cancels: Arc<Cancels>) -> Arc<Self> {
        Arc::new(ConnState {
            database,
            parser: PostgresCompatibilityParser::new(),
            current: tokio::sync::Mutex::new(None),
            copy: tokio::sync::Mutex::new(None),
            cancels,
            cancel_gen: Arc::new(tokio::sync::watch::channel(0).0),
            key: std::sync::Mutex::new(None),
            table_oids: Default::default(),
        })
    }

    /// Registers this connection for CancelRequests (once its pid and key are known) and
    /// returns a receiver that changes when the running query is to stop.
    pub(crate) fn cancel_watch<C: ClientInfo>(
        &self,
        client: &C,
    ) -> tokio::sync::watch::Receiver<u64> {
        if let Ok(mut key) = self.key.lock()
            && key.is_none()
        {
            let (pid, secret) = client.pid_and_secret_key();
            let k = (pid, secret.to_bytes());
            if let Ok(mut running) = self.cancels.running.lock() {
                running.insert(k.clone(), self.cancel_gen.clone());
            }
            *key = Some(k);
        }
        self.cancel_gen.subscribe()
    }

    /// How the statement starting now is given up: its `statement_timeout` from now, or
    /// a CancelRequest from now on (`stop.rs`).
    pub(crate) fn stop<C: ClientInfo>(&self, client: &C, session: &SqlSession) -> Stop {
        let deadline = statement_timeout(client).map(|t| tokio::time::Instant::now() + t);
        Stop::new(deadline, self.cancel_watch(client), session.interrupt())
    }

    /// This connection's session on the live engine. After the engine was reopened the
    /// session is made again; a transaction open on the old engine is lost (57P03).
    pub(crate) async fn session(&self) -> PgWireResult<Arc<SqlSession>> {
        let engine = self.database.engine().await;
        let mut current = self.current.lock().await;
        let lost = match current.as_ref() {
            Some((e, s)) if Arc::ptr_eq(e, &engine) => return Ok(s.clone()),
            Some((_, s)) => s.in_transaction(),
            None => false,
        };
        let session = Arc::new(engine.new_session());
        *current = Some((engine, session.clone()));
        if lost {
            return Err(user_error(
                "57P03",
                "the database engine was reopened after a failure and the open transaction \
                 was lost; nothing of it was committed, retry it"
                    .into(),
            ));
        }
        Ok(session)
    }

    /// Splits a query string into statements (see [`crate::parse::parse`]).
    pub(crate) fn parse(&self, sql: &str) -> PgWireResult<Vec<Statement>> {
        crate::parse::parse(&self.parser, sql)
    }

    /// The one statement of an extended-protocol Parse; refused in an aborted transaction
    /// unless it ends the transaction.
    pub(crate) async fn parse_one(
        &self,
        session: &SqlSession,
        sql: &str,
    ) -> PgWireResult<Option<Statement>> {
        let mut statements = self.parse(sql)?;
        if statements.len() > 1 {
            return Err(user_error(
                "42601",
                "cannot insert multiple commands into a prepared statement".into(),
            ));
        }
        let Some(stmt) = statements.pop() else {
            return Ok(None);
        };
        session
            .refuse_if_aborted(StatementKind::of_sql(&stmt))
            .map_err(|e| table_error(&e))?;
        Ok(Some(stmt))
    }

    /// Runs one statement and answers it. `plan` is its plan with parameters bound
    /// (extended protocol), `format` the result formats the client asked for.
    pub(crate) async fn run<C>(
        &self,
        client: &mut C,
        stmt: Statement,
        plan: Option<LogicalPlan>,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session().await?;
        tracing::debug!(statement = %stmt, bound = plan.is_some(), "run");
        let kind = StatementKind::of_sql(&stmt);
        // What can change how a statement is planned (plans of prepared statements are
        // kept while nothing did: `tierdb_tables` `plancache.rs`, invariant 3).
        if matches!(
            stmt,
            Statement::Set(_) | Statement::Reset(_) | Statement::Discard { .. }
        ) {
            session.settings_changed();
        }
        // The client's time zone (its startup parameter, as pgjdbc and libpq's PGTZ send
        // it, or what SET TIME ZONE recorded): applied to the session when it differs.
        // An unknown zone at startup leaves the session in UTC.
        if let Some(tz) = client_time_zone(client) {
            let _ = session.set_time_zone(&tz); // a no-op when the session is in it already
        }
        if let Some(r) = show_server_version(&stmt) {
            return r;
        }
        if let Some(r) = show_replica(&stmt, session.tables()).await {
            return r;
        }
        if let Some(r) = show_isolation(&stmt, &session) {
            return r;
        }
        if let Some(change) = crate::pgcatalog::OwnerChange::of(&stmt) {
            let user = client.metadata().get("user").cloned().unwrap_or_default();
            let tag = session
                .guarded(async {
                    session.refuse_if_aborted(kind)?;
                    change.check(&user, &session).await
                })
                .await
                .map_err(|e| table_error(&e))?;
            return Ok(Response::Execution(Tag::new(tag)));
        }
        if let Statement::Set(datafusion::sql::sqlparser::ast::Set::SetTransaction {
            modes,
            session: characteristics,
            ..
        }) = &stmt
        {
            session
                .refuse_if_aborted(kind)
                .and_then(|()| session.set_transaction_modes(modes, *characteristics))
                .map_err(|e| table_error(&e))?;
            return Ok(Response::Execution(Tag::new("SET")));
        }
        if let Statement::Reset(r) = &stmt {
            session
                .refuse_if_aborted(kind)
                .map_err(|e| table_error(&e))?;
            let tag = crate::show::reset(&r.reset)?;
            if crate::show::resets_search_path(&r.reset) {
                reset_search_path(&session, client);
            }
            return Ok(Response::Execution(Tag::new(tag)));
        }
        if is_set_or_show(&stmt) {
            session
                .refuse_if_aborted(kind)
                .map_err(|e| table_error(&e))?;
            // SET search_path: the session resolves unqualified names by it
            // (`tierdb_tables::sql::searchpath`); SHOW answers it from the metadata.
            if let (Some(path), Some(text)) = (
                crate::show::search_path(&stmt),
                crate::show::search_path_text(&stmt),
            ) {
                set_search_path(&session, client, path, &text);
                return Ok(Response::Execution(Tag::new("SET")));
            }
            // SET TIME ZONE: checked and applied to the session here (the hook below only
            // records it for SHOW; its change of the context's options is lost).
            if let Statement::Set(datafusion::sql::sqlparser::ast::Set::SetTimeZone {
                value, ..
            }) = &stmt
            {
                let tz = value.to_string();
                session
                    .set_time_zone(tz.trim_matches('\'').trim_matches('"'))
                    .map_err(|e| table_error(&e))?;
            }
            if let Some(r) = SetShowHook
                .handle_simple_query(&stmt, session.context(), client)
                .await
            {
                return r;
            }
        }
        match &stmt {
            // Prepared statements live in the protocol (Parse/Close); SQL-level ones are
            // not kept, so there is nothing more to free. A transaction is not touched.
            Statement::Deallocate { name, .. } => {
                let all = name.value.eq_ignore_ascii_case("all");
                return Ok(Response::Execution(Tag::new(if all {
                    "DEALLOCATE ALL"
                } else {
                    "DEALLOCATE"
                })));
            }
            Statement::Discard { .. } => {
                session.rollback().await;
                reset_search_path(&session, client);
                return Ok(Response::Execution(Tag::new("DISCARD ALL")));
            }
            Statement::Copy { .. } => {
                session
                    .refuse_if_aborted(kind)
                    .map_err(|e| table_error(&e))?;
                return session.guarded(self.copy(&session, stmt, client)).await;
            }
            _ => {}
        }
        let names = crate::colnames::for_client(&stmt);
        // INSERT … RETURNING answers rows, tagged as the INSERT it is ("INSERT 0 n").
        // UPDATE/DELETE … RETURNING likewise ("UPDATE n", "DELETE n").
        let tag = match &stmt {
            Statement::Insert(_) => Some("INSERT 0"),
            Statement::Update(_) => Some("UPDATE"),
            Statement::Delete(_) => Some("DELETE"),
            _ => None,
        };
        // The session aborts its transaction when the statement fails or is dropped (a
        // stop drops it).
        let mut stop = self.stop(client, &session);
        let run = session.execute_outcome(DfStatement::Statement(Box::new(stmt)), plan);
        let outcome = stop.bound(run).await?;
        for n in session.take_notices() {
            notice(client, n.severity(), n.code, &n.message, n.detail).await?;
        }
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => return Err(self.failed(&e).await),
        };
        match outcome {
            Outcome::Command(tag) => Ok(match kind {
                StatementKind::Begin => Response::TransactionStart(Tag::new("BEGIN")),
                StatementKind::Commit | StatementKind::Rollback => {
                    Response::TransactionEnd(Tag::new(&tag))
                }
                StatementKind::Savepoint | StatementKind::Release | StatementKind::RollbackTo => {
                    Response::Execution(Tag::new(&tag))
                }
                _ => Response::Execution(command_tag(&tag)),
            }),
            Outcome::Rows(rows) => {
                let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
                let ids = self.table_oids.resolve(&session, &rows.origins()).await;
                let fields = crate::encode::expression_typmods(
                    crate::tableoid::with_ids(
                        crate::encode::describe(rows.schema().as_arrow(), format, Some(options))?,
                        &ids,
                    ),
                    &rows.modifiers(),
                );
                let fields = Arc::new(match &names {
                    Some(n) => n.apply(fields),
                    None => fields,
                });
                // An error while the rows stream (an overflow, a timeout, a cancel) fails the
                // statement after it started answering; the session's rows abort its
                // transaction then, as any failed statement does.
                let stream = stop
                    .bound(rows.execute_stream())
                    .await?
                    .map_err(|e| table_error(&e))?;
                let rows = encode_rows(fields.clone(), stream, session.time_zone());
                let rows = stop.guard_stream(rows);
                let mut response = QueryResponse::new(fields, rows);
                if let Some(tag) = tag {
                    response.set_command_tag(tag);
                }
                Ok(Response::Query(response))
            }
        }
    }

    /// The error a failed statement answers with; a failed engine is reopened in the
    /// background and the client told to retry (57P03).
    pub(crate) async fn failed(&self, e: &TableError) -> PgWireError {
        let engine = self.database.engine().await;
        match engine.tables().failure() {
            Some(why) => {
                self.database.recover(&engine, &why);
                user_error(
                    "57P03",
                    format!(
                        "the database engine failed ({why}); it is being reopened in the \
                         background, retry shortly (this statement was not applied: {e})"
                    ),
                )
            }
            None => table_error(e),
        }
    }
}

/// The time zone the client's metadata names (`timezone`, or `TimeZone` as pgjdbc sends
/// it at startup), if any.
/// The session's `search_path`: for name resolution, `current_setting` and SHOW (`text`
/// as they give it back).
fn set_search_path(
    session: &SqlSession,
    client: &mut dyn ClientInfo,
    path: Vec<String>,
    text: &str,
) {
    session.set_search_path(path);
    session
        .context()
        .register_udf(crate::catalogfns::current_setting_with_path(text));
    client
        .metadata_mut()
        .insert("search_path".to_string(), text.to_string());
}

/// Back to the default `search_path` (RESET search_path, DISCARD ALL).
fn reset_search_path(session: &SqlSession, client: &mut dyn ClientInfo) {
    let public = vec![tierdb_tables::sql::SCHEMA.to_string()];
    set_search_path(session, client, public, "\"$user\", public");
}

fn client_time_zone<C: ClientInfo>(client: &C) -> Option<String> {
    let m = client.metadata();
    m.get("timezone")
        .or_else(|| m.get("TimeZone"))
        .map(|tz| tz.trim_matches(['\'', '"']).to_string())
}
