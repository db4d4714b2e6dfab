//! Answers on the wire: a query's rows (text or binary per column, stopped by the statement
//! timeout or a CancelRequest) and command tags.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion_postgres::arrow_pg::datatypes::encode_recordbatch;
use futures::StreamExt;
use pgwire::api::results::{FieldInfo, Tag};
use pgwire::error::PgWireResult;
use tierdb_tables::TableError;

use crate::errors::table_error;

/// A result's RowDescription: arrow-pg's, with what Arrow's types cannot say taken from the
/// columns' declared types: VARCHAR(n) as `varchar` and CHAR(n) as `bpchar` with their
/// length, DECIMAL(p,s) with its precision and scale (PostgreSQL's typmods).
pub(crate) fn describe(
    schema: &datafusion::arrow::datatypes::Schema,
    format: &pgwire::api::portal::Format,
    options: Option<Arc<pgwire::types::format::FormatOptions>>,
) -> PgWireResult<Vec<FieldInfo>> {
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion_postgres::arrow_pg::datatypes::PG_OID_ALIAS_KEY;
    use datafusion_postgres::arrow_pg::datatypes::arrow_schema_to_pg_fields;
    // arrow-pg knows no Decimal256 (a literal of more than 38 digits): NUMERIC too, and
    // sent by `numeric.rs` as every NUMERIC is. An oid column cast to another integer
    // (`oid::bigint`, DataGrip's) keeps the column's oid marker through DataFusion's cast:
    // it is that integer type, as PostgreSQL describes it.
    let oid_cast = |f: &Field| {
        f.metadata().contains_key(PG_OID_ALIAS_KEY) && f.data_type() != &DataType::Int32
    };
    let fields = if schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Decimal256(..)) || oid_cast(f))
    {
        let adjusted = schema.fields().iter().map(|f| match f.data_type() {
            DataType::Decimal256(_, s) => {
                Field::new(f.name(), DataType::Decimal128(38, *s), f.is_nullable())
            }
            _ if oid_cast(f) => {
                let mut metadata = f.metadata().clone();
                metadata.remove(PG_OID_ALIAS_KEY);
                f.as_ref().clone().with_metadata(metadata)
            }
            _ => f.as_ref().clone(),
        });
        arrow_schema_to_pg_fields(&Schema::new(adjusted.collect::<Vec<_>>()), format, options)?
    } else {
        arrow_schema_to_pg_fields(schema, format, options)?
    };
    Ok(fields
        .into_iter()
        .zip(schema.fields())
        .map(|(info, f)| {
            let info = declared(info, f);
            let size = type_size(info.datatype());
            info.with_type_size(size)
        })
        .collect())
}

/// `fields` without the NUMERIC typmod of the columns that do not keep one (`keep[i]`
/// false: a literal, an expression, an aggregate; `tierdb_tables::origin::modifiers`):
/// PostgreSQL describes `1.5` and `sum(n)` as `numeric` with typmod -1, and drivers read
/// a typmod as the column's declared precision and scale.
pub(crate) fn expression_typmods(fields: Vec<FieldInfo>, keep: &[bool]) -> Vec<FieldInfo> {
    fields
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            if *f.datatype() == pgwire::api::Type::NUMERIC && !keep.get(i).copied().unwrap_or(true)
            {
                f.with_type_modifier(-1)
            } else {
                f
            }
        })
        .collect()
}

/// RowDescription's type size: `pg_type.typlen` of the type, as PostgreSQL sends it (the
/// width of a fixed-size type, -1 for a variable-length one; arrow-pg leaves it 0).
fn type_size(ty: &pgwire::api::Type) -> i16 {
    use pgwire::api::Type;
    match *ty {
        Type::BOOL | Type::CHAR => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE | Type::OID | Type::REGCLASS | Type::REGTYPE => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIME | Type::TIMESTAMP | Type::TIMESTAMPTZ => 8,
        Type::TIMETZ => 12,
        Type::INTERVAL | Type::UUID => 16,
        Type::NAME => 64,
        _ => -1,
    }
}

