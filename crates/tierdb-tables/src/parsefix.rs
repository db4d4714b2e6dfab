//! Repairs to the syntax tree the SQL parser gets wrong, applied to every statement before
//! it is planned (`sql::parse`, and the PostgreSQL server's parser).
//!
//! 1. `a IS [NOT] DISTINCT FROM b AND c` is `(a IS DISTINCT FROM b) AND c` in SQL and in
//!    PostgreSQL (IS binds tighter than AND and OR). sqlparser 0.62 parses the right side of
//!    IS DISTINCT FROM as a whole expression, giving `a IS DISTINCT FROM (b AND c)`: an
//!    error when the types differ, a silently different predicate when they are booleans
//!    (found by the differential tester). Written parentheses survive as `Expr::Nested`, so
//!    a bare AND/OR on the right can only come from that mis-parse and is re-associated.
//! 2. `nextval('s'::regclass)` (also `currval`, `setval`): PostgreSQL's tools write a
//!    sequence's name as a `regclass` (pg_dump's and psql's column defaults), a type tierdb
//!    does not have; its sequence functions take the name as text, so the cast is dropped.
//! 3. A cast to UUID, JSON or JSONB (`x::uuid`, `CAST(x AS jsonb)`, `UUID '…'`) is the
//!    call of the function that checks and canonicalizes the text (`pgtext.rs`): those
//!    types are stored as text, and DataFusion has no casts to them.
//! 4. A cast to VARCHAR(n) or CHAR(n) is the call that cuts (and pads) to the length and
//!    declares the type (`charcast.rs`): DataFusion's cast drops the length.
//! 5. `FROM generate_series(1, n) g` (also `unnest(a) u`): in PostgreSQL the alias of a
//!    function returning one scalar column names that column too (`SELECT g …`; pgbench's
//!    server-side data generation writes it so); DataFusion names it `value`. The alias
//!    gets the column alias `g(g)`.
//! 6. A number written with an exponent (`1e10`, `2.5E-3`) is written out in plain digits
//!    (`10000000000`, `0.0025`), the NUMERIC value PostgreSQL reads: DataFusion, which
//!    reads numbers with a point or an exponent as NUMERIC for tierdb as PostgreSQL does,
//!    gives `1e10` a negative scale that no client can be sent. An exponent beyond ±1000
//!    is left to DataFusion's error. Unlike PostgreSQL's, a whole number so written is
//!    then an integer literal (`pg_typeof(1e10)` is bigint; the value is the same).
//! 7. An INTERVAL times or divided by a number is PostgreSQL's `interval_mul` /
//!    `interval_div` (`intervalmul.rs`), which DataFusion does not have.
//! 8. A cast to NUMERIC (DECIMAL) without a precision (`x::numeric`, `NUMERIC '1.5'`) is
//!    one to the type a NUMERIC column without precision stores (`ColumnType::Numeric`:
//!    76 digits, 20 after the point), which is shown without trailing zeros: DataFusion
//!    casts it to DECIMAL(38,10), so `1.5::numeric` showed `1.5000000000` and a value
//!    with more than 28 integer digits failed.
//! 9. `INTERVAL '…'` whose text Arrow's parser does not read as PostgreSQL does (`'1 day
//!    02:00:00'`, which is how PostgreSQL writes an interval; `'@ 1 hour ago'`, `'P1DT2H'`;
//!    `'1.25 mon'`, whose fraction of a month Arrow drops past whole days) is the cast
//!    `CAST('…' AS INTERVAL)`, which reads PostgreSQL's forms (`textin/interval.rs`):
//!    DataFusion parses the literal while planning, before any rule could. Text Arrow
//!    reads stays a literal (DATE plus a literal of whole days stays a DATE, `pgarith.rs`
//!    rule 4).
//! 10. `x AT TIME ZONE z` is `timezone(z, x)`, PostgreSQL's conversion between
//!     TIMESTAMPTZ and wall-clock TIMESTAMP (`textin/atzone.rs`): DataFusion plans it as a
//!     cast that only changes the zone a TIMESTAMPTZ is shown in, so `tz AT TIME ZONE
//!     'UTC'` answered the same instant where PostgreSQL answers the time in UTC.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Statement, TableAlias, TableAliasColumnDef, TableFactor, VisitMut,
    VisitorMut,
};

/// Applies every repair in the module doc to `stmt`.
pub fn repair(stmt: &mut Statement) {
    let _ = stmt.visit(&mut Repair);
}

