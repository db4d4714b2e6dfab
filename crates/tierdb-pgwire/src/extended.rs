//! The extended query protocol: Parse (plan once, for Describe), Bind (parameters decoded
//! as the types the plan infers), Execute (planned again, so it reads the tables as they
//! are then).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use datafusion_postgres::arrow_pg::datatypes::into_pg_type;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{FieldFormat, FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use tierdb_tables::TableError;

use crate::conn::ConnState;
use crate::deferflush::DeferFlush;
use crate::errors::{table_error, user_error};
use crate::parse::declared_parameters;
use crate::show::is_set_or_show;
use crate::simple::status_before;

/// A statement prepared by Parse: its syntax, and its plan as of Parse (for Describe; it
/// is planned again at each Execute, so it reads the tables as they are then).
#[derive(Debug, Clone)]
pub struct Prepared {
    stmt: Statement,
    plan: Option<LogicalPlan>,
    /// The columns it returns, as its rows will have them (`SqlSession::described_schema`).
    schema: Option<datafusion::common::DFSchemaRef>,
    /// The parameters the client binds (`$1`…`$n` in its query string).
    params: usize,
    /// RowDescription's table OIDs and column numbers (`tableoid.rs`).
    ids: crate::tableoid::Ids,
    /// Which columns keep a NUMERIC typmod (`tierdb_tables::origin::modifiers`).
    modifiers: Vec<bool>,
    /// The parameters compared with or inserted into UUID, JSON and JSONB columns, as
    /// those types (`tierdb_tables::paramdecl`): what ParameterDescription says and how
    /// binary values are read (`textparams.rs`).
    text_types: Vec<Option<Type>>,
    /// Its plan, kept for the next Execute while it holds (`tierdb_tables` `plancache.rs`).
    cache: Arc<tierdb_tables::sql::PlanCache>,
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
        session
            .guarded(async {
                let Some(stmt) = self.parse_one(&session, sql).await? else {
                    return Ok(None);
                };
                let plan = if is_set_or_show(&stmt)
                    || matches!(
                        stmt,
                        Statement::Copy { .. }
                            | Statement::Deallocate { .. }
                            | Statement::Discard { .. }
                    ) {
                    None
                } else {
                    session
                        .plan(&DfStatement::Statement(Box::new(stmt.clone())))
                        .await
                        .map_err(|e| table_error(&e))?
                };
                let schema = plan.as_ref().map(|p| session.described_schema(p));
                let ids = match &plan {
                    Some(p) => {
                        let origins = tierdb_tables::origin::origins(p);
                        self.table_oids.resolve(&session, &origins).await
                    }
                    None => Vec::new(),
                };
                let modifiers = plan
                    .as_ref()
                    .map(tierdb_tables::origin::modifiers)
                    .unwrap_or_default();
                let text_types = plan
                    .as_ref()
                    .map(crate::textparams::declared_types)
                    .unwrap_or_default();
                Ok(Some(Prepared {
                    stmt,
                    plan,
                    schema,
                    params: declared_parameters(sql),
                    ids,
                    modifiers,
                    text_types,
                    cache: Default::default(),
                }))
            })
            .await
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        match &stmt.plan {
            Some(plan) => parameter_types(plan, stmt.params)?
                .into_iter()
                .enumerate()
                .map(
                    |(i, t)| match (stmt.text_types.get(i).cloned().flatten(), t) {
                        (Some(declared), _) => Ok(declared),
                        (None, Some(t)) => into_pg_type(&t),
                        (None, None) => Ok(Type::TEXT),
                    },
                )
                .collect(),
            None => Ok(Vec::new()),
        }
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        // A SHOW answers one text column (PostgreSQL: type text), named as PostgreSQL
        // names it.
        if let Some(name) = crate::show::shown_column(&stmt.stmt) {
            return Ok(vec![
                FieldInfo::new(name, None, None, Type::TEXT, FieldFormat::Text).with_type_size(-1),
            ]);
        }
        // UPDATE and DELETE are planned as the query that names their rows (tierdb-tables'
        // `dml`), but answer with a command tag and no rows (NoData).
        // An INSERT … ON CONFLICT is planned as one node whose schema is the INSERT's count.
        let changes_rows = match &stmt.stmt {
            Statement::Update(u) => u.returning.is_none(),
            Statement::Delete(d) => d.returning.is_none(),
            Statement::Insert(i) => i.returning.is_none(),
            _ => false,
        };
        match (&stmt.plan, &stmt.schema) {
            (Some(plan), Some(schema))
                if !changes_rows && !matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Ddl(_)) =>
            {
                crate::encode::describe(
                    schema.as_arrow(),
                    column_format.unwrap_or(&Format::UnifiedText),
                    None,
                )
                .map(|f| crate::tableoid::with_ids(f, &stmt.ids))
                .map(|f| crate::encode::expression_typmods(f, &stmt.modifiers))
                .map(|f| match crate::colnames::for_client(&stmt.stmt) {
                    Some(n) => n.apply(f),
                    None => f,
                })
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// The extended query protocol of a connection (its state is also its statement parser).
#[derive(Debug)]
pub struct Extended(pub(crate) Arc<ConnState>);

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
            status_before(client, Some(&portal.statement.statement.stmt));
        }
        self._on_execute(&mut DeferFlush::new(client), message)
            .await
    }

    async fn on_describe<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Describe,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_describe(&mut DeferFlush::new(client), message)
            .await
    }

    async fn on_parse<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Parse,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        PgwireDefaults(self.0.clone())
            .on_parse(&mut DeferFlush::new(client), message)
            .await
    }

    async fn on_bind<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Bind,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        PgwireDefaults(self.0.clone())
            .on_bind(&mut DeferFlush::new(client), message)
            .await
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
        // Planned again, unless the plan kept from the last Execute still holds: a
        // prepared statement reads the tables as they are now. Anything failing here
        // aborts the session's transaction (`guarded`).
        let session = this.session().await?;
        let bound = session
            .guarded(async {
                let plan = session
                    .plan_prepared(
                        &DfStatement::Statement(Box::new(stmt.clone())),
                        &prepared.cache,
                    )
                    .await
                    .map_err(|e| table_error(&e))?;
                let Some(plan) = plan else {
                    return Ok(None);
                };
                // The client decodes rows by the description it got at Parse: a plan whose
                // columns changed since (a table dropped and created again) must not send
                // rows of another shape (PostgreSQL: 0A000, "cached plan must not change
                // result type"). A write without RETURNING sends no rows: its plan's
                // columns (those of what it reads) may change freely.
                if returns_rows(&stmt) && !same_columns(plan.schema(), described.schema()) {
                    return Err(user_error(
                        "0A000",
                        "cached plan must not change result type (a table it reads changed; \
                         prepare the statement again)"
                            .into(),
                    ));
                }
                let types = parameter_types(&plan, prepared.params)?;
                if portal.parameters.len() != types.len() {
                    return Err(user_error(
                        "08P01",
                        format!(
                            "bind message supplies {} parameters, but the statement takes {}",
                            portal.parameters.len(),
                            types.len()
                        ),
                    ));
                }
                let values = bind_parameters(portal, &types, &session.time_zone())?;
                plan.replace_params_with_values(&values)
                    .map(Some)
                    .map_err(|e| user_error("22023", format!("cannot bind the parameters: {e}")))
            })
            .await?;
        let Some(plan) = bound else {
            return this
                .run(client, stmt, None, &portal.result_column_format)
                .await;
        };
        this.run(client, stmt, Some(plan), &portal.result_column_format)
            .await
    }
}

