//! DDL a session carries out on the catalog: CREATE TABLE (… AS SELECT), DROP TABLE of
//! several tables, TRUNCATE, CREATE/DROP VIEW, CREATE/DROP INDEX, COMMENT ON. Each is one
//! atomic catalog commit, made at once (also inside a transaction). ALTER TABLE is
//! `alter_stmt.rs`.

use std::sync::Arc;

use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, ObjectType, OneOrManyWithParens, Statement as SqlStatement,
};

use super::namespaces::{renamed, schema_ident};
use super::session::{Outcome, inserted};
use super::{SCHEMA, SqlSession, ident_name, relation_name};
use crate::catalog::{ColumnDef, ColumnType};
use crate::error::{Result, TableError};
use crate::provider::{ScanOptions, TierTable};
use crate::rows::index::IndexOptions;
use crate::tables::NewTable;
use crate::viewdeps::Dependents;

impl SqlSession {
    /// PostgreSQL's NOTICE of an IF [NOT] EXISTS that skipped: `relation "t" already
    /// exists, skipping` (a relation by its name without the schema, as PostgreSQL names
    /// it there), `sequence "s.q" does not exist, skipping` (a DROP names it as written).
    pub(super) fn skipping(&self, kind: &str, name: &str, why: &str) {
        let (code, name) = if kind == "relation" {
            let code = if why == "already exists" {
                "42P07"
            } else {
                "00000"
            };
            (code, super::split_qualified(name).1)
        } else {
            ("00000", name)
        };
        self.notice(code, &format!("{kind} \"{name}\" {why}, skipping"));
    }

    /// Whether an index of this name exists.
    async fn index_exists(&self, name: &str) -> Result<bool> {
        Ok(self
            .tables
            .tables()
            .await?
            .iter()
            .any(|t| t.indexes.iter().any(|i| i.name == name)))
    }