struct Repair;

impl VisitorMut for Repair {
    type Break = ();

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        scalar_function_alias(factor);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Value(v) = e
            && let datafusion::sql::sqlparser::ast::Value::Number(n, _) = &mut v.value
            && let Some(plain) = plain_digits(n)
        {
            *n = plain;
        }
        sequence_name_casts(e);
        text_type_casts(e);
        unconstrained_numeric_casts(e);
        crate::intervalmul::rewrite(e);
        interval_literals(e);
        at_time_zone(e);
        crate::charcast::repair(e);
        if matches!(e, Expr::IsDistinctFrom(..) | Expr::IsNotDistinctFrom(..)) {
            let taken = std::mem::replace(
                e,
                Expr::Value(datafusion::sql::sqlparser::ast::Value::Null.into()),
            );
            *e = reassociate(taken);
        }
        ControlFlow::Continue(())
    }
}

/// Rule 6: `n` (unsigned digits, an optional point, an exponent) in plain digits; `None`
/// when it has no exponent or is not such a number.
fn plain_digits(n: &str) -> Option<String> {
    let (mantissa, exponent) = n.split_once(['e', 'E'])?;
    let exponent: i64 = exponent.parse().ok().filter(|e: &i64| e.abs() <= 1000)?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Where the point falls in `digits`, and the digits after it (the scale).
    let point = int.len() as i64 + exponent;
    let scale = (frac.len() as i64 - exponent).max(0) as usize;
    let mut whole = if point <= 0 {
        String::new()
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        digits[..point as usize].to_string()
    };
    let after = if point < 0 {
        format!("{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        digits.get(point as usize..).unwrap_or("").to_string()
    };
    let trimmed = whole.trim_start_matches('0');
    whole = if trimmed.is_empty() {
        "0".into()
    } else {
        trimmed.into()
    };
    let after: String = after
        .chars()
        .chain(std::iter::repeat('0'))
        .take(scale)
        .collect();
    Some(if scale == 0 {
        whole
    } else {
        format!("{whole}.{after}")
    })
}

/// Rule 9.
fn interval_literals(e: &mut Expr) {
    use datafusion::sql::sqlparser::ast::{CastKind, DataType, Value};
    let Expr::Interval(i) = e else {
        return;
    };
    if i.leading_field.is_some() || i.last_field.is_some() {
        return;
    }
    let Expr::Value(v) = i.value.as_ref() else {
        return;
    };
    let Value::SingleQuotedString(text) = &v.value else {
        return;
    };
    let arrow =
        datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(text);
    match (arrow, crate::textin::interval::interval(text)) {
        // Read alike (or only by Arrow): the literal stays.
        (Ok(a), Ok((months, days, micros)))
            if (a.months, a.days, a.nanoseconds) == (months, days, micros.saturating_mul(1000)) =>
        {
            return;
        }
        (Ok(_), Err(_)) => return,
        _ => {}
    }
    *e = Expr::Cast {
        kind: CastKind::Cast,
        expr: i.value.clone(),
        data_type: DataType::Interval {
            fields: None,
            precision: None,
        },
        array: false,
        format: None,
    };
}

/// Rule 10.
fn at_time_zone(e: &mut Expr) {
    if let Expr::AtTimeZone {
        timestamp,
        time_zone,
    } = e
    {
        let args = vec![time_zone.as_ref().clone(), timestamp.as_ref().clone()];
        *e = call(crate::textin::atzone::NAME, args);
    }
}

/// Rule 8.
fn unconstrained_numeric_casts(e: &mut Expr) {
    use datafusion::sql::sqlparser::ast::{DataType, ExactNumberInfo};
    let data_type = match e {
        Expr::Cast { data_type, .. } => data_type,
        Expr::TypedString(t) => &mut t.data_type,
        _ => return,
    };
    if let DataType::Numeric(info @ ExactNumberInfo::None)
    | DataType::Decimal(info @ ExactNumberInfo::None)
    | DataType::Dec(info @ ExactNumberInfo::None) = data_type
    {
        *info = ExactNumberInfo::PrecisionAndScale(
            u64::from(crate::catalog::MAX_NUMERIC_PRECISION),
            crate::catalog::NUMERIC_SCALE as i64,
        );
    }
}

/// Rule 2.
fn sequence_name_casts(e: &mut Expr) {
    use datafusion::sql::sqlparser::ast::{
        DataType, FunctionArg, FunctionArgExpr, FunctionArguments,
    };
    let Expr::Function(f) = e else {
        return;
    };
    let is_sequence_fn = f.name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| {
        ["nextval", "currval", "setval"]
            .iter()
            .any(|n| i.value.eq_ignore_ascii_case(n))
    });
    if !is_sequence_fn {
        return;
    }
    let FunctionArguments::List(list) = &mut f.args else {
        return;
    };
    if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = list.args.first_mut()
        && let Expr::Cast {
            expr, data_type, ..
        } = first
        && (matches!(data_type, DataType::Regclass)
            || matches!(data_type, DataType::Custom(n, _) if n.to_string().eq_ignore_ascii_case("regclass")))
        && matches!(expr.as_ref(), Expr::Value(_))
    {
        *first = expr.as_ref().clone();
    }
}

