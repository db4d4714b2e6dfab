//! PostgreSQL's `character(n)` semantics for CHAR(n) columns, which tierdb stores padded
//! with spaces to `n` characters (catalog.rs): trailing spaces are insignificant.
//!
//! Without this rule `cd_education_status = 'Primary'` over a CHAR(20) column compared
//! `'Primary             '` with `'Primary'` and matched nothing: TPC-DS answered empty
//! where PostgreSQL and DuckDB find rows. PostgreSQL's rules, and how each is kept:
//!
//! | where a CHAR(n) value is used | PostgreSQL | here |
//! |---|---|---|
//! | compared with a string literal (`=`, `<>`, `<`, `IN (…)`, BETWEEN, NULLIF) | `bpchareq`: trailing spaces ignored | the literal is padded to `n` when the plan is analyzed: same answers, and the comparison stays a column against a literal (pruning, pushdown) |
//! | compared with a CHAR(n) column of the same `n` | `bpchareq` | unchanged: both are padded alike |
//! | compared with anything else | cast to text, which strips trailing spaces | `rtrim(col)` |
//! | a function argument, `\|\|`, CAST | cast to text | `rtrim(col)` |
//! | a CASE branch, a COALESCE argument, where all are CHAR(n) or literals and one a CHAR(n) column | the result is character | unchanged; compared with `rtrim` on both sides; otherwise as text (a CASE of literals only is text, as in PostgreSQL) |
//!
//! A cast to CHAR(n) (`charcast.rs`: padded to `n`) is such a value too, and so is
//! `NULLIF(c, x)` of a CHAR(n) column (its result has the column's type).
//! | LIKE, regular expressions, `octet_length` | the padded value (`bpcharlike`, `bpcharoctetlen`) | unchanged |
//! | selected, grouped, sorted, aggregated | the padded value | unchanged |
//! | stored into a TEXT or VARCHAR column (INSERT, UPDATE) | cast to text | `rtrim` ([`unpadded_into`]) |
//!
//! A CHAR(n) column is known by its field's [`DECLARED_TYPE`] metadata, which DataFusion
//! carries through projections and subqueries with the column.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunction, InList, Like, Sort, WindowFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

use crate::catalog::DECLARED_TYPE;

#[derive(Debug, Default)]
pub struct CharSemantics;

impl AnalyzerRule for CharSemantics {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(rewrite_node)
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tierdb_char_semantics"
    }
}

