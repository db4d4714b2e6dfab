//! The column types tierdb stores ([`ColumnType`]): each one Arrow type and one Parquet
//! physical type, named in a catalog by its serde name, with the SQL spelling it is
//! declared and described by.

use datafusion::arrow::datatypes::DataType;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TableError};

/// The column types tierdb stores. Each maps to one Arrow type and one Parquet physical type.
/// Variants are only ever added (a catalog names them by their serde name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    Boolean,
    /// SMALLINT.
    Int16,
    Int32,
    Int64,
    /// REAL.
    Float32,
    Float64,
    /// TEXT.
    Utf8,
    /// VARCHAR(n): at most `len` characters, enforced on every write (22001).
    Varchar {
        len: u32,
    },
    /// CHAR(n): exactly `len` characters, padded with spaces on write, longer refused.
    Char {
        len: u32,
    },
    Date32,
    /// NUMERIC(p,s): Arrow's Decimal128 up to precision 38, Decimal256 from 39 to
    /// [`MAX_NUMERIC_PRECISION`] (Prisma's default `DECIMAL(65,30)`), as DataFusion types
    /// `NUMERIC(p,s)` in SQL.
    Decimal {
        precision: u8,
        scale: i8,
    },
    /// TIMESTAMP (without time zone): microseconds, PostgreSQL's precision.
    Timestamp,
    /// TIMESTAMPTZ: an instant, stored as microseconds since the epoch in UTC.
    TimestampTz,
    /// TIME (without time zone): microseconds since midnight, PostgreSQL's precision.
    Time,
    /// BYTEA.
    Binary,
    /// UUID: stored as its canonical text (lowercase, hyphenated; `pgtext.rs`).
    Uuid,
    /// JSON: stored as the text written, checked to be JSON (`pgtext.rs`).
    Json,
    /// JSONB: stored as PostgreSQL's normalized text of the value (`pgtext.rs`).
    Jsonb,
    /// VARCHAR without a length: any text, as TEXT, but described as PostgreSQL describes
    /// it (`character varying`, type 1043). Columns declared so before this variant was
    /// added are [`ColumnType::Utf8`] and read as `text`.
    VarcharUnbounded,
    /// NUMERIC (DECIMAL) without a precision: any value of up to [`NUMERIC_SCALE`] digits
    /// after the point and 76 in all, stored as [`ColumnType::storage`] says, reported as
    /// PostgreSQL reports `numeric` (no typmod) and shown without the fraction's trailing
    /// zeros (`1.5`, not `1.50000000000000000000`: PostgreSQL shows the digits each value
    /// was written with, which a fixed Arrow scale cannot keep). Columns declared so before
    /// this variant was added are `Decimal { precision: 38, scale: 10 }`.
    Numeric,
}

/// The digits after the point a [`ColumnType::Numeric`] value keeps (more are rounded, as
/// NUMERIC(p,s) rounds): eighteen-decimal token amounts and fifteen-decimal coordinates fit,
/// and the product of two values still has 36 digits before the point.
pub const NUMERIC_SCALE: i8 = 20;

/// The most digits a NUMERIC(p,s) column may declare: Arrow's Decimal256 holds 76
/// (PostgreSQL allows 1000; a wider declaration is refused with this limit named).
pub const MAX_NUMERIC_PRECISION: u8 = 76;

/// The widest NUMERIC(p,s) Arrow's Decimal128 holds; wider columns are Decimal256.
pub const DECIMAL128_MAX_PRECISION: u8 = 38;

/// The Arrow field metadata key of a column's declared SQL type, where Arrow's type does not
/// say it (`VARCHAR(20)`, `CHAR(3)`).
pub const DECLARED_TYPE: &str = "tierdb.declared_type";

/// The Arrow time zone of TIMESTAMPTZ values (and of the sessions' `now()`): UTC.
pub const UTC: &str = "+00:00";

impl ColumnType {
    pub fn arrow(self) -> DataType {
        use datafusion::arrow::datatypes::TimeUnit;
        match self {
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Int16 => DataType::Int16,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float32 => DataType::Float32,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Utf8
            | ColumnType::VarcharUnbounded
            | ColumnType::Varchar { .. }
            | ColumnType::Char { .. }
            | ColumnType::Uuid
            | ColumnType::Json
            | ColumnType::Jsonb => DataType::Utf8,
            ColumnType::Date32 => DataType::Date32,
            ColumnType::Decimal { precision, scale } if precision > DECIMAL128_MAX_PRECISION => {
                DataType::Decimal256(precision, scale)
            }
            ColumnType::Decimal { precision, scale } => DataType::Decimal128(precision, scale),
            ColumnType::Numeric => self.storage().arrow(),
            ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            ColumnType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            ColumnType::Time => DataType::Time64(TimeUnit::Microsecond),
            ColumnType::Binary => DataType::Binary,
        }
    }

