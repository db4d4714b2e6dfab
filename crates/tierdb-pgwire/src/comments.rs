//! `pg_description` with the comments of tierdb's tables and views (`COMMENT ON TABLE`,
//! `VIEW` and `COLUMN`, kept in their catalog entries, `TableDef::comments`, `ViewDef::comments`), beside datafusion-pg-catalog's own
//! rows: psql's `\dt+` and `\d+`, pg_dump, dbt's `docs generate` and JDBC's `REMARKS` read
//! them there or through `obj_description` and `col_description` (`catalogsql.rs` turns
//! those into lookups of this table).
//!
//! A table's row has `objoid` its `pg_class` oid, `classoid` 1259 (`pg_class`), `objsubid`
//! 0; a column's, `objsubid` its `attnum` (its position, from 1), as in PostgreSQL. The
//! `public` schema has PostgreSQL's description ("standard public schema") under its own
//! oid: without it pg_dump writes `COMMENT ON SCHEMA public IS ''` to remove it.

use std::sync::Arc;

use datafusion::catalog::{TableProvider, view::ViewTable};
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::LogicalPlanBuilder;
use tierdb_tables::catalog::TableDef;
use tierdb_tables::views::ViewDef;

use crate::keys::{FromTable, Relations, Row, stored};

/// `pg_class`'s oid: the `classoid` of a relation's description.
const PG_CLASS_OID: i32 = 1259;

/// `pg_namespace`'s oid: the `classoid` of a schema's description.
const PG_NAMESPACE_OID: i32 = 2615;

/// The key of the `public` schema's row among the relations' (no table's name).
const PUBLIC_ROW: &str = "\u{0}public";

/// The description rows of `defs` and `views` (module doc; a view's columns are numbered
/// as its fields).
pub(crate) fn rows(defs: &[TableDef], views: &[ViewDef]) -> Vec<Row> {
    let row = |table: &str, subid: i32, text: &str| -> Row {
        (
            table.to_string(),
            vec![
                ("classoid", ScalarValue::Int32(Some(PG_CLASS_OID))),
                ("objsubid", ScalarValue::Int32(Some(subid))),
                ("description", ScalarValue::Utf8(Some(text.to_string()))),
            ],
        )
    };
    let mut out = Vec::new();
    for d in defs {
        if let Some(t) = &d.comments.table {
            out.push(row(&d.name, 0, t));
        }
        for (column, text) in &d.comments.columns {
            if let Some(i) = d.column_index(column) {
                out.push(row(&d.name, i32::try_from(i + 1).unwrap_or(i32::MAX), text));
            }
        }
    }
    for v in views {
        if let Some(t) = &v.comments.table {
            out.push(row(&v.name, 0, t));
        }
        for (column, text) in &v.comments.columns {
            if let Some(i) = v.fields.iter().position(|f| &f.name == column) {
                out.push(row(&v.name, i32::try_from(i + 1).unwrap_or(i32::MAX), text));
            }
        }
    }
    out
}