    /// Stores a view once its query (with the views it reads expanded) plans, with as many
    /// columns as it names (invariant 2 of `views`).
    async fn create_view(&self, cv: &datafusion::sql::sqlparser::ast::CreateView) -> Result<()> {
        if cv.materialized {
            return Err(TableError::Unsupported(
                "CREATE MATERIALIZED VIEW is not supported: use CREATE TABLE … AS SELECT".into(),
            ));
        }
        let name = table_name(&cv.name)?;
        if name.starts_with(crate::dml::ROWS_PREFIX) {
            return Err(TableError::Schema(format!(
                "{name}: names starting with {} are reserved",
                crate::dml::ROWS_PREFIX
            )));
        }
        if cv.if_not_exists && self.tables.view(&name).await?.is_some() {
            return Ok(());
        }
        let query = cv.query.to_string();
        let mut check = DfStatement::Statement(Box::new(SqlStatement::Query(cv.query.clone())));
        crate::views::expand(&self.tables, &self.schema, &mut check).await?;
        let plan = self.ctx.state().statement_to_plan(check).await?;
        let columns: Vec<String> = cv.columns.iter().map(|c| c.name.value.clone()).collect();
        let width = plan.schema().fields().len();
        if !columns.is_empty() && columns.len() != width {
            return Err(TableError::Schema(format!(
                "view {name} names {} columns, its query returns {width}",
                columns.len()
            )));
        }
        let fields = plan
            .schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| ColumnDef {
                name: columns.get(i).cloned().unwrap_or_else(|| f.name().clone()),
                ty: declared_type(f),
                nullable: true,
            })
            .collect();
        let def = crate::views::ViewDef {
            name,
            columns,
            query,
            created_ms: tierdb_kv::lease::now_ms(),
            fields,
            comments: Default::default(),
        };
        self.tables.create_view(def, cv.or_replace).await
    }

    /// `DROP TABLE a, b [CASCADE]` (DataFusion plans one name only, without CASCADE),
    /// `TRUNCATE a, b`, `CREATE [OR REPLACE] VIEW`, `DROP VIEW`, each one atomic catalog
    /// commit; `None` for other statements.
    pub(super) async fn drop_or_truncate(&self, stmt: &DfStatement) -> Result<Option<Outcome>> {
        let DfStatement::Statement(s) = stmt else {
            return Ok(None);
        };
        let outcome = match s.as_ref() {
            SqlStatement::Drop {
                object_type: ObjectType::Table,
                names,
                if_exists,
                cascade,
                ..
            } => {
                let names = names.iter().map(table_name).collect::<Result<Vec<_>>>()?;
                let dropped = self
                    .tables
                    .drop_tables(&names, *if_exists, Dependents::cascade_if(*cascade))
                    .await?;
                for (name, _) in names.iter().zip(&dropped.existed).filter(|(_, e)| !**e) {
                    self.notice(
                        "00000",
                        &format!("table \"{name}\" does not exist, skipping"),
                    );
                }
                self.cascade_notice(&dropped.cascaded);
                "DROP TABLE"
            }
            SqlStatement::Drop {
                object_type: ObjectType::View,
                names,
                if_exists,
                cascade,
                ..
            } => {
                let names = names.iter().map(table_name).collect::<Result<Vec<_>>>()?;
                let mut missing = Vec::new();
                for n in &names {
                    if *if_exists && self.tables.view(n).await?.is_none() {
                        missing.push(n);
                    }
                }
                let cascaded = self
                    .tables
                    .drop_views(&names, *if_exists, Dependents::cascade_if(*cascade))
                    .await?;
                for name in missing {
                    self.notice(
                        "00000",
                        &format!("view \"{name}\" does not exist, skipping"),
                    );
                }
                self.cascade_notice(&cascaded);
                "DROP VIEW"
            }
            SqlStatement::CreateSequence {
                temporary,
                if_not_exists,
                name,
                sequence_options,
                data_type,
                owned_by,
            } => {
                if *temporary {
                    return Err(TableError::Unsupported(
                        "CREATE TEMPORARY SEQUENCE is not supported: sequences are stored".into(),
                    ));
                }
                let seq_name = table_name(name)?;
                let mut seq = crate::rows::sequence::SequenceDef::new(&seq_name);
                if let Some(t) = data_type {
                    super::serial::bound_by_type(&mut seq, t)?;
                }
                super::serial::apply_options(&mut seq, sequence_options);
                if *if_not_exists && self.tables.sequence(&seq_name).await?.is_some() {
                    self.skipping("relation", &seq_name, "already exists");
                }
                self.tables.create_sequence(seq, *if_not_exists).await?;
                if let Some(owner) = owned_by {
                    super::seqstmt::run(&self.tables, &seq_name, &format!("OWNED BY {owner}"))
                        .await?;
                }
                "CREATE SEQUENCE"
            }
            SqlStatement::Call(f) if super::seqstmt::call_arguments(f).is_some() => {
                let (name, clause) = super::seqstmt::call_arguments(f).unwrap_or_default();
                super::seqstmt::run(&self.tables, &name, &clause).await?;
                "ALTER SEQUENCE"
            }
            SqlStatement::Drop {
                object_type: ObjectType::Sequence,
                names,
                if_exists,
                ..
            } => {
                let names = names.iter().map(table_name).collect::<Result<Vec<_>>>()?;
                let mut missing = Vec::new();
                for n in &names {
                    if *if_exists && self.tables.sequence(n).await?.is_none() {
                        missing.push(n);
                    }
                }
                self.tables.drop_sequences(&names, *if_exists).await?;
                for n in missing {
                    self.skipping("sequence", n, "does not exist");
                }
                "DROP SEQUENCE"
            }
            SqlStatement::CreateIndex(ci) => {
                let table = table_name(&ci.table_name)?;
                let mut columns = Vec::new();
                for c in &ci.columns {
                    match &c.column.expr {
                        SqlExpr::Identifier(id) => columns.push(ident_name(id)),
                        other => {
                            return Err(TableError::Unsupported(format!(
                                "CREATE INDEX on the expression {other}: tierdb indexes \
                                 columns"
                            )));
                        }
                    }
                }
                if ci.predicate.is_some() {
                    return Err(TableError::Unsupported(
                        "partial indexes (CREATE INDEX … WHERE) are not supported".into(),
                    ));
                }
                let name = match &ci.name {
                    // An index is in its table's schema, as in PostgreSQL.
                    Some(n) => renamed(&table, n)?,
                    None => format!("{table}_{}_idx", columns.join("_")),
                };
                if ci.if_not_exists && self.index_exists(&name).await? {
                    self.skipping("relation", &name, "already exists");
                }
                self.tables
                    .create_index(
                        &table,
                        &name,
                        columns,
                        IndexOptions {
                            unique: ci.unique,
                            constraint: false,
                            if_not_exists: ci.if_not_exists,
                        },
                    )
                    .await?;
                "CREATE INDEX"
            }
            SqlStatement::Drop {
                object_type: ObjectType::Index,
                names,
                if_exists,
                ..
            } => {
                for n in names {
                    let n = table_name(n)?;
                    if *if_exists && !self.index_exists(&n).await? {
                        self.skipping("index", &n, "does not exist");
                    }
                    self.tables.drop_index(&n, *if_exists).await?;
                }
                "DROP INDEX"
            }
            SqlStatement::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => {
                use datafusion::sql::sqlparser::ast::SchemaName;
                let name = match schema_name {
                    SchemaName::Simple(n) | SchemaName::NamedAuthorization(n, _) => {
                        schema_ident(n)?
                    }
                    // `CREATE SCHEMA AUTHORIZATION u`: the schema takes the user's name.
                    SchemaName::UnnamedAuthorization(u) => ident_name(u),
                };
                if !self.tables.create_schema(&name, *if_not_exists).await? {
                    self.notice(
                        "42P06",
                        &format!("schema \"{name}\" already exists, skipping"),
                    );
                }
                "CREATE SCHEMA"
            }
            SqlStatement::AlterSchema(a) => self.alter_schema(a).await?,
            SqlStatement::Call(f) if super::setschema_stmt::call_arguments(f).is_some() => {
                self.set_schema_call(f).await?
            }
            SqlStatement::Call(f) if super::colstorage_stmt::call_arguments(f).is_some() => {
                self.column_storage_call(f).await?
            }
            SqlStatement::Drop {
                object_type: ObjectType::Schema,
                names,
                if_exists,
                cascade,
                ..
            } => {
                let names = names.iter().map(schema_ident).collect::<Result<Vec<_>>>()?;
                let dropped = self
                    .tables
                    .drop_schemas(&names, *if_exists, *cascade)
                    .await?;
                for name in &dropped.missing {
                    self.notice(
                        "00000",
                        &format!("schema \"{name}\" does not exist, skipping"),
                    );
                }
                self.objects_notice(&dropped.cascaded);
                "DROP SCHEMA"
            }
            SqlStatement::Comment {
                object_type,
                object_name,
                comment,
                if_exists,
            } => {
                self.comment_on(*object_type, object_name, comment.clone(), *if_exists)
                    .await?;
                "COMMENT"
            }
            SqlStatement::AlterTable(at) => {
                self.alter_table(at).await?;
                "ALTER TABLE"
            }
            SqlStatement::CreateView(cv) => {
                self.create_view(cv).await?;
                "CREATE VIEW"
            }
            SqlStatement::Truncate(t) => {
                let names = t
                    .table_names
                    .iter()
                    .map(|t| table_name(&t.name))
                    .collect::<Result<Vec<_>>>()?;
                let mut defs = Vec::with_capacity(names.len());
                for n in &names {
                    defs.extend(self.tables.table(n).await?);
                }
                self.tables.truncate(&names).await?;
                if let Some(tx) = self.abort.slot.current() {
                    defs.iter().for_each(|d| tx.truncated(d));
                }
                "TRUNCATE TABLE"
            }
            _ => return Ok(None),
        };
        // The transaction's writes follow its DDL (ownddl.rs invariant 1).
        if let Some(tx) = self.abort.slot.current() {
            tx.follow_ddl(&self.tables).await?;
        }
        self.schema.refresh().await?;
        Ok(Some(Outcome::Command(outcome.into())))
    }

    pub(super) async fn create_table(
        &self,
        c: datafusion::logical_expr::CreateMemoryTable,
        declared: &[datafusion::sql::sqlparser::ast::DataType],
        order: Option<OneOrManyWithParens<SqlExpr>>,
        part: Option<Box<SqlExpr>>,
        sequences: Vec<crate::rows::sequence::SequenceDef>,
        uniques: Vec<(String, Vec<String>)>,
    ) -> Result<Outcome> {
        use datafusion::common::Constraint;
        if c.temporary {
            return Err(TableError::Schema(
                "CREATE TEMPORARY TABLE is not supported: every tierdb table is stored".into(),
            ));
        }
        let name = super::stored_table(&c.name)?.to_string();
        let schema = c.input.schema();
        let mut primary_key = Vec::new();
        for constraint in c.constraints.iter() {
            match constraint {
                Constraint::PrimaryKey(cols) => {
                    primary_key = cols
                        .iter()
                        .map(|&i| schema.field(i).name().clone())
                        .collect()
                }
                // Named and made from the statement ([`unique_constraints`]).
                Constraint::Unique(_) => {}
            }
        }
        if !uniques.is_empty() && primary_key.is_empty() {
            return Err(TableError::Unsupported(format!(
                "table {name}: UNIQUE constraints are enforced by unique indexes, which need a \
                 row table: declare a PRIMARY KEY"
            )));
        }
        let mut defaults = Vec::new();
        for (column, expr) in &c.column_defaults {
            let sql = default_text(expr, column, &name)?;
            defaults.push((column.clone(), sql));
        }
        let mut columns = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            let ty = ColumnType::from_arrow(f.name(), f.data_type())?;
            let ty = match declared.get(i) {
                Some(d) => ty.with_declared(d),
                // CREATE TABLE … AS: a column keeps the type its value declares (a
                // VARCHAR(5) column's), as in PostgreSQL.
                None => declared_type(f),
            };
            columns.push(ColumnDef {
                name: f.name().clone(),
                ty,
                nullable: f.is_nullable() && !primary_key.contains(f.name()),
            });
        }
        if !primary_key.is_empty() && (order.is_some() || part.is_some()) {
            return Err(TableError::Schema(format!(
                "table {name}: a table with a PRIMARY KEY is kept in key order; ORDER BY and \
                 PARTITION BY are for tables without one"
            )));
        }
        let sort_key = match order {
            None => Vec::new(),
            Some(OneOrManyWithParens::One(e)) => vec![key_column(&e, "ORDER BY")?],
            Some(OneOrManyWithParens::Many(es)) => es
                .iter()
                .map(|e| key_column(e, "ORDER BY"))
                .collect::<Result<_>>()?,
        };
        let partition_key = part.map(|e| key_column(&e, "PARTITION BY")).transpose()?;
        if c.or_replace {
            self.tables.drop_table(&name, true).await?;
        }
        let existed = self.tables.table(&name).await?.is_some();
        if existed && c.if_not_exists {
            self.skipping("relation", &name, "already exists");
        }
        if !existed {
            for seq in sequences {
                self.tables.create_sequence(seq, true).await?;
            }
        }
        let def = self
            .tables
            .create_table(
                NewTable {
                    name: name.clone(),
                    columns,
                    sort_key,
                    partition_key,
                    primary_key,
                    defaults,
                },
                c.if_not_exists,
            )
            .await?;
        self.schema.refresh().await?;
        if !existed {
            // A UNIQUE constraint is a unique index on the new, empty table; if one cannot
            // be made (its name is taken), the table goes again.
            for (index, columns) in uniques {
                if let Err(e) = self
                    .tables
                    .create_index(&name, &index, columns, UNIQUE_CONSTRAINT)
                    .await
                {
                    self.tables.drop_table(&name, true).await?;
                    self.schema.refresh().await?;
                    return Err(e);
                }
            }
        }
        let is_ctas = !matches!(c.input.as_ref(), LogicalPlan::EmptyRelation(_));
        if !is_ctas || existed {
            return Ok(Outcome::Command("CREATE TABLE".into()));
        }
        // CREATE TABLE … AS SELECT: the rows go in like an INSERT … SELECT. If that fails
        // the new (empty) table is dropped again.
        let table = TierTable::load(
            self.tables.clone(),
            def,
            self.counters.clone(),
            ScanOptions::default(),
        )
        .await?;
        let insert = LogicalPlanBuilder::insert_into(
            c.input.as_ref().clone(),
            name.as_str(),
            provider_as_source(Arc::new(table)),
            InsertOp::Append,
        )?
        .build()?;
        let run = async {
            let df = self.exec_ctx().execute_logical_plan(insert).await?;
            Ok::<_, TableError>(df.collect().await?)
        };
        match run.await {
            Ok(batches) => Ok(Outcome::Command(format!("SELECT {}", inserted(&batches)))),
            Err(e) => {
                self.tables.drop_table(&name, true).await?;
                self.schema.refresh().await?;
                Err(e)
            }
        }
    }
}

