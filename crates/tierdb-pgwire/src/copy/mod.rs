//! COPY: `COPY t FROM STDIN` spools the client's data and imports it through the import
//! path (sorted on ingest; one commit, or the session's transaction); `COPY … TO STDOUT`
//! streams a query's rows out. The data formats are in [`format`] and, for binary COPY
//! FROM, [`binary`]. A column list (`COPY t (a, c) FROM STDIN`) copies those columns and
//! gives the others their defaults (`tierdb_tables` `copy_columns.rs`).

pub(crate) mod binary;
pub(crate) mod format;

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{CopySource, CopyTarget, Statement};
use futures::{Sink, SinkExt};
use pgwire::api::ClientInfo;
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::{CopyResponse, Response, Tag};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use tierdb_tables::TableError;
use tierdb_tables::import::{Format as ImportFormat, ImportOptions, ImportProgress};
use tierdb_tables::sql::{Outcome, SqlSession};

use crate::conn::ConnState;
use crate::errors::{table_error, user_error};
use format::{CopyOptions, Spool, copy_out_stream};

/// A COPY FROM STDIN in progress.
#[derive(Debug)]
pub(crate) struct CopyIn {
    session: Arc<SqlSession>,
    table: String,
    /// The columns listed, when they are not every column in table order.
    columns: Option<Vec<String>>,
    spool: Spool,
}

