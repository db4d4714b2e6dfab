//! `INSERT … ON CONFLICT [(columns) | ON CONSTRAINT name] DO NOTHING | DO UPDATE SET … [WHERE
//! …]`: the upsert of ORMs and loaders (SQLAlchemy's `on_conflict_do_update`, Django's
//! `bulk_create(update_conflicts=True)`, ActiveRecord's `upsert_all`).
//!
//! DataFusion plans no ON CONFLICT, so tierdb takes the clause out and plans the rest:
//!
//! 1. **The plan** ([`SqlSession::upsert_plan`]) is one [`UpsertPlan`] node holding the
//!    INSERT without the clause (its source: the proposed rows, defaults and sequences
//!    filled in), the `DO UPDATE` projection (every column's new value, then the `WHERE`)
//!    over an empty relation of the existing row's columns (named by the table or its
//!    alias) and the proposed row's (`excluded`), and the RETURNING projection. Bind
//!    replaces the parameters in all three, so `SET b = $3` is prepared like any value.
//! 2. **The arbiter** ([`arbiters`]): the conflict target names the primary key or a
//!    unique index by its columns (in any order) or by its constraint name; none matching
//!    is 42P10, as PostgreSQL says. `DO NOTHING` without a target is arbitrated by every
//!    unique index and the key; `DO UPDATE` needs a target (42601). A columnar table has no
//!    unique constraint: `DO NOTHING` without a target is a plain INSERT there, and a
//!    target is 42P10; so it is on a temporary table, which has no constraints.
//! 3. **Running it** ([`SqlSession::upsert`]): the proposed rows are computed once and put
//!    in the stored form, NOT NULL is checked on all of them (as PostgreSQL checks before
//!    the conflict), then `rows/upsert.rs` inserts or finds each one's conflict under
//!    locks; the `DO UPDATE` values of all conflicts are computed in one batch, then
//!    written. RETURNING is computed over the rows inserted and updated, in the order they
//!    were proposed, before anything is committed; the tag counts the same rows.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{Column, DFSchema, DFSchemaRef, TableReference};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::dml::DmlStatement;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{
    EmptyRelation, Expr, ExprSchemable, Extension, LogicalPlan, LogicalPlanBuilder, Projection,
    UserDefinedLogicalNodeCore, lit,
};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, DoUpdate, Expr as SqlExpr, ExprWithAlias, OnConflict,
    OnConflictAction, OnInsert, Statement as SqlStatement,
};

use super::returning::Returning;
use super::session::{Outcome, Rows, Source};
use super::{SqlSession, ident_name};
use crate::catalog::TableDef;
use crate::error::{Result, TableError};
use crate::rows::upsert::{self as rows_upsert, Arbiter};

/// The name the `DO UPDATE` plan gives the `WHERE` result, after the columns.
const WHERE: &str = "__upsert_where";

/// An INSERT's ON CONFLICT clause, taken out of the statement.
#[derive(Debug, Clone)]
pub(super) struct Clause {
    target: Option<ConflictTarget>,
    action: OnConflictAction,
    /// What the existing row is called in `DO UPDATE`: the table's alias or name.
    alias: String,
    returning: Option<Returning>,
}

/// Takes ON CONFLICT (and RETURNING, and the table's alias) out of `stmt`, if it is an
/// INSERT with ON CONFLICT.
pub(super) fn take(stmt: &mut DfStatement) -> Result<Option<Clause>> {
    let DfStatement::Statement(s) = stmt else {
        return Ok(None);
    };
    let SqlStatement::Insert(insert) = s.as_mut() else {
        return Ok(None);
    };
    if !matches!(insert.on, Some(OnInsert::OnConflict(_))) {
        return Ok(None);
    }
    let Some(OnInsert::OnConflict(OnConflict {
        conflict_target,
        action,
    })) = insert.on.take()
    else {
        return Ok(None);
    };
    if matches!(action, OnConflictAction::DoUpdate(_)) && conflict_target.is_none() {
        return Err(TableError::Column {
            code: "42601",
            message: "ON CONFLICT DO UPDATE requires inference specification or constraint \
                      name (HINT: For example, ON CONFLICT (column_name).)"
                .into(),
        });
    }
    let alias = super::returning::table_name_in(
        insert.table_alias.as_ref().map(|a| &a.alias),
        &insert.table,
    );
    let returning = super::returning::take(stmt);
    if let DfStatement::Statement(s) = stmt
        && let SqlStatement::Insert(insert) = s.as_mut()
    {
        insert.table_alias = None;
    }
    Ok(Some(Clause {
        target: conflict_target,
        action,
        alias,
        returning,
    }))
}

