//! The names PostgreSQL gives a query's result columns (its parser's `FigureColname`): a
//! column by its name, a function call by the function (`count`, `now`), a cast by what
//! it casts if that has a name, else by the type (`jsonb`, `int4`), CASE by its ELSE or
//! `case`, EXISTS `exists`, a scalar subquery by its column, anything else `?column?`.
//!
//! DataFusion names an unaliased expression after its plan (`count(*)`, `Int64(1) +
//! Int64(1)`) and refuses two columns of one name in a projection, which PostgreSQL
//! allows (`SELECT i, CAST(i AS bigint)`: both `i`). So:
//! - the PostgreSQL server sends these names in RowDescription (tierdb-pgwire `colnames`);
//! - a query DataFusion refuses for a repeated name is planned again with its result
//!   columns aliased to these names made unique ([`unique_result_names`]; a second `i`
//!   is `i_2`), which the server then sends as PostgreSQL's (`i`, `i`).

use datafusion::sql::parser::Statement as DfStatement;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, Expr, Function, Ident, ObjectName, Query, SelectItem, SetExpr, Statement,
    VisitMut, VisitorMut,
};

/// What DataFusion says when a projection names two columns alike.
pub const DUPLICATE_NAMES: &str = "Projections require unique expression names";

/// A result's column names: `front` by position from the left; after a `*` (whose columns
/// keep DataFusion's names) `back`, by position from the right. `None`: DataFusion's name
/// is PostgreSQL's (an aliased item).
#[derive(Debug, Default, PartialEq)]
pub struct ResultNames {
    pub front: Vec<Option<String>>,
    pub back: Vec<Option<String>>,
    pub wildcard: bool,
}

/// PostgreSQL's column names for `stmt`'s rows, if it is a query.
pub fn of_statement(stmt: &Statement) -> Option<ResultNames> {
    match stmt {
        Statement::Query(q) => of_query(q),
        _ => None,
    }
}

fn of_query(q: &Query) -> Option<ResultNames> {
    of_set_expr(&q.body)
}

fn of_set_expr(body: &SetExpr) -> Option<ResultNames> {
    match body {
        SetExpr::Select(select) => {
            let mut names = ResultNames::default();
            for item in &select.projection {
                let name = match item {
                    SelectItem::UnnamedExpr(e) => Some(figure(e).0),
                    SelectItem::ExprWithAlias { .. } | SelectItem::ExprWithAliases { .. } => None,
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                        names.wildcard = true;
                        names.back.clear();
                        continue;
                    }
                };
                if names.wildcard {
                    names.back.push(name);
                } else {
                    names.front.push(name);
                }
            }
            Some(names)
        }
        // A UNION's columns are named by its first branch.
        SetExpr::SetOperation { left, .. } => of_set_expr(left),
        SetExpr::Query(q) => of_query(q),
        _ => None,
    }
}

/// `stmt` (a query DataFusion refused with [`DUPLICATE_NAMES`]) with every unaliased
/// column of its result aliased to its PostgreSQL name, repeats numbered (`i`, `i_2`);
/// whether anything changed. Only the outermost SELECT (each branch of a UNION): the names
/// inner queries give are what the outer one refers to.
pub fn unique_result_names(stmt: &mut DfStatement) -> bool {
    let DfStatement::Statement(s) = stmt else {
        return false;
    };
    let mut changed = match s.as_mut() {
        Statement::Query(q) => alias_set_expr(&mut q.body),
        _ => false,
    };
    // Queries inside (a derived table, a CTE, an INSERT's or CREATE TABLE AS's query):
    // PostgreSQL allows repeated names there too (`INSERT INTO t SELECT a, a FROM s`);
    // only a SELECT that repeats one is aliased, so the names others refer to stay.
    let _ = s.visit(&mut Nested(&mut changed));
    changed
}

struct Nested<'a>(&'a mut bool);

impl VisitorMut for Nested<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        *self.0 |= alias_repeated(&mut q.body);
        ControlFlow::Continue(())
    }
}