/// `inner` (datafusion-pg-catalog's `pg_description`), the rows of `defs`, the description
/// of the `public` schema and the comments of the stored schemas (`COMMENT ON SCHEMA`), each
/// at its oid in `namespaces`.
pub(crate) fn pg_description(
    inner: Arc<dyn TableProvider>,
    defs: &[TableDef],
    views: &[ViewDef],
    relations: &Relations,
    namespaces: &std::collections::HashMap<String, i32>,
    schemas: &[tierdb_tables::catalog::SchemaDef],
) -> Result<Arc<dyn TableProvider>> {
    let mut rows = rows(defs, views);
    let mut relations = relations.clone();
    let public = namespaces.get(tierdb_tables::sql::SCHEMA).map(|&oid| {
        (
            PUBLIC_ROW.to_string(),
            oid,
            "standard public schema".to_string(),
        )
    });
    let commented = schemas.iter().filter_map(|d| {
        let oid = *namespaces.get(&d.name)?;
        // (NUL starts no relation's name: the key cannot meet a table's.)
        Some((format!("\u{0}schema {}", d.name), oid, d.comment.clone()?))
    });
    for (key, oid, text) in public.into_iter().chain(commented) {
        relations.insert(key.clone(), (oid, oid));
        rows.push((
            key,
            vec![
                ("classoid", ScalarValue::Int32(Some(PG_NAMESPACE_OID))),
                ("objsubid", ScalarValue::Int32(Some(0))),
                ("description", ScalarValue::Utf8(Some(text))),
            ],
        ));
    }
    if rows.is_empty() {
        return Ok(inner);
    }
    let added = stored(
        &inner.schema(),
        &rows,
        &[("objoid", FromTable::Oid)],
        &relations,
    )?;
    let plan = LogicalPlanBuilder::scan("pg_description", provider_as_source(inner), None)?
        .union(
            LogicalPlanBuilder::scan("pg_description_tierdb", provider_as_source(added), None)?
                .build()?,
        )?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// Every `obj_description` and `col_description` in `stmt` a [`description_lookup`]; one
/// selected without an alias keeps the function's name as its column's, as in PostgreSQL
/// (the subquery would be named after its aggregate).
pub(crate) fn description_lookups(stmt: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem, SetExpr, VisitMut, VisitorMut};
    struct Names;
    impl VisitorMut for Names {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> std::ops::ControlFlow<()> {
            if let SetExpr::Select(select) = q.body.as_mut() {
                // A name two columns would take is left alone: a DataFusion projection
                // cannot hold two columns of one name.
                let named = |item: &SelectItem, name: &str| match item {
                    SelectItem::UnnamedExpr(Expr::Function(f)) => f
                        .name
                        .0
                        .last()
                        .and_then(|p| p.as_ident())
                        .is_some_and(|i| i.value.eq_ignore_ascii_case(name)),
                    SelectItem::ExprWithAlias { alias, .. } => {
                        alias.value.eq_ignore_ascii_case(name)
                    }
                    _ => false,
                };
                let once =
                    |name: &str| select.projection.iter().filter(|i| named(i, name)).count() == 1;
                let unique = ["obj_description", "col_description"].map(once);
                for item in &mut select.projection {
                    let SelectItem::UnnamedExpr(e @ Expr::Function(_)) = item else {
                        continue;
                    };
                    let Expr::Function(f) = &*e else { continue };
                    let Some(name) = f.name.0.last().and_then(|p| p.as_ident()).cloned() else {
                        continue;
                    };
                    let lower = name.value.to_lowercase();
                    if (lower == "obj_description" && unique[0])
                        || (lower == "col_description" && unique[1])
                    {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: datafusion::sql::sqlparser::ast::Ident::new(lower),
                        };
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Names);
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(stmt, |e| {
        if let Some(lookup) = description_lookup(e) {
            *e = lookup;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `obj_description(x)`, `obj_description(x, 'pg_class')` and `col_description(x, n)`
/// as subqueries of `pg_description` (tierdb's tables' comments, `comments.rs`).
pub(crate) fn description_lookup(
    e: &datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    use datafusion::sql::sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let Expr::Function(f) = e else {
        return None;
    };
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args: Vec<&Expr> = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let condition = match (name.as_str(), args.as_slice()) {
        ("obj_description", [x]) => format!("objoid = {x} AND objsubid = 0"),
        ("obj_description", [x, class]) if class.to_string().contains("'pg_class'") => {
            format!("objoid = {x} AND classoid = 1259 AND objsubid = 0")
        }
        // A schema's (psql's `\dn+`).
        ("obj_description", [x, class]) if class.to_string().contains("'pg_namespace'") => {
            format!("objoid = {x} AND classoid = {PG_NAMESPACE_OID} AND objsubid = 0")
        }
        ("col_description", [x, n]) => {
            format!("objoid = {x} AND classoid = 1259 AND objsubid = {n}")
        }
        _ => return None,
    };
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&format!(
            "(SELECT description FROM pg_catalog.pg_description WHERE {condition})"
        ))
        .and_then(|mut p| p.parse_expr())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierdb_tables::catalog::{ColumnDef, ColumnType, Comments};

    #[test]
    fn tables_and_columns_are_described_by_position() {
        let column = |name: &str| ColumnDef {
            name: name.into(),
            ty: ColumnType::Int32,
            nullable: true,
        };
        let def = TableDef {
            id: 1,
            name: "t".into(),
            columns: vec![column("a"), column("b")],
            sort_key: vec![],
            partition_key: None,
            created_ms: 0,
            dropped: vec![],
            primary_key: vec![],
            defaults: vec![],
            indexes: vec![],
            comments: Comments {
                table: Some("the table".into()),
                columns: vec![("b".into(), "second".into()), ("gone".into(), "x".into())],
            },
            missing: vec![],
        };
        let rows = rows(&[def], &[]);
        let subids: Vec<(String, ScalarValue)> = rows
            .iter()
            .map(|(t, v)| (t.clone(), v[1].1.clone()))
            .collect();
        assert_eq!(
            subids,
            vec![
                ("t".to_string(), ScalarValue::Int32(Some(0))),
                ("t".to_string(), ScalarValue::Int32(Some(2))),
            ]
        );
        assert_eq!(rows[1].1[2].1, ScalarValue::Utf8(Some("second".into())));
    }

    #[test]
    fn description_functions_become_lookups() {
        use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
        use datafusion::sql::sqlparser::parser::Parser;
        let expr = |sql: &str| {
            Parser::new(&PostgreSqlDialect {})
                .try_with_sql(sql)
                .unwrap()
                .parse_expr()
                .unwrap()
        };
        let got = |sql: &str| description_lookup(&expr(sql)).map(|e| e.to_string());
        assert_eq!(
            got("pg_catalog.obj_description(c.oid, 'pg_class')").as_deref(),
            Some(
                "(SELECT description FROM pg_catalog.pg_description WHERE objoid = c.oid AND \
                 classoid = 1259 AND objsubid = 0)"
            )
        );
        assert_eq!(
            got("col_description(a.attrelid, a.attnum)").as_deref(),
            Some(
                "(SELECT description FROM pg_catalog.pg_description WHERE objoid = a.attrelid \
                 AND classoid = 1259 AND objsubid = a.attnum)"
            )
        );
        assert_eq!(
            got("obj_description(n.oid, 'pg_namespace')").as_deref(),
            Some(
                "(SELECT description FROM pg_catalog.pg_description WHERE objoid = n.oid AND \
                 classoid = 2615 AND objsubid = 0)"
            )
        );
        assert_eq!(got("obj_description(p.oid, 'pg_proc')"), None);
        assert_eq!(got("upper(x)"), None);
    }

    #[test]
    fn a_description_selected_unnamed_keeps_the_functions_name() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT obj_description(c.oid, 'pg_class'), col_description(c.oid, 1) AS d \
             FROM pg_class c",
        )
        .expect("parse")
        .remove(0);
        description_lookups(&mut s);
        let text = s.to_string();
        assert!(text.contains(") AS obj_description,"), "{text}");
        assert!(text.contains(") AS d FROM"), "{text}");
        assert!(!text.contains("obj_description("), "{text}");
        // Two of one name stay unnamed (DataFusion's projection needs distinct names).
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT col_description(1, 2), col_description(1, 1)",
        )
        .expect("parse")
        .remove(0);
        description_lookups(&mut s);
        assert!(!s.to_string().contains("AS col_description"), "{s}");
    }
}
