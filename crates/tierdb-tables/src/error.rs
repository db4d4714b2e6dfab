//! Errors of the tables layer. Each names what is wrong and, where it can, how to fix it.

use datafusion::error::DataFusionError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    #[error("table {0} does not exist (list tables with: SHOW TABLES)")]
    NoTable(String),

    #[error("table {0} already exists (use CREATE TABLE IF NOT EXISTS, or DROP TABLE it first)")]
    TableExists(String),

    /// A schema, key or type that tierdb cannot store.
    #[error("{0}")]
    Schema(String),

    /// A write through a read-only open.
    #[error("{db} was opened read-only; open it as the writer to change tables")]
    ReadOnly { db: String },

    /// A catalog record that cannot be decoded (damage, or a newer format).
    #[error("damaged catalog record {key}: {reason}")]
    Damaged { key: String, reason: String },

    /// Bad input to an import; nothing was committed.
    #[error("{0}")]
    Import(String),

    #[error("segment {path}: {reason}")]
    Segment { path: String, reason: String },

    #[error(transparent)]
    Kv(#[from] tierdb_kv::KvError),

    #[error("object store: {0}")]
    Store(#[from] object_store::Error),

    #[error(transparent)]
    DataFusion(#[from] DataFusionError),

    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),

    #[error(transparent)]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),

    #[error("{0}")]
    Io(#[from] std::io::Error),

    /// A transaction lost a race with another commit; nothing of it was committed.
    #[error("could not serialize access: {0}")]
    Conflict(String),

    /// A statement or form tierdb does not support (SQLSTATE 0A000); nothing was changed.
    #[error("{0}")]
    Unsupported(String),

    /// A value longer than its VARCHAR(n) or CHAR(n) column allows; nothing was written.
    #[error("value too long for type {ty} of column {column}")]
    ValueTooLong { column: String, ty: String },

    /// A column that ALTER TABLE cannot add, drop or find (SQLSTATE `code`: 42701, 42703,
    /// 23502, 0A000); nothing was changed.
    #[error("{message}")]
    Column { code: &'static str, message: String },

    /// A constraint violated by a write (23505, 23502), with PostgreSQL's separate fields;
    /// nothing was written.
    #[error("{0}")]
    Violation(Box<crate::violation::Violation>),

    /// A statement that the transaction state does not allow (SQLSTATE `code`).
    #[error("{message}")]
    Transaction { code: &'static str, message: String },
}

pub type Result<T, E = TableError> = std::result::Result<T, E>;

pub use tierdb_kv::ErrorKind;

impl TableError {
    /// What the caller should do about it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TableError::NoTable(_) => ErrorKind::NotFound,
            TableError::TableExists(_) => ErrorKind::Conflict,
            TableError::Schema(_) | TableError::ReadOnly { .. } | TableError::Import(_) => {
                ErrorKind::Input
            }
            TableError::Damaged { .. } | TableError::Segment { .. } => ErrorKind::Data,
            TableError::Kv(e) => e.kind(),
            TableError::Store(e) => tierdb_store::store_error_kind(e),
            TableError::DataFusion(e) => datafusion_kind(e),
            TableError::Arrow(e) => arrow_kind(e),
            TableError::Parquet(_) => ErrorKind::Data,
            TableError::Io(_) => ErrorKind::Retry,
            TableError::Conflict(_) => ErrorKind::Conflict,
            TableError::Transaction { .. }
            | TableError::Violation(_)
            | TableError::Column { .. }
            | TableError::Unsupported(_)
            | TableError::ValueTooLong { .. } => ErrorKind::Input,
        }
    }

    /// The PostgreSQL SQLSTATE for this error, chosen by its variant and kind (never by
    /// its message): what `tierdb serve` answers.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            TableError::NoTable(_) => "42P01",      // undefined_table
            TableError::TableExists(_) => "42P07",  // duplicate_table
            TableError::ReadOnly { .. } => "25006", // read_only_sql_transaction
            TableError::Schema(_) => "42601",       // syntax_error (what tierdb cannot store)
            TableError::Import(_) => "22000",       // data_exception
            TableError::DataFusion(e) => datafusion_sqlstate(e),
            TableError::Transaction { code, .. } | TableError::Column { code, .. } => code,
            TableError::Violation(v) => v.code,
            TableError::Unsupported(_) => "0A000", // feature_not_supported
            TableError::ValueTooLong { .. } => "22001", // string_data_right_truncation
            _ => match self.kind() {
                ErrorKind::Input => "22000",
                ErrorKind::NotFound => "42P01",
                ErrorKind::Conflict => "40001", // serialization_failure
                ErrorKind::Retry => "58030",    // io_error
                ErrorKind::Reopen => "57P03",   // cannot_connect_now
                ErrorKind::Data => "XX001",     // data_corrupted
                _ => "XX000",                   // internal_error
            },
        }
    }
}

