//! `tierdb serve DB`: the database's tables over the PostgreSQL wire protocol (simple query
//! protocol, SCRAM-SHA-256 password authentication), so `psql` and libraries that use the
//! simple protocol work. A failing statement answers with a PostgreSQL error (SQLSTATE and
//! message) and the connection and the server stay up.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::Sink;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::{ClientInfo, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use tierdb_tables::{SqlEngine, StatementResult, TableError};
use tokio::net::TcpListener;

use crate::args::KvArgs;
use crate::error::{CliError, CliResult};
use crate::sql_cmd::{EngineArgs, open_engine};
use tierdb_engine::Role;

const SCRAM_ITERATIONS: usize = 4096;

#[derive(Args, Debug)]
pub struct ServeArgs {
    pub db: String,
    /// Address to listen on (loopback by default; expose it deliberately).
    #[arg(long, default_value = "127.0.0.1:5433")]
    pub listen: String,
    /// The user name clients log in as.
    #[arg(long, default_value = "tierdb")]
    pub user: String,
    /// The password clients must give (SCRAM-SHA-256). Required: there is no trust mode.
    #[arg(long, env = "TIERDB_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// After the database engine fails (an object-store outage longer than its retries),
    /// keep trying to reopen it for this long, then exit non-zero so a supervisor can act.
    #[arg(long, default_value = "10m")]
    pub recover_for: humantime::Duration,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

#[derive(Debug)]
struct Credentials {
    user: String,
    password: String,
}

#[async_trait]
impl AuthSource for Credentials {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let salt: [u8; 16] = rand::random();
        // An unknown user gets a password nobody knows, so the exchange fails like a wrong
        // password would (no user enumeration).
        let secret = if login.user() == Some(self.user.as_str()) {
            self.password.clone()
        } else {
            format!("{:x}", rand::random::<u128>())
        };
        let hashed = gen_salted_password(&secret, &salt, SCRAM_ITERATIONS);
        Ok(Password::new(Some(salt.to_vec()), hashed))
    }
}

struct Handlers {
    database: Arc<Database>,
    credentials: Arc<Credentials>,
}

/// The served database, reopened in place when its engine fails.
///
/// SlateDB shuts a database handle down when a background task fails, for example when the
/// object store stays away longer than its retries; every later call then returns that stale
/// error, even after the store is back. The server notices ([`tierdb_tables::Tables::failure`]),
/// gives the old handle up without flushing (acknowledged writes stay in the write-back log,
/// as after a crash) and opens the database again, retrying with backoff for
/// `--recover-for`; past that it stops serving and exits non-zero with the reason.
struct Database {
    db: String,
    kv: KvArgs,
    engine_args: EngineArgs,
    recover_for: std::time::Duration,
    live: tokio::sync::RwLock<Live>,
    /// A reopen is under way.
    recovering: std::sync::atomic::AtomicBool,
    /// Set when recovery gave up: the server stops with this message.
    fatal: tokio::sync::watch::Sender<Option<String>>,
}

struct Live {
    engine: Arc<SqlEngine>,
    handle: Option<tierdb_engine::Database>,
}

impl Database {
    async fn engine(&self) -> Arc<SqlEngine> {
        self.live.read().await.engine.clone()
    }

    /// Starts replacing `broken` (if it is still the live engine) with a freshly opened one,
    /// in the background: statements meanwhile fail at once with SQLSTATE 57P03 rather than
    /// wait for the object store.
    fn recover(self: &Arc<Self>, broken: &Arc<SqlEngine>, why: &str) {
        if self
            .recovering
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let (this, broken, why) = (self.clone(), broken.clone(), why.to_string());
        tokio::spawn(async move {
            this.reopen(&broken, &why).await;
            this.recovering
                .store(false, std::sync::atomic::Ordering::Release);
        });
    }

