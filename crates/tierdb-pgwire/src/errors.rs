//! The errors and warnings the server answers with: SQLSTATE and message, as PostgreSQL
//! sends them.

use std::fmt::Debug;

use futures::{Sink, SinkExt};
use pgwire::api::{ClientInfo, ErrorHandler};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::NoticeResponse;
use tierdb_tables::TableError;

/// Sends a NoticeResponse of `severity` (`WARNING`, `NOTICE`).
pub(crate) async fn notice<C>(
    client: &mut C,
    severity: &str,
    code: &str,
    message: &str,
    detail: Option<String>,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let mut info = ErrorInfo::new(severity.into(), code.into(), message.into());
    info.detail = detail;
    client
        .send(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
            info,
        )))
        .await?;
    Ok(())
}

pub(crate) fn user_error(code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message,
    )))
}

pub(crate) fn table_error(e: &TableError) -> PgWireError {
    user_error(e.sqlstate(), e.message())
}

pub(crate) fn timed_out() -> PgWireError {
    user_error(
        "57014",
        "canceling statement due to statement timeout".into(),
    )
}

pub(crate) fn canceled() -> PgWireError {
    user_error("57014", "canceling statement due to user request".into())
}

pub(crate) fn error_info(e: PgWireError) -> ErrorInfo {
    let mut e = e;
    SqlStates.rewrite(&mut e);
    e.into()
}

/// Gives errors from the libraries (DataFusion's, arrow-pg's) the SQLSTATE tierdb's
/// errors have, instead of pgwire's catch-all XX000.
pub(crate) struct SqlStates;

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

/// The SQLSTATE of an error the server answers with.
#[cfg(test)]
pub(crate) fn sqlstate(e: &PgWireError) -> String {
    match e {
        PgWireError::UserError(info) => info.code.clone(),
        other => format!("not a user error: {other}"),
    }
}
