//! `tierdb serve DB`: the database's tables over the PostgreSQL wire protocol (simple and
//! extended query protocols, COPY, cancel; SCRAM-SHA-256 password authentication, TLS), so
//! PostgreSQL drivers and tools work. Each connection is a session of its own
//! ([`crate::pg`]). A failing statement answers with a PostgreSQL error (SQLSTATE and
//! message) and the connection and the server stay up.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use futures::Sink;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::{ClientInfo, ConnectionManager};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use tierdb_tables::SqlEngine;
use tokio::net::TcpListener;

use crate::args::KvArgs;
use crate::error::{CliError, CliResult};
use crate::sql_cmd::{EngineArgs, open_engine};
use tierdb_engine::Role;

const SCRAM_ITERATIONS: usize = 4096;

#[derive(Args, Debug)]
pub struct ServeArgs {
    pub db: String,
    /// Address to listen on (loopback by default). Another address needs TLS
    /// (--tls-cert, --tls-key) or --insecure.
    #[arg(long, default_value = "127.0.0.1:5433")]
    pub listen: String,
    /// The server's certificate chain (PEM) for TLS; clients then connect with
    /// sslmode=require (or verify-full with this certificate's CA).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM, PKCS#8 or RSA) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Listen on a non-loopback address without TLS: passwords are then safe (SCRAM) but
    /// data crosses the network in the clear.
    #[arg(long)]
    pub insecure: bool,
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
    /// Serve as a read replica: open the database as a follower (it never fences the
    /// writer, which may run in another process or on another machine), refuse writes with
    /// SQLSTATE 25006, and see the writer's commits within --poll-interval (default 500ms)
    /// plus the time to read them. `SHOW tierdb.replica_lag` tells how old the newest
    /// commit it sees is.
    #[arg(long)]
    pub read_only: bool,
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

/// The served database, reopened in place when its engine fails.
///
/// SlateDB shuts a database handle down when a background task fails, for example when the
/// object store stays away longer than its retries; every later call then returns that stale
/// error, even after the store is back. The server notices ([`tierdb_tables::Tables::failure`]),
/// gives the old handle up without flushing (acknowledged writes stay in the write-back log,
/// as after a crash) and opens the database again, retrying with backoff for
/// `--recover-for`; past that it stops serving and exits non-zero with the reason.
pub struct Database {
    db: String,
    kv: KvArgs,
    engine_args: EngineArgs,
    role: Role,
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
    pub async fn engine(&self) -> Arc<SqlEngine> {
        self.live.read().await.engine.clone()
    }