    async fn reopen(&self, broken: &Arc<SqlEngine>, why: &str) {
        // The lock is held only to swap: statements meanwhile meet the broken engine and fail
        // at once instead of waiting here.
        let handle = {
            let mut live = self.live.write().await;
            if !Arc::ptr_eq(&live.engine, broken) {
                return; // already reopened
            }
            live.handle.take()
        };
        tracing::warn!(db = %self.db, reason = why, "the database engine failed; reopening it");
        if let Some(handle) = handle {
            handle.abandon().await;
        }
        let deadline = tokio::time::Instant::now() + self.recover_for;
        let mut pause = std::time::Duration::from_millis(250);
        loop {
            match open_engine(&self.db, &self.kv, &self.engine_args, Role::Writer).await {
                Ok((engine, handle)) => {
                    tracing::warn!(db = %self.db, "database reopened; serving again");
                    *self.live.write().await = Live {
                        engine: Arc::new(engine),
                        handle: Some(handle),
                    };
                    return;
                }
                Err(e) if tokio::time::Instant::now() + pause < deadline => {
                    tracing::warn!(db = %self.db, error = %e, "reopening failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(5));
                }
                Err(e) => {
                    let message = format!(
                        "the database engine failed ({why}) and could not be reopened within \
                         {}: {e}; acknowledged writes are safe in the write-back log and the \
                         capacity store, and are there when tierdb serve starts again",
                        humantime::format_duration(self.recover_for)
                    );
                    self.fatal.send_replace(Some(message));
                    return;
                }
            }
        }
    }

    async fn close(&self) -> CliResult {
        let handle = self.live.write().await.handle.take();
        match handle {
            Some(h) => Ok(h.close().await?),
            None => Ok(()),
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::new(Queries {
            database: self.database.clone(),
        })
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        let mut scram = ScramAuth::new(self.credentials.clone());
        scram.set_iterations(SCRAM_ITERATIONS);
        Arc::new(StartupUserInErrors(
            SASLAuthStartupHandler::new(Arc::new(DefaultServerParameterProvider::default()))
                .with_scram(scram),
        ))
    }
}

/// Names the startup message's user in a failed login. Clients (libpq among them) leave the
/// SCRAM user name empty, as RFC 5802 lets a server that knows the user from elsewhere, and
/// pgwire reports the SCRAM one: `Password authentication failed for user ""`.
struct StartupUserInErrors<H>(H);

#[async_trait]
impl<H: StartupHandler> StartupHandler for StartupUserInErrors<H> {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self.0.on_startup(client, message).await {
            Err(PgWireError::InvalidPassword(user)) if user.is_empty() => {
                let user = client
                    .metadata()
                    .get(pgwire::api::METADATA_USER)
                    .cloned()
                    .unwrap_or_default();
                Err(PgWireError::InvalidPassword(user))
            }
            other => other,
        }
    }
}

struct Queries {
    database: Arc<Database>,
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let engine = self.database.engine().await;
        let statements = match engine.parse(query) {
            Ok(s) => s,
            Err(e) => return Ok(vec![error_response(&e)]),
        };
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        // One query string of INSERTs is one implicit transaction (SqlEngine::run).
        let (results, error) = engine.run(statements).await;
        let mut out = Vec::with_capacity(results.len() + 1);
        for r in results {
            out.push(to_response(r)?);
        }
        if let Some(e) = error {
            // Like PostgreSQL: the failing statement ends the query string.
            out.push(match engine.tables().failure() {
                Some(why) => {
                    self.database.recover(&engine, &why);
                    unavailable(&e, &why)
                }
                None => error_response(&e),
            });
        }
        Ok(out)
    }
}

/// The answer to a statement that met a failed engine: SQLSTATE 57P03 (cannot connect now)
/// so clients know to retry.
fn unavailable(e: &TableError, why: &str) -> Response {
    let message = format!(
        "the database engine failed ({why}); it is being reopened in the background, retry \
         shortly (this statement was not applied: {e})"
    );
    Response::Error(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        "57P03".to_string(),
        message,
    )))
}

fn error_response(e: &TableError) -> Response {
    let message = e.to_string();
    let code = e.sqlstate();
    Response::Error(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        message,
    )))
}

fn pg_type(t: &DataType) -> Type {
    match t {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => Type::INT8,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Decimal128(..) | DataType::Decimal256(..) => Type::NUMERIC,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        _ => Type::VARCHAR,
    }
}