impl TableError {
    /// What a user reads: a tierdb error that a provider or sink raised inside DataFusion
    /// is shown as itself, without DataFusion's "External error: " in front.
    pub fn message(&self) -> String {
        if let TableError::DataFusion(e) = self {
            let mut e = e;
            loop {
                match e {
                    DataFusionError::External(b) => match b.downcast_ref::<TableError>() {
                        Some(t) => return t.message(),
                        None => break,
                    },
                    DataFusionError::Shared(s) => e = s.as_ref(),
                    DataFusionError::Context(_, inner) => e = inner.as_ref(),
                    // The planner's refusal without "type_coercion caused by Error during
                    // planning: " around it: the words say what is wrong.
                    DataFusionError::Plan(m)
                        if m.contains("should satisfy `0 < precision <= 76`") =>
                    {
                        return format!(
                            "{m} (tierdb stores NUMERIC(p,s) with p from 1 to 76 and s from 0 \
                             to p; declare the column within those)"
                        );
                    }
                    DataFusionError::Plan(m) => return m.clone(),
                    // PostgreSQL's words for 53200, then what ran out and how to give more.
                    DataFusionError::ResourcesExhausted(m) => {
                        return format!(
                            "out of memory: {m} (the statement was stopped and its memory \
                             freed; raise --memory or --memory-limit, or use less at once)"
                        );
                    }
                    _ => break,
                }
            }
        }
        self.to_string()
    }
}

/// The tierdb error inside a DataFusion error, if one is (a provider or sink failed).
fn inner_table_error(e: &DataFusionError) -> Option<&TableError> {
    match e {
        DataFusionError::External(b) => b.downcast_ref::<TableError>(),
        DataFusionError::Context(_, e) | DataFusionError::Diagnostic(_, e) => inner_table_error(e),
        DataFusionError::Shared(e) => inner_table_error(e),
        _ => None,
    }
}

fn datafusion_kind(e: &DataFusionError) -> ErrorKind {
    if let Some(t) = inner_table_error(e) {
        return t.kind();
    }
    match e {
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_)
        | DataFusionError::Configuration(_) => ErrorKind::Input,
        DataFusionError::ResourcesExhausted(_) | DataFusionError::IoError(_) => ErrorKind::Retry,
        // DataFusion's own object_store version: only "not found" is told apart.
        DataFusionError::ObjectStore(e) => match e.as_ref() {
            object_store_df::Error::NotFound { .. } => ErrorKind::NotFound,
            _ => ErrorKind::Retry,
        },
        DataFusionError::ArrowError(e, _) => arrow_kind(e),
        DataFusionError::ParquetError(_) => ErrorKind::Data,
        DataFusionError::Context(_, e) | DataFusionError::Diagnostic(_, e) => datafusion_kind(e),
        DataFusionError::Shared(e) => datafusion_kind(e),
        DataFusionError::Internal(_) => ErrorKind::Bug,
        // Execution errors are mostly the data's (a cast, a division by zero).
        _ => ErrorKind::Input,
    }
}

