//! Catalog and settings functions tools call that datafusion-pg-catalog does not have:
//! `current_setting` and `set_config` (pg_dump, Grafana, dbt), `pg_typeof`,
//! `pg_is_other_temp_schema` (dbt docs), `pg_postmaster_start_time` (DataGrip),
//! `pg_is_in_recovery`, `pg_get_indexdef`, `pg_get_constraintdef` (pg_dump).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility, create_udf,
};
use tierdb_tables::SqlEngine;

use crate::{SERVER_VERSION, SERVER_VERSION_NUM};

/// The rows of `pg_settings` (pgjdbc's getImportedKeys reads `max_index_keys` there):
/// every setting [`setting`] answers, under PostgreSQL's names.
const LISTED: [&str; 26] = [
    "server_version",
    "server_version_num",
    "search_path",
    "standard_conforming_strings",
    "integer_datetimes",
    "is_superuser",
    "client_encoding",
    "server_encoding",
    "DateStyle",
    "IntervalStyle",
    "TimeZone",
    "log_timezone",
    "max_index_keys",
    "max_identifier_length",
    "lc_collate",
    "lc_ctype",
    "lc_messages",
    "default_transaction_isolation",
    "transaction_isolation",
    "default_transaction_read_only",
    "transaction_read_only",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "application_name",
    "block_size",
];

/// `pg_settings` with `schema` (datafusion-pg-catalog's, whose one row is
/// `standard_conforming_strings`): the [`LISTED`] settings' names and values, the other
/// columns NULL.
pub(crate) fn settings_table(
    schema: datafusion::arrow::datatypes::SchemaRef,
) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::catalog::TableProvider>> {
    use datafusion::arrow::array::{ArrayRef, StringArray, new_null_array};
    let values: Vec<String> = LISTED
        .iter()
        .map(|n| setting(n).unwrap_or_default())
        .collect();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match f.name().as_str() {
                "name" => std::sync::Arc::new(StringArray::from(LISTED.to_vec())),
                "setting" | "reset_val" => std::sync::Arc::new(StringArray::from(values.clone())),
                _ => new_null_array(f.data_type(), LISTED.len()),
            }
        })
        .collect();
    let batch = datafusion::arrow::array::RecordBatch::try_new(schema.clone(), columns)?;
    Ok(std::sync::Arc::new(datafusion::catalog::MemTable::try_new(
        schema,
        vec![vec![batch]],
    )?))
}

/// `name(oid)`: `value` for every row (a property every object of tierdb's catalog has).
pub(crate) fn constant_bool(name: &str, value: bool) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let n = ColumnarValue::values_to_arrays(args)?[0].len();
            Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(
                vec![value; n],
            ))))
        }),
    )
}

/// The settings `current_setting` answers, as this server has them (`SET` of a session
/// does not change these answers; `SHOW` answers the session's own).
fn setting(name: &str) -> Option<String> {
    Some(
        match name.to_ascii_lowercase().as_str() {
            "server_version" => SERVER_VERSION.split(' ').next().unwrap_or("15.18"),
            "server_version_num" => SERVER_VERSION_NUM,
            "search_path" => "\"$user\", public",
            "standard_conforming_strings" | "integer_datetimes" | "is_superuser" => "on",
            "client_encoding" | "server_encoding" => "UTF8",
            "datestyle" => "ISO, MDY",
            "intervalstyle" => "postgres",
            "timezone" | "log_timezone" => "UTC",
            "max_index_keys" => "32",
            "max_identifier_length" => "63",
            "lc_collate" | "lc_ctype" | "lc_messages" => "C",
            "default_transaction_isolation" | "transaction_isolation" => "read committed",
            "default_transaction_read_only" | "transaction_read_only" => "off",
            "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => "0",
            "application_name" => "",
            "block_size" => "8192",
            _ => return None,
        }
        .to_string(),
    )
}

/// `current_setting(name [, missing_ok])`; `search_path` is the session's once it set one.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    signature: Signature,
    search_path: Option<String>,
}

impl CurrentSetting {
    fn new(search_path: Option<String>) -> Self {
        CurrentSetting {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
            search_path,
        }
    }
}