/// Rule 2 of the module doc: what arbitrates a conflict on `def` (empty: nothing can
/// conflict, a plain INSERT).
pub(crate) fn arbiters(
    def: &TableDef,
    target: Option<&ConflictTarget>,
    update: bool,
) -> Result<Vec<Arbiter>> {
    let no_match = || TableError::Column {
        code: "42P10",
        message: "there is no unique or exclusion constraint matching the ON CONFLICT \
                  specification"
            .into(),
    };
    let Some(target) = target else {
        return Ok(if def.is_row_table() && !update {
            rows_upsert::all_arbiters(def)
        } else {
            Vec::new()
        });
    };
    if !def.is_row_table() {
        return Err(no_match());
    }
    let short = def.name.rsplit('.').next().unwrap_or(&def.name);
    match target {
        ConflictTarget::Columns(cols) => {
            let mut names: Vec<String> = cols.iter().map(ident_name).collect();
            for n in &names {
                if def.column_index(n).is_none() {
                    return Err(TableError::Column {
                        code: "42703",
                        message: format!("column \"{n}\" does not exist"),
                    });
                }
            }
            names.sort();
            names.dedup();
            let same = |cols: &[String]| {
                let mut c = cols.to_vec();
                c.sort();
                c == names
            };
            if same(&def.primary_key) {
                return Ok(vec![Arbiter::Key]);
            }
            def.indexes
                .iter()
                .position(|i| i.unique && same(&i.columns))
                .map(|n| vec![Arbiter::Index(n)])
                .ok_or_else(no_match)
        }
        ConflictTarget::OnConstraint(name) => {
            let name = super::ident_name_of(name);
            if name == format!("{short}_pkey") {
                return Ok(vec![Arbiter::Key]);
            }
            def.indexes
                .iter()
                .position(|i| i.unique && i.constraint && i.name == name)
                .map(|n| vec![Arbiter::Index(n)])
                .ok_or_else(|| TableError::Column {
                    code: "42704",
                    message: format!("constraint \"{name}\" for table \"{short}\" does not exist"),
                })
        }
    }
}

/// Rule 1 of the module doc: the INSERT, the `DO UPDATE` projection and RETURNING, as one
/// plan whose parameters Bind replaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub(super) struct UpsertPlan {
    insert: LogicalPlan,
    update: Option<LogicalPlan>,
    returning: Option<LogicalPlan>,
}

impl UserDefinedLogicalNodeCore for UpsertPlan {
    fn name(&self) -> &str {
        "Upsert"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        let mut out = vec![&self.insert];
        out.extend(&self.update);
        out.extend(&self.returning);
        out
    }

    fn schema(&self) -> &DFSchemaRef {
        self.returning.as_ref().unwrap_or(&self.insert).schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Upsert: INSERT … ON CONFLICT")
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        let mut inputs = inputs.into_iter();
        let mut next = || {
            inputs.next().ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("Upsert: an input is missing".into())
            })
        };
        Ok(UpsertPlan {
            insert: next()?,
            update: self.update.as_ref().map(|_| next()).transpose()?,
            returning: self.returning.as_ref().map(|_| next()).transpose()?,
        })
    }
}

/// A parameter alone as a value (`SET b = $1`) has the column's type, as PostgreSQL infers.
fn typed_parameter(e: Expr, ty: &DataType) -> Expr {
    match e {
        Expr::Placeholder(Placeholder { id, field: None }) => Expr::Placeholder(
            Placeholder::new_with_field(id, Some(Arc::new(Field::new("", ty.clone(), true)))),
        ),
        other => other,
    }
}

