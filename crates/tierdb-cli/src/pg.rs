//! One client connection of `tierdb serve`: the PostgreSQL protocol (simple and extended
//! query, COPY, cancel) over a [`SqlSession`] of its own.
//!
//! What comes from elsewhere, not written here: the protocol itself (pgwire), parameter
//! decoding and text/binary encoding of Arrow values (arrow-pg), PostgreSQL's SQL
//! compatibility rewrites and `pg_catalog` (datafusion-pg-catalog), and `SET`/`SHOW` of the
//! settings drivers touch (datafusion-postgres's hook). What is tierdb's: transactions,
//! DDL, INSERT/UPDATE/DELETE, COPY into the import path, VACUUM, statement timeouts,
//! errors with SQLSTATEs, and reopening a failed engine.

use std::fmt::Debug;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions as ArrowFormat};
use datafusion::common::ParamValues;
use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};
use datafusion_postgres::QueryHook;
use datafusion_postgres::arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use datafusion_postgres::arrow_pg::datatypes::{
    arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type,
};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::hooks::set_show::SetShowHook;
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ErrorHandler, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::response::NoticeResponse;
use pgwire::types::format::FormatOptions;
use tierdb_tables::import::{Format as ImportFormat, ImportOptions, ImportProgress};
use tierdb_tables::sql::{Outcome, StatementKind};
use tierdb_tables::{SqlEngine, TableError, sql::SqlSession};

use crate::serve::Database;

/// The version clients are told (`server_version`, `version()`): PostgreSQL's protocol and
/// catalog as of this major version, served by tierdb.
pub const SERVER_VERSION: &str = concat!("16.6 (tierdb ", env!("CARGO_PKG_VERSION"), ")");

/// Where datafusion-postgres's `SET statement_timeout` hook keeps the timeout.
const METADATA_STATEMENT_TIMEOUT: &str = "statement_timeout_ms";

/// Makes an engine speak PostgreSQL's dialect: `pg_catalog` and PostgreSQL's catalog
/// functions (datafusion-pg-catalog), and `version()`. Sessions made afterwards inherit it.
pub fn install_postgres_compat(engine: &SqlEngine) -> Result<(), String> {
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
    datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog(
        engine.context(),
        tierdb_tables::sql::CATALOG,
        EmptyContextProvider,
    )
    .map_err(|e| format!("cannot set up pg_catalog: {e}"))?;
    let version = format!(
        "PostgreSQL {SERVER_VERSION} on {}-{}, compatible; Apache DataFusion {}",
        std::env::consts::ARCH,
        std::env::consts::OS,
        datafusion::DATAFUSION_VERSION
    );
    let udf = create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(Some(version.clone())),
            ))
        }),
    );
    engine.context().register_udf(udf);
    engine.context().register_udf(to_regtype_udf());
    engine
        .context()
        .register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            JsonBuildObject::new(),
        ));
    // Every collation and type is visible: there is one schema search path.
    for name in ["pg_collation_is_visible", "pg_type_is_visible"] {
        engine.context().register_udf(create_udf(
            name,
            vec![DataType::Int32],
            DataType::Boolean,
            Volatility::Immutable,
            Arc::new(|_| {
                Ok(ColumnarValue::Scalar(
                    datafusion::common::ScalarValue::Boolean(Some(true)),
                ))
            }),
        ));
    }
    // tierdb has no sequences: no column is backed by one.
    engine.context().register_udf(create_udf(
        "pg_get_serial_sequence",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(None),
            ))
        }),
    ));
    Ok(())
}

/// `json_build_object(key, value, …)`: a JSON object as text (catalog queries of
/// SQLAlchemy and BI tools build one per column).
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: datafusion::logical_expr::Signature,
}

impl JsonBuildObject {
    fn new() -> Self {
        JsonBuildObject {
            signature: datafusion::logical_expr::Signature::variadic_any(
                datafusion::logical_expr::Volatility::Immutable,
            ),
        }
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<datafusion::logical_expr::ColumnarValue> {
        use datafusion::arrow::array::StringBuilder;
        if !args.args.len().is_multiple_of(2) {
            return Err(datafusion::error::DataFusionError::Execution(
                "json_build_object takes keys and values in pairs".into(),
            ));
        }
        let arrays = datafusion::logical_expr::ColumnarValue::values_to_arrays(&args.args)?;
        let fmt = ArrowFormat::default();
        let formatters = arrays
            .iter()
            .map(|a| ArrayFormatter::try_new(a.as_ref(), &fmt))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = StringBuilder::new();
        for row in 0..args.number_rows {
            let mut obj = serde_json::Map::new();
            for pair in 0..arrays.len() / 2 {
                let (k, v) = (2 * pair, 2 * pair + 1);
                let key = formatters[k].value(row).to_string();
                let value = if arrays[v].is_null(row) {
                    serde_json::Value::Null
                } else {
                    let text = formatters[v].value(row).to_string();
                    match arrays[v].data_type() {
                        DataType::Boolean => serde_json::Value::Bool(text == "true"),
                        t if t.is_numeric() => {
                            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
                        }
                        _ => serde_json::Value::String(text),
                    }
                };
                obj.insert(key, value);
            }
            out.append_value(serde_json::Value::Object(obj).to_string());
        }
        Ok(datafusion::logical_expr::ColumnarValue::Array(Arc::new(
            out.finish(),
        )))
    }
}

/// `to_regtype(name)`: the OID of a built-in type by any of its SQL names, NULL for a type
/// this server does not have (drivers probe for extension types such as hstore this way).
fn to_regtype_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    let lookup = |name: &str| -> Option<i32> {
        let n = name.trim().trim_matches('"').to_ascii_lowercase();
        let n = n.strip_prefix("pg_catalog.").unwrap_or(&n);
        let ty = match n {
            "bool" | "boolean" => Type::BOOL,
            "int2" | "smallint" => Type::INT2,
            "int4" | "int" | "integer" => Type::INT4,
            "int8" | "bigint" => Type::INT8,
            "float4" | "real" => Type::FLOAT4,
            "float8" | "double precision" => Type::FLOAT8,
            "numeric" | "decimal" => Type::NUMERIC,
            "text" => Type::TEXT,
            "varchar" | "character varying" => Type::VARCHAR,
            "bpchar" | "char" | "character" => Type::BPCHAR,
            "name" => Type::NAME,
            "date" => Type::DATE,
            "time" | "time without time zone" => Type::TIME,
            "timestamp" | "timestamp without time zone" => Type::TIMESTAMP,
            "timestamptz" | "timestamp with time zone" => Type::TIMESTAMPTZ,
            "interval" => Type::INTERVAL,
            "bytea" => Type::BYTEA,
            "oid" => Type::OID,
            "json" => Type::JSON,
            "jsonb" => Type::JSONB,
            "uuid" => Type::UUID,
            _ => return None,
        };
        i32::try_from(ty.oid()).ok()
    };
    create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let names = arrays[0]
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| {
                    datafusion::error::DataFusionError::Plan("to_regtype takes text".into())
                })?;
            let oids: Int32Array = names.iter().map(|n| n.and_then(lookup)).collect();
            Ok(ColumnarValue::Array(Arc::new(oids)))
        }),
    )
}

