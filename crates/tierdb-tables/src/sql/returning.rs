//! `INSERT … RETURNING` (what ORMs send to learn the keys a SERIAL column or a default
//! gave the rows they insert: SQLAlchemy, Django, ActiveRecord, Hibernate).
//!
//! DataFusion plans no RETURNING, so tierdb plans the INSERT without it and keeps the
//! clause as a projection over the rows the INSERT writes:
//!
//! 1. **The plan** ([`SqlSession::returning_plan`]) is `Projection(RETURNING items)` over
//!    `SubqueryAlias(the table or its alias)` over the INSERT's source: the rows as the
//!    table will have them (every column, defaults and sequences filled in, cast to the
//!    column types). It is a query's plan, so Parse describes its columns, and Bind binds
//!    the source's parameters in it, as for any query.
//! 2. **Running it** ([`SqlSession::insert_returning`]) computes the source once
//!    (`nextval` is called once per row), puts it in the table's stored form (CHAR(n)
//!    padded, UUID and JSONB canonical: `write::conform`), computes the RETURNING items
//!    over those rows, and only then inserts exactly those rows through the same paths as
//!    any INSERT (temporary, row and columnar tables). The statement fails as a whole:
//!    an item that fails (an overflow) inserts nothing, a failed insert (a duplicate key,
//!    a NOT NULL column) returns no rows.
//! 3. **Names** are PostgreSQL's (`colnames::figure`): `RETURNING id` is `id`,
//!    `RETURNING id + 1` is `?column?`; `*` and `t.*` are the table's columns.
//! 4. The items see the row's columns only: a subquery in RETURNING is refused when it is
//!    planned ("table not found"), not answered wrongly.
//!
//! 5. **UPDATE and DELETE … RETURNING** (row tables; a columnar table refuses with
//!    0A000): the query that names the rows (`dml/`) carries every column's value, new for
//!    UPDATE, as read for DELETE (under READ COMMITTED, as read after the row was locked),
//!    and the items are projected over the rows changed ([`WithReturning`] holds both
//!    plans for Parse and Bind). Outside a transaction the statement runs in one of its
//!    own, so a failing item changes nothing.
//!
//! INSERT … ON CONFLICT … RETURNING is `upsert.rs`'s, over the rows inserted and updated.

use std::sync::Arc;

use datafusion::common::{Column, TableReference};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::dml::DmlStatement;
use datafusion::logical_expr::{
    Expr, LogicalPlan, LogicalPlanBuilder, Projection, SubqueryAlias, UserDefinedLogicalNodeCore,
};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    ExprWithAlias, FromTable, Ident, SelectItem, SelectItemQualifiedWildcardKind,
    Statement as SqlStatement, TableFactor, TableObject,
};

use super::session::{Outcome, Rows, Source};
use super::{SqlSession, ident_name};
use crate::error::{Result, TableError};

/// An INSERT's RETURNING clause, taken out of the statement, and the name its items call
/// the table by.
#[derive(Debug, Clone)]
pub(super) struct Returning {
    items: Vec<SelectItem>,
    alias: String,
}

/// Takes the RETURNING clause out of `stmt` if it is an INSERT that has one. The table's
/// alias (`INSERT INTO t AS x`), which only RETURNING and ON CONFLICT can name and which
/// DataFusion refuses, is taken out of every INSERT.
pub(super) fn take(stmt: &mut DfStatement) -> Option<Returning> {
    let DfStatement::Statement(s) = stmt else {
        return None;
    };
    let SqlStatement::Insert(insert) = s.as_mut() else {
        return None;
    };
    let table_alias = if insert.on.is_none() {
        insert.table_alias.take()
    } else {
        insert.table_alias.clone()
    };
    let items = insert.returning.take()?;
    let alias = table_name_in(table_alias.as_ref().map(|a| &a.alias), &insert.table);
    Some(Returning { items, alias })
}

/// What an INSERT's RETURNING and ON CONFLICT call its table: its alias, or its name.
pub(super) fn table_name_in(alias: Option<&Ident>, table: &TableObject) -> String {
    match (alias, table) {
        (Some(a), _) => ident_name(a),
        (None, TableObject::TableName(name)) => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(ident_name)
            .unwrap_or_default(),
        (None, _) => String::new(),
    }
}

/// The RETURNING clause of an UPDATE or DELETE (left in the statement: `dml/target.rs`
/// reads it to carry every column's value in the query that names the rows).
pub(super) fn of_dml(stmt: &DfStatement) -> Option<Returning> {
    let DfStatement::Statement(s) = stmt else {
        return None;
    };
    let (items, relation) = match s.as_ref() {
        SqlStatement::Update(u) => (u.returning.clone()?, &u.table.relation),
        SqlStatement::Delete(d) => {
            let from = match &d.from {
                FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
            };
            (d.returning.clone()?, &from.first()?.relation)
        }
        _ => return None,
    };
    let TableFactor::Table { name, alias, .. } = relation else {
        return None;
    };
    let alias = match alias {
        Some(a) => ident_name(&a.name),
        None => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(ident_name)
            .unwrap_or_default(),
    };
    Some(Returning { items, alias })
}