/// The columns of the existing row (qualified by `alias`) then of the proposed one
/// (`excluded`), all nullable.
fn update_input_schema(def: &TableDef, alias: &str) -> Result<DFSchema> {
    let arrow = def.schema();
    let mut fields = Vec::new();
    for q in [alias, "excluded"] {
        for f in arrow.fields() {
            fields.push((
                Some(TableReference::bare(q)),
                Arc::new(f.as_ref().clone().with_nullable(true)),
            ));
        }
    }
    Ok(DFSchema::new_with_metadata(fields, HashMap::new())?)
}

impl SqlSession {
    /// Rule 1 of the module doc; `stmt` is the INSERT without the clause.
    pub(super) async fn upsert_plan(
        &self,
        stmt: &DfStatement,
        clause: &Clause,
    ) -> Result<LogicalPlan> {
        let insert = self.insert_plan(stmt).await?;
        let def = self.upsert_target(&insert).await?;
        let update = match &clause.action {
            OnConflictAction::DoUpdate(u) => {
                arbiters(&def, clause.target.as_ref(), true)?;
                Some(self.update_plan(&def, &clause.alias, u)?)
            }
            OnConflictAction::DoNothing => {
                arbiters(&def, clause.target.as_ref(), false)?;
                None
            }
        };
        let returning = match &clause.returning {
            Some(r) => Some(self.returning_plan(insert.clone(), r)?),
            None => None,
        };
        Ok(LogicalPlan::Extension(Extension {
            node: Arc::new(UpsertPlan {
                insert,
                update,
                returning,
            }),
        }))
    }

    /// The table an upsert writes (a temporary table: one without keys).
    async fn upsert_target(&self, insert: &LogicalPlan) -> Result<TableDef> {
        let LogicalPlan::Dml(dml) = insert else {
            return Err(TableError::Unsupported(
                "ON CONFLICT is supported on INSERT into a table only".into(),
            ));
        };
        if self.inserts_into_temp(insert) {
            // A temporary table has no key or unique index (temp.rs rule 4): as a columnar
            // table, nothing can conflict (rule 2), and a conflict target matches nothing.
            return Ok(TableDef {
                id: 0,
                name: dml.table_name.table().to_string(),
                columns: Vec::new(),
                sort_key: Vec::new(),
                partition_key: None,
                created_ms: 0,
                dropped: Vec::new(),
                primary_key: Vec::new(),
                defaults: Vec::new(),
                indexes: Vec::new(),
                comments: Default::default(),
                missing: Vec::new(),
            });
        }
        let name = super::stored_table(&dml.table_name)?;
        self.tables.require(&name).await
    }