/// [`alias_set_expr`] of each SELECT in `body` whose result names repeat.
fn alias_repeated(body: &mut SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => {
            let mut seen = std::collections::HashSet::new();
            let repeats = select.projection.iter().any(|item| {
                let name = match item {
                    SelectItem::UnnamedExpr(e) => figure(e).0,
                    SelectItem::ExprWithAlias { alias, .. } => ident(alias),
                    _ => return false,
                };
                !seen.insert(name)
            });
            repeats && alias_set_expr(body)
        }
        SetExpr::SetOperation { left, right, .. } => {
            let l = alias_repeated(left);
            alias_repeated(right) || l
        }
        SetExpr::Query(q) => alias_repeated(&mut q.body),
        _ => false,
    }
}

/// Plans `stmt`; a query refused for a repeated column name is planned again with its
/// result columns aliased apart ([`unique_result_names`]). Casts to text declare text
/// (`casts.rs`). An INSERT of a query over VALUES is planned by `insert_source.rs`.
pub(crate) async fn statement_to_plan(
    state: &datafusion::execution::SessionState,
    mut stmt: DfStatement,
) -> datafusion::common::Result<datafusion::logical_expr::LogicalPlan> {
    super::insert_source::name_leading_columns(state, &mut stmt).await?;
    if let Some(plan) = super::insert_source::plan(state, &stmt).await? {
        return super::casts::text_casts_are_text(plan);
    }
    let plan = match state.statement_to_plan(stmt.clone()).await {
        Err(e) if e.to_string().contains(DUPLICATE_NAMES) => {
            let mut stmt = stmt;
            if unique_result_names(&mut stmt) {
                state.statement_to_plan(stmt).await
            } else {
                Err(e)
            }
        }
        other => other,
    }?;
    super::casts::text_casts_are_text(plan)
}

fn alias_set_expr(body: &mut SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => {
            let mut used: std::collections::HashSet<String> = select
                .projection
                .iter()
                .filter_map(|i| match i {
                    SelectItem::ExprWithAlias { alias, .. } => Some(ident(alias)),
                    _ => None,
                })
                .collect();
            let mut changed = false;
            for item in &mut select.projection {
                let SelectItem::UnnamedExpr(e) = item else {
                    continue;
                };
                let base = figure(e).0;
                let mut name = base.clone();
                let mut n = 1;
                while !used.insert(name.clone()) {
                    n += 1;
                    name = format!("{base}_{n}");
                }
                *item = SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: Ident::with_quote('"', name),
                };
                changed = true;
            }
            changed
        }
        SetExpr::SetOperation { left, right, .. } => {
            let l = alias_set_expr(left);
            alias_set_expr(right) || l
        }
        SetExpr::Query(q) => alias_set_expr(&mut q.body),
        _ => false,
    }
}

/// `FigureColnameInternal`: the name and its strength (2: a real name, 1: a type's or
/// keyword's, 0: `?column?`).
pub fn figure(e: &Expr) -> (String, u8) {
    match e {
        Expr::Identifier(i) => (ident(i), 2),
        Expr::CompoundIdentifier(parts) => parts.last().map_or(unnamed(), |i| (ident(i), 2)),
        Expr::Nested(inner) => figure(inner),
        Expr::Collate { expr, .. } => figure(expr),
        // A cast to UUID, JSON or JSONB, as the parser rewrote it (`pgtext.rs`).
        Expr::Function(f) if let Some((ty, arg)) = typed_text_cast(f) => match figure(arg) {
            inner if inner.1 > 1 => inner,
            _ => (ty.into(), 1),
        },
        // An operator on an INTERVAL, as the parser rewrote it (`intervalmul.rs`).
        Expr::Function(f)
            if matches!(
                function_name(f).as_str(),
                "tierdb_interval_mul" | "tierdb_interval_div"
            ) =>
        {
            unnamed()
        }
        Expr::Function(f) => (function_name(f), 2),
        Expr::Cast {
            expr,
            data_type,
            kind,
            ..
        } => {
            let inner = figure(expr);
            if inner.1 > 1 {
                return inner;
            }
            match kind {
                CastKind::Cast | CastKind::DoubleColon => (type_name(data_type), 1),
                CastKind::TryCast | CastKind::SafeCast => inner,
            }
        }
        Expr::TypedString(t) => (type_name(&t.data_type), 1),
        Expr::Interval(_) => ("interval".into(), 1),
        Expr::Case { else_result, .. } => match else_result.as_deref().map(figure) {
            Some(n) if n.1 > 1 => n,
            _ => ("case".into(), 1),
        },
        Expr::Exists { .. } => ("exists".into(), 2),
        Expr::Subquery(q) => match of_query(q).and_then(|n| n.front.first().cloned().flatten()) {
            Some(name) => (name, 2),
            None => unnamed(),
        },
        Expr::Array(_) => ("array".into(), 2),
        Expr::Tuple(_) => ("row".into(), 2),
        Expr::Extract { .. } => ("extract".into(), 2),
        Expr::Substring { .. } => ("substring".into(), 2),
        Expr::Trim { .. } => ("btrim".into(), 2),
        Expr::Position { .. } => ("position".into(), 2),
        Expr::Overlay { .. } => ("overlay".into(), 2),
        Expr::Ceil { .. } => ("ceil".into(), 2),
        Expr::Floor { .. } => ("floor".into(), 2),
        Expr::AtTimeZone { .. } => ("timezone".into(), 2),
        _ => unnamed(),
    }
}

