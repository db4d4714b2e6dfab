//! PostgreSQL's system columns on catalog tables, which datafusion-pg-catalog's tables do
//! not have: `tableoid` (pg_dump reads it from every catalog it lists) is the catalog
//! table's own OID, `xmin` (DataGrip's change detection) a constant transaction id. A
//! rewrite of the statement: each `alias.tableoid` becomes the OID of the table `alias`
//! names. Pure: tested without a socket.
//!
//! A catalog table named as a `regclass` (`'pg_class'::regclass`, as pg_dump joins
//! `pg_depend` on `classid`) is its OID too ([`catalog_regclass`]): datafusion-pg-catalog
//! looks such a name up in the current schema only, where PostgreSQL's search path has
//! `pg_catalog` first, and found none (no sequence's owner in a dump).

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SelectItem, SetExpr, Statement, TableFactor, Value, VisitMut, VisitorMut,
    visit_expressions_mut,
};

/// The OIDs of PostgreSQL's catalog tables (`pg_class.oid` where `relname` is the table).
fn catalog_oid(table: &str) -> Option<u32> {
    Some(match table {
        "pg_aggregate" => 2600,
        "pg_am" => 2601,
        "pg_attrdef" => 2604,
        "pg_attribute" => 1249,
        "pg_authid" | "pg_roles" => 1260,
        "pg_cast" => 2605,
        "pg_class" => 1259,
        "pg_collation" => 3456,
        "pg_constraint" => 2606,
        "pg_conversion" => 2607,
        "pg_database" => 1262,
        "pg_default_acl" => 826,
        "pg_depend" => 2608,
        "pg_description" => 2609,
        "pg_event_trigger" => 3466,
        "pg_extension" => 3079,
        "pg_foreign_data_wrapper" => 2328,
        "pg_foreign_server" => 1417,
        "pg_foreign_table" => 3118,
        "pg_index" => 2610,
        "pg_inherits" => 2611,
        "pg_language" => 2612,
        "pg_largeobject_metadata" => 2995,
        "pg_namespace" => 2615,
        "pg_opclass" => 2616,
        "pg_operator" => 2617,
        "pg_opfamily" => 2753,
        "pg_policy" => 3256,
        "pg_proc" => 1255,
        "pg_publication" => 6104,
        "pg_rewrite" => 2618,
        "pg_sequence" => 2224,
        "pg_statistic_ext" => 3381,
        "pg_subscription" => 6100,
        "pg_tablespace" => 1213,
        "pg_transform" => 3576,
        "pg_trigger" => 2620,
        "pg_ts_config" => 3602,
        "pg_ts_dict" => 3600,
        "pg_ts_parser" => 3601,
        "pg_ts_template" => 3764,
        "pg_type" => 1247,
        "pg_auth_members" => 1261,
        "pg_db_role_setting" => 2964,
        "pg_enum" => 3501,
        "pg_init_privs" => 3394,
        "pg_largeobject" => 2613,
        "pg_partitioned_table" => 3350,
        "pg_publication_namespace" => 6237,
        "pg_publication_rel" => 6106,
        "pg_range" => 3541,
        "pg_replication_origin" => 6000,
        "pg_seclabel" => 3596,
        "pg_shdepend" => 1214,
        "pg_shdescription" => 2396,
        "pg_shseclabel" => 3592,
        "pg_statistic" => 2619,
        "pg_statistic_ext_data" => 3429,
        "pg_subscription_rel" => 6102,
        "pg_user_mapping" => 1418,
        _ => return None,
    })
}

/// The constant `xmin` every catalog row answers.
const XMIN: &str = "1";

