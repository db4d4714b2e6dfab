//! The SQLSTATE of a statement DataFusion's planner refused.
//!
//! `DataFusionError::Plan` carries only a message, and one variant covers an unknown
//! table, a VALUES list of uneven rows, a column outside GROUP BY and an operator without
//! a matching type. Clients act on the SQLSTATE (an ORM retries nothing on 42601 but
//! creates a missing table on 42P01), so each is told apart here by the words DataFusion
//! and tierdb's own planning code write, mapped to the code PostgreSQL 15 gives the same
//! statement.
//!
//! Invariants:
//! 1. A message no rule knows gets 42000, the class of every planning refusal
//!    (syntax_error_or_access_rule_violation): never a narrower code that could send a
//!    client down the wrong path (before, every unknown message was 42P01, "undefined
//!    table", and an uneven VALUES list looked like a missing table).
//! 2. Rules are tried in order and the first that matches wins, so a narrower rule comes
//!    before a broader one that shares its words.
//! 3. Only DataFusion's planning messages come here; errors with their own variant
//!    (schema errors, casts, tierdb's own) are coded where they are raised.

/// `(words the message contains, SQLSTATE)`, first match wins (invariant 2).
const RULES: &[(&str, &str)] = &[
    // A relation or schema that does not exist: undefined_table.
    ("' not found", "42P01"), // "table 'x' not found"; also "column 'c' not found" below
    ("Table not found", "42P01"),
    ("failed to resolve schema", "42P01"),
    ("failed to resolve catalog", "42P01"),
    // NUMERIC(p,s) wider than Decimal256 (PostgreSQL takes up to 1000 digits, and a scale
    // above the precision): feature_not_supported.
    ("should satisfy `0 < precision <= 76`", "0A000"),
    // Parameters: undefined_parameter.
    ("placeholder", "42P02"),
    // A configuration name nobody knows: undefined_object.
    ("unrecognized configuration parameter", "42704"),
    // Duplicates: duplicate_alias, duplicate_column.
    ("WITH query name", "42712"),
    ("specified more than once", "42701"),
    ("require unique expression names", "42701"),
    // A column outside GROUP BY: grouping_error.
    ("must be in GROUP BY", "42803"),
    ("must appear in the GROUP BY", "42803"),
    ("non-aggregate values", "42803"),
    // ORDER BY 9 past the select list: invalid_column_reference.
    ("Order by column out of bounds", "42P10"),
    ("Order by index starts at 1", "42P10"),
    // A condition that is not boolean, set operands of different types: datatype_mismatch.
    ("must be boolean type", "42804"),
    ("non-boolean predicate", "42804"),
    ("requires a boolean expression", "42804"),
    ("have different type in inputs", "42804"),
    // Rows and column lists of different lengths: syntax_error, as PostgreSQL's
    // "VALUES lists must all be the same length", "INSERT has more expressions than
    // target columns", "each UNION query must have the same number of columns".
    ("Inconsistent data length", "42601"),
    ("different number of columns", "42601"),
    ("different number of fields", "42601"),
    ("columns specified, but result has", "42601"),
    ("Source table contains", "42601"),
    ("Column count doesn't match", "42601"),
    ("Values list cannot be", "42601"),
    // No function or operator for these argument types: undefined_function.
    ("Invalid function", "42883"),
    ("No function matches", "42883"),
    ("Function ", "42883"), // "Function x not found", "Function 'f' expects Numeric …"
    ("function ", "42883"), // "function sum(text) does not exist", "… user-defined coercion"
    ("Failed to coerce arguments", "42883"),
    ("Cannot infer common argument type", "42883"),
    ("Cannot coerce arithmetic expression", "42883"),
    ("There isn't a common type", "42883"),
    ("Cannot find a common type", "42883"),
    ("can't cast to", "42883"),
    ("does not support type", "42883"),
    ("expected ", "42883"), // "The function 'f' expected 2 arguments but received 1"
    ("Unary operator", "42883"),
    // What PostgreSQL runs and DataFusion cannot plan: feature_not_supported.
    ("must be aggregated to return at most one row", "0A000"),
    ("not supported", "0A000"),
    ("not yet supported", "0A000"),
    ("not currently supported", "0A000"),
    ("Unsupported", "0A000"),
    // A column that does not exist, said by the SQL planner as a plan error.
    ("column '", "42703"),
    ("is not in schema", "42703"),
];

/// The SQLSTATE PostgreSQL gives the statement DataFusion's planner refused with
/// `message` (invariant 1 for a message no rule knows).
pub(crate) fn plan_sqlstate(message: &str) -> &'static str {
    // "column 'c' not found" is an undefined column, not a table: the one rule that must
    // look at two places of the message.
    if message.contains("column '") && message.contains("' not found") {
        return "42703";
    }
    RULES
        .iter()
        .find(|(words, _)| message.contains(words))
        .map_or("42000", |(_, code)| code)
}

#[cfg(test)]
mod tests {
    use super::plan_sqlstate;

    /// Each message as DataFusion 55 or tierdb writes it, with the code PostgreSQL 15
    /// gives the statement that provokes it (checked with psql).
    #[test]
    fn planning_refusals_get_postgresqls_codes() {
        for (message, code) in [
            ("table 'datafusion.public.nope' not found", "42P01"),
            ("failed to resolve schema: nosuch", "42P01"),
            (
                "Inconsistent data length across values list: got 1 values in row 1 but expected 2",
                "42601",
            ),
            (
                "UNION queries have different number of columns: left has 1 columns whereas right has 2 columns",
                "42601",
            ),
            (
                "Column in SELECT must be in GROUP BY or an aggregate function: While expanding wildcard",
                "42803",
            ),
            (
                "Invalid function 'nosuchfn'.\nDid you mean 'nanvl'?",
                "42883",
            ),
            (
                "Cannot infer common argument type for comparison operation Int64 = Utf8",
                "42883",
            ),
            (
                "function sum(Utf8) does not exist: sum takes numbers and intervals",
                "42883",
            ),
            ("column \"a\" specified more than once", "42701"),
            (
                "Decimal(precision = 100, scale = 2) should satisfy `0 < precision <= 76`, and `scale <= precision`.",
                "0A000",
            ),
            ("WITH query name \"x\" specified more than once", "42712"),
            (
                "Order by column out of bounds, specified: 3, max: 1",
                "42P10",
            ),
            ("unrecognized configuration parameter \"nope\"", "42704"),
            (
                "Correlated scalar subquery must be aggregated to return at most one row",
                "0A000",
            ),
            ("Unsupported AnyOp: '~'", "0A000"),
            ("column 'x' not found", "42703"),
            (
                "Cannot create filter with non-boolean predicate 't.a' returning Int32",
                "42804",
            ),
            ("something new in a later DataFusion", "42000"),
        ] {
            assert_eq!(plan_sqlstate(message), code, "{message}");
        }
    }
}