/// `tierdb_uuid(x)`, `tierdb_json(x)`, `tierdb_jsonb(x)`: the casts `x::uuid`, `x::json`,
/// `x::jsonb` as the parser rewrites them; the type's name and `x`.
fn typed_text_cast(f: &Function) -> Option<(&'static str, &Expr)> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let ty = match function_name(f).as_str() {
        "tierdb_uuid" => "uuid",
        "tierdb_json" => "json",
        "tierdb_jsonb" => "jsonb",
        _ => return None,
    };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some((ty, e)),
        _ => None,
    }
}

fn unnamed() -> (String, u8) {
    ("?column?".into(), 0)
}

/// An identifier as PostgreSQL folds it: lower case unless quoted.
fn ident(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn function_name(f: &Function) -> String {
    last(&f.name).unwrap_or_else(|| "?column?".into())
}

fn last(name: &ObjectName) -> Option<String> {
    name.0.last().and_then(|p| p.as_ident()).map(ident)
}

/// The last part of a type's name as PostgreSQL's grammar spells it (`integer` is
/// `pg_catalog.int4`, so a cast to it is named `int4`).
fn type_name(t: &DataType) -> String {
    let s = match t {
        DataType::SmallInt(_) | DataType::Int2(_) => "int2",
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => "int4",
        DataType::BigInt(_) | DataType::Int8(_) => "int8",
        DataType::Real | DataType::Float4 => "float4",
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float8 => "float8",
        DataType::Float(_) => "float8",
        DataType::Boolean | DataType::Bool => "bool",
        DataType::Varchar(_) | DataType::CharacterVarying(_) | DataType::CharVarying(_) => {
            "varchar"
        }
        DataType::Char(_) | DataType::Character(_) => "bpchar",
        DataType::Numeric(_) | DataType::Decimal(_) | DataType::Dec(_) => "numeric",
        DataType::Text => "text",
        DataType::Date => "date",
        DataType::Timestamp(_, tz) => match tz {
            datafusion::sql::sqlparser::ast::TimezoneInfo::WithTimeZone
            | datafusion::sql::sqlparser::ast::TimezoneInfo::Tz => "timestamptz",
            _ => "timestamp",
        },
        DataType::Time(_, tz) => match tz {
            datafusion::sql::sqlparser::ast::TimezoneInfo::WithTimeZone
            | datafusion::sql::sqlparser::ast::TimezoneInfo::Tz => "timetz",
            _ => "time",
        },
        DataType::Interval { .. } => "interval",
        DataType::Bytea => "bytea",
        DataType::Uuid => "uuid",
        DataType::JSON => "json",
        DataType::JSONB => "jsonb",
        DataType::Custom(name, _) => return last(name).unwrap_or_else(|| "?column?".into()),
        other => return other.to_string().to_lowercase(),
    };
    s.into()
}

#[cfg(test)]
mod tests;
