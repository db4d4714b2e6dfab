//! Where a query's output columns come from: for a column that is a plain reference to a
//! stored table's column (through projections, aliases, filters, sorts, limits and joins),
//! that table and the column's number in it, as PostgreSQL's RowDescription reports them
//! (drivers answer `ResultSetMetaData.getTableName`, `getColumnName` and updatable result
//! sets from them). A computed column has no origin, as in PostgreSQL.

use datafusion::common::Column;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan};

/// A stored table's name and the column's 1-based number in it.
pub type Origin = (String, i16);

/// The origin of each output column of `plan` (`None` where it has none).
pub fn origins(plan: &LogicalPlan) -> Vec<Option<Origin>> {
    (0..plan.schema().fields().len())
        .map(|i| origin(plan, i, 0))
        .collect()
}

/// Whether each output column of `plan` keeps its type's modifier (a typmod), as
/// PostgreSQL's RowDescription sends one: a stored column's (`NUMERIC(10,2)`, through
/// subqueries and joins as [`origins`] follows them) and a cast's (`x::numeric(10,2)`);
/// not a computed value's (`1.5`, `n + 1`, `sum(n)`: `numeric`, typmod -1), whose Arrow
/// type still has a precision and scale. A cast of a literal that the optimizer folded
/// into a literal (a prepared statement's kept plan) has none.
pub fn modifiers(plan: &LogicalPlan) -> Vec<bool> {
    (0..plan.schema().fields().len())
        .map(|i| modifier(plan, i, 0))
        .collect()
}

fn modifier(plan: &LogicalPlan, i: usize, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let through = |input: &LogicalPlan, c: &Column| {
        input
            .schema()
            .index_of_column(c)
            .is_ok_and(|j| modifier(input, j, depth + 1))
    };
    match plan {
        LogicalPlan::Projection(p) => match p.expr.get(i).map(unaliased) {
            Some(Expr::Column(c)) => through(&p.input, c),
            Some(Expr::Cast(_) | Expr::TryCast(_)) => true,
            _ => false,
        },
        LogicalPlan::SubqueryAlias(a) => modifier(&a.input, i, depth + 1),
        LogicalPlan::Filter(f) => modifier(&f.input, i, depth + 1),
        LogicalPlan::Sort(s) => modifier(&s.input, i, depth + 1),
        LogicalPlan::Limit(l) => modifier(&l.input, i, depth + 1),
        LogicalPlan::Join(j) => {
            let left = j.left.schema().fields().len();
            if i < left {
                modifier(&j.left, i, depth + 1)
            } else {
                modifier(&j.right, i - left, depth + 1)
            }
        }
        // A grouped column is the column (`SELECT n … GROUP BY n`); an aggregate is computed.
        LogicalPlan::Aggregate(a) => match a.group_expr.get(i).map(unaliased) {
            Some(Expr::Column(c)) => through(&a.input, c),
            Some(Expr::Cast(_) | Expr::TryCast(_)) => true,
            _ => false,
        },
        LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input)) => {
            modifier(input, i, depth + 1)
        }
        LogicalPlan::TableScan(_) | LogicalPlan::Extension(_) => origin(plan, i, depth).is_some(),
        _ => false,
    }
}

/// Plans nest this deep at most before a column is given up on (no origin).
const MAX_DEPTH: usize = 64;

fn origin(plan: &LogicalPlan, i: usize, depth: usize) -> Option<Origin> {
    if depth > MAX_DEPTH {
        return None;
    }
    let through = |input: &LogicalPlan, c: &Column| {
        let j = input.schema().index_of_column(c).ok()?;
        origin(input, j, depth + 1)
    };
    match plan {
        LogicalPlan::Projection(p) => match unaliased(p.expr.get(i)?) {
            Expr::Column(c) => through(&p.input, c),
            _ => None,
        },
        LogicalPlan::SubqueryAlias(a) => origin(&a.input, i, depth + 1),
        LogicalPlan::Filter(f) => origin(&f.input, i, depth + 1),
        LogicalPlan::Sort(s) => origin(&s.input, i, depth + 1),
        LogicalPlan::Limit(l) => origin(&l.input, i, depth + 1),
        LogicalPlan::Join(j)
            if matches!(
                j.join_type,
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
            ) =>
        {
            let left = j.left.schema().fields().len();
            if i < left {
                origin(&j.left, i, depth + 1)
            } else {
                origin(&j.right, i - left, depth + 1)
            }
        }
        LogicalPlan::TableScan(t) => {
            let ours = t
                .table_name
                .catalog()
                .is_none_or(|c| c == crate::sql::CATALOG);
            let stored = datafusion::datasource::source_as_provider(&t.source)
                .ok()
                .is_some_and(|p| {
                    p.is::<crate::provider::TierTable>()
                        || p.is::<crate::rows::provider::RowTable>()
                });
            if !ours || !stored {
                return None;
            }
            let source = t.source.schema();
            let column = match &t.projection {
                Some(p) => *p.get(i)?,
                None => i,
            };
            // Row tables may append their key column: it is not one of the table's.
            if source.fields().get(column)?.name() == crate::rows::provider::KEY_COLUMN {
                return None;
            }
            Some((
                // The catalog name (`s.t` outside public), as `tierdb-pgwire` keys OIDs.
                crate::sql::qualified(
                    t.table_name.schema().unwrap_or(crate::sql::SCHEMA),
                    t.table_name.table(),
                ),
                i16::try_from(column + 1).ok()?,
            ))
        }
        // The key-lookup short path (`rows/fast.rs`): its columns are the table's, in the
        // order the statement names them, then (for UPDATE and DELETE) the row's key.
        LogicalPlan::Extension(_) => {
            let lookup = crate::rows::fast::as_lookup(plan)?;
            let column = *lookup.columns().get(i)?;
            Some((lookup.def().name.clone(), i16::try_from(column + 1).ok()?))
        }
        _ => None,
    }
}

fn unaliased(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unaliased(&a.expr),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    async fn modifiers_of(sql: &str) -> Vec<bool> {
        let ctx = SessionContext::new();
        let plan = ctx.state().create_logical_plan(sql).await.expect("plan");
        super::modifiers(&plan)
    }

    #[tokio::test]
    async fn casts_keep_a_modifier_and_computed_values_do_not() {
        assert_eq!(
            modifiers_of(
                "SELECT 1.5 AS lit, CAST(1.5 AS DECIMAL(10,2)) AS cast, x.b AS sub, x.b + 1 AS sum \
                 FROM (SELECT CAST(2 AS DECIMAL(5,1)) AS b) x"
            )
            .await,
            vec![false, true, true, false]
        );
        assert_eq!(
            modifiers_of(
                "SELECT b, sum(b) FROM (SELECT CAST(2 AS DECIMAL(5,1)) AS b) x GROUP BY b ORDER BY b"
            )
            .await,
            vec![true, false]
        );
    }
}