/// `current_setting` of a session that ran `SET search_path` (`text` as it gives it back).
pub(crate) fn current_setting_with_path(text: &str) -> ScalarUDF {
    ScalarUDF::new_from_impl(CurrentSetting::new(Some(text.to_string())))
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let names = arrays[0].as_string::<i32>();
        let missing_ok = arrays.get(1).map(|a| a.as_boolean().clone());
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            let name = names.value(i);
            let value = match &self.search_path {
                Some(p) if name.eq_ignore_ascii_case("search_path") => Some(p.clone()),
                _ => setting(name),
            };
            match value {
                Some(v) => out.push(Some(v)),
                None if missing_ok
                    .as_ref()
                    .is_some_and(|m| m.is_valid(i) && m.value(i)) =>
                {
                    out.push(None)
                }
                None => {
                    return Err(DataFusionError::Plan(format!(
                        "unrecognized configuration parameter \"{name}\""
                    )));
                }
            }
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// `pg_typeof(value)`: the PostgreSQL name of its type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ty = args.arg_fields[0].data_type();
        let name = match ty {
            DataType::Null => "unknown".to_string(),
            DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
            DataType::Timestamp(_, None) => "timestamp without time zone".into(),
            DataType::Float64 => "double precision".into(),
            DataType::Decimal128(..) | DataType::Decimal256(..) => "numeric".into(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
            other => datafusion_postgres::arrow_pg::datatypes::into_pg_type(other)
                .map(|t| t.name().to_string())
                .unwrap_or_else(|_| other.to_string()),
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// Registers the functions of this module on `engine`'s context.
/// `pg_get_indexdef` and its kind: NULL (see `install`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NoDefinition {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for NoDefinition {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))
    }
}

pub(crate) fn install(engine: &SqlEngine) {
    let ctx = engine.context();
    ctx.register_udf(ScalarUDF::new_from_impl(CurrentSetting::new(None)));
    ctx.register_udf(ScalarUDF::new_from_impl(PgTypeof {
        signature: Signature::any(1, Volatility::Immutable),
    }));
    // set_config(name, value, is_local): answers the value. It does not change what
    // current_setting answers (pg_dump and dbt only set search_path, which has one value).
    ctx.register_udf(create_udf(
        "set_config",
        vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
        DataType::Utf8,
        Volatility::Volatile,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            Ok(ColumnarValue::Array(arrays[1].clone() as ArrayRef))
        }),
    ));
    // The definitions of indexes, constraints and triggers pg_dump asks for by oid: none
    // is listed in pg_index, pg_constraint or pg_trigger (datafusion-pg-catalog's are
    // empty), so these are only planned, never asked about a row: NULL.
    // pg_dump prepares its function query when a built-in function's ACL is to be
    // checked; tierdb has no functions of its users to describe.
    for name in [
        "pg_get_indexdef",
        "pg_get_constraintdef",
        "pg_get_triggerdef",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
        "pg_get_function_result",
        "pg_get_function_sqlbody",
        // Comments of what tierdb keeps none for (a schema's, a type's): NULL. Those of
        // tables and columns are lookups of pg_description in catalog queries
        // (`comments.rs`).
        "obj_description",
        "col_description",
        "shobj_description",
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(NoDefinition {
            name,
            signature: Signature::variadic_any(Volatility::Stable),
        }));
    }
    ctx.register_udf(crate::keysql::expandarray());
    // tierdb has no temporary schemas of other sessions.
    ctx.register_udf(constant_bool("pg_is_other_temp_schema", false));
    // Privileges: tierdb has one user, who owns everything; no ACL differs from the
    // default, which tools then leave out of their output.
    ctx.register_udf(create_udf(
        "acldefault",
        vec![DataType::Utf8, DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    ));
    // A replica (serve --read-only) is "in recovery", as a PostgreSQL standby is.
    let replica = engine.tables().is_read_only();
    ctx.register_udf(create_udf(
        "pg_is_in_recovery",
        vec![],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(replica))))),
    ));
    let started = started_micros();
    ctx.register_udf(create_udf(
        "pg_postmaster_start_time",
        vec![],
        DataType::Timestamp(
            TimeUnit::Microsecond,
            Some(tierdb_tables::catalog::UTC.into()),
        ),
        Volatility::Stable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
                Some(started),
                Some(tierdb_tables::catalog::UTC.into()),
            )))
        }),
    ));
}

/// When this process started serving (microseconds since the epoch).
fn started_micros() -> i64 {
    static STARTED: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *STARTED.get_or_init(|| micros_since_epoch(std::time::SystemTime::now()))
}

fn micros_since_epoch(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_tools_read() {
        assert_eq!(setting("server_version_num").as_deref(), Some("150018"));
        assert!(
            LISTED.iter().all(|n| setting(n).is_some()),
            "every listed setting has a value"
        );
        assert_eq!(setting("SERVER_VERSION").as_deref(), Some("15.18"));
        assert_eq!(setting("search_path").as_deref(), Some("\"$user\", public"));
        assert_eq!(setting("no_such_setting"), None);
    }
}