/// `info` with the type and typmod `field` declares (see [`describe`]).
fn declared(info: FieldInfo, field: &datafusion::arrow::datatypes::Field) -> FieldInfo {
    use pgwire::api::Type;
    if let DataType::Decimal128(p, s) | DataType::Decimal256(p, s) = field.data_type() {
        // Precision 76 is NUMERIC without one and what is computed from it (`numeric.rs`
        // rule 4): no typmod, as PostgreSQL sends for `numeric`.
        let typmod = if crate::numeric::unconstrained(field.data_type()) {
            -1
        } else {
            ((i32::from(*p) << 16) | i32::from(*s).max(0)) + 4
        };
        return info.with_type_modifier(typmod);
    }
    let Some(declared) = field.metadata().get(tierdb_tables::catalog::DECLARED_TYPE) else {
        return info;
    };
    let length = |prefix: &str| {
        declared
            .strip_prefix(prefix)?
            .strip_suffix(')')?
            .parse::<i32>()
            .ok()
    };
    // A typmod is the length plus VARHDRSZ (4); -1 for none.
    let (ty, typmod) = if let Some(n) = length("VARCHAR(") {
        (Type::VARCHAR, n + 4)
    } else if let Some(n) = length("CHAR(") {
        (Type::BPCHAR, n + 4)
    } else {
        // Typed text (`tierdb_tables::pgtext`): no typmod.
        let ty = match declared.as_str() {
            "UUID" => Type::UUID,
            "CHARACTER VARYING" => Type::VARCHAR,
            "JSON" => Type::JSON,
            "JSONB" => Type::JSONB,
            // pg_sleep's value (`tierdb_tables::sleep`).
            "VOID" => Type::VOID,
            _ => return info,
        };
        (ty, -1)
    };
    FieldInfo::new(
        info.name().to_string(),
        info.table_id(),
        info.column_id(),
        ty,
        info.format(),
    )
    .with_format_options(info.format_options().clone())
    .with_type_modifier(typmod)
}

/// The rows of one batch, up to and including the first error. arrow-pg's row iterator
/// does not advance past a value it cannot encode: it yields that error again forever, and
/// collecting it grew the server to all of the machine's memory (TPC-DS Q21).
fn rows_until_error<T>(rows: impl Iterator<Item = PgWireResult<T>>) -> Vec<PgWireResult<T>> {
    let mut out = Vec::new();
    for row in rows {
        let failed = row.is_err();
        out.push(row);
        if failed {
            break;
        }
    }
    out
}

/// A query's rows, encoded as the client asked (text or binary per column), computed as
/// they are sent (the caller bounds the stream by the statement's `Stop`).
pub(crate) fn encode_rows(
    fields: Arc<Vec<FieldInfo>>,
    stream: datafusion::execution::SendableRecordBatchStream,
    time_zone: String,
) -> impl futures::Stream<Item = PgWireResult<pgwire::messages::data::DataRow>> + Send + 'static {
    stream
        .map(move |batch| match batch {
            Ok(b) => {
                let b = as_pg_text(in_time_zone(b, &time_zone), &fields);
                let b = as_pg_binary(b, &fields);
                let b = crate::numeric::as_pg_numeric(b, &fields);
                let b = crate::interval::as_pg_interval(b, &fields);
                futures::stream::iter(rows_until_error(encode_recordbatch(fields.clone(), b)))
            }
            Err(e) => futures::stream::iter(vec![Err(table_error(&TableError::from(e)))]),
        })
        .flatten()
}