/// A connection's own state: its session and a COPY in progress.
pub struct ConnState {
    database: Arc<Database>,
    parser: PostgresCompatibilityParser,
    current: tokio::sync::Mutex<Option<(Arc<SqlEngine>, Arc<SqlSession>)>>,
    copy: tokio::sync::Mutex<Option<CopyIn>>,
    cancels: Arc<Cancels>,
    /// Bumped by a CancelRequest for this connection: a query's rows stop.
    cancel_gen: Arc<tokio::sync::watch::Sender<u64>>,
    /// This connection's (pid, secret key), once registered with `cancels`.
    key: std::sync::Mutex<Option<(i32, Bytes)>>,
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

/// CancelRequests: pgwire's connection manager stops a statement still being planned or
/// written (its `do_query`); the connection's own generation counter stops a query whose
/// rows are being streamed after that returned.
pub struct Cancels {
    manager: Arc<pgwire::api::ConnectionManager>,
    running: std::sync::Mutex<std::collections::HashMap<ConnectionKey, Generation>>,
}

/// A connection's pid and secret key, as CancelRequests name it.
type ConnectionKey = (i32, Bytes);
/// A counter a CancelRequest bumps.
type Generation = Arc<tokio::sync::watch::Sender<u64>>;

impl Cancels {
    pub fn new(manager: Arc<pgwire::api::ConnectionManager>) -> Arc<Self> {
        Arc::new(Cancels {
            manager,
            running: Default::default(),
        })
    }
}

#[async_trait]
impl pgwire::api::cancel::CancelHandler for Cancels {
    async fn on_cancel_request(&self, request: pgwire::messages::cancel::CancelRequest) {
        self.manager.cancel(request.pid, &request.secret_key).await;
        let key = (request.pid, request.secret_key.to_bytes());
        let generation = self.running.lock().ok().and_then(|r| r.get(&key).cloned());
        if let Some(g) = generation {
            g.send_modify(|n| *n += 1);
        }
    }
}

/// The handlers of one connection (pgwire asks for them once per connection); `S` is the
/// startup (authentication) handler all connections share.
pub struct Handlers<S> {
    pub conn: Arc<ConnState>,
    pub startup: Arc<S>,
}

impl<S> PgWireServerHandlers for Handlers<S>
where
    S: pgwire::api::auth::StartupHandler + 'static,
{
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.conn.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::new(Extended(self.conn.clone()))
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.conn.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.conn.cancels.clone()
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(SqlStates)
    }
}

impl ConnState {
    pub fn new(database: Arc<Database>, cancels: Arc<Cancels>) -> Arc<Self> {
        Arc::new(ConnState {
            database,
            parser: PostgresCompatibilityParser::new(),
            current: tokio::sync::Mutex::new(None),
            copy: tokio::sync::Mutex::new(None),
            cancels,
            cancel_gen: Arc::new(tokio::sync::watch::channel(0).0),
            key: std::sync::Mutex::new(None),
        })
    }

