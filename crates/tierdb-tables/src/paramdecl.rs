//! The declared types of a statement's parameters where Arrow's type cannot say them: a
//! `$n` compared with, or inserted into, a UUID, JSON or JSONB column (stored as text,
//! `pgtext`) is that type, as PostgreSQL infers it. DataFusion infers such a parameter as
//! Utf8, and a ParameterDescription of `text` makes pgx refuse to send a Go map or a
//! `[16]byte` (it encodes by the type the server names), so the PostgreSQL server asks
//! here first.
//!
//! Found: `col <op> $n` and `$n <op> col` (either side possibly cast), `col IN ($n, …)`,
//! and `INSERT … VALUES (…, $n, …)` into such a column. Anything else keeps the type
//! DataFusion inferred.

use std::collections::HashMap;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema};
use datafusion::logical_expr::{Expr, LogicalPlan, WriteOp};

use crate::catalog::DECLARED_TYPE;

/// The declared types (their SQL spelling: `UUID`, `JSON`, `JSONB`) of `plan`'s
/// parameters, by number (`$1` is 1), for those the module doc names.
pub fn declared_parameters(plan: &LogicalPlan) -> HashMap<usize, String> {
    let mut out = HashMap::new();
    let _ = plan.apply(|node| {
        if let LogicalPlan::Dml(d) = node
            && matches!(d.op, WriteOp::Insert(_))
        {
            inserted(&d.input, d.target.schema().as_ref(), &mut out);
        }
        let inputs: Vec<&DFSchema> = node.inputs().iter().map(|i| i.schema().as_ref()).collect();
        for e in node.expressions() {
            let _ = e.apply(|e| {
                compared(e, &inputs, &mut out);
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

fn compared(e: &Expr, inputs: &[&DFSchema], out: &mut HashMap<usize, String>) {
    let declared = |c: &Column| {
        inputs
            .iter()
            .find_map(|s| s.qualified_field_from_column(c).ok().map(|(_, f)| f))
            .and_then(|f| text_typed(f.metadata().get(DECLARED_TYPE)))
    };
    match e {
        Expr::BinaryExpr(b) => {
            for (col, param) in [(&b.left, &b.right), (&b.right, &b.left)] {
                if let (Expr::Column(c), Some(n)) = (uncast(col), placeholder(param))
                    && let Some(ty) = declared(c)
                {
                    out.entry(n).or_insert(ty);
                }
            }
        }
        Expr::InList(l) => {
            if let Expr::Column(c) = uncast(&l.expr)
                && let Some(ty) = declared(c)
            {
                for n in l.list.iter().filter_map(placeholder) {
                    out.entry(n).or_insert_with(|| ty.clone());
                }
            }
        }
        _ => {}
    }
}

/// `INSERT … VALUES`: DataFusion plans it as Values, under a Projection that names (and
/// casts) each value as its target column when the statement lists columns or casts.
fn inserted(
    input: &LogicalPlan,
    target: &datafusion::arrow::datatypes::Schema,
    out: &mut HashMap<usize, String>,
) {
    let declared = |name: &str| {
        target
            .field_with_name(name)
            .ok()
            .and_then(|f| text_typed(f.metadata().get(DECLARED_TYPE)))
    };
    match input {
        LogicalPlan::Projection(p) => {
            let LogicalPlan::Values(v) = p.input.as_ref() else {
                return;
            };
            for (i, e) in p.expr.iter().enumerate() {
                let Expr::Column(c) = uncast(e) else { continue };
                let (Ok(k), Some(ty)) = (
                    v.schema.index_of_column(c),
                    declared(p.schema.field(i).name()),
                ) else {
                    continue;
                };
                column_of_values(&v.values, k, &ty, out);
            }
        }
        LogicalPlan::Values(v) => {
            for (k, field) in target.fields().iter().enumerate() {
                let Some(ty) = text_typed(field.metadata().get(DECLARED_TYPE)) else {
                    continue;
                };
                column_of_values(&v.values, k, &ty, out);
            }
        }
        _ => {}
    }
}

/// Every parameter that is a whole value in column `k` of a VALUES list is of type `ty`.
fn column_of_values(rows: &[Vec<Expr>], k: usize, ty: &str, out: &mut HashMap<usize, String>) {
    for n in rows
        .iter()
        .filter_map(|row| row.get(k).and_then(placeholder))
    {
        out.entry(n).or_insert_with(|| ty.to_string());
    }
}

fn text_typed(declared: Option<&String>) -> Option<String> {
    declared
        .filter(|d| matches!(d.as_str(), "UUID" | "JSON" | "JSONB"))
        .cloned()
}

fn uncast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => uncast(&c.expr),
        Expr::TryCast(c) => uncast(&c.expr),
        Expr::Alias(a) => uncast(&a.expr),
        other => other,
    }
}

fn placeholder(e: &Expr) -> Option<usize> {
    match uncast(e) {
        Expr::Placeholder(p) => {
            p.id.trim_start_matches('$')
                .parse()
                .ok()
                .filter(|n| *n >= 1)
        }
        _ => None,
    }
}