/// An UPDATE's or DELETE's query with its RETURNING projection (over an empty relation of
/// the table's columns), as one plan: Parse describes the returned columns, Bind binds
/// the parameters of both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub(super) struct WithReturning {
    pub(super) query: LogicalPlan,
    pub(super) returning: LogicalPlan,
}

impl UserDefinedLogicalNodeCore for WithReturning {
    fn name(&self) -> &str {
        "WithReturning"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.query, &self.returning]
    }

    fn schema(&self) -> &datafusion::common::DFSchemaRef {
        self.returning.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "WithReturning")
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        let [query, returning]: [LogicalPlan; 2] = inputs.try_into().map_err(|_| {
            datafusion::error::DataFusionError::Internal("WithReturning: two inputs".into())
        })?;
        Ok(WithReturning { query, returning })
    }
}

/// `plan` as a [`WithReturning`], if it is one.
pub(super) fn with_returning(plan: &LogicalPlan) -> Option<&WithReturning> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<WithReturning>(),
        _ => None,
    }
}

/// The parts of a RETURNING plan: its items, the alias, and the INSERT's source.
fn parts(plan: &LogicalPlan) -> Option<(&Projection, &SubqueryAlias)> {
    let LogicalPlan::Projection(p) = plan else {
        return None;
    };
    let LogicalPlan::SubqueryAlias(a) = p.input.as_ref() else {
        return None;
    };
    Some((p, a))
}

fn not_returning() -> TableError {
    TableError::Schema("INSERT … RETURNING: the plan is not a RETURNING projection".into())
}

impl SqlSession {
    /// The plan of an INSERT (without RETURNING), as the general path plans it.
    pub(super) async fn insert_plan(&self, stmt: &DfStatement) -> Result<LogicalPlan> {
        let state = self.ctx.state();
        self.require_tables(&state, stmt)?;
        crate::guard::check(stmt)?;
        let planning = state.clone();
        let stmt = stmt.clone();
        let plan = crate::interrupt::off_task(async move {
            super::colnames::statement_to_plan(&planning, stmt).await
        })
        .await?;
        let plan = crate::rows::sequence::bind_to_session(plan, &state)?;
        Ok(crate::literals::int4_literals(plan)?)
    }

    /// Rule 1 of the module doc: the RETURNING projection over the source of `insert`,
    /// the plan of the INSERT without its RETURNING clause.
    pub(super) fn returning_plan(
        &self,
        insert: LogicalPlan,
        returning: &Returning,
    ) -> Result<LogicalPlan> {
        let LogicalPlan::Dml(DmlStatement { input, .. }) = insert else {
            return Err(TableError::Unsupported(
                "RETURNING is supported on INSERT into a table only".into(),
            ));
        };
        self.returning_over(input.as_ref().clone(), returning)
    }

