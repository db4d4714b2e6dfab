//! The names `WITH` clauses define, as a visitor walking a statement meets them: a
//! relation named like a CTE in whose scope it stands is the CTE, not a table or view. The
//! visitors that resolve names (view expansion, the search path, what a view reads) keep
//! one of these, entering each query on the way down and leaving it on the way up.

use std::collections::HashSet;

use datafusion::sql::sqlparser::ast::Query;

/// The CTE names in scope, innermost query last.
#[derive(Debug, Default)]
pub(crate) struct WithNames(Vec<HashSet<String>>);

impl WithNames {
    /// Entering `query` (a visitor's `pre_visit_query`): its `WITH` names come in scope.
    pub(crate) fn enter(&mut self, query: &Query) {
        let names = query
            .with
            .iter()
            .flat_map(|w| w.cte_tables.iter())
            .map(|c| super::ident_name(&c.alias.name))
            .collect();
        self.0.push(names);
    }

    /// Leaving the innermost query (`post_visit_query`).
    pub(crate) fn leave(&mut self) {
        self.0.pop();
    }

    /// Whether `name` (as `ident_name` gives it) is a CTE here.
    pub(crate) fn defines(&self, name: &str) -> bool {
        self.0.iter().any(|c| c.contains(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::{Statement, Visit, Visitor};
    use std::ops::ControlFlow;

    /// Records, for each table factor, whether it names a CTE in scope.
    struct Seen(WithNames, Vec<(String, bool)>);

    impl Visitor for Seen {
        type Break = ();
        fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
            self.0.enter(q);
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.0.leave();
            ControlFlow::Continue(())
        }
        fn pre_visit_relation(
            &mut self,
            n: &datafusion::sql::sqlparser::ast::ObjectName,
        ) -> ControlFlow<()> {
            let name = n.to_string();
            let is_cte = self.0.defines(&name.replace('"', ""));
            self.1.push((name, is_cte));
            ControlFlow::Continue(())
        }
    }

    #[test]
    fn a_cte_is_in_scope_only_inside_its_query() {
        let sql = "SELECT * FROM (WITH t AS (SELECT 1) SELECT * FROM t) x, t, \
                   (WITH \"T\" AS (SELECT 2) SELECT * FROM \"T\", t) y";
        let stmts = crate::sql::parse(sql).expect("parse");
        let datafusion::sql::parser::Statement::Statement(s) = &stmts[0] else {
            panic!("not a statement");
        };
        let s: &Statement = s;
        let mut seen = Seen(WithNames::default(), Vec::new());
        let _ = s.visit(&mut seen);
        assert_eq!(
            seen.1,
            [
                ("t".to_string(), true),
                ("t".to_string(), false),
                ("\"T\"".to_string(), true),
                ("t".to_string(), false),
            ]
        );
    }
}
