//! The simple query protocol: a query string of one or more statements, run in order
//! (several without BEGIN/COMMIT are one implicit transaction: [`SqlSession::begin_batch`]).
//!
//! [`SqlSession::begin_batch`]: tierdb_tables::sql::SqlSession::begin_batch

use std::fmt::Debug;

use async_trait::async_trait;
use datafusion::sql::sqlparser::ast::Statement;
use futures::Sink;
use pgwire::api::portal::Format;
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::TransactionStatus;
use tierdb_tables::sql::StatementKind;

use crate::conn::ConnState;
use crate::errors::{error_info, table_error};

/// The transaction status a statement starts from, where pgwire's own would be wrong.
/// pgwire derives the status it reports from the status before the statement and the
/// responses: an error turns "in a transaction" into "failed", "idle" stays "idle".
///
/// - `ROLLBACK TO SAVEPOINT` leaves a failed transaction's error state, which pgwire can
///   only keep: the status is set to "in a transaction" first (if it fails, the error puts
///   it back to "failed").
/// - `COMMIT` ends the transaction also when it fails (a write conflict found at commit,
///   40001: nothing was committed, as PostgreSQL's serialization failure at COMMIT): the
///   status is set to "idle" first, so a failed COMMIT reports "idle", not "failed", and
///   the client needs no ROLLBACK before its retry.
pub(crate) fn status_before<C: ClientInfo>(client: &mut C, stmt: Option<&Statement>) {
    if let Some(status) = starting_status(client.transaction_status(), stmt) {
        client.set_transaction_status(status);
    }
}

/// [`status_before`]'s rule: the status `stmt` starts from when it is not `current`.
fn starting_status(
    current: TransactionStatus,
    stmt: Option<&Statement>,
) -> Option<TransactionStatus> {
    match stmt {
        Some(Statement::Rollback {
            savepoint: Some(_), ..
        }) if current == TransactionStatus::Error => Some(TransactionStatus::Transaction),
        Some(Statement::Commit { .. }) => Some(TransactionStatus::Idle),
        _ => None,
    }
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
            status_before(client, statements.first());
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
        let kinds: Vec<_> = statements.iter().map(StatementKind::of_sql).collect();
        let batch = session.begin_batch(&kinds);
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            match self.run(client, stmt, None, &Format::UnifiedText).await {
                Ok(r) => out.push(r),
                Err(e) => {
                    out.push(Response::Error(Box::new(error_info(e))));
                    if let Err(e) = session.end_batch(batch, false).await {
                        out.push(Response::Error(Box::new(error_info(table_error(&e)))));
                    }
                    return Ok(out);
                }
            }
        }
        if let Err(e) = session.end_batch(batch, true).await {
            out.push(Response::Error(Box::new(error_info(table_error(&e)))));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(sql: &str) -> Statement {
        let d = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        datafusion::sql::sqlparser::parser::Parser::parse_sql(&d, sql)
            .unwrap_or_default()
            .remove(0)
    }

    #[test]
    fn a_commit_starts_idle_so_its_failure_leaves_no_failed_transaction() {
        use TransactionStatus::{Error, Idle, Transaction};
        for current in [Idle, Transaction, Error] {
            assert_eq!(starting_status(current, Some(&stmt("COMMIT"))), Some(Idle));
            assert_eq!(starting_status(current, Some(&stmt("END"))), Some(Idle));
        }
        let to_savepoint = stmt("ROLLBACK TO SAVEPOINT s");
        assert_eq!(
            starting_status(Error, Some(&to_savepoint)),
            Some(Transaction)
        );
        assert_eq!(starting_status(Transaction, Some(&to_savepoint)), None);
        assert_eq!(starting_status(Error, Some(&stmt("ROLLBACK"))), None);
        assert_eq!(starting_status(Transaction, Some(&stmt("SELECT 1"))), None);
        assert_eq!(starting_status(Transaction, None), None);
    }
}