/// Arrow errors from computing on values (a cast, an overflow) are the input's; the rest
/// come from decoding stored bytes.
fn arrow_kind(e: &datafusion::arrow::error::ArrowError) -> ErrorKind {
    use datafusion::arrow::error::ArrowError as A;
    match e {
        A::CastError(_)
        | A::ParseError(_)
        | A::ComputeError(_)
        | A::DivideByZero
        | A::ArithmeticOverflow(_)
        | A::InvalidArgumentError(_)
        | A::SchemaError(_)
        | A::NotYetImplemented(_) => ErrorKind::Input,
        A::IoError(..) | A::MemoryError(_) => ErrorKind::Retry,
        A::ExternalError(b) => b
            .downcast_ref::<TableError>()
            .map_or(ErrorKind::Data, TableError::kind),
        _ => ErrorKind::Data,
    }
}

fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    use datafusion::common::SchemaError;
    if let Some(t) = inner_table_error(e) {
        return t.sqlstate();
    }
    match e {
        DataFusionError::SQL(..) => "42601", // syntax_error
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { .. } => "42703", // undefined_column
            SchemaError::AmbiguousReference { .. } => "42702",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::Plan(m) => crate::plancodes::plan_sqlstate(m),
        DataFusionError::NotImplemented(_) => "0A000", // feature_not_supported
        DataFusionError::ResourcesExhausted(_) => "53200", // out_of_memory
        DataFusionError::Context(_, e) | DataFusionError::Diagnostic(_, e) => {
            datafusion_sqlstate(e)
        }
        DataFusionError::Shared(e) => datafusion_sqlstate(e),
        DataFusionError::Internal(_) => "XX000",
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            datafusion::arrow::error::ArrowError::DivideByZero => "22012", // division_by_zero
            // numeric_value_out_of_range
            datafusion::arrow::error::ArrowError::ArithmeticOverflow(_) => "22003",
            datafusion::arrow::error::ArrowError::CastError(m)
                if let Some(code) =
                    datetime_cast_sqlstate(m).or_else(|| number_cast_sqlstate(m)) =>
            {
                code
            }
            // A value too large for an integer column (`SET n = 3000000000`): PostgreSQL's
            // "integer out of range".
            datafusion::arrow::error::ArrowError::CastError(m)
                if m.starts_with("Can't cast value") && m.contains("to type Int") =>
            {
                "22003"
            }
            // A value with more digits than NUMERIC(p,s) holds: "numeric field overflow".
            datafusion::arrow::error::ArrowError::InvalidArgumentError(m)
                if m.contains("too large to store in a Decimal") =>
            {
                "22003"
            }
            _ => match datafusion_kind(e) {
                ErrorKind::Data => "XX001",
                ErrorKind::Retry => "58030",
                _ => "22000",
            },
        },
        _ => match datafusion_kind(e) {
            ErrorKind::Data => "XX001",
            ErrorKind::Retry => "58030",
            _ => "22000", // data_exception: a cast or arithmetic on the rows
        },
    }
}

/// A text that did not cast to a date, time or timestamp, as PostgreSQL tells it: 22008
/// (datetime_field_overflow) when it is written like one but a field is out of range
/// (`25:00`, `2024-02-30`), 22007 (invalid_datetime_format) otherwise (`noon`).
fn datetime_cast_sqlstate(message: &str) -> Option<&'static str> {
    let rest = message.split("Cannot cast string '").nth(1)?;
    let (value, target) = rest.rsplit_once("' to value of ")?;
    if !["Time32", "Time64", "Timestamp", "Date32", "Date64"]
        .iter()
        .any(|t| target.starts_with(t))
    {
        return None;
    }
    let shaped = !value.trim().is_empty()
        && value
            .trim()
            .bytes()
            .all(|b| b.is_ascii_digit() || b" :-.T+".contains(&b));
    Some(if shaped { "22008" } else { "22007" })
}

