//! Statement shapes tierdb refuses because the engine below would answer them wrong.
//!
//! Each entry was found by the differential tester against PostgreSQL
//! (`python/sqlcheck`) and is refused with SQLSTATE 0A000 before anything runs, until the
//! engine computes it right; a refusal names the rewrite that works.
//!
//! 1. `x NOT IN (subquery)` anywhere but as a conjunct of a WHERE or HAVING clause (under
//!    OR, NOT, CASE, in a select list, in a join condition). DataFusion plans it as a mark
//!    join that is not null-aware: with `x` NULL, or a NULL among the subquery's values,
//!    the predicate is true where SQL says NULL, so `WHERE a = 1 OR id NOT IN (SELECT …)`
//!    returns, updates or deletes rows it must not. As a conjunct it becomes a null-aware
//!    anti join and is right.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, Select, Visit, Visitor};

use crate::error::{Result, TableError};

/// Refuses `stmt` if it has a shape listed in the module doc.
pub(crate) fn check(stmt: &DfStatement) -> Result<()> {
    let DfStatement::Statement(s) = stmt else {
        return Ok(());
    };
    if crate::dml::is_update_or_delete(stmt) {
        return Ok(()); // checked as the query that names its rows (`dml::plan`)
    }
    let mut v = NotInGuard::default();
    match s.visit(&mut v) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(e) => Err(e),
    }
}

#[derive(Default)]
struct NotInGuard {
    /// Addresses of the `NOT IN (subquery)` nodes that are conjuncts of a WHERE/HAVING.
    conjuncts: HashSet<usize>,
}

impl NotInGuard {
    fn mark(&mut self, e: &Expr) {
        match e {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                self.mark(left);
                self.mark(right);
            }
            Expr::Nested(inner) => self.mark(inner),
            Expr::InSubquery { negated: true, .. } => {
                self.conjuncts.insert(e as *const Expr as usize);
            }
            _ => {}
        }
    }
}

impl Visitor for NotInGuard {
    type Break = TableError;

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<TableError> {
        for clause in [&select.selection, &select.having].into_iter().flatten() {
            self.mark(clause);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<TableError> {
        if let Expr::InSubquery { negated: true, .. } = e
            && !self.conjuncts.contains(&(e as *const Expr as usize))
        {
            return ControlFlow::Break(TableError::Unsupported(
                "x NOT IN (subquery) is supported only as a condition ANDed into WHERE or \
                 HAVING (under OR or NOT, or as a value, NULLs would be handled wrongly); \
                 write NOT EXISTS (SELECT 1 FROM … WHERE y = x), adding OR y IS NULL and x \
                 IS NULL cases as the query means them; nothing was run"
                    .into(),
            ));
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(sql: &str) -> bool {
        let stmt = crate::sql::parse(sql).expect("parses").pop().expect("one");
        check(&stmt).is_err()
    }

    #[test]
    fn not_in_subquery_only_as_a_conjunct() {
        assert!(!refused("SELECT c FROM t WHERE c NOT IN (SELECT c FROM s)"));
        assert!(!refused(
            "SELECT c FROM t WHERE (c > 1 AND (c NOT IN (SELECT c FROM s))) AND c < 9"
        ));
        assert!(!refused(
            "SELECT c FROM t WHERE c IN (SELECT c FROM s) OR c = 5"
        ));
        assert!(!refused("SELECT c FROM t WHERE c NOT IN (1, 2) OR c = 5"));
        assert!(!refused(
            "SELECT c FROM t GROUP BY c HAVING c NOT IN (SELECT c FROM s)"
        ));
        assert!(refused(
            "SELECT c FROM t WHERE c = 5 OR c NOT IN (SELECT c FROM s)"
        ));
        assert!(refused(
            "SELECT c FROM t WHERE NOT (c NOT IN (SELECT c FROM s))"
        ));
        assert!(refused("SELECT c NOT IN (SELECT c FROM s) FROM t"));
        assert!(refused(
            "SELECT c FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.c = 1 OR u.c NOT IN (SELECT c FROM s))"
        ));
    }
}