impl SqlSession {
    /// COMMENT ON TABLE / VIEW / COLUMN / SCHEMA: kept in the table's, view's or schema's
    /// catalog entry (listed in `pg_description`). Other objects' comments (temporary
    /// tables, indexes, …) are accepted and not kept, with a notice saying so.
    async fn comment_on(
        &self,
        object: datafusion::sql::sqlparser::ast::CommentObject,
        name: &datafusion::sql::sqlparser::ast::ObjectName,
        text: Option<String>,
        if_exists: bool,
    ) -> Result<()> {
        use datafusion::sql::sqlparser::ast::{CommentObject, ObjectName};
        let (table, column) = match object {
            CommentObject::Table => (table_name(name)?, None),
            CommentObject::View => {
                let view = table_name(name)?;
                return match self.tables.comment_on_view(&view, None, text).await {
                    Err(TableError::NoTable(_)) if if_exists => Ok(()),
                    other => other,
                };
            }
            CommentObject::Schema => {
                let schema = schema_ident(name)?;
                if schema == SCHEMA {
                    self.notice(
                        "01000",
                        "the comment on schema public is not kept by tierdb (accepted, ignored)",
                    );
                    return Ok(());
                }
                return match self.tables.comment_on_schema(&schema, text).await {
                    Err(TableError::Column { code: "3F000", .. }) if if_exists => Ok(()),
                    other => other,
                };
            }
            CommentObject::Column => {
                let Some((last, rest)) = name.0.split_last() else {
                    return Err(TableError::NoTable(name.to_string()));
                };
                let column = last.as_ident().map(ident_name).ok_or_else(|| {
                    TableError::Schema(format!("COMMENT ON COLUMN {name}: not a column"))
                })?;
                if rest.is_empty() {
                    return Err(TableError::Column {
                        code: "42601",
                        message: format!(
                            "column name must be qualified: COMMENT ON COLUMN table.{column}"
                        ),
                    });
                }
                (table_name(&ObjectName(rest.to_vec()))?, Some(column))
            }
            other => {
                self.notice(
                    "01000",
                    &format!("comments on a {other} are not kept by tierdb (accepted, ignored)"),
                );
                return Ok(());
            }
        };
        if !self.temp.has(&table)
            && let Some(column) = &column
            && self.tables.view(&table).await?.is_some()
        {
            return self
                .tables
                .comment_on_view(&table, Some(column), text)
                .await;
        }
        if column.is_none() && !self.temp.has(&table) && self.tables.view(&table).await?.is_some() {
            return Err(TableError::Column {
                code: "42809",
                message: format!("\"{table}\" is not a table"),
            });
        }
        if self.temp.has(&table) || self.tables.view(&table).await?.is_some() {
            self.notice(
                "01000",
                &format!("comments on {table} are not kept: tierdb keeps those of stored tables"),
            );
            return Ok(());
        }
        let change = crate::alter::TableChange::Comment { column, text };
        match self.tables.alter_table(&table, &[change]).await {
            Err(TableError::NoTable(_)) if if_exists => Ok(()),
            other => other,
        }
    }
}

