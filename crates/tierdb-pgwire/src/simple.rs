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
use tierdb_tables::sql::StatementKind;

use crate::conn::ConnState;
use crate::errors::{error_info, table_error};

/// `ROLLBACK TO SAVEPOINT` leaves a failed transaction's error state; pgwire derives the
/// status it reports from the status before the statement and the responses, which can
/// only go from failed to failed, so the status is set before the statement runs (if it
/// fails, the error puts it back).
pub(crate) fn rolls_back_to_savepoint<C: ClientInfo>(client: &mut C, stmt: Option<&Statement>) {
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
