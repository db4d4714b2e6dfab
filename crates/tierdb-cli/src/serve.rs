//! `tierdb serve DB`: the database's tables over the PostgreSQL wire protocol (simple and
//! extended query protocols, COPY, cancel; SCRAM-SHA-256 password authentication, TLS), so
//! PostgreSQL drivers and tools work. The server is the `tierdb-pgwire` crate; this is
//! its command line. A failing statement answers with a PostgreSQL error (SQLSTATE and
//! message) and the connection and the server stay up.

use std::sync::Arc;

use clap::Args;
use tierdb_tables::SqlEngine;
use tokio::net::TcpListener;

use crate::args::KvArgs;
use crate::error::{CliError, CliResult};
use crate::sql_cmd::{EngineArgs, open_engine};
use tierdb_engine::Role;

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
    user: &str,
) -> CliResult<(SqlEngine, tierdb_engine::Database)> {
    let (engine, handle) = open_engine(db, kv, engine_args, role).await?;
    tierdb_pgwire::install_postgres_compat(&engine, user)?;
    Ok((engine, handle))
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
        (Some(c), Some(k)) => Some(tierdb_pgwire::tls_acceptor(c, k).map_err(CliError::input)?),
        _ => None,
    };
    if tls.is_none() && !args.insecure && !tierdb_pgwire::is_loopback(&args.listen).await {
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
    // The engine is reopened in place when it fails (tierdb_engine::Supervised).
    let opener: tierdb_engine::Opener<SqlEngine> = {
        let (db, kv, engine) = (args.db.clone(), args.kv.clone(), args.engine.clone());
        let user = args.user.clone();
        Arc::new(move || {
            let (db, kv, engine, user) = (db.clone(), kv.clone(), engine.clone(), user.clone());
            Box::pin(async move {
                open_served(&db, &kv, &engine, role, &user)
                    .await
                    .map_err(|e| tierdb_engine::OpenError::from(e.message))
            })
        })
    };
    let (engine, handle) = open_served(&args.db, &args.kv, &args.engine, role, &args.user).await?;
    let database =
        tierdb_pgwire::Served::new(&args.db, args.recover_for.into(), opener, engine, handle);
    if let Ok(plan) = args.engine.memory_plan(args.kv.tiers.memory_bytes) {
        println!("{}", plan.describe());
    }
    // The last start-up line: tools (and the tests) wait for it.
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
    let config = tierdb_pgwire::ServerConfig {
        user: args.user.clone(),
        password,
        tls,
    };
    tokio::select! {
        () = tierdb_pgwire::serve(listener, database.clone(), config) => {}
        () = shutdown_signal() => println!("shutting down"),
        why = database.given_up() => {
            return Err(CliError::new(tierdb_store::ErrorKind::Retry, why));
        }
    }
    Ok(database.close().await?)
}
