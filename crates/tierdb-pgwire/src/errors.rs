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
    match tierdb_tables::error::violation_of(e) {
        Some(v) => violation(v),
        None => user_error(e.sqlstate(), e.message()),
    }
}

/// A constraint violation as PostgreSQL sends it: the message, DETAIL, and the schema,
/// table, column and constraint fields drivers and ORMs read.
fn violation(v: &tierdb_tables::violation::Violation) -> PgWireError {
    let mut info = ErrorInfo::new("ERROR".into(), v.code.into(), v.message.clone());
    info.detail = v.detail.clone();
    info.schema = Some(v.schema.clone());
    info.table = Some(v.table.clone());
    info.column = v.column.clone();
    info.constraint = v.constraint.clone();
    PgWireError::UserError(Box::new(info))
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
            *error = match tierdb_tables::error::violation_of(e.as_ref()) {
                Some(v) => violation(v),
                None => user_error(tierdb_tables::error::sqlstate_of(e.as_ref()), e.to_string()),
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::error::DataFusionError;
    use tierdb_tables::violation::Violation;

    fn unique() -> TableError {
        TableError::Violation(Box::new(Violation {
            code: "23505",
            message: "duplicate key value violates unique constraint \"t_pkey\"".into(),
            detail: Some("Key (id)=(1) already exists.".into()),
            schema: "public".into(),
            table: "t".into(),
            column: None,
            constraint: Some("t_pkey".into()),
        }))
    }

    fn info(e: PgWireError) -> ErrorInfo {
        match e {
            PgWireError::UserError(info) => *info,
            other => panic!("not a user error: {other}"),
        }
    }

    #[test]
    fn violations_send_detail_and_names_as_fields() {
        let i = info(table_error(&unique()));
        assert_eq!(i.code, "23505");
        assert_eq!(
            i.message,
            "duplicate key value violates unique constraint \"t_pkey\""
        );
        assert_eq!(i.detail.as_deref(), Some("Key (id)=(1) already exists."));
        assert_eq!(i.schema.as_deref(), Some("public"));
        assert_eq!(i.table.as_deref(), Some("t"));
        assert_eq!(i.constraint.as_deref(), Some("t_pkey"));
        assert_eq!(i.column, None);
    }

    #[test]
    fn violations_raised_under_a_plan_keep_their_fields() {
        let wrapped = DataFusionError::Context(
            "while inserting".into(),
            Box::new(DataFusionError::External(Box::new(unique()))),
        );
        let i = info(table_error(&TableError::DataFusion(wrapped)));
        assert_eq!(i.constraint.as_deref(), Some("t_pkey"));
        assert_eq!(i.detail.as_deref(), Some("Key (id)=(1) already exists."));

        let mut e = PgWireError::ApiError(Box::new(DataFusionError::External(Box::new(unique()))));
        SqlStates.rewrite(&mut e);
        let i = info(e);
        assert_eq!(i.code, "23505");
        assert_eq!(i.table.as_deref(), Some("t"));
    }
}
