//! # tierdb-pgwire: tierdb's tables over the PostgreSQL wire protocol
//!
//! `tierdb serve` is this crate behind a command line: PostgreSQL drivers and tools (psql,
//! psycopg, JDBC, node-postgres, pgx…) connect, authenticate with SCRAM-SHA-256 (over TLS
//! when asked) and run SQL; each connection is a [`SqlSession`] of its own, which keeps the
//! transaction rules. A failing statement answers with a PostgreSQL error (SQLSTATE and
//! message); the connection and the server stay up.
//!
//! What comes from elsewhere, not written here: the protocol itself (pgwire), parameter
//! decoding and text/binary encoding of Arrow values (arrow-pg), PostgreSQL's SQL
//! compatibility rewrites and `pg_catalog` (datafusion-pg-catalog), and `SET`/`SHOW` of
//! the settings drivers touch (datafusion-postgres's hook).
//!
//! One concern per module:
//!
//! | module | concern |
//! |---|---|
//! | [`serve`] (here) | the accept loop: one set of handlers per connection |
//! | `tls`, `auth` | TLS (rustls) and the loopback rule; SCRAM against the one user |
//! | `conn` | a connection's session (made again after a reopen) and running one statement |
//! | `parse`, `catalogsql`, `systemcols` | query strings into statements (PostgreSQL's syntax, then tierdb's); rewrites of catalog queries; catalog system columns |
//! | `simple`, `extended`, `deferflush` | the simple and the extended query protocol; extended-protocol replies written at Sync/Flush, not one by one |
//! | `copy` | COPY FROM STDIN (into the import path) and COPY TO STDOUT, their formats |
//! | `cancel`, `stop` | CancelRequests; a statement given up (timeout, cancel) wherever it runs |
//! | `show` | SET/SHOW, statement_timeout, tierdb's own settings |
//! | `compat`, `catalogfns`, `pgcatalog` | pg_catalog and the catalog and settings functions tools call; the one role, owner of everything, and the catalog tables datafusion-pg-catalog lacks; `declared`: `pg_attribute` with declared types and typmods; `keys`, `keyed`, `keysql`: keys, indexes and defaults in `pg_index`, `pg_constraint`, `pg_attrdef`, and the rewrites of the queries that read them |
//! | `encode`, `floats`, `errors` | rows (floats in PostgreSQL's text), command tags, errors and warnings on the wire |
//!
//! [`SqlSession`]: tierdb_tables::sql::SqlSession

mod auth;
mod cancel;
mod catalogfns;
mod catalogsql;
mod colnames;
mod comments;
mod compat;
mod conn;
mod copy;
mod declared;
mod deferflush;
mod encode;
mod errors;
mod extended;
mod floats;
pub mod fuzzing;
mod interval;
mod keyed;
mod keys;
mod keysql;
mod numeric;
mod numparams;
mod parse;
mod pgcatalog;
mod psqlfns;
mod sequences;
mod show;
mod simple;
mod sizes;
mod stop;
mod systemcols;
mod sysviews;
mod tableoid;
mod textparams;
mod timeparams;
mod tls;

use std::sync::Arc;

use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ConnectionManager, ErrorHandler, PgWireServerHandlers};
use tierdb_tables::SqlEngine;
use tokio::net::TcpListener;

pub use compat::install_postgres_compat;
pub use tls::{is_loopback, tls_acceptor};

use cancel::Cancels;
use conn::ConnState;
use errors::SqlStates;
use extended::Extended;

/// The version clients are told (`server_version`, `version()`): PostgreSQL's protocol and
/// catalog as of this major version, served by tierdb. 15, the PostgreSQL these machines
/// install: pg_dump refuses to dump a server newer than itself.
pub const SERVER_VERSION: &str = concat!("15.18 (tierdb ", env!("CARGO_PKG_VERSION"), ")");

/// [`SERVER_VERSION`] as `server_version_num`.
pub const SERVER_VERSION_NUM: &str = "150018";

/// The served database: the SQL engine, reopened in place when it fails.
pub type Served = tierdb_engine::Supervised<SqlEngine>;

/// Who may connect, and how.
pub struct ServerConfig {
    /// The user name clients log in as.
    pub user: String,
    /// The password they give (SCRAM-SHA-256).
    pub password: String,
    /// TLS, when clients are to connect with `sslmode=require`.
    pub tls: Option<pgwire::tokio::TlsAcceptor>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("user", &self.user)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves `database` to the clients that connect on `listener`, until the future is
/// dropped. Each connection runs on a task of its own with its own session.
pub async fn serve(listener: TcpListener, database: Arc<Served>, config: ServerConfig) {
    let connections = Arc::new(ConnectionManager::new());
    let cancels = Cancels::new(connections.clone());
    let startup = auth::startup_handlers(config.user, config.password, connections);
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let handlers = Arc::new(Handlers {
            conn: ConnState::new(database.clone(), cancels.clone()),
            startup: startup(),
        });
        let tls = config.tls.clone();
        tokio::spawn(async move {
            if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                tracing::info!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// The handlers of one connection (pgwire asks for them once per connection); `S` is its
/// startup (authentication) handler.
struct Handlers<S> {
    conn: Arc<ConnState>,
    startup: Arc<S>,
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