    /// Registers this connection for CancelRequests (once its pid and key are known) and
    /// returns a receiver that changes when the running query is to stop.
    fn cancel_watch<C: ClientInfo>(&self, client: &C) -> tokio::sync::watch::Receiver<u64> {
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

    /// This connection's session on the live engine. After the engine was reopened the
    /// session is made again; a transaction open on the old engine is lost (57P03).
    async fn session(&self) -> PgWireResult<Arc<SqlSession>> {
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

    /// The one statement of an extended-protocol Parse; refused in an aborted transaction
    /// unless it ends the transaction.
    async fn parse_one(&self, session: &SqlSession, sql: &str) -> PgWireResult<Option<Statement>> {
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
        let ends = matches!(
            StatementKind::of(&DfStatement::Statement(Box::new(stmt.clone()))),
            StatementKind::Commit | StatementKind::Rollback | StatementKind::RollbackTo
        );
        if session.is_aborted() && !ends {
            return Err(aborted());
        }
        Ok(Some(stmt))
    }

    /// Splits a query string into statements: PostgreSQL's syntax first (with the
    /// rewrites that map it onto DataFusion), then tierdb's own (CREATE TABLE … ORDER BY,
    /// PARTITION BY), whose syntax errors are the ones reported.
    fn parse(&self, sql: &str) -> PgWireResult<Vec<Statement>> {
        // pgwire decodes a query string lossily: an invalid UTF-8 byte arrives as U+FFFD.
        // Running it would store or compare other bytes than the client sent, so refuse
        // (PostgreSQL: 22021). A U+FFFD the client really wrote is refused too: it cannot
        // be told apart here.
        if sql.contains('\u{FFFD}') {
            return Err(user_error(
                "22021",
                "invalid byte sequence for encoding \"UTF8\" in the query string (or the \
                 replacement character U+FFFD, which tierdb cannot tell apart from one); \
                 send the query as UTF-8"
                    .into(),
            ));
        }
        let mut statements = self.parse_unrepaired(sql)?;
        for s in &mut statements {
            tierdb_tables::parsefix::repair(s);
        }
        Ok(statements)
    }

    fn parse_unrepaired(&self, sql: &str) -> PgWireResult<Vec<Statement>> {
        if let Ok(statements) = self.parser.parse(sql) {
            if !sql.contains("pg_catalog") {
                return Ok(statements);
            }
            return Ok(statements
                .into_iter()
                .map(|mut s| {
                    hoist_case_subqueries(&mut s);
                    self.parser.rewrite(s)
                })
                .collect());
        }
        let statements = tierdb_tables::sql::parse(sql).map_err(|e| table_error(&e))?;
        statements
            .into_iter()
            .map(|s| match s {
                DfStatement::Statement(s) => Ok(self.parser.rewrite(*s)),
                other => Err(user_error(
                    "0A000",
                    format!("{other} is not supported by tierdb serve"),
                )),
            })
            .collect()
    }

    /// Runs one statement and answers it. `plan` is its plan with parameters bound
    /// (extended protocol), `format` the result formats the client asked for.
    async fn run<C>(
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
        if let Some(r) = show_server_version(&stmt) {
            return r;
        }
        if let Some(r) = show_replica(&stmt, session.tables()).await {
            return r;
        }
        if is_set_or_show(&stmt) {
            if session.is_aborted() {
                return Err(aborted());
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
                return Ok(Response::Execution(Tag::new("DISCARD ALL")));
            }
            _ => {}
        }
        if let Statement::Copy { .. } = &stmt {
            if session.is_aborted() {
                return Err(aborted());
            }
            let r = self.copy(&session, stmt, client).await;
            if r.is_err() {
                session.fail();
            }
            return r;
        }
        let df = DfStatement::Statement(Box::new(stmt));
        let kind = StatementKind::of(&df);
        match kind {
            StatementKind::Begin if session.in_transaction() => {
                notice(
                    client,
                    "25001",
                    "there is already a transaction in progress",
                )
                .await?;
            }
            StatementKind::Commit | StatementKind::Rollback if !session.in_transaction() => {
                notice(client, "25P01", "there is no transaction in progress").await?;
            }
            _ => {}
        }
        let timeout = statement_timeout(client);
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let cancel = self.cancel_watch(client);
        let run = session.execute_outcome(df, plan);
        let outcome = match deadline {
            Some(d) => match tokio::time::timeout_at(d, run).await {
                Ok(r) => r,
                Err(_) => {
                    session.fail();
                    return Err(timed_out());
                }
            },
            None => run.await,
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                session.fail();
                return Err(self.failed(&e).await);
            }
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
            Outcome::Rows(df) => {
                let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
                let fields = Arc::new(arrow_schema_to_pg_fields(
                    df.schema().as_arrow(),
                    format,
                    Some(options),
                )?);
                let stream = df
                    .execute_stream()
                    .await
                    .map_err(|e| self.failed_now(&session, &TableError::from(e)))?;
                let rows = encode_rows(fields.clone(), stream, deadline, cancel);
                // An error while the rows stream (an overflow, a timeout, a cancel) fails the
                // statement after it started answering: inside a transaction that aborts it,
                // as any failed statement does, so its COMMIT rolls back.
                let failing = session.clone();
                let rows = rows.inspect(move |r| {
                    if r.is_err() {
                        failing.fail();
                    }
                });
                Ok(Response::Query(QueryResponse::new(fields, rows)))
            }
        }
    }

    /// The error a failed statement answers with; a failed engine is reopened in the
    /// background and the client told to retry (57P03).
    async fn failed(&self, e: &TableError) -> PgWireError {
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

    fn failed_now(&self, session: &SqlSession, e: &TableError) -> PgWireError {
        session.fail();
        table_error(e)
    }

    /// `COPY table FROM STDIN` starts a copy-in (finished in [`CopyHandler`]); `COPY table
    /// TO STDOUT` and `COPY (query) TO STDOUT` stream the rows out.
    async fn copy<C>(
        &self,
        session: &Arc<SqlSession>,
        stmt: Statement,
        _client: &mut C,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Send + Sync,
    {
        let Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        } = stmt
        else {
            return Err(user_error("XX000", "not a COPY statement".into()));
        };
        let opts = CopyOptions::parse(&options, &legacy_options)?;
        match (to, target) {
            (false, CopyTarget::Stdin) => {
                let CopySource::Table {
                    table_name,
                    columns,
                } = source
                else {
                    return Err(user_error("42601", "COPY FROM needs a table".into()));
                };
                let name = table_name
                    .0
                    .last()
                    .map(|p| p.to_string().trim_matches('"').to_string())
                    .unwrap_or_default();
                let def = session
                    .tables()
                    .require(&name)
                    .await
                    .map_err(|e| table_error(&e))?;
                let listed: Vec<String> = columns.iter().map(|c| c.value.clone()).collect();
                let all: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
                if !listed.is_empty() && listed != all {
                    return Err(user_error(
                        "0A000",
                        format!(
                            "COPY {name} ({}) FROM STDIN: tierdb copies every column in table \
                             order; list none, or ({})",
                            listed.join(", "),
                            all.join(", ")
                        ),
                    ));
                }
                let spool = tempfile::NamedTempFile::new()
                    .map_err(|e| user_error("58030", format!("cannot spool COPY data: {e}")))?;
                *self.copy.lock().await = Some(CopyIn {
                    session: session.clone(),
                    table: name,
                    options: opts,
                    spool,
                    partial: Vec::new(),
                    ended: false,
                });
                Ok(Response::CopyIn(CopyResponse::new(
                    0,
                    all.len(),
                    futures::stream::empty(),
                )))
            }
            (true, CopyTarget::Stdout) => {
                let query = match source {
                    CopySource::Query(q) => Statement::Query(q),
                    CopySource::Table {
                        table_name,
                        columns,
                    } => {
                        let cols = if columns.is_empty() {
                            "*".to_string()
                        } else {
                            columns
                                .iter()
                                .map(|c| c.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        let sql = format!("SELECT {cols} FROM {table_name}");
                        self.parse(&sql)?
                            .into_iter()
                            .next()
                            .ok_or_else(|| user_error("42601", "empty COPY query".into()))?
                    }
                };
                let outcome = session
                    .execute_outcome(DfStatement::Statement(Box::new(query)), None)
                    .await
                    .map_err(|e| table_error(&e))?;
                let Outcome::Rows(df) = outcome else {
                    return Err(user_error("42601", "COPY TO needs a query".into()));
                };
                let columns = df.schema().fields().len();
                let header = opts.header.then(|| {
                    df.schema()
                        .fields()
                        .iter()
                        .map(|f| opts.field(Some(f.name())))
                        .collect::<Vec<_>>()
                        .join(&(opts.delimiter as char).to_string())
                });
                let stream = df
                    .execute_stream()
                    .await
                    .map_err(|e| table_error(&TableError::from(e)))?;
                let failing = session.clone();
                let data = copy_out_stream(stream, opts, header).inspect(move |r| {
                    if r.is_err() {
                        failing.fail(); // as for a query's rows
                    }
                });
                Ok(Response::CopyOut(CopyResponse::new(0, columns, data)))
            }
            (_, other) => Err(user_error(
                "0A000",
                format!(
                    "COPY … {other} is not supported by tierdb serve: use FROM STDIN or TO \
                     STDOUT (psql's \\copy reads and writes client-side files that way)"
                ),
            )),
        }
    }
}

/// `ROLLBACK TO SAVEPOINT` leaves a failed transaction's error state; pgwire derives the
/// status it reports from the status before the statement and the responses, which can
/// only go from failed to failed, so the status is set before the statement runs (if it
/// fails, the error puts it back).
fn rolls_back_to_savepoint<C: ClientInfo>(client: &mut C, stmt: Option<&Statement>) {
    if client.transaction_status() == pgwire::messages::response::TransactionStatus::Error
        && matches!(
            stmt,
            Some(Statement::Rollback {
                savepoint: Some(_),
                ..
            })
        )
    {
        client.set_transaction_status(pgwire::messages::response::TransactionStatus::Transaction);
    }
}

/// Catalog queries (SQLAlchemy's, BI tools') select some columns as `CASE WHEN c THEN
/// (correlated subquery) END`, which DataFusion cannot run. datafusion-pg-catalog's rules
/// already answer a correlated subquery selected as a column with NULL (tierdb has no
/// column defaults, identity columns, sequences or collations, which is what those
/// subqueries look up); this moves `c` into the subquery's WHERE, `(SELECT … WHERE (w) AND
/// (c))`, NULL when `c` is not true either way, so those rules apply to it as well.
fn hoist_case_subqueries(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, SetExpr, visit_expressions_mut};
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Case {
            operand: None,
            conditions,
            else_result,
            ..
        } = e
            && conditions.len() == 1
            && else_result.as_deref().is_none_or(|r| {
                matches!(r, Expr::Value(v) if v.value == datafusion::sql::sqlparser::ast::Value::Null)
            })
            && let Expr::Subquery(q) = &conditions[0].result
            && let SetExpr::Select(_) = q.body.as_ref()
        {
            let when = conditions.remove(0);
            let Expr::Subquery(mut q) = when.result else {
                return std::ops::ControlFlow::<()>::Continue(());
            };
            if let SetExpr::Select(sel) = q.body.as_mut() {
                let cond = Expr::Nested(Box::new(when.condition));
                sel.selection = Some(match sel.selection.take() {
                    Some(w) => Expr::BinaryOp {
                        left: Box::new(Expr::Nested(Box::new(w))),
                        op: datafusion::sql::sqlparser::ast::BinaryOperator::And,
                        right: Box::new(cond),
                    },
                    None => cond,
                });
            }
            *e = Expr::Subquery(q);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

#[async_trait]
impl SimpleQueryHandler for ConnState {
    async fn on_query<C>(
        &self,
        client: &mut C,
        query: pgwire::messages::simplequery::Query,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Ok(statements) = self.parse(&query.query) {
            rolls_back_to_savepoint(client, statements.first());
        }
        self._on_query(client, query).await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.parse(query)?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let session = self.session().await?;
        // Several statements outside a transaction, none of them BEGIN, COMMIT or
        // ROLLBACK: one implicit transaction, as in PostgreSQL.
        let implicit = statements.len() > 1
            && !session.in_transaction()
            && statements.iter().all(|s| {
                !matches!(
                    s,
                    Statement::StartTransaction { .. }
                        | Statement::Commit { .. }
                        | Statement::Rollback { .. }
                )
            });
        if implicit {
            session.begin();
        }
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            match self.run(client, stmt, None, &Format::UnifiedText).await {
                Ok(r) => out.push(r),
                Err(e) => {
                    if implicit {
                        session.rollback().await;
                    }
                    out.push(Response::Error(Box::new(error_info(e))));
                    return Ok(out);
                }
            }
        }
        if implicit && let Err(e) = session.commit().await {
            out.push(Response::Error(Box::new(error_info(table_error(&e)))));
        }
        Ok(out)
    }
}

/// A statement prepared by Parse: its syntax, and its plan as of Parse (for Describe; it
/// is planned again at each Execute, so it reads the tables as they are then).
#[derive(Debug, Clone)]
pub struct Prepared {
    stmt: Statement,
    plan: Option<LogicalPlan>,
    /// The parameters the client binds (`$1`…`$n` in its query string).
    params: usize,
}

#[async_trait]
impl QueryParser for ConnState {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let session = self.session().await?;
        // A Parse that fails inside a transaction aborts it, as any failed statement does
        // (PostgreSQL: exec_parse_message); in an aborted transaction only COMMIT and
        // ROLLBACK may be parsed.
        let parsed = self.parse_one(&session, sql).await;
        if parsed.is_err() {
            session.fail();
        }
        let Some(stmt) = parsed? else {
            return Ok(None);
        };
        let plan = if is_set_or_show(&stmt)
            || matches!(
                stmt,
                Statement::Copy { .. } | Statement::Deallocate { .. } | Statement::Discard { .. }
            ) {
            None
        } else {
            match session
                .plan(&DfStatement::Statement(Box::new(stmt.clone())))
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    session.fail();
                    return Err(table_error(&e));
                }
            }
        };
        Ok(Some(Prepared {
            stmt,
            plan,
            params: declared_parameters(sql),
        }))
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        match &stmt.plan {
            Some(plan) => parameter_types(plan, stmt.params)?
                .into_iter()
                .map(|t| match t {
                    Some(t) => into_pg_type(&t),
                    None => Ok(Type::TEXT),
                })
                .collect(),
            None => Ok(Vec::new()),
        }
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        if let Statement::ShowVariable { variable } = &stmt.stmt {
            let name = variable
                .iter()
                .map(|v| v.value.to_lowercase())
                .collect::<Vec<_>>()
                .join("_");
            return Ok(vec![FieldInfo::new(
                name,
                None,
                None,
                Type::VARCHAR,
                FieldFormat::Text,
            )]);
        }
        // UPDATE and DELETE are planned as the query that names their rows (tierdb-tables'
        // `dml`), but answer with a command tag and no rows (NoData).
        let changes_rows = matches!(stmt.stmt, Statement::Update(_) | Statement::Delete(_));
        match &stmt.plan {
            Some(plan)
                if !changes_rows && !matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Ddl(_)) =>
            {
                arrow_schema_to_pg_fields(
                    plan.schema().as_arrow(),
                    column_format.unwrap_or(&Format::UnifiedText),
                    None,
                )
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// The extended query protocol of a connection (its state is also its statement parser).
pub struct Extended(Arc<ConnState>);

#[async_trait]
impl ExtendedQueryHandler for Extended {
    type Statement = Prepared;
    type QueryParser = ConnState;

    fn query_parser(&self) -> Arc<ConnState> {
        self.0.clone()
    }

    async fn on_execute<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Execute,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        if let Some(pgwire::api::store::Entry::Value(portal)) =
            client.portal_store().get_portal(name)
        {
            rolls_back_to_savepoint(client, Some(&portal.statement.statement.stmt));
        }
        self._on_execute(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let this = &self.0;
        let prepared = &portal.statement.statement;
        let stmt = prepared.stmt.clone();
        let Some(described) = &prepared.plan else {
            if !portal.parameters.is_empty() {
                return Err(user_error(
                    "08P01",
                    format!(
                        "bind message supplies {} parameters, but the statement takes none",
                        portal.parameters.len()
                    ),
                ));
            }
            return this
                .run(client, stmt, None, &portal.result_column_format)
                .await;
        };
        // Planned again: a prepared statement reads the tables as they are now.
        let session = this.session().await?;
        if session.is_aborted() {
            return Err(aborted());
        }
        let plan = match session
            .plan(&DfStatement::Statement(Box::new(stmt.clone())))
            .await
        {
            // The client decodes rows by the description it got at Parse: a plan whose
            // columns changed since (a table dropped and created again) must not send rows
            // of another shape (PostgreSQL: 0A000, "cached plan must not change result type").
            Ok(Some(p)) if !same_columns(p.schema(), described.schema()) => {
                session.fail();
                return Err(user_error(
                    "0A000",
                    "cached plan must not change result type (a table it reads changed; \
                     prepare the statement again)"
                        .into(),
                ));
            }
            Ok(Some(p)) => p,
            Ok(None) => {
                return this
                    .run(client, stmt, None, &portal.result_column_format)
                    .await;
            }
            Err(e) => {
                session.fail();
                return Err(table_error(&e));
            }
        };
        let types = parameter_types(&plan, prepared.params)?;
        if portal.parameters.len() != types.len() {
            session.fail();
            return Err(user_error(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but the statement takes {}",
                    portal.parameters.len(),
                    types.len()
                ),
            ));
        }
        let values = match bind_parameters(portal, &types) {
            Ok(v) => v,
            Err(e) => {
                session.fail();
                return Err(e);
            }
        };
        let plan = match plan.replace_params_with_values(&values) {
            Ok(p) => p,
            Err(e) => {
                session.fail();
                return Err(user_error(
                    "22023",
                    format!("cannot bind the parameters: {e}"),
                ));
            }
        };
        this.run(client, stmt, Some(plan), &portal.result_column_format)
            .await
    }
}

/// Whether two plans return the same columns (names and types) in the same order.
fn same_columns(a: &datafusion::common::DFSchemaRef, b: &datafusion::common::DFSchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// The portal's parameter values as the types the plan infers for them. A value the
/// client sent with a type of its own (psycopg sends a Python float as float8, also for a
/// DECIMAL column) is decoded as that type, then cast; one without is decoded as the
/// inferred type.
fn bind_parameters(
    portal: &Portal<Prepared>,
    types: &[Option<DataType>],
) -> PgWireResult<ParamValues> {
    let hinted = |i: usize| {
        portal
            .statement
            .parameter_types
            .get(i)
            .is_some_and(|t| t.as_ref().is_some_and(|t| *t != Type::UNKNOWN))
    };
    // A parameter nothing gives a type to is text, as in PostgreSQL (then cast by the
    // statement); without a type at all pgwire's decoder would skip it.
    let server: Vec<Option<Type>> = types
        .iter()
        .map(|t| {
            Some(
                t.as_ref()
                    .and_then(|t| into_pg_type(t).ok())
                    .unwrap_or(Type::TEXT),
            )
        })
        .collect();
    let decode_as: Vec<Option<&DataType>> = types
        .iter()
        .enumerate()
        .map(|(i, t)| if hinted(i) { None } else { t.as_ref() })
        .collect();
    let server_refs: Vec<Option<&Type>> = server.iter().map(|t| t.as_ref()).collect();
    let values = deserialize_parameters_with_server_types(portal, &decode_as, &server_refs)?;
    let ParamValues::List(list) = values else {
        return Ok(values);
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.into_iter().enumerate() {
        let value = v.value;
        match types.get(i).and_then(|t| t.as_ref()) {
            Some(target) if value.data_type() != *target && !value.is_null() => {
                let cast = value.cast_to(target).map_err(|e| {
                    user_error(
                        "22P02",
                        format!("parameter ${}: {value} is not a valid {target}: {e}", i + 1),
                    )
                })?;
                out.push(cast);
            }
            Some(target) if value.is_null() => {
                out.push(datafusion::common::ScalarValue::try_from(target).unwrap_or(value));
            }
            _ => out.push(value),
        }
    }
    Ok(ParamValues::from(out))
}

/// The parameters of a plan (`$1`, `$2`…) in order, with their inferred types.
fn parameter_types(plan: &LogicalPlan, declared: usize) -> PgWireResult<Vec<Option<DataType>>> {
    let types = plan
        .get_parameter_types()
        .map_err(|e| table_error(&TableError::from(e)))?;
    let mut out = vec![None; declared];
    for (id, ty) in types {
        let n = id
            .trim_start_matches('$')
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| user_error("42P02", format!("parameter {id}: use $1, $2…")))?;
        if n > out.len() {
            out.resize(n, None);
        }
        out[n - 1] = ty;
    }
    // `$1::BIGINT`: DataFusion leaves the placeholder untyped; its cast says what it is.
    let _ = plan.apply(|node| {
        for e in node.expressions() {
            let _ = e.apply(|e| {
                if let datafusion::logical_expr::Expr::Cast(c) = e
                    && let datafusion::logical_expr::Expr::Placeholder(p) = c.expr.as_ref()
                    && let Some(n) = p.id.trim_start_matches('$').parse::<usize>().ok()
                    && n >= 1
                    && n <= out.len()
                    && out[n - 1].is_none()
                {
                    out[n - 1] = Some(c.field.data_type().clone());
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            });
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    Ok(out)
}

/// The highest `$n` in a query string: how many parameters the client binds (rewrites of
/// catalog queries can drop some of them from the plan).
fn declared_parameters(sql: &str) -> usize {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map(|tokens| {
            tokens
                .iter()
                .filter_map(|t| match t {
                    Token::Placeholder(p) => p.strip_prefix('$')?.parse::<usize>().ok(),
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// COPY FROM STDIN in progress: the data is spooled to a file, then goes through the
/// import path (sorted on ingest, one commit or the session's transaction).
struct CopyIn {
    session: Arc<SqlSession>,
    table: String,
    options: CopyOptions,
    spool: tempfile::NamedTempFile,
    /// Text format: the start of a line not yet complete.
    partial: Vec<u8>,
    /// Text format: the `\.` end marker was seen.
    ended: bool,
}

impl CopyIn {
    /// Adds client data to the spool, as CSV.
    fn add(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.options.csv {
            return self.spool.write_all(data);
        }
        self.partial.extend_from_slice(data);
        let mut start = 0;
        let mut out = Vec::with_capacity(self.partial.len() + 64);
        while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let line = &self.partial[start..start + nl];
            start += nl + 1;
            if self.ended {
                continue;
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line == b"\\." {
                self.ended = true;
                continue;
            }
            text_line_to_csv(line, self.options.delimiter, &self.options.null, &mut out);
        }
        self.partial.drain(..start);
        self.spool.write_all(&out)
    }

    fn finish(&mut self) -> std::io::Result<()> {
        if !self.partial.is_empty() && !self.ended {
            let mut last = std::mem::take(&mut self.partial);
            last.push(b'\n');
            self.add(&last)?;
        }
        self.spool.flush()
    }
}

/// One line of PostgreSQL's text COPY format as a CSV record: fields split at the
/// delimiter, the null string as an empty unquoted field, backslash escapes decoded, every
/// other field quoted.
fn text_line_to_csv(line: &[u8], delimiter: u8, null: &str, out: &mut Vec<u8>) {
    for (i, field) in line.split(|&b| b == delimiter).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if field == null.as_bytes() {
            continue;
        }
        out.push(b'"');
        let mut bytes = field.iter().copied();
        while let Some(b) = bytes.next() {
            let b = if b == b'\\' {
                match bytes.next() {
                    Some(b'n') => b'\n',
                    Some(b't') => b'\t',
                    Some(b'r') => b'\r',
                    Some(b'b') => 8,
                    Some(b'f') => 12,
                    Some(b'v') => 11,
                    Some(other) => other,
                    None => b'\\',
                }
            } else {
                b
            };
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    }
    out.push(b'\n');
}

#[async_trait]
impl CopyHandler for ConnState {
    async fn on_copy_data<C>(&self, _client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut copy = self.copy.lock().await;
        let Some(c) = copy.as_mut() else {
            return Err(user_error(
                "08P01",
                "CopyData without a COPY in progress".into(),
            ));
        };
        if let Err(e) = c.add(&data.data) {
            c.session.fail();
            *copy = None;
            return Err(user_error("58030", format!("cannot spool COPY data: {e}")));
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(mut c) = self.copy.lock().await.take() else {
            return Err(user_error(
                "08P01",
                "CopyDone without a COPY in progress".into(),
            ));
        };
        let result = self.import_copy(&mut c).await;
        match result {
            Ok(rows) => {
                let tag = Tag::new("COPY").with_rows(rows as usize);
                client
                    .send(PgWireBackendMessage::CommandComplete(tag.into()))
                    .await?;
                Ok(())
            }
            Err(e) => {
                c.session.fail();
                Err(e)
            }
        }
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(c) = self.copy.lock().await.take() {
            c.session.fail();
        }
        user_error(
            "57014",
            format!(
                "COPY from stdin failed: {}; nothing was copied",
                fail.message
            ),
        )
    }
}

impl ConnState {
    async fn import_copy(&self, c: &mut CopyIn) -> PgWireResult<u64> {
        c.finish()
            .map_err(|e| user_error("58030", format!("cannot spool COPY data: {e}")))?;
        let rejects = tempfile::NamedTempFile::new()
            .map_err(|e| user_error("58030", format!("cannot spool COPY data: {e}")))?;
        let options = ImportOptions {
            format: Some(ImportFormat::Csv),
            delimiter: Some(if c.options.csv {
                c.options.delimiter
            } else {
                b','
            }),
            header: Some(c.options.csv && c.options.header),
            // Like PostgreSQL: one bad row fails the whole COPY.
            max_rejects: 0,
            reject_file: rejects.path().to_path_buf(),
            threads: 2,
            transaction: c.session.transaction(),
        };
        let summary = tierdb_tables::import::import(
            c.session.tables().clone(),
            &c.table,
            &[c.spool.path().to_path_buf()],
            &options,
            c.session.context().task_ctx(),
            Arc::new(ImportProgress::default()),
        )
        .await;
        match summary {
            Ok(s) => Ok(s.rows),
            // An empty COPY copies nothing, successfully (the import path refuses it).
            Err(TableError::Import(m)) if m.starts_with("the input holds no rows") => Ok(0),
            Err(TableError::Import(m)) => {
                // The reject file names the spool file; say "line N of the COPY data".
                let spool = c.spool.path().display().to_string();
                let m = m.replace(&format!("{spool}:"), "COPY data, line ");
                let m = m
                    .split("; that is 1 rejected rows")
                    .next()
                    .unwrap_or(&m)
                    .to_string();
                Err(user_error("22P04", format!("{m}; nothing was copied")))
            }
            Err(e) => Err(self.failed(&e).await),
        }
    }
}

/// COPY's options, PostgreSQL's spellings (new and legacy).
#[derive(Debug, Clone)]
struct CopyOptions {
    csv: bool,
    header: bool,
    delimiter: u8,
    null: String,
}

impl CopyOptions {
    fn parse(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> PgWireResult<Self> {
        let mut o = CopyOptions {
            csv: false,
            header: false,
            delimiter: b'\t',
            null: "\\N".into(),
        };
        let mut delimiter = None;
        let mut null = None;
        let unsupported = |what: String| {
            user_error(
                "0A000",
                format!("COPY option {what} is not supported by tierdb serve"),
            )
        };
        for opt in options {
            match opt {
                CopyOption::Format(f) => match f.value.to_lowercase().as_str() {
                    "csv" => o.csv = true,
                    "text" => o.csv = false,
                    other => return Err(unsupported(format!("FORMAT {other}"))),
                },
                CopyOption::Header(h) => o.header = *h,
                CopyOption::Delimiter(c) => delimiter = Some(*c),
                CopyOption::Null(n) => null = Some(n.clone()),
                CopyOption::Encoding(e)
                    if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
                other => return Err(unsupported(other.to_string())),
            }
        }
        for opt in legacy {
            match opt {
                CopyLegacyOption::Csv(inner) => {
                    o.csv = true;
                    for i in inner {
                        match i {
                            CopyLegacyCsvOption::Header => o.header = true,
                            other => return Err(unsupported(other.to_string())),
                        }
                    }
                }
                CopyLegacyOption::Delimiter(c) => delimiter = Some(*c),
                CopyLegacyOption::Null(n) => null = Some(n.clone()),
                CopyLegacyOption::Header => o.header = true,
                other => return Err(unsupported(other.to_string())),
            }
        }
        if o.csv {
            o.delimiter = b',';
            o.null = String::new();
        }
        if let Some(c) = delimiter {
            if !c.is_ascii() {
                return Err(user_error(
                    "22023",
                    format!("COPY delimiter {c:?} must be one ASCII character"),
                ));
            }
            o.delimiter = c as u8;
        }
        if let Some(n) = null {
            o.null = n;
        }
        if o.header && !o.csv {
            return Err(user_error(
                "0A000",
                "COPY HEADER is available only in CSV mode".into(),
            ));
        }
        Ok(o)
    }

    /// One value as COPY writes it: NULL as the null string; text format escapes
    /// backslash, tab and newlines; CSV quotes what needs it.
    fn field(&self, value: Option<&str>) -> String {
        let Some(v) = value else {
            return self.null.clone();
        };
        if self.csv {
            let needs = v.is_empty()
                || v.bytes()
                    .any(|b| b == self.delimiter || b == b'"' || b == b'\n' || b == b'\r');
            if needs {
                return format!("\"{}\"", v.replace('"', "\"\""));
            }
            return v.to_string();
        }
        let mut out = String::with_capacity(v.len());
        for ch in v.chars() {
            match ch {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c as u32 == u32::from(self.delimiter) => {
                    out.push('\\');
                    out.push(c);
                }
                c => out.push(c),
            }
        }
        out
    }
}

/// Rows of a query as COPY data, one message per row.
fn copy_out_stream(
    stream: datafusion::execution::SendableRecordBatchStream,
    opts: CopyOptions,
    header: Option<String>,
) -> impl futures::Stream<Item = PgWireResult<CopyData>> + Send + 'static {
    // pgwire counts CopyData messages for the `COPY n` tag, so the header line travels in
    // the first row's message, not in one of its own (with no rows at all it goes alone
    // and the tag says 1: a known limit of counting messages).
    let header = Arc::new(std::sync::Mutex::new(header.map(|h| format!("{h}\n"))));
    let leftover = header.clone();
    let rows = stream.flat_map(move |batch| {
        let messages: Vec<PgWireResult<CopyData>> = match batch {
            Err(e) => vec![Err(table_error(&TableError::from(e)))],
            Ok(batch) => {
                let fmt = ArrowFormat::default();
                let formatters: Result<Vec<_>, _> = batch
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &fmt))
                    .collect();
                match formatters {
                    Err(e) => vec![Err(table_error(&TableError::from(e)))],
                    Ok(formatters) => (0..batch.num_rows())
                        .map(|row| {
                            let fields: Vec<String> = batch
                                .columns()
                                .iter()
                                .zip(&formatters)
                                .map(|(col, f)| {
                                    if col.is_null(row) {
                                        opts.field(None)
                                    } else {
                                        opts.field(Some(&pg_text(
                                            col.data_type(),
                                            f.value(row).to_string(),
                                        )))
                                    }
                                })
                                .collect();
                            let mut line = header
                                .lock()
                                .ok()
                                .and_then(|mut h| h.take())
                                .unwrap_or_default();
                            line.push_str(&fields.join(&(opts.delimiter as char).to_string()));
                            line.push('\n');
                            Ok(CopyData::new(Bytes::from(line)))
                        })
                        .collect(),
                }
            }
        };
        futures::stream::iter(messages)
    });
    let rest =
        futures::stream::once(async move { leftover.lock().ok().and_then(|mut h| h.take()) })
            .filter_map(|h| async move { h.map(|h| Ok(CopyData::new(Bytes::from(h)))) });
    rows.chain(rest)
}

/// A value's text as PostgreSQL writes it (booleans as `t`/`f`).
fn pg_text(ty: &DataType, text: String) -> String {
    match (ty, text.as_str()) {
        (DataType::Boolean, "true") => "t".into(),
        (DataType::Boolean, "false") => "f".into(),
        _ => text,
    }
}

/// A query's rows, encoded as the client asked (text or binary per column), computed as
/// they are sent; past the statement timeout, or on a CancelRequest, the stream ends with
/// SQLSTATE 57014 (and the query's stream is dropped: DataFusion stops).
fn encode_rows(
    fields: Arc<Vec<FieldInfo>>,
    stream: datafusion::execution::SendableRecordBatchStream,
    deadline: Option<tokio::time::Instant>,
    mut cancel: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = PgWireResult<pgwire::messages::data::DataRow>> + Send + 'static {
    cancel.mark_unchanged();
    let rows = stream
        .map(move |batch| match batch {
            Ok(b) => {
                futures::stream::iter(encode_recordbatch(fields.clone(), b).collect::<Vec<_>>())
            }
            Err(e) => futures::stream::iter(vec![Err(table_error(&TableError::from(e)))]),
        })
        .flatten();
    let rows = Box::pin(rows);
    futures::stream::unfold(Some((rows, cancel)), move |state| async move {
        let (mut rows, mut cancel) = state?;
        let expired = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            item = rows.next() => item,
            () = expired => return Some((Err(timed_out()), None)),
            Ok(()) = cancel.changed() => return Some((Err(canceled()), None)),
        };
        next.map(|item| (item, Some((rows, cancel))))
    })
}

fn statement_timeout<C: ClientInfo>(client: &C) -> Option<Duration> {
    client
        .metadata()
        .get(METADATA_STATEMENT_TIMEOUT)
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

fn is_set_or_show(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::Set(_)
            | Statement::ShowVariable { .. }
            | Statement::ShowStatus { .. }
            | Statement::ShowCatalogs { .. }
    )
}

/// The name of a `SHOW` statement's variable, lower case (`tierdb.role`).
fn shown_variable(stmt: &Statement) -> Option<String> {
    let Statement::ShowVariable { variable } = stmt else {
        return None;
    };
    Some(
        variable
            .iter()
            .map(|v| v.value.to_lowercase())
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// `SHOW server_version` answers what the startup parameters said.
fn show_server_version(stmt: &Statement) -> Option<PgWireResult<Response>> {
    let name = shown_variable(stmt)?;
    let value = match name.as_str() {
        "server_version" => SERVER_VERSION.to_string(),
        "server_version_num" => "160006".to_string(),
        _ => return None,
    };
    Some(Ok(one_value(name, value)))
}

/// `SHOW tierdb.role` (writer or replica) and `SHOW tierdb.replica_lag`: how old the newest
/// commit this server sees is (on a replica, an upper bound of how far behind its writer
/// it is; it also grows while the writer commits nothing, as PostgreSQL's
/// `now() - pg_last_xact_replay_timestamp()` does).
async fn show_replica(
    stmt: &Statement,
    tables: &tierdb_tables::Tables,
) -> Option<PgWireResult<Response>> {
    let name = shown_variable(stmt)?;
    let value = match name.as_str() {
        "tierdb.role" => if tables.is_read_only() {
            "replica"
        } else {
            "writer"
        }
        .to_string(),
        "tierdb.replica_lag" => match tables.last_commit_ms().await {
            Err(e) => return Some(Err(table_error(&e))),
            Ok(_) if !tables.is_read_only() => "0 (this server is the writer)".to_string(),
            Ok(None) => "unknown (no commit seen yet)".to_string(),
            Ok(Some(ms)) => {
                let age = tierdb_kv::lease::now_ms().saturating_sub(ms);
                format!(
                    "{:.3} s (since the newest commit this replica sees)",
                    age as f64 / 1e3
                )
            }
        },
        _ => return None,
    };
    Some(Ok(one_value(name, value)))
}

/// A one-row, one-column text answer named `name`.
fn one_value(name: String, value: String) -> Response {
    let fields = Arc::new(vec![FieldInfo::new(
        name,
        None,
        None,
        Type::TEXT,
        FieldFormat::Text,
    )]);
    let mut encoder = pgwire::api::results::DataRowEncoder::new(fields.clone());
    let row = encoder
        .encode_field(&Some(value))
        .map(|()| encoder.take_row());
    Response::Query(QueryResponse::new(fields, futures::stream::iter(vec![row])))
}

/// `INSERT 0 5` / `UPDATE 3` / `CREATE TABLE` as a pgwire tag.
fn command_tag(tag: &str) -> Tag {
    let mut words = tag.split(' ');
    let first = words.next().unwrap_or("OK");
    let rows = tag.rsplit(' ').next().and_then(|n| n.parse::<usize>().ok());
    match (first, rows) {
        ("INSERT", Some(n)) => Tag::new("INSERT").with_oid(0).with_rows(n),
        ("UPDATE" | "DELETE" | "SELECT" | "VACUUM", Some(n)) => Tag::new(first).with_rows(n),
        _ => Tag::new(tag.split(" (").next().unwrap_or(tag)),
    }
}

async fn notice<C>(client: &mut C, code: &str, message: &str) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let info = ErrorInfo::new("WARNING".into(), code.into(), message.into());
    client
        .send(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
            info,
        )))
        .await?;
    Ok(())
}

fn user_error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message,
    )))
}

fn table_error(e: &TableError) -> PgWireError {
    user_error(e.sqlstate(), e.to_string())
}

fn aborted() -> PgWireError {
    user_error(
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block \
         (send ROLLBACK)"
            .into(),
    )
}

fn timed_out() -> PgWireError {
    user_error(
        "57014",
        "canceling statement due to statement timeout".into(),
    )
}

fn canceled() -> PgWireError {
    user_error("57014", "canceling statement due to user request".into())
}

fn error_info(e: PgWireError) -> ErrorInfo {
    let mut e = e;
    SqlStates.rewrite(&mut e);
    e.into()
}

/// Gives errors from the libraries (DataFusion's, arrow-pg's) the SQLSTATE tierdb's
/// errors have, instead of pgwire's catch-all XX000.
struct SqlStates;

impl SqlStates {
    fn rewrite(&self, error: &mut PgWireError) {
        if let PgWireError::ApiError(e) = error {
            let code = tierdb_tables::error::sqlstate_of(e.as_ref());
            *error = user_error(code, e.to_string());
        }
    }
}

impl ErrorHandler for SqlStates {
    fn on_error<C>(&self, _client: &C, error: &mut PgWireError)
    where
        C: ClientInfo,
    {
        self.rewrite(error);
    }
}