impl ConnState {
    /// `COPY table FROM STDIN` starts a copy-in (finished in [`CopyHandler`]); `COPY table
    /// TO STDOUT` and `COPY (query) TO STDOUT` stream the rows out.
    pub(crate) async fn copy<C>(
        &self,
        session: &Arc<SqlSession>,
        stmt: Statement,
        client: &mut C,
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
                // The catalog name: `s.t` is schema s's table, not public's `t`; an
                // unqualified name is found by the session's search_path.
                let name = session
                    .resolve_relation(&table_name)
                    .await
                    .map_err(|e| table_error(&e))?;
                let def = session
                    .tables()
                    .require(&name)
                    .await
                    .map_err(|e| table_error(&e))?;
                let listed: Vec<String> =
                    columns.iter().map(tierdb_tables::sql::ident_name).collect();
                let all: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
                let columns = (!listed.is_empty() && listed != all).then_some(listed);
                // The types of the fields the data holds, in its order (binary COPY).
                let mut types = Vec::new();
                for name in columns.as_ref().unwrap_or(&all) {
                    match def.columns.iter().find(|c| &c.name == name) {
                        Some(c) => types.push(c.ty),
                        None => {
                            return Err(user_error(
                                "42703",
                                format!(
                                    "column \"{name}\" of relation \"{}\" does not exist",
                                    def.name
                                ),
                            ));
                        }
                    }
                }
                let fields = types.len();
                let format = i8::from(opts.binary);
                let spool = Spool::new(opts, types)
                    .map_err(|e| user_error("58030", format!("cannot spool COPY data: {e}")))?;
                *self.copy.lock().await = Some(CopyIn {
                    session: session.clone(),
                    table: name,
                    columns,
                    spool,
                });
                Ok(Response::CopyIn(CopyResponse::new(
                    format,
                    fields,
                    futures::stream::empty(),
                )))
            }
            (true, CopyTarget::Stdout) if opts.binary => Err(user_error(
                "0A000",
                "COPY … TO STDOUT (FORMAT binary) is not supported by tierdb serve: use FORMAT \
                 text or csv"
                    .into(),
            )),
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
                        crate::parse::parse(&self.parser, &sql)?
                            .into_iter()
                            .next()
                            .ok_or_else(|| user_error("42601", "empty COPY query".into()))?
                    }
                };
                // A statement timeout or cancel ends it wherever it is (`stop.rs`).
                let mut stop = self.stop(client, session);
                let outcome = stop
                    .bound(session.execute_outcome(DfStatement::Statement(Box::new(query)), None))
                    .await?
                    .map_err(|e| table_error(&e))?;
                let Outcome::Rows(rows) = outcome else {
                    return Err(user_error("42601", "COPY TO needs a query".into()));
                };
                let columns = rows.schema().fields().len();
                let header = opts.header.then(|| {
                    rows.schema()
                        .fields()
                        .iter()
                        .map(|f| opts.field(Some(f.name())))
                        .collect::<Vec<_>>()
                        .join(&(opts.delimiter as char).to_string())
                });
                // An error while the rows stream aborts the transaction (the session's Rows).
                let stream = stop
                    .bound(rows.execute_stream())
                    .await?
                    .map_err(|e| table_error(&e))?;
                // TIMESTAMPTZ in the session's time zone, as PostgreSQL's COPY writes it.
                let tz = session.time_zone();
                let schema = stream.schema();
                let stream: datafusion::execution::SendableRecordBatchStream = Box::pin(
                    datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                        schema,
                        futures::StreamExt::map(stream, move |b| {
                            b.map(|b| crate::encode::in_time_zone(b, &tz))
                        }),
                    ),
                );
                // Fused: an empty COPY ends at the first poll and is polled again below.
                let mut data = Box::pin(futures::StreamExt::fuse(
                    stop.guard_stream(copy_out_stream(stream, opts, header)),
                ));
                // pgwire 0.41 answers an error inside COPY OUT with CopyFail, a frontend
                // message clients refuse ("you cannot mix COPY with other operations"). An
                // error before the first row (a timeout, a cancel, a failing aggregate: the
                // usual place) is answered as a plain ErrorResponse instead.
                let first = futures::StreamExt::next(&mut data).await;
                let first = match first {
                    Some(Err(e)) => return Err(e),
                    other => other,
                };
                let data = futures::StreamExt::chain(futures::stream::iter(first), data);
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
        if let Err(e) = c.spool.add(&data.data) {
            // Outside any session call: the one place a COPY's failure is noted by hand.
            c.session.fail();
            *copy = None;
            return Err(spool_error(&e));
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
        let session = c.session.clone();
        let rows = session.guarded(self.import_copy(&mut c)).await?;
        let tag = Tag::new("COPY").with_rows(rows as usize);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
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

/// A spool failure: bad data with its own SQLSTATE (`binary.rs`), else the disk's.
fn spool_error(e: &std::io::Error) -> PgWireError {
    match e
        .get_ref()
        .and_then(|i| i.downcast_ref::<binary::BadData>())
    {
        Some(bad) => user_error(bad.code, format!("{}; nothing was copied", bad.message)),
        None => user_error("58030", format!("cannot spool COPY data: {e}")),
    }
}

impl ConnState {
    async fn import_copy(&self, c: &mut CopyIn) -> PgWireResult<u64> {
        c.spool.finish().map_err(|e| spool_error(&e))?;
        let rejects = tempfile::NamedTempFile::new()
            .map_err(|e| user_error("58030", format!("cannot spool COPY data: {e}")))?;
        let options = ImportOptions {
            format: Some(if c.spool.options.csv && !c.spool.options.binary {
                ImportFormat::Csv
            } else {
                ImportFormat::CopyText
            }),
            delimiter: Some(if c.spool.options.csv {
                c.spool.options.delimiter
            } else {
                b','
            }),
            header: Some(c.spool.options.csv && c.spool.options.header),
            // Like PostgreSQL: one bad row fails the whole COPY.
            max_rejects: 0,
            reject_file: rejects.path().to_path_buf(),
            threads: 2,
            transaction: c.session.transaction(),
            // Text without an offset is the session's wall-clock time, as in a statement.
            time_zone: c.session.time_zone().parse().ok(),
        };
        let files = [c.spool.file.path().to_path_buf()];
        let copied = match &c.columns {
            Some(columns) => {
                c.session
                    .import_columns(&c.table, columns, &files, &options)
                    .await
            }
            None => tierdb_tables::import::import(
                c.session.tables().clone(),
                &c.table,
                &files,
                &options,
                c.session.context().task_ctx(),
                Arc::new(ImportProgress::default()),
            )
            .await
            .map(|s| s.rows),
        };
        match copied {
            Ok(rows) => Ok(rows),
            // An empty COPY copies nothing, successfully (the import path refuses it).
            Err(TableError::Import(m)) if m.starts_with("the input holds no rows") => Ok(0),
            Err(TableError::Import(m)) => {
                // The reject file names the spool file; say "line N of the COPY data".
                let spool = c.spool.file.path().display().to_string();
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