/// The type of a view's or a CREATE TABLE … AS's column: a column of a VARCHAR(20)
/// column (or cast to one) is VARCHAR(20), as its field's declared type says; one of a
/// type tierdb does not store, text.
fn declared_type(f: &datafusion::arrow::datatypes::Field) -> ColumnType {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let ty = ColumnType::from_arrow(f.name(), f.data_type()).unwrap_or(ColumnType::Utf8);
    let Some(declared) = f.metadata().get(crate::catalog::DECLARED_TYPE) else {
        return ty;
    };
    match Parser::new(&GenericDialect {})
        .try_with_sql(declared)
        .and_then(|mut p| p.parse_data_type())
    {
        Ok(sql) => ty.with_declared(&sql),
        Err(_) => ty,
    }
}

/// A table's name as the catalog keys it (see [`relation_name`]).
pub(super) fn table_name(name: &datafusion::sql::sqlparser::ast::ObjectName) -> Result<String> {
    relation_name(name).ok_or_else(|| TableError::NoTable(name.to_string()))
}

/// A key given as a plain column name (normalized as DataFusion does: lowercase unless quoted).
fn key_column(e: &SqlExpr, clause: &str) -> Result<String> {
    match e {
        SqlExpr::Identifier(id) => Ok(ident_name(id)),
        other => Err(TableError::Schema(format!(
            "{clause} {other}: table keys must be column names"
        ))),
    }
}