/// A text that did not cast to a number, as PostgreSQL tells it: 22003 (out of range)
/// when it is written as an integer (`99999999999` for INT), 22P02
/// (invalid_text_representation) otherwise (`abc`, `1.5` for INT).
fn number_cast_sqlstate(message: &str) -> Option<&'static str> {
    let rest = message.split("Cannot cast string '").nth(1)?;
    let (value, target) = rest.rsplit_once("' to value of ")?;
    if !["Int", "UInt", "Float", "Decimal"]
        .iter()
        .any(|t| target.starts_with(t))
    {
        return None;
    }
    let v = value.trim();
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    let integer = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    Some(if integer { "22003" } else { "22P02" })
}

impl From<TableError> for DataFusionError {
    fn from(e: TableError) -> Self {
        match e {
            TableError::DataFusion(e) => e,
            other => DataFusionError::External(Box::new(other)),
        }
    }
}

/// The SQLSTATE for any error a statement can end with (a tierdb or DataFusion error, or
/// another error; those are internal): what `tierdb serve` answers.
/// The constraint violation inside `e`, wherever DataFusion carried it (an error raised
/// under a plan reaches the server wrapped in External, Shared or Context).
pub fn violation_of<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a crate::violation::Violation> {
    let mut d = match e.downcast_ref::<TableError>() {
        Some(TableError::Violation(v)) => return Some(v),
        Some(TableError::DataFusion(d)) => d,
        Some(_) => return None,
        None => e.downcast_ref::<DataFusionError>()?,
    };
    loop {
        match d {
            DataFusionError::External(b) => return violation_of(b.as_ref()),
            DataFusionError::Shared(s) => d = s.as_ref(),
            DataFusionError::Context(_, inner) => d = inner.as_ref(),
            _ => return None,
        }
    }
}

pub fn sqlstate_of(e: &(dyn std::error::Error + 'static)) -> &'static str {
    if let Some(t) = e.downcast_ref::<TableError>() {
        return t.sqlstate();
    }
    if let Some(d) = e.downcast_ref::<DataFusionError>() {
        return datafusion_sqlstate(d);
    }
    "XX000"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_casts_fail_with_postgresql_sqlstates() {
        let m = |v: &str, t: &str| format!("Cannot cast string '{v}' to value of {t} type");
        assert_eq!(
            datetime_cast_sqlstate(&m("25:00", "Time64(µs)")),
            Some("22008")
        );
        assert_eq!(
            datetime_cast_sqlstate(&m("2024-02-30", "Date32")),
            Some("22008")
        );
        assert_eq!(
            datetime_cast_sqlstate(&m("noon", "Time64(µs)")),
            Some("22007")
        );
        assert_eq!(
            datetime_cast_sqlstate(&m("x", "Timestamp(µs)")),
            Some("22007")
        );
        assert_eq!(datetime_cast_sqlstate(&m("x", "Int32")), None);
        assert_eq!(number_cast_sqlstate(&m("abc", "Int32")), Some("22P02"));
        assert_eq!(number_cast_sqlstate(&m("1.5", "Int64")), Some("22P02"));
        assert_eq!(
            number_cast_sqlstate(&m("-99999999999", "Int32")),
            Some("22003")
        );
        assert_eq!(number_cast_sqlstate(&m("2024-01-01", "Date32")), None);
    }

    #[test]
    fn a_numeric_too_wide_for_its_precision_is_an_overflow() {
        let e = DataFusionError::ArrowError(
            Box::new(datafusion::arrow::error::ArrowError::InvalidArgumentError(
                "1.30 is too large to store in a Decimal128 of precision 2. Max is 0.99".into(),
            )),
            None,
        );
        assert_eq!(datafusion_sqlstate(&e), "22003");
    }
}
