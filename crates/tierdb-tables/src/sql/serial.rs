//! `SERIAL`, `BIGSERIAL`, `SMALLSERIAL` and `GENERATED … AS IDENTITY` columns, rewritten
//! before planning as PostgreSQL defines them: an integer column, NOT NULL, whose DEFAULT
//! is `nextval('<table>_<column>_seq')`, with that sequence created beside the table and
//! dropped with it.

use datafusion::sql::sqlparser::ast::{
    ColumnOption, ColumnOptionDef, CreateTable, DataType, Expr, Ident, SequenceOptions, Value,
};

use crate::rows::sequence::SequenceDef;

/// Rewrites the serial and identity columns of `ct`; returns the sequences they draw from.
pub(crate) fn rewrite(ct: &mut CreateTable, table: &str) -> Vec<SequenceDef> {
    let mut out = Vec::new();
    for col in &mut ct.columns {
        let serial = match &col.data_type {
            DataType::Custom(name, args) if args.is_empty() => {
                match name.to_string().to_lowercase().as_str() {
                    "serial" | "serial4" => Some(DataType::Integer(None)),
                    "bigserial" | "serial8" => Some(DataType::BigInt(None)),
                    "smallserial" | "serial2" => Some(DataType::SmallInt(None)),
                    _ => None,
                }
            }
            _ => None,
        };
        let identity = col.options.iter().position(|o| {
            matches!(
                o.option,
                ColumnOption::Generated {
                    generation_expr: None,
                    ..
                }
            )
        });
        if serial.is_none() && identity.is_none() {
            continue;
        }
        let column = crate::sql::ident_name(&col.name);
        let mut seq = SequenceDef::new(&format!("{table}_{column}_seq"));
        seq.owned_by = Some(table.to_string());
        seq.owned_column = Some(column.clone());
        if let Some(ty) = serial {
            col.data_type = ty;
        }
        if let Some(i) = identity {
            if let ColumnOption::Generated {
                sequence_options: Some(options),
                ..
            } = &col.options[i].option
            {
                apply_options(&mut seq, options);
            }
            col.options.remove(i);
        }
        seq.max = seq.max.min(match col.data_type {
            DataType::SmallInt(_) | DataType::Int2(_) => i16::MAX as i64,
            DataType::Integer(_) | DataType::Int(_) | DataType::Int4(_) => i32::MAX as i64,
            _ => i64::MAX,
        });
        col.options
            .retain(|o| !matches!(o.option, ColumnOption::Null));
        col.options.push(ColumnOptionDef {
            name: None,
            option: ColumnOption::NotNull,
        });
        col.options.push(ColumnOptionDef {
            name: None,
            option: ColumnOption::Default(nextval(&seq.name)),
        });
        out.push(seq);
    }
    out
}

/// `nextval('<name>')`.
fn nextval(name: &str) -> Expr {
    let sql = format!("nextval('{}')", name.replace('\'', "''"));
    datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(&sql)
    .and_then(|mut p| p.parse_expr())
    .unwrap_or_else(|_| Expr::Identifier(Ident::new("nextval")))
}

fn int(e: &Expr) -> Option<i64> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp { op, expr } if op.to_string() == "-" => int(expr).map(|v| -v),
        _ => None,
    }
}

/// `CREATE SEQUENCE … AS type`: the type's bounds (PostgreSQL: smallint, integer or
/// bigint; anything else is refused with 22023).
pub(crate) fn bound_by_type(seq: &mut SequenceDef, ty: &DataType) -> crate::error::Result<()> {
    let (min, max) = match ty {
        DataType::SmallInt(_) | DataType::Int2(_) => (i16::MIN as i64, i16::MAX as i64),
        DataType::Integer(_) | DataType::Int(_) | DataType::Int4(_) => {
            (i32::MIN as i64, i32::MAX as i64)
        }
        DataType::BigInt(_) | DataType::Int8(_) => (i64::MIN, i64::MAX),
        other => {
            return Err(crate::error::TableError::Column {
                code: "22023",
                message: format!("sequence type must be smallint, integer, or bigint, not {other}"),
            });
        }
    };
    // An ascending sequence starts at 1 (its MINVALUE), a descending one at -1.
    seq.max = max;
    if seq.increment < 0 {
        seq.min = min;
    }
    Ok(())
}

/// CREATE SEQUENCE's (and IDENTITY's) options onto `seq`.
pub(crate) fn apply_options(seq: &mut SequenceDef, options: &[SequenceOptions]) {
    let mut start = None;
    for o in options {
        match o {
            SequenceOptions::IncrementBy(e, _) => {
                if let Some(v) = int(e) {
                    seq.increment = v;
                    if v < 0 {
                        seq.min = i64::MIN;
                        seq.max = -1;
                    }
                }
            }
            SequenceOptions::MinValue(Some(e)) => seq.min = int(e).unwrap_or(seq.min),
            SequenceOptions::MaxValue(Some(e)) => seq.max = int(e).unwrap_or(seq.max),
            SequenceOptions::StartWith(e, _) => start = int(e),
            _ => {}
        }
    }
    seq.start = start.unwrap_or(if seq.increment > 0 { seq.min } else { seq.max });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use datafusion::sql::parser::Statement as DfStatement;
    use datafusion::sql::sqlparser::ast::Statement;

    #[test]
    fn serial_becomes_an_integer_with_a_sequence_default() {
        let mut stmts = crate::sql::parse(
            "CREATE TABLE sbtest1 (id SERIAL, k BIGSERIAL, v INT GENERATED BY DEFAULT AS IDENTITY (START WITH 10), PRIMARY KEY (id))",
        )
        .unwrap();
        let DfStatement::Statement(s) = &mut stmts[0] else {
            panic!()
        };
        let Statement::CreateTable(ct) = s.as_mut() else {
            panic!()
        };
        let seqs = rewrite(ct, "sbtest1");
        let names: Vec<_> = seqs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["sbtest1_id_seq", "sbtest1_k_seq", "sbtest1_v_seq"]);
        assert_eq!(seqs[0].max, i32::MAX as i64);
        assert_eq!(seqs[2].start, 10);
        let sql = ct.to_string();
        assert!(
            sql.contains("id INTEGER NOT NULL DEFAULT nextval('sbtest1_id_seq')"),
            "{sql}"
        );
        assert!(
            sql.contains("k BIGINT NOT NULL DEFAULT nextval('sbtest1_k_seq')"),
            "{sql}"
        );
    }
}