fn rewrite_node(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if let Some(insert) = inserted_as_text(&node)? {
        return Ok(Transformed::yes(insert));
    }
    // Columns are resolved against the node's inputs (all of them: a join's two sides).
    let mut schema = DFSchema::empty();
    let inputs = node.inputs();
    if inputs.is_empty() {
        return Ok(Transformed::no(node));
    }
    for input in inputs {
        schema.merge(input.schema());
    }
    let keeps_bare = matches!(
        node,
        LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_) | LogicalPlan::Sort(_)
    );
    // Output columns keep their names (`sum(CASE WHEN d = 'Sunday' …)` stays that even with
    // the literal padded): the nodes above refer to them by name.
    let names = NamePreserver::new(&node);
    let rewritten = node.map_expressions(|e| {
        if keeps_bare && is_bare(&e) {
            return Ok(Transformed::no(e));
        }
        let name = names.save(&e);
        // NULLIF's own comparison first, wherever it is: where its result is then used as
        // a CHAR(n) value (compared as one, trimmed as one) the rules below do not look
        // inside it again.
        let e = e
            .transform_up(|x| match x {
                Expr::ScalarFunction(ref f) if f.name() == "nullif" => {
                    Ok(Transformed::yes(fix(x, &schema)?))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        Ok(Transformed::yes(name.restore(fix(e, &schema)?)))
    })?;
    // Re-derive the schema: a rewritten expression can have another type or name.
    Ok(Transformed::yes(rewritten.data.recompute_schema()?))
}

/// A column, possibly renamed: its padded value is what PostgreSQL shows.
fn is_bare(e: &Expr) -> bool {
    match e {
        // ROLLUP, CUBE, GROUPING SETS: of columns, as grouping keys.
        Expr::Column(_) | Expr::GroupingSet(_) => true,
        Expr::Alias(a) => is_bare(&a.expr),
        _ => false,
    }
}

/// `n` if `e` is a column declared CHAR(n).
fn char_len(e: &Expr, schema: &DFSchema) -> Option<usize> {
    let declared = match e {
        Expr::Column(c) => {
            let (_, field) = schema.qualified_field_from_column(c).ok()?;
            field.metadata().get(DECLARED_TYPE)?.clone()
        }
        // A correlated subquery's reference to its outer query's column.
        Expr::OuterReferenceColumn(field, _) => field.metadata().get(DECLARED_TYPE)?.clone(),
        // A scalar subquery selecting a CHAR(n) column.
        Expr::ScalarSubquery(q) => subquery_char(&q.subquery)?,
        // NULLIF's result is its first argument's type (PostgreSQL): a CHAR(n) column's,
        // padded. (Its own comparison is fixed inside it like any other.)
        Expr::ScalarFunction(f) if f.name() == "nullif" => {
            return char_len(f.args.first()?, schema);
        }
        // A cast to CHAR(n) (`charcast.rs`), padded like a column.
        Expr::ScalarFunction(f) if f.name() == crate::charcast::BPCHAR => {
            return match f.args.get(1) {
                Some(Expr::Literal(v, _)) => crate::charcast::length_of(v).map(|n| n as usize),
                _ => None,
            };
        }
        // Type coercion casts a column to the string type it is compared in (Utf8View for
        // CHAR(n) literals): still the padded value. The plan is analyzed again to run it.
        Expr::Cast(c) if is_string_type(c.field.data_type()) => {
            return char_len(&c.expr, schema);
        }
        _ => return None,
    };
    declared
        .strip_prefix("CHAR(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

/// The results of a CASE (its ELSE first, then its branches: the order PostgreSQL resolves
/// their type in) or COALESCE (its arguments).
fn results(e: &Expr) -> Option<Vec<&Expr>> {
    match e {
        Expr::Case(c) => {
            let mut r: Vec<&Expr> = c.else_expr.iter().map(|e| e.as_ref()).collect();
            r.extend(c.when_then_expr.iter().map(|(_, t)| t.as_ref()));
            Some(r)
        }
        Expr::ScalarFunction(f) if f.name() == "coalesce" => Some(f.args.iter().collect()),
        _ => None,
    }
}

/// `n` if PostgreSQL types the results character: the first result that is not a string
/// literal (an untyped literal, to PostgreSQL) decides, as its `select_common_type` keeps
/// the first type when text and character coerce both ways (`CASE WHEN … THEN
/// coalesce('a', '') ELSE c END` is character, its ELSE coming first; `COALESCE(upper(x),
/// c)` is text, `COALESCE(c, upper(x))` character). Character results of two lengths are
/// taken as text.
fn results_char(found: &[&Expr], schema: &DFSchema) -> Option<usize> {
    let mut n = None;
    for r in found {
        // A character CASE inside (NULLIF over one is rewritten to such a CASE).
        let len = char_len(r, schema).or_else(|| results(r).and_then(|x| results_char(&x, schema)));
        match len {
            Some(m) if n.is_none_or(|n| n == m) => n = Some(m),
            Some(_) => return None,
            None if is_string_literal(r) => {}
            // Text first: the result is text.
            None if n.is_none() => return None,
            // Text after character: coerced to character.
            None => {}
        }
    }
    n
}

/// A string literal or a NULL, possibly cast to a string type.
fn is_string_literal(e: &Expr) -> bool {
    match e {
        Expr::Literal(v, _) => {
            v.is_null()
                || matches!(
                    v,
                    ScalarValue::Utf8(_) | ScalarValue::Utf8View(_) | ScalarValue::LargeUtf8(_)
                )
        }
        Expr::Cast(c) => is_string_type(c.field.data_type()) && is_string_literal(&c.expr),
        _ => false,
    }
}

/// A CASE or COALESCE whose result is character: its values are the padded columns' and
/// the literals' as they are, compared without trailing spaces.
fn is_charish(e: &Expr, schema: &DFSchema) -> bool {
    results(e).is_some_and(|r| results_char(&r, schema).is_some())
}

/// One side of a comparison with a character CASE or COALESCE: without trailing spaces
/// if it is character (a CHAR(n) column, a string literal, another such CASE).
fn trimmed_side(e: Expr, schema: &DFSchema) -> Result<Expr> {
    let rtrim = |e| datafusion::functions::string::expr_fn::rtrim(vec![e]);
    if is_charish(&e, schema) || is_string_literal(&e) {
        return Ok(rtrim(fix(e, schema)?));
    }
    value(e, schema)
}

/// The declared type of a subquery's (first) column, if it is one: also through `min` and
/// `max`, whose result fields do not carry the metadata (`c >= (SELECT min(d) …)`).
fn subquery_char(plan: &LogicalPlan) -> Option<String> {
    output_char(plan, 0)
}

/// The declared type of `plan`'s output `i` (any declared type: `CHAR(4)`, `VARCHAR(5)`), if
/// known.
fn output_char(plan: &LogicalPlan, i: usize) -> Option<String> {
    if let Some(d) = plan.schema().fields().get(i)?.metadata().get(DECLARED_TYPE) {
        return Some(d.clone());
    }
    match plan {
        LogicalPlan::Projection(p) => expr_char(p.expr.get(i)?, &p.input),
        LogicalPlan::Aggregate(a) => {
            let groups = a.group_expr.len();
            match a.group_expr.get(i) {
                Some(g) => expr_char(g, &a.input),
                None => expr_char(a.aggr_expr.get(i - groups)?, &a.input),
            }
        }
        LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Distinct(_) => output_char(plan.inputs().first()?, i),
        // VALUES: a column with a CHAR(n) value in any row is character, as PostgreSQL
        // resolves it (the other rows' literals become CHAR(n) too).
        LogicalPlan::Values(v) => v
            .values
            .iter()
            .find_map(|row| char_len(row.get(i)?, plan.schema()))
            .map(|n| format!("CHAR({n})")),
        _ => None,
    }
}

fn expr_char(e: &Expr, input: &LogicalPlan) -> Option<String> {
    match e {
        Expr::Alias(a) => expr_char(&a.expr, input),
        Expr::Column(c) => output_char(input, input.schema().index_of_column(c).ok()?),
        Expr::AggregateFunction(f)
            if matches!(f.func.name(), "min" | "max") && f.params.args.len() == 1 =>
        {
            expr_char(&f.params.args[0], input)
        }
        // A cast to CHAR(n), NULLIF of one, a string cast of one, a scalar subquery's.
        other => char_len(other, input.schema()).map(|n| format!("CHAR({n})")),
    }
}

/// Whether output `i` of `source`, stored into a column `target` of another string type
/// (TEXT, VARCHAR), loses its trailing spaces: it is a CHAR(n) value, and PostgreSQL's
/// cast from `character` to `text` or `varchar` strips them. (Stored into a CHAR(m)
/// column it is padded to `m` by the write path.)
pub(crate) fn unpadded_into(
    target: &datafusion::arrow::datatypes::Field,
    source: &LogicalPlan,
    i: usize,
) -> bool {
    let target_char = target
        .metadata()
        .get(DECLARED_TYPE)
        .is_some_and(|d| d.starts_with("CHAR("));
    let source_char = output_char(source, i).is_some_and(|d| d.starts_with("CHAR("));
    !target_char && is_string_type(target.data_type()) && source_char
}

/// An INSERT's rows with [`unpadded_into`] applied to each column (the input's columns
/// are the table's, in order, as DataFusion plans an INSERT).
fn inserted_as_text(node: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    use datafusion::logical_expr::dml::{DmlStatement, WriteOp};
    let LogicalPlan::Dml(dml) = node else {
        return Ok(None);
    };
    if !matches!(dml.op, WriteOp::Insert(_)) {
        return Ok(None);
    }
    let target = dml.target.schema();
    let input = dml.input.as_ref();
    let insert = |input: LogicalPlan| {
        LogicalPlan::Dml(DmlStatement::new(
            dml.table_name.clone(),
            dml.target.clone(),
            dml.op.clone(),
            std::sync::Arc::new(input),
        ))
    };
    if matches!(input, LogicalPlan::Projection(p) if matches!(p.input.as_ref(), LogicalPlan::Values(_)))
    {
        return Ok(values_trimmed(input, &target)?.map(insert));
    }
    let trim: Vec<bool> = (0..input.schema().fields().len())
        .map(|i| {
            target
                .fields()
                .get(i)
                .is_some_and(|f| unpadded_into(f, input, i))
        })
        .collect();
    if !trim.contains(&true) {
        return Ok(None);
    }
    let exprs = input
        .schema()
        .columns()
        .into_iter()
        .zip(trim)
        .map(|(c, trim)| {
            let name = c.name.clone();
            let e = Expr::Column(c);
            if trim {
                datafusion::functions::string::expr_fn::rtrim(vec![e]).alias(name)
            } else {
                e
            }
        })
        .collect::<Vec<_>>();
    let input = datafusion::logical_expr::Projection::try_new(exprs, dml.input.clone())?;
    Ok(Some(insert(LogicalPlan::Projection(input))))
}

/// INSERT … VALUES (DataFusion's plan: columns of VALUES renamed): each row's value is
/// stored on its own, as PostgreSQL assigns each row's expressions to the columns, so
/// only the CHAR(n) values themselves lose their padding into a TEXT column (`'p  '` in
/// another row keeps its spaces). `None` for another shape, or nothing to change.
fn values_trimmed(
    input: &LogicalPlan,
    target: &datafusion::arrow::datatypes::SchemaRef,
) -> Result<Option<LogicalPlan>> {
    let LogicalPlan::Projection(p) = input else {
        return Ok(None);
    };
    let LogicalPlan::Values(v) = p.input.as_ref() else {
        return Ok(None);
    };
    // Which VALUES column each target column is.
    let mut source = Vec::with_capacity(p.expr.len());
    for e in &p.expr {
        let column = match e {
            Expr::Alias(a) => a.expr.as_ref(),
            other => other,
        };
        let Expr::Column(c) = column else {
            return Ok(None);
        };
        source.push(v.schema.index_of_column(c)?);
    }
    let mut rows = v.values.clone();
    let mut changed = false;
    for row in &mut rows {
        for (i, &k) in source.iter().enumerate() {
            let Some(field) = target.fields().get(i) else {
                continue;
            };
            let is_char = field
                .metadata()
                .get(DECLARED_TYPE)
                .is_some_and(|d| d.starts_with("CHAR("));
            if !is_char
                && is_string_type(field.data_type())
                && char_len(&row[k], &v.schema).is_some()
            {
                let e = std::mem::replace(&mut row[k], Expr::Literal(ScalarValue::Null, None));
                row[k] = datafusion::functions::string::expr_fn::rtrim(vec![e]);
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(None);
    }
    let values = LogicalPlan::Values(datafusion::logical_expr::Values {
        schema: v.schema.clone(),
        values: rows,
    });
    Ok(Some(LogicalPlan::Projection(
        datafusion::logical_expr::Projection::try_new(p.expr.clone(), std::sync::Arc::new(values))?,
    )))
}

/// `s` without trailing spaces, padded to `n` characters; `None` if longer than `n` (no
/// CHAR(n) value equals it).
fn padded(s: &str, n: usize) -> Option<String> {
    let t = s.trim_end_matches(' ');
    let len = t.chars().count();
    (len <= n).then(|| format!("{t}{}", " ".repeat(n - len)))
}

/// A string literal padded to `n`, in its own string type; `None` if `e` is not a string
/// literal or is longer than `n`.
fn is_string_type(t: &datafusion::arrow::datatypes::DataType) -> bool {
    matches!(
        t,
        datafusion::arrow::datatypes::DataType::Utf8
            | datafusion::arrow::datatypes::DataType::Utf8View
            | datafusion::arrow::datatypes::DataType::LargeUtf8
    )
}

fn padded_literal(e: &Expr, n: usize) -> Option<Expr> {
    let is_string = is_string_type;
    match e {
        // A NULL, typed or not, compares as NULL whatever its padding.
        Expr::Literal(v, _) if v.is_null() => Some(e.clone()),
        Expr::Cast(c) if matches!(c.expr.as_ref(), Expr::Literal(v, _) if v.is_null()) => {
            Some(e.clone())
        }
        // `CAST(NULL AS CHAR(4))` (`charcast.rs`).
        Expr::ScalarFunction(f)
            if f.name() == crate::charcast::BPCHAR
                && f.args
                    .first()
                    .is_some_and(|a| padded_literal(a, n).is_some_and(|p| p == *a)) =>
        {
            Some(e.clone())
        }
        // `CAST('ab' AS CHAR(4))`: a string literal still.
        Expr::Cast(c) if is_string(c.field.data_type()) => padded_literal(&c.expr, n),
        Expr::Literal(v, meta) => {
            let v = match v {
                ScalarValue::Utf8(Some(s)) => ScalarValue::Utf8(Some(padded(s, n)?)),
                ScalarValue::Utf8View(Some(s)) => ScalarValue::Utf8View(Some(padded(s, n)?)),
                ScalarValue::LargeUtf8(Some(s)) => ScalarValue::LargeUtf8(Some(padded(s, n)?)),
                _ => return None,
            };
            Some(Expr::Literal(v, meta.clone()))
        }
        _ => None,
    }
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// `e` where its value is used as text: a CHAR(n) column loses its trailing spaces.
fn value(e: Expr, schema: &DFSchema) -> Result<Expr> {
    if char_len(&e, schema).is_some() {
        return Ok(datafusion::functions::string::expr_fn::rtrim(vec![e]));
    }
    // A character CASE or COALESCE used as text (`coalesce(c_last_name, '') || ', '`,
    // TPC-DS Q84) loses its trailing spaces too.
    if is_charish(&e, schema) {
        return Ok(datafusion::functions::string::expr_fn::rtrim(vec![fix(
            e, schema,
        )?]));
    }
    fix(e, schema)
}

/// `e` with PostgreSQL's CHAR(n) rules applied inside it (see the module's table).
fn fix(e: Expr, schema: &DFSchema) -> Result<Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => {
            let (l, r) = (char_len(&left, schema), char_len(&right, schema));
            if is_charish(&left, schema) || is_charish(&right, schema) {
                return Ok(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(trimmed_side(*left, schema)?),
                    op,
                    Box::new(trimmed_side(*right, schema)?),
                )));
            }
            let (left, right) = match (l, r) {
                (Some(n), Some(m)) if n == m => (*left, *right),
                (Some(n), None) if padded_literal(&right, n).is_some() => {
                    let right = padded_literal(&right, n).expect("checked");
                    (*left, right)
                }
                (None, Some(m)) if padded_literal(&left, m).is_some() => {
                    let left = padded_literal(&left, m).expect("checked");
                    (left, *right)
                }
                _ => (value(*left, schema)?, value(*right, schema)?),
            };
            Ok(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(left),
                op,
                Box::new(right),
            )))
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            if let Some(n) = char_len(&expr, schema) {
                let padded: Option<Vec<Expr>> = list.iter().map(|v| padded_literal(v, n)).collect();
                if let Some(list) = padded {
                    return Ok(Expr::InList(InList::new(expr, list, negated)));
                }
            }
            let list = list
                .into_iter()
                .map(|v| value(v, schema))
                .collect::<Result<Vec<_>>>()?;
            Ok(Expr::InList(InList::new(
                Box::new(value(*expr, schema)?),
                list,
                negated,
            )))
        }
        // `c BETWEEN a AND b` is `c >= a AND c <= b`.
        Expr::Between(mut b) => {
            if let Some(n) = char_len(&b.expr, schema)
                && let (Some(low), Some(high)) =
                    (padded_literal(&b.low, n), padded_literal(&b.high, n))
            {
                b.low = Box::new(low);
                b.high = Box::new(high);
                return Ok(Expr::Between(b));
            }
            b.expr = Box::new(value(*b.expr, schema)?);
            b.low = Box::new(value(*b.low, schema)?);
            b.high = Box::new(value(*b.high, schema)?);
            Ok(Expr::Between(b))
        }
        // `c IN (SELECT d …)`: compared as `c = d` is.
        Expr::InSubquery(mut i) => {
            let sub = subquery_char(&i.subquery.subquery);
            let same = char_len(&i.expr, schema).is_some()
                && sub.is_some()
                && char_len(&i.expr, schema).map(|n| format!("CHAR({n})")) == sub;
            if !same {
                i.expr = Box::new(value(*i.expr, schema)?);
            }
            Ok(Expr::InSubquery(i))
        }
        // Pattern matching sees the padded value (PostgreSQL's bpcharlike).
        Expr::Like(Like {
            negated,
            expr,
            pattern,
            escape_char,
            case_insensitive,
        }) => {
            let expr = if char_len(&expr, schema).is_some() {
                *expr
            } else {
                fix(*expr, schema)?
            };
            Ok(Expr::Like(Like::new(
                negated,
                Box::new(expr),
                Box::new(value(*pattern, schema)?),
                escape_char,
                case_insensitive,
            )))
        }
        // An aggregate or window function of a column keeps its padded value (min(c) is a
        // CHAR(n) value); anything computed in its arguments follows the rules.
        Expr::AggregateFunction(mut f) => {
            f.params.args = bare_or_fixed(f.params.args, schema)?;
            f.params.filter = f
                .params
                .filter
                .map(|e| fix(*e, schema).map(Box::new))
                .transpose()?;
            f.params.order_by = sorts(f.params.order_by, schema)?;
            Ok(Expr::AggregateFunction(AggregateFunction { ..f }))
        }
        Expr::WindowFunction(mut w) => {
            let p = &mut w.params;
            p.args = bare_or_fixed(std::mem::take(&mut p.args), schema)?;
            p.partition_by = bare_or_fixed(std::mem::take(&mut p.partition_by), schema)?;
            p.order_by = sorts(std::mem::take(&mut p.order_by), schema)?;
            Ok(Expr::WindowFunction(Box::new(WindowFunction { ..*w })))
        }
        // The branches of CASE and the arguments of COALESCE are results: a CHAR(n) column
        // there stays a CHAR(n) value (PostgreSQL types the result character).
        Expr::Case(c) => {
            let n = results(&Expr::Case(c.clone())).and_then(|r| results_char(&r, schema));
            let mut c = c;
            let branch = |t: Expr| match n {
                Some(_) => Ok(t),
                None => value(t, schema),
            };
            c.expr = c
                .expr
                .map(|e| value(*e, schema).map(Box::new))
                .transpose()?;
            c.when_then_expr = c
                .when_then_expr
                .into_iter()
                .map(|(w, t)| Ok((Box::new(fix(*w, schema)?), Box::new(branch(*t)?))))
                .collect::<Result<Vec<_>>>()?;
            c.else_expr = c.else_expr.map(|e| branch(*e).map(Box::new)).transpose()?;
            Ok(Expr::Case(c))
        }
        Expr::ScalarFunction(f) if f.name() == "coalesce" => {
            let n = results_char(&f.args.iter().collect::<Vec<_>>(), schema);
            let mut f = f;
            f.args = f
                .args
                .into_iter()
                .map(|a| match n {
                    Some(_) => Ok(a),
                    None => value(a, schema),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Expr::ScalarFunction(f))
        }
        // NULLIF(a, b) is a result compared: `NULLIF(c, 'ab')` is NULL where c = 'ab'.
        Expr::ScalarFunction(mut f) if f.name() == "nullif" && f.args.len() == 2 => {
            let b = f.args.pop().expect("two arguments");
            let a = f.args.pop().expect("two arguments");
            // A character CASE or COALESCE: its value is the result, compared without
            // trailing spaces: CASE WHEN rtrim(a) = rtrim(b) THEN NULL ELSE a END.
            if is_charish(&a, schema) {
                let a = fix(a, schema)?;
                let equal = Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(datafusion::functions::string::expr_fn::rtrim(vec![
                        a.clone(),
                    ])),
                    Operator::Eq,
                    Box::new(trimmed_side(b, schema)?),
                ));
                return datafusion::logical_expr::when(
                    equal,
                    Expr::Literal(ScalarValue::Utf8(None), None),
                )
                .otherwise(a);
            }
            let (a, b) = match (char_len(&a, schema), char_len(&b, schema)) {
                (Some(n), Some(m)) if n == m => (a, b),
                (Some(n), None) if padded_literal(&b, n).is_some() => {
                    let b = padded_literal(&b, n).expect("checked");
                    (a, b)
                }
                // `NULLIF('ab  ', c)`: the literal is compared as character(n) (padded),
                // and is the result as written where it differs.
                (None, Some(m)) if padded_literal(&a, m).is_some() => {
                    let equal = Expr::BinaryExpr(BinaryExpr::new(
                        Box::new(padded_literal(&a, m).expect("checked")),
                        Operator::Eq,
                        Box::new(b),
                    ));
                    return datafusion::logical_expr::when(
                        equal,
                        Expr::Literal(ScalarValue::Utf8(None), None),
                    )
                    .otherwise(a);
                }
                _ => (value(a, schema)?, value(b, schema)?),
            };
            f.args = vec![a, b];
            Ok(Expr::ScalarFunction(f))
        }
        Expr::Alias(mut a) => {
            a.expr = Box::new(fix(*a.expr, schema)?);
            Ok(Expr::Alias(a))
        }
        // `octet_length` of a CHAR(n) counts its padding (PostgreSQL's `bpcharoctetlen`).
        Expr::ScalarFunction(mut f) if f.name() == "octet_length" => {
            f.args = bare_or_fixed(f.args, schema)?;
            Ok(Expr::ScalarFunction(f))
        }
        Expr::Column(_)
        | Expr::OuterReferenceColumn(..)
        | Expr::Literal(..)
        | Expr::GroupingSet(_) => Ok(e),
        // Subqueries are plans of their own (rewritten as nodes); everything else uses its
        // operands as text.
        other => other
            .map_children(|c| {
                let out = if matches!(
                    c,
                    Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                ) {
                    c
                } else {
                    value(c, schema)?
                };
                Ok(Transformed::new(out, true, TreeNodeRecursion::Jump))
            })
            .map(|t| t.data),
    }
}

