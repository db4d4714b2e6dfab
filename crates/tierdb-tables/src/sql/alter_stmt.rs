//! ALTER TABLE a session carries out on the catalog: RENAME TO, ADD COLUMN (with its
//! DEFAULT evaluated once), DROP COLUMN, and the constraints and renames `alter.rs` lists;
//! the whole statement one catalog commit, other forms refused before anything changes.
//! ALTER COLUMN … TYPE is `alter_type.rs`; the rest of DDL is `ddl.rs`.

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, Statement as SqlStatement};

use super::ddl::{UNIQUE_CONSTRAINT, default_text, index_columns, table_name, unique_name};
use super::namespaces::renamed;
use super::{SqlSession, ident_name};
use crate::catalog::{ColumnDef, ColumnType};
use crate::error::{Result, TableError};

impl SqlSession {
    /// ALTER TABLE: RENAME TO, ADD COLUMN, DROP COLUMN (see `alter.rs`), the whole
    /// statement one commit; other forms are refused before anything changes.
    pub(super) async fn alter_table(
        &self,
        at: &datafusion::sql::sqlparser::ast::AlterTable,
    ) -> Result<()> {
        use crate::alter::TableChange;
        use datafusion::sql::sqlparser::ast::{
            AlterColumnOperation as ColumnOp, AlterTableOperation as Op, RenameTableNameKind,
        };
        let name = table_name(&at.name)?;
        if self.tables.table(&name).await?.is_none() {
            if let [
                Op::RenameTable {
                    table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
                },
            ] = at.operations.as_slice()
                && self.tables.view(&name).await?.is_some()
            {
                self.tables.rename_view(&name, &renamed(&name, n)?).await?;
                self.schema.refresh().await?;
                return Ok(());
            }
            if at.if_exists {
                self.skipping("relation", &name, "does not exist");
                return Ok(());
            }
        }
        if let [
            Op::AddConstraint {
                constraint: datafusion::sql::sqlparser::ast::TableConstraint::PrimaryKey(pk),
                ..
            },
        ] = at.operations.as_slice()
        {
            let mut columns = Vec::new();
            for c in &pk.columns {
                match &c.column.expr {
                    SqlExpr::Identifier(id) => columns.push(ident_name(id)),
                    other => {
                        return Err(TableError::Unsupported(format!(
                            "PRIMARY KEY ({other}): keys are columns"
                        )));
                    }
                }
            }
            crate::rows::convert::add_primary_key(&self.local_ctx(), &self.tables, &name, columns)
                .await?;
            self.schema.refresh().await?;
            return Ok(());
        }
        if let [
            Op::AddConstraint {
                constraint: datafusion::sql::sqlparser::ast::TableConstraint::Unique(u),
                ..
            },
        ] = at.operations.as_slice()
        {
            let columns = index_columns(&u.columns, "UNIQUE")?;
            let index = match &u.name {
                Some(n) => ident_name(n),
                None => unique_name(&name, &columns),
            };
            self.tables
                .create_index(&name, &index, columns, UNIQUE_CONSTRAINT)
                .await?;
            self.schema.refresh().await?;
            return Ok(());
        }
        let retypes: Vec<super::alter_type::Retype> = at
            .operations
            .iter()
            .filter_map(|op| match op {
                Op::AlterColumn {
                    column_name,
                    op:
                        ColumnOp::SetDataType {
                            data_type, using, ..
                        },
                } => Some(super::alter_type::Retype {
                    column: column_name,
                    data_type,
                    using: using.as_ref(),
                }),
                _ => None,
            })
            .collect();
        if !retypes.is_empty() {
            if retypes.len() != at.operations.len() {
                return Err(TableError::Unsupported(
                    "ALTER COLUMN … TYPE together with other changes in one ALTER TABLE is not \
                     supported: run them as separate statements"
                        .into(),
                ));
            }
            return self.alter_column_types(&name, &retypes).await;
        }
        if let Some(def) = self.tables.table(&name).await?
            && def.is_row_table()
            && at
                .operations
                .iter()
                .any(|op| matches!(op, Op::DropColumn { .. }))
        {
            let mut dropped = Vec::new();
            for op in &at.operations {
                let Op::DropColumn {
                    column_names,
                    if_exists,
                    ..
                } = op
                else {
                    return Err(TableError::Unsupported(
                        "DROP COLUMN of a table with a PRIMARY KEY together with other changes \
                         in one ALTER TABLE is not supported: run them as separate statements"
                            .into(),
                    ));
                };
                dropped.extend(column_names.iter().map(|c| (ident_name(c), *if_exists)));
            }
            return self.drop_row_columns(&name, &dropped).await;
        }
        let mut changes = Vec::new();
        for op in &at.operations {
            changes.push(match op {
                Op::RenameTable {
                    table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
                } => TableChange::RenameTo(renamed(&name, n)?),
                Op::AddColumn {
                    if_not_exists,
                    column_def,
                    ..
                } => {
                    let (column, default) = self.added_column(&name, column_def).await?;
                    TableChange::AddColumn {
                        column,
                        if_not_exists: *if_not_exists,
                        default,
                    }
                }
                Op::DropColumn {
                    column_names,
                    if_exists,
                    ..
                } => {
                    for c in column_names {
                        changes.push(TableChange::DropColumn {
                            name: ident_name(c),
                            if_exists: *if_exists,
                        });
                    }
                    continue;
                }
                Op::AlterColumn {
                    column_name,
                    op: op @ (ColumnOp::SetNotNull | ColumnOp::DropNotNull),
                } => TableChange::NotNull {
                    name: ident_name(column_name),
                    not_null: matches!(op, ColumnOp::SetNotNull),
                },
                Op::AlterColumn {
                    column_name,
                    op: ColumnOp::SetDefault { value },
                } => TableChange::Default {
                    name: ident_name(column_name),
                    sql: Some(self.default_sql(&name, column_name, value).await?),
                },
                Op::RenameColumn {
                    old_column_name,
                    new_column_name,
                } => TableChange::RenameColumn {
                    from: ident_name(old_column_name),
                    to: ident_name(new_column_name),
                },
                Op::AlterColumn {
                    column_name,
                    op: ColumnOp::DropDefault,
                } => TableChange::Default {
                    name: ident_name(column_name),
                    sql: None,
                },
                other => {
                    return Err(TableError::Unsupported(format!(
                        "ALTER TABLE … {other} is not supported: tierdb alters tables with \
                         RENAME TO, RENAME COLUMN, ADD COLUMN, DROP COLUMN and ALTER COLUMN \
                         TYPE, SET/DROP NOT NULL and SET/DROP DEFAULT"
                    )));
                }
            });
        }
        let before = self.tables.table(&name).await?;
        // A columnar table's rows this transaction wrote cannot read a DEFAULT's value
        // either (alter.rs rule 6; ownddl.rs follows its segments by name only).
        if let (Some(def), Some(tx)) = (&before, self.abort.slot.current())
            && !def.is_row_table()
            && tx.wrote(def.id)
            && changes.iter().any(|c| {
                matches!(c, TableChange::AddColumn { default: Some(d), .. } if !d.value.is_null())
            })
        {
            return Err(TableError::Unsupported(format!(
                "ADD COLUMN with a DEFAULT on {name}, a table without a PRIMARY KEY this \
                 transaction wrote rows of, is not supported: add the column before writing, \
                 or UPDATE it after"
            )));
        }
        self.tables.alter_table(&name, &changes).await?;
        if let Some(def) = before {
            for c in &changes {
                match c {
                    TableChange::AddColumn {
                        column,
                        if_not_exists: true,
                        ..
                    } if def.column_index(&column.name).is_some() => self.notice(
                        "42701",
                        &format!(
                            "column \"{}\" of relation \"{name}\" already exists, skipping",
                            column.name
                        ),
                    ),
                    TableChange::DropColumn {
                        name: column,
                        if_exists: true,
                    } if def.column_index(column).is_none() => self.notice(
                        "00000",
                        &format!(
                            "column \"{column}\" of relation \"{name}\" does not exist, skipping"
                        ),
                    ),
                    _ => {}
                }
            }
        }
        self.schema.refresh().await?;
        Ok(())
    }