/// `batch` with the columns that go out in text format and whose text arrow-pg writes
/// otherwise than PostgreSQL already written as PostgreSQL writes them (Utf8 arrays:
/// arrow-pg sends a string's bytes as the value's text, under the column's own type OID):
/// REAL and DOUBLE (`floats`), TIMESTAMP and TIMESTAMPTZ (no `.000000` for whole seconds,
/// `+02` for a whole-hour offset), TIME (`10:11:12.5`, not `10:11:12.500000`). Binary-format columns are sent as they are.
pub(crate) fn as_pg_text(
    batch: datafusion::arrow::array::RecordBatch,
    fields: &[FieldInfo],
) -> datafusion::arrow::array::RecordBatch {
    use datafusion::arrow::array::{Array, ArrayRef, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions as ArrowFormat};
    let retyped = |i: usize, c: &ArrayRef| {
        matches!(
            c.data_type(),
            DataType::Float64
                | DataType::Float32
                | DataType::Timestamp(_, _)
                | DataType::Time32(_)
                | DataType::Time64(_)
        ) && fields
            .get(i)
            .is_some_and(|f| f.format() == pgwire::api::results::FieldFormat::Text)
    };
    if !batch
        .columns()
        .iter()
        .enumerate()
        .any(|(i, c)| retyped(i, c))
    {
        return batch;
    }
    let schema = batch.schema();
    let mut new_fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    let options = ArrowFormat::default();
    for (i, (c, f)) in batch.columns().iter().zip(schema.fields()).enumerate() {
        let formatter = ArrayFormatter::try_new(c.as_ref(), &options);
        match formatter {
            Ok(fmt) if retyped(i, c) => {
                let text: StringArray = (0..c.len())
                    .map(|r| {
                        if c.is_null(r) {
                            return None;
                        }
                        crate::floats::cell(c, r)
                            .or_else(|| Some(pg_text(c.data_type(), fmt.value(r).to_string())))
                    })
                    .collect();
                columns.push(Arc::new(text) as ArrayRef);
                new_fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
            }
            _ => {
                columns.push(c.clone());
                new_fields.push(f.as_ref().clone());
            }
        }
    }
    datafusion::arrow::array::RecordBatch::try_new(Arc::new(Schema::new(new_fields)), columns)
        .unwrap_or(batch)
}

/// `batch` with its UUID and JSONB columns that go out in binary format in PostgreSQL's
/// binary forms (a UUID's 16 bytes; JSONB's version byte 1, then the text), as BYTEA arrays
/// arrow-pg sends as they are. JSON's binary form is its text, as the column holds it.
pub(crate) fn as_pg_binary(
    batch: datafusion::arrow::array::RecordBatch,
    fields: &[FieldInfo],
) -> datafusion::arrow::array::RecordBatch {
    use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
    use datafusion::arrow::datatypes::{Field, Schema};
    use pgwire::api::Type;
    let binary = |i: usize| {
        fields.get(i).and_then(|f| {
            (f.format() == pgwire::api::results::FieldFormat::Binary
                && matches!(*f.datatype(), Type::UUID | Type::JSONB))
            .then(|| f.datatype().clone())
        })
    };
    if !(0..batch.num_columns()).any(|i| binary(i).is_some()) {
        return batch;
    }
    let schema = batch.schema();
    let mut new_fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, (c, f)) in batch.columns().iter().zip(schema.fields()).enumerate() {
        let converted = match (binary(i), c.as_string_opt::<i32>()) {
            (Some(ty), Some(strings)) => {
                let mut out = BinaryBuilder::with_capacity(strings.len(), 17 * strings.len());
                for v in strings.iter() {
                    match v {
                        None => out.append_null(),
                        Some(s) if ty == Type::UUID => match uuid::Uuid::try_parse(s) {
                            Ok(u) => out.append_value(u.as_bytes()),
                            // Stored text is canonical; anything else is sent as text.
                            Err(_) => out.append_value(s.as_bytes()),
                        },
                        Some(s) => {
                            let mut b = Vec::with_capacity(s.len() + 1);
                            b.push(1u8);
                            b.extend_from_slice(s.as_bytes());
                            out.append_value(&b);
                        }
                    }
                }
                Some(Arc::new(out.finish()) as ArrayRef)
            }
            _ => None,
        };
        match converted {
            Some(a) => {
                columns.push(a);
                new_fields.push(Field::new(f.name(), DataType::Binary, f.is_nullable()));
            }
            None => {
                columns.push(c.clone());
                new_fields.push(f.as_ref().clone());
            }
        }
    }
    datafusion::arrow::array::RecordBatch::try_new(Arc::new(Schema::new(new_fields)), columns)
        .unwrap_or(batch)
}