/// Rewrites `tableoid` and `xmin` of catalog tables in `stmt` into constants.
/// Each `'pg_x'::regclass` (or `'pg_catalog.pg_x'`) of a catalog table as its OID (module
/// doc); applied before datafusion-pg-catalog's rewrite of regclass casts.
pub(crate) fn catalog_regclass(stmt: &mut Statement) {
    use datafusion::sql::sqlparser::ast::DataType;
    let _ = visit_expressions_mut(stmt, |e| {
        if let Expr::Cast {
            expr, data_type, ..
        } = e
            && (matches!(data_type, DataType::Regclass)
                || matches!(data_type, DataType::Custom(n, _) if n
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .is_some_and(|i| i.value.eq_ignore_ascii_case("regclass"))))
            && let Expr::Value(v) = expr.as_ref()
            && let Value::SingleQuotedString(name) = &v.value
            && let Some(oid) = catalog_oid(name.strip_prefix("pg_catalog.").unwrap_or(name))
        {
            *e = Expr::value(Value::Number(oid.to_string(), false));
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Whether `sql` may name a catalog table as a `regclass` ([`catalog_regclass`]).
pub(crate) fn names_catalog_regclass(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    lower.contains("::regclass") && lower.contains("'pg_")
}

pub(crate) fn rewrite(stmt: &mut Statement) {
    let mut tables = Aliases::default();
    let _ = stmt.visit(&mut tables);
    if tables.0.is_empty() {
        return;
    }
    let single = (tables.0.len() == 1)
        .then(|| tables.0.values().next().copied())
        .flatten();
    // Selected as a column, the constant keeps the column's name (clients look it up).
    let _ = stmt.visit(&mut Named);
    // A bare `tableoid` in a SELECT reading one catalog table is that table's, whatever
    // else the statement reads (pg_dump: `SELECT tableoid, … FROM pg_type` with subqueries
    // of pg_class and pg_type).
    let _ = stmt.visit(&mut OneTableScopes);
    let _ = visit_expressions_mut(stmt, |e| {
        let replaced = match e {
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let alias = parts[0].value.to_lowercase();
                tables
                    .0
                    .get(&alias)
                    .and_then(|oid| constant(&parts[1], *oid))
            }
            Expr::Identifier(id) => single.and_then(|oid| constant(id, oid)),
            _ => None,
        };
        if let Some(r) = replaced {
            *e = r;
        }
        ControlFlow::<()>::Continue(())
    });
}

fn constant(column: &Ident, oid: u32) -> Option<Expr> {
    if column.quote_style.is_some() {
        return None;
    }
    let value = match column.value.to_lowercase().as_str() {
        "tableoid" => oid.to_string(),
        "xmin" => XMIN.to_string(),
        _ => return None,
    };
    Some(Expr::value(Value::Number(value, false)))
}

/// Names selected system columns: `x.tableoid` becomes `x.tableoid AS tableoid`.
struct Named;

impl VisitorMut for Named {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        name_projections(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn name_projections(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            for item in &mut select.projection {
                let SelectItem::UnnamedExpr(e) = item else {
                    continue;
                };
                let column = match e {
                    Expr::CompoundIdentifier(parts) if parts.len() == 2 => parts[1].clone(),
                    Expr::Identifier(id) => id.clone(),
                    _ => continue,
                };
                if column.quote_style.is_none()
                    && matches!(column.value.to_lowercase().as_str(), "tableoid" | "xmin")
                {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::new(column.value.to_lowercase()),
                    };
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            name_projections(left);
            name_projections(right);
        }
        _ => {}
    }
}

/// Replaces bare `tableoid` and `xmin` in each SELECT whose FROM is one catalog table.
struct OneTableScopes;

impl VisitorMut for OneTableScopes {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        one_table_scope(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn one_table_scope(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            let [from] = select.from.as_slice() else {
                return;
            };
            let TableFactor::Table { name, .. } = &from.relation else {
                return;
            };
            let oid = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .and_then(|i| catalog_oid(&i.value.to_lowercase()));
            let Some(oid) = oid.filter(|_| from.joins.is_empty()) else {
                return;
            };
            let replace = |e: &mut Expr| {
                let _ = visit_expressions_mut(e, |x| {
                    if let Expr::Identifier(id) = x
                        && let Some(c) = constant(id, oid)
                    {
                        *x = c;
                    }
                    ControlFlow::<()>::Continue(())
                });
            };
            for item in &mut select.projection {
                match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        replace(e)
                    }
                    _ => {}
                }
            }
            if let Some(w) = &mut select.selection {
                replace(w);
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            one_table_scope(left);
            one_table_scope(right);
        }
        _ => {}
    }
}

/// Alias (or table name) → OID of every catalog table a statement reads.
#[derive(Default)]
struct Aliases(HashMap<String, u32>);

impl VisitorMut for Aliases {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, .. } = factor {
            let table = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase());
            if let Some(oid) = table.as_deref().and_then(catalog_oid) {
                let key = alias
                    .as_ref()
                    .map(|a| a.name.value.to_lowercase())
                    .or(table)
                    .unwrap_or_default();
                self.0.insert(key, oid);
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        rewrite(&mut s);
        s.to_string()
    }

    #[test]
    fn a_catalog_table_named_as_regclass_is_its_oid() {
        let sql = "SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass \
                   AND d.refclassid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass \
                   AND d.objid = 'my_table'::regclass";
        assert!(names_catalog_regclass(sql));
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        catalog_regclass(&mut s);
        let got = s.to_string();
        assert!(got.contains("d.classid = 1259"), "{got}");
        assert!(got.contains("d.refclassid = 2604"), "{got}");
        assert!(got.contains("'my_table'::REGCLASS"), "{got}");
    }

    #[test]
    fn a_bare_tableoid_is_its_selects_one_tables() {
        assert_eq!(
            rewritten(
                "SELECT tableoid, oid, (SELECT relkind FROM pg_class WHERE oid = typrelid) FROM pg_type"
            ),
            "SELECT 1247 AS tableoid, oid, (SELECT relkind FROM pg_class WHERE oid = typrelid) FROM pg_type"
        );
    }

    #[test]
    fn tableoid_and_xmin_become_constants() {
        assert_eq!(
            rewritten(
                "SELECT x.tableoid, x.oid FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace"
            ),
            "SELECT 3079 AS tableoid, x.oid FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace"
        );
        assert_eq!(
            rewritten("SELECT tableoid, xmin FROM pg_catalog.pg_namespace"),
            "SELECT 2615 AS tableoid, 1 AS xmin FROM pg_catalog.pg_namespace"
        );
        // Not a catalog table, or quoted: left alone.
        assert_eq!(
            rewritten("SELECT t.tableoid FROM t"),
            "SELECT t.tableoid FROM t"
        );
        assert_eq!(
            rewritten("SELECT c.\"xmin\" FROM pg_class c"),
            "SELECT c.\"xmin\" FROM pg_class c"
        );
    }
}