fn to_response(r: StatementResult) -> PgWireResult<Response> {
    if let Some(tag) = &r.command {
        let mut words = tag.split(' ');
        let first = words.next().unwrap_or("OK");
        let rows = tag.rsplit(' ').next().and_then(|n| n.parse::<usize>().ok());
        let t = match (first, rows) {
            ("INSERT", Some(n)) => Tag::new("INSERT").with_oid(0).with_rows(n),
            ("SELECT", Some(n)) => Tag::new("SELECT").with_rows(n),
            _ => Tag::new(tag.split(" (").next().unwrap_or(tag)),
        };
        return Ok(Response::Execution(t));
    }
    let fields: Vec<FieldInfo> = r
        .schema
        .fields()
        .iter()
        .map(|f| {
            FieldInfo::new(
                f.name().clone(),
                None,
                None,
                pg_type(f.data_type()),
                FieldFormat::Text,
            )
        })
        .collect();
    let fields = Arc::new(fields);
    let rows = encode_rows(&fields, &r.batches)?;
    Ok(Response::Query(QueryResponse::new(
        fields,
        futures::stream::iter(rows.into_iter().map(Ok)),
    )))
}

fn encode_rows(
    fields: &Arc<Vec<FieldInfo>>,
    batches: &[RecordBatch],
) -> PgWireResult<Vec<pgwire::messages::data::DataRow>> {
    let opts = FormatOptions::default();
    let mut rows = Vec::new();
    let mut encoder = DataRowEncoder::new(fields.clone());
    for b in batches {
        let formatters = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
        for row in 0..b.num_rows() {
            for (col, f) in b.columns().iter().zip(&formatters) {
                let value: Option<String> = if col.is_null(row) {
                    None
                } else if col.data_type() == &DataType::Boolean {
                    Some(
                        if f.value(row).to_string() == "true" {
                            "t"
                        } else {
                            "f"
                        }
                        .to_string(),
                    )
                } else {
                    Some(f.value(row).to_string())
                };
                encoder.encode_field(&value)?;
            }
            rows.push(encoder.take_row());
        }
    }
    Ok(rows)
}

pub async fn run_serve(args: ServeArgs) -> CliResult {
    let password = match args.password.clone() {
        Some(p) if !p.is_empty() => p,
        _ => {
            return Err(
                "tierdb serve needs a password: set TIERDB_PASSWORD (or --password); clients \
                 log in with it as --user (default tierdb)"
                    .into(),
            );
        }
    };
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let (engine, handle) = open_engine(&args.db, &args.kv, &args.engine, Role::Writer).await?;
    let (fatal, mut fatal_rx) = tokio::sync::watch::channel(None);
    let database = Arc::new(Database {
        db: args.db.clone(),
        kv: args.kv.clone(),
        engine_args: args.engine.clone(),
        recover_for: args.recover_for.into(),
        live: tokio::sync::RwLock::new(Live {
            engine: Arc::new(engine),
            handle: Some(handle),
        }),
        recovering: Default::default(),
        fatal,
    });
    let handlers = Arc::new(Handlers {
        database: database.clone(),
        credentials: Arc::new(Credentials {
            user: args.user.clone(),
            password,
        }),
    });
    let addr = listener
        .local_addr()
        .map_or_else(|_| args.listen.clone(), |a| a.to_string());
    println!(
        "tierdb serving {} on {addr} (psql -h {} -p {} -U {})",
        args.db,
        addr.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h),
        addr.rsplit_once(':').map_or("5433", |(_, p)| p),
        args.user
    );
    let serve = async {
        loop {
            let (socket, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            };
            let handlers = handlers.clone();
            tokio::spawn(async move {
                if let Err(e) = pgwire::tokio::process_socket(socket, None, handlers).await {
                    tracing::info!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    };
    tokio::select! {
        () = serve => {}
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
        fatal = fatal_rx.wait_for(Option::is_some) => {
            let message = fatal.ok().and_then(|m| m.clone()).unwrap_or_default();
            return Err(CliError::new(tierdb_store::ErrorKind::Retry, message));
        }
    }
    database.close().await
}