/// pgwire's own Parse and Bind handling (statement and portal stores), which a trait
/// method cannot call once [`Extended`] overrides it: `Extended` runs it through this
/// handler with a [`DeferFlush`] connection. It never runs a statement.
struct PgwireDefaults(Arc<ConnState>);

#[async_trait]
impl ExtendedQueryHandler for PgwireDefaults {
    type Statement = Prepared;
    type QueryParser = ConnState;

    fn query_parser(&self) -> Arc<ConnState> {
        self.0.clone()
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        _portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Err(user_error(
            "XX000",
            "internal: Parse/Bind handler asked to execute".into(),
        ))
    }
}

/// Whether `stmt` answers rows: anything but an INSERT, UPDATE or DELETE without
/// RETURNING.
fn returns_rows(stmt: &Statement) -> bool {
    match stmt {
        Statement::Insert(i) => i.returning.is_some(),
        Statement::Update(u) => u.returning.is_some(),
        Statement::Delete(d) => d.returning.is_some(),
        _ => true,
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
    zone: &str,
) -> PgWireResult<ParamValues> {
    let as_text =
        crate::textparams::text_parameters(portal, &portal.statement.statement.text_types)?;
    let portal = as_text.as_ref().unwrap_or(portal);
    let numeric = crate::numparams::take_numeric(portal, types)?;
    let (portal, mut ours) = match &numeric {
        Some((p, decoded)) => (p, decoded.clone()),
        None => (portal, Vec::new()),
    };
    // Dates and times sent as text (`timeparams.rs`), read in the session's TimeZone.
    let datetimes = crate::timeparams::take_datetimes(portal, types, zone)?;
    let portal = match &datetimes {
        Some((p, decoded)) => {
            ours.resize(decoded.len(), None);
            for (slot, d) in ours.iter_mut().zip(decoded) {
                if d.is_some() {
                    *slot = d.clone();
                }
            }
            p
        }
        None => portal,
    };
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
        // A NUMERIC parameter decoded by numparams.rs (arrow-pg saw NULL in its place).
        let value = ours.get_mut(i).and_then(Option::take).unwrap_or(v.value);
        // arrow-pg gives a NUMERIC parameter the precision of its digits, which is less
        // than its scale for 0.01 (Decimal128(1, 1, 2), an invalid type every cast
        // refuses): widen it; the cast to the target type checks the range.
        let value = match value {
            datafusion::common::ScalarValue::Decimal128(d, _, s) => {
                datafusion::common::ScalarValue::Decimal128(d, 38, s)
            }
            other => other,
        };
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
    // `LIMIT $1`, `OFFSET $2`: bigint, as PostgreSQL infers them (else a NULL sent without
    // a type would be text, which LIMIT refuses).
    let _ = plan.apply(|node| {
        if let LogicalPlan::Limit(l) = node {
            for e in [&l.skip, &l.fetch].into_iter().flatten() {
                if let datafusion::logical_expr::Expr::Placeholder(p) = e.as_ref()
                    && let Some(n) = p.id.trim_start_matches('$').parse::<usize>().ok()
                    && n >= 1
                    && n <= out.len()
                    && out[n - 1].is_none()
                {
                    out[n - 1] = Some(DataType::Int64);
                }
            }
        }
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