    /// Starts replacing `broken` (if it is still the live engine) with a freshly opened one,
    /// in the background: statements meanwhile fail at once with SQLSTATE 57P03 rather than
    /// wait for the object store.
    pub fn recover(self: &Arc<Self>, broken: &Arc<SqlEngine>, why: &str) {
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
            match open_served(&self.db, &self.kv, &self.engine_args, self.role).await {
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

/// SIGINT or SIGTERM (what supervisors send): stop accepting, close the database cleanly.
pub(crate) async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// How long SIGTERM/SIGINT waits for the clean close before the process exits anyway.
const TERM_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A watchdog on its own thread and runtime: after SIGTERM or SIGINT, if the process has
/// not ended within [`TERM_GRACE`] (query operators can keep every worker thread of the
/// main runtime busy, so its own signal handler may not even run), it exits. Nothing
/// acknowledged is lost by that: a commit is durable before it is acknowledged, and a
/// statement that had not committed never was (as after `kill -9`).
fn spawn_term_watchdog() {
    let spawned = std::thread::Builder::new()
        .name("tierdb-term-watchdog".into())
        .spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(shutdown_signal());
            std::thread::sleep(TERM_GRACE);
            eprintln!(
                "tierdb serve: still running {} s after the signal; exiting without a clean \
                 close (running statements are abandoned; nothing acknowledged is lost)",
                TERM_GRACE.as_secs()
            );
            std::process::exit(1);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the shutdown watchdog");
    }
}

/// Opens the database for serving: the engine, with PostgreSQL's catalog and functions.
async fn open_served(
    db: &str,
    kv: &KvArgs,
    engine_args: &EngineArgs,
    role: Role,
) -> CliResult<(SqlEngine, tierdb_engine::Database)> {
    let (engine, handle) = open_engine(db, kv, engine_args, role).await?;
    crate::pg::install_postgres_compat(&engine)?;
    Ok((engine, handle))
}

/// TLS from a PEM certificate chain and key.
fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> CliResult<pgwire::tokio::TlsAcceptor> {
    use tokio_rustls::rustls;
    let read = |p: &std::path::Path| {
        std::fs::read(p)
            .map_err(|e| CliError::input(format!("--tls: cannot read {}: {e}", p.display())))
    };
    let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            CliError::input(format!(
                "--tls-cert {}: not a PEM certificate: {e}",
                cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(CliError::input(format!(
            "--tls-cert {}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)",
            cert.display()
        )));
    }
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| CliError::input(format!("--tls-key {}: {e}", key.display())))?
        .ok_or_else(|| {
            CliError::input(format!(
                "--tls-key {}: no private key in it (expected PEM, PKCS#8 or RSA)",
                key.display()
            ))
        })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| CliError::input(format!("TLS: {e}")))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| {
        CliError::input(format!(
            "--tls-cert/--tls-key do not make a usable pair: {e}"
        ))
    })?;
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}

/// Whether `listen` names only loopback addresses.
async fn is_loopback(listen: &str) -> bool {
    match tokio::net::lookup_host(listen).await {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
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
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(tls_acceptor(c, k)?),
        _ => None,
    };
    if tls.is_none() && !args.insecure && !is_loopback(&args.listen).await {
        return Err(CliError::input(format!(
            "--listen {} is not a loopback address: give --tls-cert and --tls-key so clients' \
             data is encrypted, or --insecure to serve it in the clear",
            args.listen
        )));
    }
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let role = if args.read_only {
        Role::Follower
    } else {
        Role::Writer
    };
    let (engine, handle) = open_served(&args.db, &args.kv, &args.engine, role).await?;
    let (fatal, mut fatal_rx) = tokio::sync::watch::channel(None);
    let database = Arc::new(Database {
        db: args.db.clone(),
        kv: args.kv.clone(),
        engine_args: args.engine.clone(),
        role,
        recover_for: args.recover_for.into(),
        live: tokio::sync::RwLock::new(Live {
            engine: Arc::new(engine),
            handle: Some(handle),
        }),
        recovering: Default::default(),
        fatal,
    });
    let credentials = Arc::new(Credentials {
        user: args.user.clone(),
        password,
    });
    let connections = Arc::new(ConnectionManager::new());
    let cancels = crate::pg::Cancels::new(connections.clone());
    let mut parameters = DefaultServerParameterProvider::default();
    parameters.server_version = crate::pg::SERVER_VERSION.to_string();
    let parameters = Arc::new(parameters);
    // Per connection: the SASL handler keeps the exchange's state.
    let startup = move || {
        let mut scram = ScramAuth::new(credentials.clone());
        scram.set_iterations(SCRAM_ITERATIONS);
        Arc::new(StartupUserInErrors(
            SASLAuthStartupHandler::new(parameters.clone())
                .with_scram(scram)
                .with_connection_manager(connections.clone()),
        ))
    };
    let addr = listener
        .local_addr()
        .map_or_else(|_| args.listen.clone(), |a| a.to_string());
    println!(
        "tierdb serving {}{} on {addr}{} (psql -h {} -p {} -U {})",
        args.db,
        if args.read_only {
            " read-only (a replica of its writer)"
        } else {
            ""
        },
        if tls.is_some() { " with TLS" } else { "" },
        addr.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h),
        addr.rsplit_once(':').map_or("5433", |(_, p)| p),
        args.user
    );
    spawn_term_watchdog();
    let serve = async {
        loop {
            let (socket, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            };
            // Each connection gets its own handlers: its session, its COPY in progress.
            let handlers = Arc::new(crate::pg::Handlers {
                conn: crate::pg::ConnState::new(database.clone(), cancels.clone()),
                startup: startup(),
            });
            let tls = tls.clone();
            tokio::spawn(async move {
                if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                    tracing::info!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    };
    tokio::select! {
        () = serve => {}
        () = shutdown_signal() => println!("shutting down"),
        fatal = fatal_rx.wait_for(Option::is_some) => {
            let message = fatal.ok().and_then(|m| m.clone()).unwrap_or_default();
            return Err(CliError::new(tierdb_store::ErrorKind::Retry, message));
        }
    }
    database.close().await
}