    pub fn from_arrow(column: &str, t: &DataType) -> Result<Self> {
        Ok(match t {
            DataType::Boolean => ColumnType::Boolean,
            DataType::Int8 | DataType::Int16 => ColumnType::Int16,
            DataType::Int32 => ColumnType::Int32,
            DataType::Int64 => ColumnType::Int64,
            DataType::Float16 | DataType::Float32 => ColumnType::Float32,
            DataType::Float64 => ColumnType::Float64,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ColumnType::Utf8,
            DataType::Date32 => ColumnType::Date32,
            DataType::Decimal128(p, s) => ColumnType::Decimal {
                precision: *p,
                scale: *s,
            },
            DataType::Decimal256(MAX_NUMERIC_PRECISION, NUMERIC_SCALE) => ColumnType::Numeric,
            DataType::Decimal256(p, s) => ColumnType::Decimal {
                precision: *p,
                scale: *s,
            },
            DataType::Timestamp(_, None) => ColumnType::Timestamp,
            DataType::Timestamp(_, Some(_)) => ColumnType::TimestampTz,
            DataType::Time32(_) | DataType::Time64(_) => ColumnType::Time,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => ColumnType::Binary,
            other => {
                return Err(TableError::Schema(format!(
                    "column {column}: type {other} is not supported; use BOOLEAN, SMALLINT, \
                     INT, BIGINT, REAL, DOUBLE, TEXT, VARCHAR(n), CHAR(n), DATE, \
                     DECIMAL(p,s), TIMESTAMP, TIMESTAMPTZ, TIME, BYTEA, UUID, JSON or JSONB"
                )));
            }
        })
    }

    /// The SQL spelling, as `\d`-style listings show it.
    pub fn sql(self) -> String {
        match self {
            ColumnType::Boolean => "BOOLEAN".into(),
            ColumnType::Int16 => "SMALLINT".into(),
            ColumnType::Int32 => "INT".into(),
            ColumnType::Int64 => "BIGINT".into(),
            ColumnType::Float32 => "REAL".into(),
            ColumnType::Float64 => "DOUBLE".into(),
            ColumnType::Utf8 => "VARCHAR".into(),
            ColumnType::Varchar { len } => format!("VARCHAR({len})"),
            ColumnType::VarcharUnbounded => "CHARACTER VARYING".into(),
            ColumnType::Char { len } => format!("CHAR({len})"),
            ColumnType::Date32 => "DATE".into(),
            ColumnType::Decimal { precision, scale } => format!("DECIMAL({precision},{scale})"),
            ColumnType::Numeric => "NUMERIC".into(),
            ColumnType::Timestamp => "TIMESTAMP".into(),
            ColumnType::TimestampTz => "TIMESTAMPTZ".into(),
            ColumnType::Time => "TIME".into(),
            ColumnType::Binary => "BYTEA".into(),
            ColumnType::Uuid => "UUID".into(),
            ColumnType::Json => "JSON".into(),
            ColumnType::Jsonb => "JSONB".into(),
        }
    }

    /// Whether the Arrow type does not say this type (it is stored as text, or with a
    /// length): such a column carries its SQL spelling in its field's [`DECLARED_TYPE`].
    pub fn needs_declaration(self) -> bool {
        self.max_chars().is_some()
            || matches!(
                self,
                ColumnType::Uuid
                    | ColumnType::Json
                    | ColumnType::Jsonb
                    | ColumnType::VarcharUnbounded
            )
    }

    /// Whether values are plain text with no length, no padding and no format: TEXT and
    /// VARCHAR without a length.
    pub fn is_text(self) -> bool {
        matches!(self, ColumnType::Utf8 | ColumnType::VarcharUnbounded)
    }

    /// The type whose values a column of this type stores: NUMERIC without a precision
    /// stores `Decimal { precision: 76, scale: NUMERIC_SCALE }`; every other type itself.
    pub fn storage(self) -> Self {
        match self {
            ColumnType::Numeric => ColumnType::Decimal {
                precision: MAX_NUMERIC_PRECISION,
                scale: NUMERIC_SCALE,
            },
            t => t,
        }
    }

    /// The precision and scale of a NUMERIC's stored values (with or without a declared
    /// precision).
    pub fn decimal(self) -> Option<(u8, i8)> {
        match self.storage() {
            ColumnType::Decimal { precision, scale } => Some((precision, scale)),
            _ => None,
        }
    }

    /// The most characters a value may have (VARCHAR(n), CHAR(n)).
    pub fn max_chars(self) -> Option<u32> {
        match self {
            ColumnType::Varchar { len } | ColumnType::Char { len } => Some(len),
            _ => None,
        }
    }

    /// This type with the length a column declared (`VARCHAR(20)`, `CHAR(3)`), which the
    /// Arrow type does not carry.
    pub fn with_declared(self, declared: &datafusion::sql::sqlparser::ast::DataType) -> Self {
        use datafusion::sql::sqlparser::ast::{CharacterLength, DataType as Sql, ExactNumberInfo};
        let len = |l: &Option<CharacterLength>| match l {
            Some(CharacterLength::IntegerLength { length, .. }) => u32::try_from(*length).ok(),
            _ => None,
        };
        match (self, declared) {
            (
                ColumnType::Utf8,
                Sql::Varchar(l) | Sql::CharacterVarying(l) | Sql::CharVarying(l),
            ) => len(l).map_or(ColumnType::VarcharUnbounded, |len| ColumnType::Varchar {
                len,
            }),
            (ColumnType::Utf8, Sql::Char(l) | Sql::Character(l)) => ColumnType::Char {
                len: len(l).unwrap_or(1),
            },
            (ColumnType::Utf8, Sql::Uuid) => ColumnType::Uuid,
            // DataFusion plans a NUMERIC without precision as DECIMAL(38,10); an explicit
            // NUMERIC(76,20) is that, not the unconstrained type `from_arrow` reads it as.
            (
                ColumnType::Decimal { .. } | ColumnType::Numeric,
                Sql::Numeric(info) | Sql::Decimal(info) | Sql::Dec(info),
            ) => match info {
                ExactNumberInfo::None => ColumnType::Numeric,
                _ => self.storage(),
            },
            (ColumnType::Utf8, Sql::JSON) => ColumnType::Json,
            (ColumnType::Utf8, Sql::JSONB) => ColumnType::Jsonb,
            _ => self,
        }
    }
}