    /// The RETURNING projection over `source` (rows with the table's columns), called by
    /// the table's alias.
    pub(super) fn returning_over(
        &self,
        source: LogicalPlan,
        returning: &Returning,
    ) -> Result<LogicalPlan> {
        let source = LogicalPlanBuilder::from(source)
            .alias(returning.alias.as_str())?
            .build()?;
        let schema = source.schema().clone();
        let state = self.ctx.state();
        let mut exprs = Vec::new();
        let all = |exprs: &mut Vec<Expr>| {
            for (q, f) in schema.iter() {
                exprs.push(Expr::Column(Column::new(q.cloned(), f.name())));
            }
        };
        let planned = |e: &datafusion::sql::sqlparser::ast::Expr| {
            let e = ExprWithAlias {
                expr: e.clone(),
                alias: None,
            };
            state.create_logical_expr_from_sql_expr(e, &schema)
        };
        for item in &returning.items {
            match item {
                SelectItem::UnnamedExpr(e) => {
                    exprs.push(planned(e)?.alias(super::colnames::figure(e).0));
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    exprs.push(planned(expr)?.alias(ident_name(alias)));
                }
                SelectItem::Wildcard(_) => all(&mut exprs),
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) if super::relation_name(n).as_deref() == Some(returning.alias.as_str()) => {
                    all(&mut exprs)
                }
                other => {
                    return Err(TableError::Unsupported(format!(
                        "RETURNING {other} is not supported: name the inserted table's \
                         columns, expressions of them, or *"
                    )));
                }
            }
        }
        let plan = LogicalPlanBuilder::from(source).project(exprs)?.build()?;
        Ok(crate::literals::int4_literals(plan)?)
    }

    /// Rule 2 of the module doc: `insert` is the INSERT without RETURNING (for its target),
    /// `plan` the RETURNING plan (its parameters bound).
    pub(super) async fn insert_returning(
        &self,
        insert: LogicalPlan,
        plan: LogicalPlan,
    ) -> Result<Outcome> {
        let LogicalPlan::Dml(dml) = insert else {
            return Err(not_returning());
        };
        let (_, alias) = parts(&plan).ok_or_else(not_returning)?;
        let ctx = self.local_ctx();
        let source = ctx
            .execute_logical_plan(alias.input.as_ref().clone())
            .await?;
        let mut batches = crate::interrupt::off_task(source.collect()).await?;
        // The rows as the table stores them (CHAR(n) padded, UUID and JSONB canonical):
        // what RETURNING shows, and what is inserted (conforming again changes nothing).
        let temp = self.inserts_into_temp(&LogicalPlan::Dml(dml.clone()));
        if !temp
            && let Some(def) = self
                .tables
                .table(&super::stored_table(&dml.table_name)?)
                .await?
        {
            let schema = def.schema();
            batches = batches
                .into_iter()
                .map(|b| crate::write::conform(b, &def, &schema))
                .collect::<Result<Vec<_>>>()?;
        }
        // As computed (nullability may differ from the plan's), the same names and types.
        let schema = match batches.first() {
            Some(b) => b.schema(),
            None => Arc::new(alias.input.schema().as_arrow().clone()),
        };
        let rows = Arc::new(MemTable::try_new(schema.clone(), vec![batches.clone()])?);
        let scan = LogicalPlanBuilder::scan(
            TableReference::bare("inserted"),
            provider_as_source(rows),
            None,
        )?
        .build()?;
        let dml = DmlStatement::new(
            dml.table_name.clone(),
            dml.target.clone(),
            dml.op.clone(),
            Arc::new(scan),
        );
        // The items first: one that fails (an overflow) fails the statement before
        // anything is inserted, as PostgreSQL's INSERT fails as a whole.
        let (schema, rows) = self.returned(&plan, schema, batches).await?;
        self.run_insert(LogicalPlan::Dml(dml)).await?;
        Ok(Outcome::Rows(Rows {
            source: Source::Ready(schema, rows),
            abort: self.abort.clone(),
        }))
    }

    /// The RETURNING items of `plan` (a RETURNING plan) computed over `rows` (the rows as
    /// the table stores them, of `schema`): the result's columns and rows.
    pub(super) async fn returned(
        &self,
        plan: &LogicalPlan,
        schema: datafusion::arrow::datatypes::SchemaRef,
        rows: Vec<datafusion::arrow::array::RecordBatch>,
    ) -> Result<(
        datafusion::common::DFSchemaRef,
        Vec<datafusion::arrow::array::RecordBatch>,
    )> {
        let (projection, alias) = parts(plan).ok_or_else(not_returning)?;
        let rows = Arc::new(MemTable::try_new(schema, vec![rows])?);
        let scan = LogicalPlanBuilder::scan(
            TableReference::bare("returned"),
            provider_as_source(rows),
            None,
        )?
        .build()?;
        let rows = LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
            Arc::new(scan),
            alias.alias.clone(),
        )?);
        let returned = LogicalPlan::Projection(Projection::try_new(
            projection.expr.clone(),
            Arc::new(rows),
        )?);
        let schema = returned.schema().clone();
        let df = self.local_ctx().execute_logical_plan(returned).await?;
        Ok((schema, crate::interrupt::off_task(df.collect()).await?))
    }

    /// The plan of an UPDATE or DELETE … RETURNING of the table `table`: its query
    /// (`dml::plan`) and the RETURNING projection over the table's columns.
    pub(super) async fn dml_returning_plan(
        &self,
        query: LogicalPlan,
        table: &str,
        returning: &Returning,
    ) -> Result<LogicalPlan> {
        let def = self.tables.require(table).await?;
        let schema = datafusion::common::DFSchema::try_from(def.schema().as_ref().clone())?;
        let empty = LogicalPlan::EmptyRelation(datafusion::logical_expr::EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(schema),
        });
        let returning = self.returning_over(empty, returning)?;
        Ok(LogicalPlan::Extension(
            datafusion::logical_expr::Extension {
                node: Arc::new(WithReturning { query, returning }),
            },
        ))
    }

    /// Runs an UPDATE or DELETE … RETURNING whose plan is `plan` ([`WithReturning`],
    /// parameters bound). Outside a transaction it runs in one of its own, so an item that
    /// fails (an overflow) leaves nothing changed, as PostgreSQL's statement fails whole.
    pub(super) async fn dml_returning(
        &self,
        stmt: &DfStatement,
        plan: &WithReturning,
    ) -> Result<Outcome> {
        let implicit = !self.in_transaction();
        if implicit {
            self.begin();
        }
        let run = async {
            let (_, rows) = crate::dml::execute_returning(
                &self.local_ctx(),
                &self.tables,
                stmt,
                plan.query.clone(),
            )
            .await?;
            self.returned(&plan.returning, rows.schema(), vec![rows])
                .await
        };
        let result = run.await;
        if implicit {
            match &result {
                Ok(_) => {
                    self.commit().await?;
                }
                Err(_) => self.rollback().await,
            }
        }
        let (schema, rows) = result?;
        Ok(Outcome::Rows(Rows {
            source: Source::Ready(schema, rows),
            abort: self.abort.clone(),
        }))
    }
}