    /// The `DO UPDATE` projection: every column's new value, then the `WHERE`.
    fn update_plan(&self, def: &TableDef, alias: &str, u: &DoUpdate) -> Result<LogicalPlan> {
        let schema = update_input_schema(def, alias)?;
        let state = self.ctx.state();
        let arrow = def.schema();
        let planned = |e: &SqlExpr| -> Result<Expr> {
            // A column named alone is ambiguous (42702) where both rows have it, as in
            // PostgreSQL: `u.n` is the existing row's, `excluded.n` the proposed one's.
            let e = ExprWithAlias {
                expr: e.clone(),
                alias: None,
            };
            Ok(state.create_logical_expr_from_sql_expr(e, &schema)?)
        };
        let mut values: Vec<Option<Expr>> = vec![None; def.columns.len()];
        for a in &u.assignments {
            let AssignmentTarget::ColumnName(name) = &a.target else {
                return Err(TableError::Unsupported(
                    "ON CONFLICT DO UPDATE SET (a, b) = … is not supported: assign each column"
                        .into(),
                ));
            };
            let column = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(ident_name)
                .unwrap_or_default();
            let Some(i) = def.column_index(&column) else {
                return Err(TableError::Column {
                    code: "42703",
                    message: format!(
                        "column \"{column}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                });
            };
            if values[i].is_some() {
                return Err(TableError::Column {
                    code: "42601",
                    message: format!("multiple assignments to same column \"{column}\""),
                });
            }
            let ty = arrow.field(i).data_type();
            values[i] = Some(typed_parameter(planned(&a.value)?, ty).cast_to(ty, &schema)?);
        }
        let mut exprs: Vec<Expr> = values
            .into_iter()
            .zip(&def.columns)
            .map(|(v, c)| {
                v.unwrap_or_else(|| Expr::Column(Column::new(Some(alias), &c.name)))
                    .alias(&c.name)
            })
            .collect();
        let chosen = match &u.selection {
            Some(w) => {
                let (w, _) = planned(w)?.infer_placeholder_types(&schema)?;
                w.cast_to(&DataType::Boolean, &schema)?
            }
            None => lit(true),
        };
        exprs.push(chosen.alias(WHERE));
        let input = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(schema),
        });
        let plan = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(input))?);
        // `SET n = 2147483647 + u.n` is INT arithmetic, as in PostgreSQL (22003).
        Ok(crate::literals::int4_literals(plan)?)
    }

    /// Rule 3 of the module doc. `stmt` is the INSERT without the clause, `plan` its
    /// [`UpsertPlan`] with the parameters bound (made here if `None`).
    pub(super) async fn upsert(
        &self,
        stmt: &DfStatement,
        plan: Option<LogicalPlan>,
        clause: Clause,
    ) -> Result<Outcome> {
        let plan = match plan {
            Some(p) => p,
            None => self.upsert_plan(stmt, &clause).await?,
        };
        let LogicalPlan::Extension(Extension { node }) = &plan else {
            return Err(TableError::Schema(
                "ON CONFLICT: the plan is not an upsert".into(),
            ));
        };
        let Some(up) = node.as_any().downcast_ref::<UpsertPlan>() else {
            return Err(TableError::Schema(
                "ON CONFLICT: the plan is not an upsert".into(),
            ));
        };
        let def = self.upsert_target(&up.insert).await?;
        let update = matches!(clause.action, OnConflictAction::DoUpdate(_));
        let arbiters = arbiters(&def, clause.target.as_ref(), update)?;
        if arbiters.is_empty() {
            // Rule 2: nothing can conflict.
            return match &up.returning {
                Some(r) => self.insert_returning(up.insert.clone(), r.clone()).await,
                None => {
                    let n = self.run_insert(up.insert.clone()).await?;
                    Ok(Outcome::Command(format!("INSERT 0 {n}")))
                }
            };
        }
        let LogicalPlan::Dml(DmlStatement { input, .. }) = &up.insert else {
            return Err(TableError::Schema("ON CONFLICT: not an INSERT".into()));
        };
        let ctx = self.local_ctx();
        let df = ctx.execute_logical_plan(input.as_ref().clone()).await?;
        let batches = crate::interrupt::off_task(df.collect()).await?;
        let schema = def.schema();
        let batches = batches
            .into_iter()
            .map(|b| crate::write::conform(b, &def, &schema))
            .collect::<Result<Vec<_>>>()?;
        let proposed = compute::concat_batches(&schema, &batches)?;
        crate::rows::dml::check_not_null(&def, &proposed)?;

        let tx = self.abort.slot.current();
        let local = parking_lot::Mutex::new(crate::rows::RowWrites::default());
        let writes = tx.as_ref().map_or(&local, |t| &t.rows);
        let outcome =
            rows_upsert::insert(&self.tables, &def, &proposed, &arbiters, update, writes).await?;
        let (new, updated) = match (&up.update, outcome.conflicts.is_empty()) {
            (Some(u), false) => {
                let (new, chosen) = self
                    .updated_rows(&def, &clause.alias, u, &proposed, &outcome)
                    .await?;
                let updated = rows_upsert::update(
                    &self.tables,
                    &def,
                    &outcome.conflicts,
                    &new,
                    &chosen,
                    writes,
                )
                .await?;
                (Some(new), updated)
            }
            _ => (None, Vec::new()),
        };
        let count = outcome.inserted.len() + updated.len();
        let result = match &up.returning {
            Some(r) => {
                // Inserted and updated rows, in the order they were proposed.
                let mut order: Vec<(usize, usize, usize)> = outcome
                    .inserted
                    .iter()
                    .map(|&row| (row, 0, row))
                    .chain(
                        updated
                            .iter()
                            .map(|&i| (outcome.conflicts[i].proposed, 1, i)),
                    )
                    .collect();
                order.sort_unstable();
                let pick: Vec<(usize, usize)> = order.iter().map(|&(_, b, i)| (b, i)).collect();
                let sources: Vec<&RecordBatch> = match &new {
                    Some(n) => vec![&proposed, n],
                    None => vec![&proposed],
                };
                let rows = interleave_rows(&schema, &sources, &pick)?;
                let (schema, rows) = self.returned(r, schema.clone(), vec![rows]).await?;
                Some((schema, rows))
            }
            None => None,
        };
        if tx.is_none() {
            let mut w = local.into_inner();
            crate::rows::commit(&self.tables, &mut w).await?;
        }
        Ok(match result {
            Some((schema, rows)) => Outcome::Rows(Rows {
                source: Source::Ready(schema, rows),
                abort: self.abort.clone(),
            }),
            None => Outcome::Command(format!("INSERT 0 {count}")),
        })
    }

    /// The new rows of the `DO UPDATE` conflicts (the table's columns, stored form) and
    /// whether each one's `WHERE` held, computed in one batch.
    async fn updated_rows(
        &self,
        def: &TableDef,
        alias: &str,
        update: &LogicalPlan,
        proposed: &RecordBatch,
        outcome: &rows_upsert::Outcome,
    ) -> Result<(RecordBatch, BooleanArray)> {
        let LogicalPlan::Projection(projection) = update else {
            return Err(TableError::Schema(
                "ON CONFLICT: DO UPDATE is not a projection".into(),
            ));
        };
        let arrow = def.schema();
        let n = def.columns.len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(2 * n);
        let mut fields = Vec::with_capacity(2 * n);
        for (i, f) in arrow.fields().iter().enumerate() {
            let old: Vec<_> = outcome.conflicts.iter().map(|c| c.old[i].clone()).collect();
            let array = datafusion::common::ScalarValue::iter_to_array(old)?;
            columns.push(compute::cast(&array, f.data_type())?);
            fields.push(Field::new(format!("o{i}"), f.data_type().clone(), true));
        }
        let at = UInt32Array::from_iter_values(outcome.conflicts.iter().map(|c| c.proposed as u32));
        for (i, f) in arrow.fields().iter().enumerate() {
            columns.push(compute::take(proposed.column(i), &at, None)?);
            fields.push(Field::new(format!("e{i}"), f.data_type().clone(), true));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let rows = Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]])?);
        let scan = LogicalPlanBuilder::scan(
            TableReference::bare("upsert_rows"),
            provider_as_source(rows),
            None,
        )?
        .build()?;
        let mut requalified = Vec::with_capacity(2 * n);
        for (q, prefix) in [(alias, "o"), ("excluded", "e")] {
            for (i, c) in def.columns.iter().enumerate() {
                requalified.push(
                    Expr::Column(Column::new(Some("upsert_rows"), format!("{prefix}{i}")))
                        .alias_qualified(Some(q), &c.name),
                );
            }
        }
        let input = LogicalPlan::Projection(Projection::try_new(requalified, Arc::new(scan))?);
        let plan = LogicalPlan::Projection(Projection::try_new(
            projection.expr.clone(),
            Arc::new(input),
        )?);
        let df = self.local_ctx().execute_logical_plan(plan).await?;
        let out = crate::interrupt::off_task(df.collect()).await?;
        let out = compute::concat_batches(
            &out.first()
                .map_or_else(|| Arc::new(Schema::empty()), |b| b.schema()),
            &out,
        )?;
        let chosen = out
            .column(n)
            .as_any()
            .downcast_ref::<BooleanArray>()
            .cloned()
            .ok_or_else(|| TableError::Schema("ON CONFLICT: WHERE is not boolean".into()))?;
        // NOT NULL is checked before the batch takes the table's (non-nullable) fields.
        let nullable: Vec<Field> = arrow
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let new =
            RecordBatch::try_new(Arc::new(Schema::new(nullable)), out.columns()[..n].to_vec())?;
        crate::rows::dml::check_not_null(def, &new)?;
        let new = crate::write::conform(new, def, &arrow)?;
        Ok((new, chosen))
    }
}

/// The rows `pick` names ((which of `sources`, row)), in that order, as one batch.
fn interleave_rows(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    sources: &[&RecordBatch],
    pick: &[(usize, usize)],
) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for c in 0..schema.fields().len() {
        let arrays: Vec<&dyn Array> = sources.iter().map(|b| b.column(c).as_ref()).collect();
        columns.push(compute::interleave(&arrays, pick)?);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}
