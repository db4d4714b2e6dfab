//! The statements a session runs on its temporary tables (`temp.rs` holds them and states
//! the invariants): CREATE, DROP, TRUNCATE, INSERT, UPDATE, DELETE; ALTER TABLE refused.

use datafusion::logical_expr::dml::{InsertOp, WriteOp};
use datafusion::logical_expr::{CreateMemoryTable, LogicalPlan};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{ObjectType, Statement as SqlStatement};

use super::session::{Outcome, SqlSession, inserted};
use super::temp::{TEMP_SCHEMA, check_dml};
use crate::error::{Result, TableError};

impl SqlSession {
    /// `CREATE TEMP TABLE` (its `TEMPORARY` taken off before DataFusion planned it; `extras`:
    /// whether it also declared SERIAL columns, ORDER BY or PARTITION BY).
    pub(super) async fn create_temp(&self, c: CreateMemoryTable, extras: bool) -> Result<Outcome> {
        let name = c.name.table().to_string();
        if let Some(schema) = c.name.schema()
            && schema != TEMP_SCHEMA
        {
            return Err(TableError::Column {
                code: "42P16",
                message: "cannot create temporary relation in non-temporary schema".into(),
            });
        }
        if !c.constraints.is_empty() || extras {
            return Err(TableError::Unsupported(format!(
                "temporary table {name}: keys, constraints, SERIAL, ORDER BY and PARTITION BY \
                 are for stored tables; leave them out"
            )));
        }
        if self.temp.has(&name) {
            if c.if_not_exists {
                self.notice(
                    "42P07",
                    &format!("relation \"{name}\" already exists, skipping"),
                );
                return Ok(Outcome::Command("CREATE TABLE".into()));
            }
            return Err(TableError::TableExists(name));
        }
        let is_ctas = !matches!(c.input.as_ref(), LogicalPlan::EmptyRelation(_));
        let mut schema = c.input.schema().as_arrow().clone();
        if is_ctas {
            // A column made by CREATE TABLE … AS takes NULLs, whatever the query's column.
            let fields: Vec<_> = schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect();
            schema = datafusion::arrow::datatypes::Schema::new(fields);
        }
        let schema = std::sync::Arc::new(schema);
        let before = self.temp.before_change(self.in_transaction()).await;
        self.temp
            .create(&name, schema, c.column_defaults.into_iter().collect())
            .await?;
        if !is_ctas {
            return Ok(Outcome::Command("CREATE TABLE".into()));
        }
        let rows = self
            .append_to_temp(&name, c.input.as_ref().clone(), before)
            .await?;
        Ok(Outcome::Command(format!("SELECT {rows}")))
    }