fn bare_or_fixed(args: Vec<Expr>, schema: &DFSchema) -> Result<Vec<Expr>> {
    args.into_iter()
        .map(|a| if is_bare(&a) { Ok(a) } else { fix(a, schema) })
        .collect()
}

fn sorts(order: Vec<Sort>, schema: &DFSchema) -> Result<Vec<Sort>> {
    order
        .into_iter()
        .map(|mut s| {
            if !is_bare(&s.expr) {
                s.expr = fix(s.expr, schema)?;
            }
            Ok(s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::{col, lit};
    use std::collections::HashMap;

    fn schema() -> DFSchema {
        let char_field = |name: &str, n: u32| {
            Field::new(name, DataType::Utf8, true).with_metadata(HashMap::from([(
                DECLARED_TYPE.to_string(),
                format!("CHAR({n})"),
            )]))
        };
        let s = Schema::new(vec![
            char_field("c", 5),
            char_field("d", 5),
            char_field("e", 3),
            Field::new("v", DataType::Utf8, true),
        ]);
        DFSchema::try_from(s).unwrap()
    }

    fn fixed(e: Expr) -> String {
        fix(e, &schema()).unwrap().to_string()
    }

    #[test]
    fn literals_compared_with_char_columns_are_padded() {
        assert_eq!(fixed(col("c").eq(lit("ab"))), r#"c = Utf8("ab   ")"#);
        assert_eq!(fixed(lit("ab  ").lt(col("c"))), r#"Utf8("ab   ") < c"#);
        assert_eq!(
            fixed(col("c").in_list(vec![lit("a"), lit("bcd")], true)),
            r#"c NOT IN ([Utf8("a    "), Utf8("bcd  ")])"#
        );
        // NULLIF of a literal and a CHAR(n) column: compared padded, the literal as
        // written is the result where they differ (sqlcheck seed 385848133).
        assert_eq!(
            fixed(datafusion::functions::core::expr_fn::nullif(
                lit("ab  "),
                col("c")
            )),
            r#"CASE WHEN Utf8("ab   ") = c THEN Utf8(NULL) ELSE Utf8("ab  ") END"#
        );
        // Longer than n: no CHAR(5) value equals it; compared as text, it matches nothing.
        assert_eq!(
            fixed(col("c").eq(lit("abcdef"))),
            r#"rtrim(c) = Utf8("abcdef")"#
        );
    }

    #[test]
    fn text_uses_of_char_columns_lose_trailing_spaces() {
        assert_eq!(fixed(col("c").eq(col("d"))), "c = d");
        assert_eq!(fixed(col("c").eq(col("e"))), "rtrim(c) = rtrim(e)");
        assert_eq!(fixed(col("c").eq(col("v"))), "rtrim(c) = v");
        assert_eq!(
            fixed(datafusion::functions::string::expr_fn::upper(col("c"))),
            "upper(rtrim(c))"
        );
        // Patterns see the padded value, as PostgreSQL's bpcharlike does.
        assert_eq!(fixed(col("c").like(lit("ab%"))), r#"c LIKE Utf8("ab%")"#);
        assert_eq!(fixed(col("v").eq(lit("ab"))), r#"v = Utf8("ab")"#);
    }
}