/// The columns of a key or index, which tierdb keeps by name: `what` names the clause for
/// the error an expression gets.
pub(super) fn index_columns(
    columns: &[datafusion::sql::sqlparser::ast::IndexColumn],
    what: &str,
) -> Result<Vec<String>> {
    columns
        .iter()
        .map(|c| match &c.column.expr {
            SqlExpr::Identifier(id) => Ok(ident_name(id)),
            other => Err(TableError::Unsupported(format!(
                "{what} ({other}): keys and indexes are of columns"
            ))),
        })
        .collect()
}

/// How a UNIQUE constraint's index is made.
pub(super) const UNIQUE_CONSTRAINT: IndexOptions = IndexOptions {
    unique: true,
    constraint: true,
    if_not_exists: false,
};

/// PostgreSQL's name for an unnamed UNIQUE constraint: `<table>_<columns>_key`.
pub(super) fn unique_name(table: &str, columns: &[String]) -> String {
    format!("{table}_{}_key", columns.join("_"))
}

/// The UNIQUE constraints of `ct`, column and table constraints alike: each one's name
/// (given, or [`unique_name`]) and columns. DataFusion's plan keeps neither the names nor
/// the order, so they are read from the statement.
pub(super) fn unique_constraints(
    ct: &datafusion::sql::sqlparser::ast::CreateTable,
    table: &str,
) -> Result<Vec<(String, Vec<String>)>> {
    use datafusion::sql::sqlparser::ast::{ColumnOption, TableConstraint};
    let mut out = Vec::new();
    for c in &ct.columns {
        for o in &c.options {
            if let ColumnOption::Unique(_) = &o.option {
                let columns = vec![ident_name(&c.name)];
                let name = match &o.name {
                    Some(n) => ident_name(n),
                    None => unique_name(table, &columns),
                };
                out.push((name, columns));
            }
        }
    }
    for constraint in &ct.constraints {
        if let TableConstraint::Unique(u) = constraint {
            let columns = index_columns(&u.columns, "UNIQUE")?;
            let name = match &u.name {
                Some(n) => ident_name(n),
                None => unique_name(table, &columns),
            };
            out.push((name, columns));
        }
    }
    Ok(out)
}

/// The SQL text a column DEFAULT is kept as (CREATE TABLE and ALTER COLUMN SET DEFAULT); a
/// subquery is refused with 0A000, as PostgreSQL refuses it (a default is evaluated per row
/// written).
pub(super) fn default_text(
    expr: &datafusion::logical_expr::Expr,
    column: &str,
    table: &str,
) -> Result<String> {
    if datafusion::common::tree_node::TreeNode::exists(expr, |e| {
        Ok(matches!(
            e,
            datafusion::logical_expr::Expr::ScalarSubquery(_)
                | datafusion::logical_expr::Expr::Exists(_)
                | datafusion::logical_expr::Expr::InSubquery(_)
        ))
    })? {
        return Err(TableError::Column {
            code: "0A000",
            message: format!(
                "cannot use subquery in DEFAULT expression (column {column} of table {table})"
            ),
        });
    }
    datafusion::sql::unparser::expr_to_sql(expr)
        .map(|e| e.to_string())
        .map_err(|e| TableError::Schema(format!("DEFAULT of column {column}: {e}")))
}