    /// The SQL text a DEFAULT is kept as: the expression planned as CREATE TABLE plans a
    /// column's default (so a subquery is refused the same way), then written back.
    pub(super) async fn default_sql(
        &self,
        table: &str,
        column: &datafusion::sql::sqlparser::ast::Ident,
        value: &SqlExpr,
    ) -> Result<String> {
        let def = self.tables.require(table).await?;
        let name = ident_name(column);
        let Some(c) = def.columns.iter().find(|c| c.name == name) else {
            return Err(TableError::Column {
                code: "42703",
                message: format!("column \"{name}\" of relation \"{table}\" does not exist"),
            });
        };
        Ok(self.default_expr(table, &name, c.ty, value).await?.0)
    }

    /// A column of ADD COLUMN and its DEFAULT, if it has one: its SQL text, and its value
    /// evaluated once in the column's type (`alter.rs` rule 6).
    async fn added_column(
        &self,
        table: &str,
        c: &datafusion::sql::sqlparser::ast::ColumnDef,
    ) -> Result<(ColumnDef, Option<crate::alter::AddedDefault>)> {
        use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
        use datafusion::arrow::datatypes::Schema;
        use datafusion::logical_expr::ColumnarValue;
        use datafusion::sql::sqlparser::ast::ColumnOption;
        let mut plain = c.clone();
        let mut default = None;
        plain.options.retain(|o| match &o.option {
            ColumnOption::Default(e) => {
                default = Some(e.clone());
                false
            }
            _ => true,
        });
        let column = self.column_def(&plain).await?;
        let Some(value) = default else {
            return Ok((column, None));
        };
        let (sql, expr) = self
            .default_expr(table, &column.name, column.ty, &value)
            .await?;
        let volatile = expr.is_volatile();
        let value = if volatile {
            ScalarValue::try_from(column.ty.arrow())?
        } else {
            let cast = datafusion::logical_expr::cast(expr, column.ty.arrow());
            let phys = self
                .ctx
                .create_physical_expr(cast, &datafusion::common::DFSchema::empty())?;
            let one_row = RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                vec![],
                &RecordBatchOptions::new().with_row_count(Some(1)),
            )?;
            match phys.evaluate(&one_row)? {
                ColumnarValue::Scalar(s) => s,
                ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
            }
        };
        Ok((
            column,
            Some(crate::alter::AddedDefault {
                sql,
                value,
                volatile,
            }),
        ))
    }

    /// [`Self::default_sql`] of a column `name` of type `ty`, with the planned expression.
    pub(super) async fn default_expr(
        &self,
        table: &str,
        name: &str,
        ty: ColumnType,
        value: &SqlExpr,
    ) -> Result<(String, datafusion::logical_expr::Expr)> {
        let ty = match ty {
            ColumnType::Float64 => "DOUBLE PRECISION".to_string(),
            other => other.sql(),
        };
        let mut probe = crate::sql::parse(&format!(
            "CREATE TABLE __tierdb_probe (c {ty} DEFAULT {value})"
        ))?
        .pop()
        .ok_or_else(|| TableError::Schema(format!("DEFAULT {value}: no expression")))?;
        if let datafusion::sql::parser::Statement::Statement(s) = &mut probe
            && let SqlStatement::CreateTable(ct) = s.as_mut()
        {
            for c in &mut ct.columns {
                if let Some(stored) = crate::pgtext::stored_sql_type(&c.data_type) {
                    c.data_type = stored;
                }
            }
        }
        let plan = self.ctx.state().statement_to_plan(probe).await?;
        let LogicalPlan::Ddl(datafusion::logical_expr::DdlStatement::CreateMemoryTable(t)) = plan
        else {
            return Err(TableError::Schema(format!(
                "DEFAULT {value}: not a default"
            )));
        };
        let Some((_, expr)) = t.column_defaults.first() else {
            return Err(TableError::Schema(format!(
                "DEFAULT {value}: not a default"
            )));
        };
        Ok((default_text(expr, name, table)?, expr.clone()))
    }

    /// A column of ALTER TABLE … ADD COLUMN as the catalog keeps it: its type as
    /// DataFusion plans it (through a CREATE TABLE of that one column), its declared
    /// length, and NOT NULL.
    pub(super) async fn column_def(
        &self,
        c: &datafusion::sql::sqlparser::ast::ColumnDef,
    ) -> Result<ColumnDef> {
        use datafusion::sql::sqlparser::ast::ColumnOption;
        if c.options
            .iter()
            .any(|o| !matches!(o.option, ColumnOption::NotNull | ColumnOption::Null))
        {
            return Err(TableError::Unsupported(format!(
                "ADD COLUMN {c}: column options other than NULL and NOT NULL (DEFAULT, \
                 constraints) are not supported"
            )));
        }
        let mut stored = c.clone();
        if let Some(t) = crate::pgtext::stored_sql_type(&c.data_type) {
            stored.data_type = t;
        }
        let probe = crate::sql::parse(&format!("CREATE TABLE __tierdb_probe ({stored})"))?
            .pop()
            .ok_or_else(|| TableError::Schema(format!("ADD COLUMN {c}: no column")))?;
        let plan = self.ctx.state().statement_to_plan(probe).await?;
        let LogicalPlan::Ddl(datafusion::logical_expr::DdlStatement::CreateMemoryTable(t)) = plan
        else {
            return Err(TableError::Schema(format!("ADD COLUMN {c}: not a column")));
        };
        let schema = t.input.schema();
        let f = schema.field(0);
        Ok(ColumnDef {
            name: f.name().clone(),
            ty: ColumnType::from_arrow(f.name(), f.data_type())?.with_declared(&c.data_type),
            nullable: f.is_nullable(),
        })
    }
}