/// `batch` with its TIMESTAMPTZ columns shown in the session's time zone, as PostgreSQL
/// shows them (the same instants: only the Arrow zone changes).
pub(crate) fn in_time_zone(
    batch: datafusion::arrow::array::RecordBatch,
    tz: &str,
) -> datafusion::arrow::array::RecordBatch {
    use datafusion::arrow::datatypes::{Field, Schema};
    let zoned = |t: &DataType| matches!(t, DataType::Timestamp(_, Some(z)) if z.as_ref() != tz);
    if !batch.schema().fields().iter().any(|f| zoned(f.data_type())) {
        return batch;
    }
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (c, f) in batch.columns().iter().zip(schema.fields()) {
        match f.data_type() {
            DataType::Timestamp(unit, Some(_)) if zoned(f.data_type()) => {
                let to = DataType::Timestamp(*unit, Some(tz.into()));
                match datafusion::arrow::compute::cast(c, &to) {
                    Ok(a) => {
                        columns.push(a);
                        fields.push(
                            Field::new(f.name(), to, f.is_nullable())
                                .with_metadata(f.metadata().clone()),
                        );
                    }
                    Err(_) => {
                        columns.push(c.clone());
                        fields.push(f.as_ref().clone());
                    }
                }
            }
            _ => {
                columns.push(c.clone());
                fields.push(f.as_ref().clone());
            }
        }
    }
    datafusion::arrow::array::RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .unwrap_or(batch)
}

/// A value's text as PostgreSQL writes it (COPY TO): booleans as `t`/`f`, timestamps with
/// a space and `+00` rather than Arrow's `T` and `Z`, BYTEA in hex format (`\x00ff`).
pub(crate) fn pg_text(ty: &DataType, text: String) -> String {
    match (ty, text.as_str()) {
        (DataType::Boolean, "true") => "t".into(),
        (DataType::Boolean, "false") => "f".into(),
        (DataType::Timestamp(_, tz), _) => {
            // Arrow writes the fraction in 3, 6 or 9 digits (`59.500`); PostgreSQL without
            // its trailing zeros (`59.5`).
            let t = fraction_trimmed(&text.replacen('T', " ", 1));
            match (tz, t.strip_suffix('Z')) {
                (Some(_), Some(utc)) => format!("{utc}+00"),
                // `+02:00` as PostgreSQL writes a whole-hour offset: `+02`.
                (Some(_), None) => match t.strip_suffix(":00") {
                    Some(whole)
                        if whole.len() > 6 && whole[whole.len() - 3..].starts_with(['+', '-']) =>
                    {
                        whole.to_string()
                    }
                    _ => t,
                },
                _ => t,
            }
        }
        (DataType::Binary | DataType::LargeBinary | DataType::BinaryView, _) => {
            format!("\\x{text}")
        }
        // A fraction without its trailing zeros, none for whole seconds.
        (DataType::Time32(_) | DataType::Time64(_), t) => match t.split_once('.') {
            Some((whole, frac)) => match frac.trim_end_matches('0') {
                "" => whole.to_string(),
                frac => format!("{whole}.{frac}"),
            },
            None => text,
        },
        _ => text,
    }
}