/// Rule 3.
fn text_type_casts(e: &mut Expr) {
    use datafusion::sql::sqlparser::ast::Value;
    let (arg, ty) = match e {
        Expr::Cast {
            expr, data_type, ..
        } => match crate::pgtext::cast_target(data_type) {
            Some(ty) => (expr.as_ref().clone(), ty),
            None => return,
        },
        Expr::TypedString(t) => match crate::pgtext::cast_target(&t.data_type) {
            Some(ty) => (Expr::Value(t.value.clone()), ty),
            None => return,
        },
        _ => return,
    };
    let Some(name) = crate::pgtext::cast_function(ty) else {
        return;
    };
    // A NULL literal has no type; the function takes text.
    let arg = match arg {
        Expr::Value(v) if matches!(v.value, Value::Null) => Expr::Cast {
            kind: datafusion::sql::sqlparser::ast::CastKind::DoubleColon,
            expr: Box::new(Expr::Value(v)),
            data_type: datafusion::sql::sqlparser::ast::DataType::Text,
            array: false,
            format: None,
        },
        other => other,
    };
    *e = call(name, vec![arg]);
}

/// The call `name(args…)`.
pub(crate) fn call(name: &str, args: Vec<Expr>) -> Expr {
    use datafusion::sql::sqlparser::ast::{
        Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
        ObjectName, ObjectNamePart,
    };
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// `l IS [NOT] DISTINCT FROM (r1 AND|OR r2)` (unparenthesized) as
/// `(l IS [NOT] DISTINCT FROM r1) AND|OR r2`, repeatedly.
fn reassociate(e: Expr) -> Expr {
    let (l, r, negated) = match e {
        Expr::IsDistinctFrom(l, r) => (l, r, false),
        Expr::IsNotDistinctFrom(l, r) => (l, r, true),
        other => return other,
    };
    match *r {
        Expr::BinaryOp {
            left,
            op: op @ (BinaryOperator::And | BinaryOperator::Or),
            right,
        } => {
            let inner = if negated {
                Expr::IsNotDistinctFrom(l, left)
            } else {
                Expr::IsDistinctFrom(l, left)
            };
            Expr::BinaryOp {
                left: Box::new(reassociate(inner)),
                op,
                right,
            }
        }
        r => {
            if negated {
                Expr::IsNotDistinctFrom(l, Box::new(r))
            } else {
                Expr::IsDistinctFrom(l, Box::new(r))
            }
        }
    }
}

/// Repair 5: the alias of a one-column set-returning function names its column.
fn scalar_function_alias(factor: &mut TableFactor) {
    let alias: Option<&mut TableAlias> = match factor {
        TableFactor::Table {
            name,
            args: Some(_),
            alias,
            ..
        } if name.0.len() == 1
            && name.0[0]
                .as_ident()
                .is_some_and(|i| i.value.eq_ignore_ascii_case("generate_series")) =>
        {
            alias.as_mut()
        }
        TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset: false,
            with_ordinality: false,
            ..
        } if array_exprs.len() == 1 => alias.as_mut(),
        _ => None,
    };
    if let Some(a) = alias
        && a.columns.is_empty()
    {
        a.columns = vec![TableAliasColumnDef::from_name(a.name.value.clone())];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn fixed(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .pop()
            .expect("one");
        repair(&mut s);
        s.to_string()
    }
    #[test]
    fn numbers_with_an_exponent_are_written_out() {
        // PostgreSQL 15: SELECT 1e10, 2.5E3, 1.5e-3, 1.50e1, .5e1, 12.345e1, 0e5, 1e-0;
        assert_eq!(
            fixed("SELECT 1e10, 2.5E3, 1.5e-3, 1.50e1, .5e1, 12.345e1, 0e5, 1e-0, -2e2"),
            "SELECT 10000000000, 2500, 0.0015, 15.0, 5, 123.45, 0, 1, -200"
        );
        // No exponent, or one too large to write out: unchanged.
        assert_eq!(fixed("SELECT 1.50, 7, 1e5000"), "SELECT 1.50, 7, 1e5000");
        assert_eq!(plain_digits("1e2x"), None);
        assert_eq!(plain_digits("e5"), None);
    }

    #[test]
    fn the_alias_of_a_one_column_function_names_its_column() {
        assert_eq!(
            fixed("SELECT g FROM generate_series(1, 3) g"),
            "SELECT g FROM generate_series(1, 3) g (g)"
        );
        assert_eq!(
            fixed("SELECT aid FROM GENERATE_SERIES(1, 3) AS aid"),
            "SELECT aid FROM GENERATE_SERIES(1, 3) AS aid (aid)"
        );
        // Column aliases written, another function, no alias: unchanged.
        assert_eq!(
            fixed("SELECT x FROM generate_series(1, 3) AS g(x), t AS u, f(1) AS v"),
            "SELECT x FROM generate_series(1, 3) AS g (x), t AS u, f(1) AS v"
        );
        assert_eq!(
            fixed("SELECT * FROM generate_series(1, 3)"),
            "SELECT * FROM generate_series(1, 3)"
        );
    }

    #[test]
    fn a_sequence_named_as_a_regclass_is_named_by_text() {
        assert_eq!(
            fixed("CREATE TABLE t (id INT DEFAULT nextval('public.t_id_seq'::regclass))"),
            "CREATE TABLE t (id INT DEFAULT nextval('public.t_id_seq'))"
        );
        assert_eq!(
            fixed("SELECT setval('s'::regclass, 3, true), currval('s'::REGCLASS)"),
            "SELECT setval('s', 3, true), currval('s')"
        );
        assert_eq!(
            fixed("SELECT 'pg_class'::regclass"),
            "SELECT 'pg_class'::REGCLASS"
        );
    }

    #[test]
    fn casts_to_text_stored_types_are_their_checking_functions() {
        assert_eq!(
            fixed("SELECT 'x'::uuid, CAST(a AS JSONB), '{}'::json, NULL::jsonb"),
            "SELECT tierdb_uuid('x'), tierdb_jsonb(a), tierdb_json('{}'), tierdb_jsonb(NULL::TEXT)"
        );
        assert_eq!(
            fixed("SELECT UUID 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
            "SELECT tierdb_uuid('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')"
        );
        assert_eq!(
            fixed("CREATE TABLE t (a UUID, b JSONB)"),
            "CREATE TABLE t (a UUID, b JSONB)"
        );
    }

    #[test]
    fn is_distinct_from_binds_tighter_than_and_and_or() {
        assert_eq!(
            fixed("SELECT 1 WHERE a IS DISTINCT FROM b AND c"),
            "SELECT 1 WHERE a IS DISTINCT FROM b AND c"
        );
        // The tree, not the text, is what changed: check it by what it nests.
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT 1 WHERE a IS NOT DISTINCT FROM b AND c OR d",
        )
        .expect("parses")
        .pop()
        .expect("one");
        repair(&mut s);
        let Statement::Query(q) = &s else {
            panic!("a query")
        };
        let datafusion::sql::sqlparser::ast::SetExpr::Select(sel) = q.body.as_ref() else {
            panic!("a select")
        };
        let Some(Expr::BinaryOp {
            left,
            op: BinaryOperator::Or,
            ..
        }) = &sel.selection
        else {
            panic!("OR at the top: {:?}", sel.selection)
        };
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            ..
        } = left.as_ref()
        else {
            panic!("AND under it: {left:?}")
        };
        assert!(
            matches!(left.as_ref(), Expr::IsNotDistinctFrom(_, r) if matches!(r.as_ref(), Expr::Identifier(_)))
        );
        // Written parentheses are kept.
        assert_eq!(
            fixed("SELECT 1 WHERE a IS DISTINCT FROM (b AND c)"),
            "SELECT 1 WHERE a IS DISTINCT FROM (b AND c)"
        );
    }
}