    /// DROP TABLE, TRUNCATE, ALTER TABLE, UPDATE and DELETE naming a temporary table; `None`
    /// for any other statement. `plan`: an UPDATE's or DELETE's plan with its parameters
    /// bound, taken if used.
    pub(super) async fn temp_statement(
        &self,
        stmt: &DfStatement,
        plan: &mut Option<LogicalPlan>,
    ) -> Result<Option<Outcome>> {
        if !self.temp.named_in(stmt) {
            return Ok(None);
        }
        let DfStatement::Statement(s) = stmt else {
            return Ok(None);
        };
        let tag = match s.as_ref() {
            SqlStatement::Drop {
                object_type: ObjectType::Table,
                names,
                if_exists,
                cascade,
                ..
            } => {
                let (temp, stored): (Vec<_>, Vec<_>) =
                    names.iter().partition(|n| self.temp.resolve(n).is_some());
                if !stored.is_empty() {
                    let stored = stored
                        .into_iter()
                        .map(super::ddl::table_name)
                        .collect::<Result<Vec<_>>>()?;
                    let dropped = self
                        .tables
                        .drop_tables(
                            &stored,
                            *if_exists,
                            crate::viewdeps::Dependents::cascade_if(*cascade),
                        )
                        .await?;
                    self.cascade_notice(&dropped.cascaded);
                    self.schema.refresh().await?;
                }
                let before = self.temp.before_change(self.in_transaction()).await;
                for n in temp {
                    self.temp
                        .drop_table(&self.temp.resolve(n).unwrap_or_default());
                }
                self.temp.after_change(before).await?;
                "DROP TABLE"
            }
            SqlStatement::Truncate(t) => {
                let (temp, stored): (Vec<_>, Vec<_>) = t
                    .table_names
                    .iter()
                    .partition(|n| self.temp.resolve(&n.name).is_some());
                if !stored.is_empty() {
                    let stored = stored
                        .into_iter()
                        .map(|n| super::ddl::table_name(&n.name))
                        .collect::<Result<Vec<_>>>()?;
                    self.tables.truncate(&stored).await?;
                }
                let before = self.temp.before_change(self.in_transaction()).await;
                for n in temp {
                    self.temp
                        .truncate(&self.temp.resolve(&n.name).unwrap_or_default())?;
                }
                self.temp.after_change(before).await?;
                "TRUNCATE TABLE"
            }
            SqlStatement::AlterTable(at) if self.temp.resolve(&at.name).is_some() => {
                return Err(TableError::Unsupported(format!(
                    "ALTER TABLE on the temporary table {}: create it again with the new \
                     shape instead",
                    at.name
                )));
            }
            SqlStatement::Update(_) | SqlStatement::Delete(_)
                if crate::dml::is_update_or_delete(stmt) =>
            {
                let Some(target) = crate::dml::target_table(stmt) else {
                    return Ok(None);
                };
                if !self.temp.has(&target) {
                    return Ok(None); // a stored table, reading a temporary one
                }
                check_dml(s)?;
                let plan = match plan.take() {
                    Some(p) => p,
                    None => self.ctx.state().statement_to_plan(stmt.clone()).await?,
                };
                let before = self.temp.before_change(self.in_transaction()).await;
                let n = async {
                    let df = self.exec_ctx().execute_logical_plan(plan).await?;
                    Ok::<_, TableError>(inserted(&crate::interrupt::off_task(df.collect()).await?))
                }
                .await;
                let n = match n {
                    Ok(n) => n,
                    Err(e) => {
                        self.temp.failed_change(before).await?;
                        return Err(e);
                    }
                };
                self.temp.after_change(before).await?;
                return Ok(Some(Outcome::Command(format!(
                    "{} {n}",
                    crate::dml::verb(stmt)
                ))));
            }
            _ => return Ok(None),
        };
        Ok(Some(Outcome::Command(tag.into())))
    }

    /// Runs `insert` (an INSERT into a temporary table: its rows, as DataFusion planned
    /// them to the table's columns, appended by `TempTables::append`).
    pub(super) async fn insert_into_temp(&self, insert: LogicalPlan) -> Result<u64> {
        let LogicalPlan::Dml(dml) = insert else {
            return Err(TableError::Schema("not an INSERT".into()));
        };
        if !matches!(dml.op, WriteOp::Insert(InsertOp::Append)) {
            return Err(TableError::Unsupported(format!(
                "{} into a temporary table is not supported: use INSERT",
                dml.op
            )));
        }
        let before = self.temp.before_change(self.in_transaction()).await;
        self.append_to_temp(dml.table_name.table(), dml.input.as_ref().clone(), before)
            .await
    }

    /// Appends the rows of `rows` to temporary table `name`; on a failure the tables go
    /// back to `before`.
    async fn append_to_temp(
        &self,
        name: &str,
        rows: LogicalPlan,
        before: super::temp::Snapshot,
    ) -> Result<u64> {
        let appended = async {
            let df = self.exec_ctx().execute_logical_plan(rows).await?;
            let stream = df.execute_stream().await?;
            let temp = self.temp.clone();
            let name = name.to_string();
            crate::interrupt::off_task(async move { temp.append(&name, stream).await }).await
        }
        .await;
        match appended {
            Ok(n) => {
                self.temp.after_change(before).await?;
                Ok(n)
            }
            Err(e) => {
                self.temp.failed_change(before).await?;
                Err(e)
            }
        }
    }

    /// Whether `plan` is an INSERT into one of this session's temporary tables.
    pub(super) fn inserts_into_temp(&self, plan: &LogicalPlan) -> bool {
        match plan {
            LogicalPlan::Dml(dml) => {
                let t = &dml.table_name;
                t.schema()
                    .is_none_or(|s| s == TEMP_SCHEMA || s == super::SCHEMA)
                    && self.temp.has(t.table())
            }
            _ => false,
        }
    }
}