/// `t` with the fraction of its seconds (the digits after the first `.`) without trailing
/// zeros, and without the point if none are left.
fn fraction_trimmed(t: &str) -> String {
    let Some(dot) = t.find('.') else {
        return t.to_string();
    };
    let digits = t[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    // PostgreSQL's timestamps and times end at microseconds: a nanosecond value (`now()`
    // is one in DataFusion) shows its first six digits, not nine.
    let kept = t[dot + 1..dot + 1 + digits.min(6)].trim_end_matches('0');
    let rest = &t[dot + 1 + digits..];
    if kept.is_empty() {
        format!("{}{rest}", &t[..dot])
    } else {
        format!("{}.{kept}{rest}", &t[..dot])
    }
}

/// `INSERT 0 5` / `UPDATE 3` / `CREATE TABLE` as a pgwire tag.
pub(crate) fn command_tag(tag: &str) -> Tag {
    let mut words = tag.split(' ');
    let first = words.next().unwrap_or("OK");
    let rows = tag.rsplit(' ').next().and_then(|n| n.parse::<usize>().ok());
    match (first, rows) {
        ("INSERT", Some(n)) => Tag::new("INSERT").with_oid(0).with_rows(n),
        ("UPDATE" | "DELETE" | "SELECT" | "VACUUM", Some(n)) => Tag::new(first).with_rows(n),
        _ => Tag::new(tag.split(" (").next().unwrap_or(tag)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tags_carry_their_row_counts() {
        let tag = |t: &str| {
            let tag: pgwire::messages::response::CommandComplete = command_tag(t).into();
            tag.tag
        };
        assert_eq!(tag("INSERT 0 5"), "INSERT 0 5");
        assert_eq!(tag("UPDATE 3"), "UPDATE 3");
        assert_eq!(tag("DELETE 0"), "DELETE 0");
        assert_eq!(tag("CREATE TABLE"), "CREATE TABLE");
        assert_eq!(tag("DROP TABLE (did not exist)"), "DROP TABLE");
    }

    #[test]
    fn an_encoding_error_ends_the_rows() {
        let err = || pgwire::error::PgWireError::ApiError("cannot encode".into());
        // What arrow-pg does on a value it cannot encode: the same error, forever.
        let mut n = 0;
        let rows = std::iter::from_fn(move || {
            n += 1;
            Some(if n < 3 { Ok(n) } else { Err(err()) })
        });
        let out = rows_until_error(rows);
        assert_eq!(out.len(), 3);
        assert!(matches!(out[..2], [Ok(1), Ok(2)]));
        assert!(out[2].is_err());
    }

    #[test]
    fn booleans_are_t_and_f() {
        assert_eq!(pg_text(&DataType::Boolean, "true".into()), "t");
        assert_eq!(pg_text(&DataType::Boolean, "false".into()), "f");
        assert_eq!(pg_text(&DataType::Utf8, "true".into()), "true");
    }

    #[test]
    fn timestamps_and_bytes_as_postgresql_writes_them() {
        use datafusion::arrow::datatypes::TimeUnit::Microsecond;
        let naive = DataType::Timestamp(Microsecond, None);
        let utc = DataType::Timestamp(Microsecond, Some("+00:00".into()));
        assert_eq!(
            pg_text(&naive, "2024-01-02T03:04:05.5".into()),
            "2024-01-02 03:04:05.5"
        );
        assert_eq!(
            pg_text(&utc, "2024-01-02T01:04:05Z".into()),
            "2024-01-02 01:04:05+00"
        );
        // Arrow's 3-digit fraction (`.500`), with and without an offset.
        assert_eq!(
            pg_text(&utc, "1999-12-31T23:59:59.500Z".into()),
            "1999-12-31 23:59:59.5+00"
        );
        assert_eq!(
            pg_text(&utc, "2024-01-02T01:04:05.120-05:00".into()),
            "2024-01-02 01:04:05.12-05"
        );
        assert_eq!(
            pg_text(&naive, "2024-01-02T03:04:05.000".into()),
            "2024-01-02 03:04:05"
        );
        assert_eq!(pg_text(&DataType::Binary, "00ff".into()), "\\x00ff");
        let time = DataType::Time64(datafusion::arrow::datatypes::TimeUnit::Microsecond);
        assert_eq!(pg_text(&time, "10:11:12.500".into()), "10:11:12.5");
        assert_eq!(pg_text(&time, "10:11:12.000000".into()), "10:11:12");
        assert_eq!(pg_text(&time, "00:00:00".into()), "00:00:00");
        assert_eq!(pg_text(&time, "23:59:59.999999".into()), "23:59:59.999999");
        // Nanoseconds (DataFusion's now()) as PostgreSQL's microseconds.
        let nanos = DataType::Timestamp(
            datafusion::arrow::datatypes::TimeUnit::Nanosecond,
            Some("+00:00".into()),
        );
        assert_eq!(
            pg_text(&nanos, "2026-12-03T15:50:13.255115935Z".into()),
            "2026-12-03 15:50:13.255115+00"
        );
        assert_eq!(
            pg_text(&nanos, "2026-12-03T15:50:13.000000935Z".into()),
            "2026-12-03 15:50:13+00"
        );
    }
}

#[cfg(test)]
mod describe_tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use pgwire::api::Type;

    #[test]
    fn declared_lengths_and_numeric_typmods_are_reported() {
        let varchar = Field::new("v", DataType::Utf8, true).with_metadata(
            [(
                tierdb_tables::catalog::DECLARED_TYPE.into(),
                "VARCHAR(20)".into(),
            )]
            .into(),
        );
        let char3 = Field::new("c", DataType::Utf8, true).with_metadata(
            [(
                tierdb_tables::catalog::DECLARED_TYPE.into(),
                "CHAR(3)".into(),
            )]
            .into(),
        );
        let schema = Schema::new(vec![
            varchar,
            char3,
            Field::new("n", DataType::Decimal128(10, 2), true),
            Field::new("t", DataType::Utf8, true),
        ]);
        let fields =
            describe(&schema, &pgwire::api::portal::Format::UnifiedText, None).expect("fields");
        let got: Vec<(Type, i32)> = fields
            .iter()
            .map(|f| (f.datatype().clone(), f.type_modifier()))
            .collect();
        assert_eq!(
            got,
            [
                (Type::VARCHAR, 24),
                (Type::BPCHAR, 7),
                (Type::NUMERIC, (10 << 16 | 2) + 4),
                (Type::TEXT, -1)
            ]
        );
        // The type sizes PostgreSQL sends: -1 for every variable-length type.
        assert!(fields.iter().all(|f| f.type_size() == -1));
    }

    #[test]
    fn computed_numerics_have_no_typmod_and_columns_keep_theirs() {
        let schema = Schema::new(vec![
            Field::new("col", DataType::Decimal128(10, 2), true),
            Field::new("lit", DataType::Decimal128(2, 1), true),
            Field::new("v", DataType::Utf8, true),
        ]);
        let fields =
            describe(&schema, &pgwire::api::portal::Format::UnifiedText, None).expect("fields");
        let fields = expression_typmods(fields, &[true, false, false]);
        let got: Vec<i32> = fields.iter().map(|f| f.type_modifier()).collect();
        assert_eq!(got, [(10 << 16 | 2) + 4, -1, -1]);
    }

    #[test]
    fn an_oid_cast_to_bigint_is_described_as_bigint() {
        use datafusion_postgres::arrow_pg::datatypes::PG_OID_ALIAS_KEY;
        let marked = |ty: DataType| {
            Field::new("o", ty, true)
                .with_metadata([(PG_OID_ALIAS_KEY.to_string(), "oid".to_string())].into())
        };
        let schema = Schema::new(vec![marked(DataType::Int32), marked(DataType::Int64)]);
        let fields =
            describe(&schema, &pgwire::api::portal::Format::UnifiedText, None).expect("fields");
        assert_eq!(fields[0].datatype(), &Type::OID);
        assert_eq!(fields[1].datatype(), &Type::INT8);
    }

    #[test]
    fn fixed_size_types_report_their_width() {
        let schema = Schema::new(vec![
            Field::new("b", DataType::Boolean, true),
            Field::new("s", DataType::Int16, true),
            Field::new("i", DataType::Int32, true),
            Field::new("l", DataType::Int64, true),
            Field::new("d", DataType::Float64, true),
            Field::new("day", DataType::Date32, true),
        ]);
        let fields =
            describe(&schema, &pgwire::api::portal::Format::UnifiedText, None).expect("fields");
        let sizes: Vec<i16> = fields.iter().map(|f| f.type_size()).collect();
        assert_eq!(sizes, [1, 2, 4, 8, 8, 4]);
    }
}
