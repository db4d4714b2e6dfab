//! PostgreSQL's dialect on an engine: `pg_catalog` and the catalog functions drivers and
//! tools call (datafusion-pg-catalog), and the few functions tierdb adds to it.

use std::sync::Arc;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions as ArrowFormat};
use pgwire::api::Type;
use tierdb_tables::SqlEngine;

use crate::SERVER_VERSION;

/// Makes an engine speak PostgreSQL's dialect: `pg_catalog` and PostgreSQL's catalog
/// functions (datafusion-pg-catalog), `user` as the one role owning everything
/// (`pgcatalog.rs`), and `version()`. Sessions made afterwards inherit it.
pub fn install_postgres_compat(engine: &SqlEngine, user: &str) -> Result<(), String> {
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
    datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog(
        engine.context(),
        tierdb_tables::sql::CATALOG,
        EmptyContextProvider,
    )
    .map_err(|e| format!("cannot set up pg_catalog: {e}"))?;
    let catalog = engine
        .context()
        .catalog(tierdb_tables::sql::CATALOG)
        .ok_or("cannot set up pg_catalog: the engine has no catalog")?;
    crate::pgcatalog::install(&catalog, user, Some(engine.tables().clone()))
        .map_err(|e| format!("cannot set up pg_roles: {e}"))?;
    engine
        .context()
        .register_udf(crate::pgcatalog::acldefault());
    let version = format!(
        "PostgreSQL {SERVER_VERSION} on {}-{}, compatible; Apache DataFusion {}",
        std::env::consts::ARCH,
        std::env::consts::OS,
        datafusion::DATAFUSION_VERSION
    );
    let udf = create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(Some(version.clone())),
            ))
        }),
    );
    engine.context().register_udf(udf);
    engine.context().register_udf(to_regtype_udf());
    engine
        .context()
        .register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            JsonBuildObject::new(),
        ));
    // Every collation and type is visible: there is one schema search path.
    for name in ["pg_collation_is_visible", "pg_type_is_visible"] {
        engine.context().register_udf(create_udf(
            name,
            vec![DataType::Int32],
            DataType::Boolean,
            Volatility::Immutable,
            Arc::new(|_| {
                Ok(ColumnarValue::Scalar(
                    datafusion::common::ScalarValue::Boolean(Some(true)),
                ))
            }),
        ));
    }
    // tierdb has no sequences: no column is backed by one.
    engine.context().register_udf(create_udf(
        "pg_get_serial_sequence",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(None),
            ))
        }),
    ));
    crate::catalogfns::install(engine);
    crate::psqlfns::install(engine, user);
    Ok(())
}

/// `json_build_object(key, value, …)`: a JSON object as text (catalog queries of
/// SQLAlchemy and BI tools build one per column).
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: datafusion::logical_expr::Signature,
}

impl JsonBuildObject {
    fn new() -> Self {
        JsonBuildObject {
            signature: datafusion::logical_expr::Signature::variadic_any(
                datafusion::logical_expr::Volatility::Immutable,
            ),
        }
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<datafusion::logical_expr::ColumnarValue> {
        use datafusion::arrow::array::StringBuilder;
        if !args.args.len().is_multiple_of(2) {
            return Err(datafusion::error::DataFusionError::Execution(
                "json_build_object takes keys and values in pairs".into(),
            ));
        }
        let arrays = datafusion::logical_expr::ColumnarValue::values_to_arrays(&args.args)?;
        let fmt = ArrowFormat::default();
        let formatters = arrays
            .iter()
            .map(|a| ArrayFormatter::try_new(a.as_ref(), &fmt))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = StringBuilder::new();
        for row in 0..args.number_rows {
            let mut obj = serde_json::Map::new();
            for pair in 0..arrays.len() / 2 {
                let (k, v) = (2 * pair, 2 * pair + 1);
                let key = formatters[k].value(row).to_string();
                let value = if arrays[v].is_null(row) {
                    serde_json::Value::Null
                } else {
                    let text = formatters[v].value(row).to_string();
                    match arrays[v].data_type() {
                        DataType::Boolean => serde_json::Value::Bool(text == "true"),
                        t if t.is_numeric() => {
                            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
                        }
                        _ => serde_json::Value::String(text),
                    }
                };
                obj.insert(key, value);
            }
            out.append_value(serde_json::Value::Object(obj).to_string());
        }
        Ok(datafusion::logical_expr::ColumnarValue::Array(Arc::new(
            out.finish(),
        )))
    }
}

/// `to_regtype(name)`: the OID of a built-in type by any of its SQL names, NULL for a type
/// this server does not have (drivers probe for extension types such as hstore this way).
fn to_regtype_udf() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    let lookup = |name: &str| -> Option<i32> {
        let n = name.trim().trim_matches('"').to_ascii_lowercase();
        let n = n.strip_prefix("pg_catalog.").unwrap_or(&n);
        let ty = match n {
            "bool" | "boolean" => Type::BOOL,
            "int2" | "smallint" => Type::INT2,
            "int4" | "int" | "integer" => Type::INT4,
            "int8" | "bigint" => Type::INT8,
            "float4" | "real" => Type::FLOAT4,
            "float8" | "double precision" => Type::FLOAT8,
            "numeric" | "decimal" => Type::NUMERIC,
            "text" => Type::TEXT,
            "varchar" | "character varying" => Type::VARCHAR,
            "bpchar" | "char" | "character" => Type::BPCHAR,
            "name" => Type::NAME,
            "date" => Type::DATE,
            "time" | "time without time zone" => Type::TIME,
            "timestamp" | "timestamp without time zone" => Type::TIMESTAMP,
            "timestamptz" | "timestamp with time zone" => Type::TIMESTAMPTZ,
            "interval" => Type::INTERVAL,
            "bytea" => Type::BYTEA,
            "oid" => Type::OID,
            "json" => Type::JSON,
            "jsonb" => Type::JSONB,
            "uuid" => Type::UUID,
            _ => return None,
        };
        i32::try_from(ty.oid()).ok()
    };
    create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let names = arrays[0]
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| {
                    datafusion::error::DataFusionError::Plan("to_regtype takes text".into())
                })?;
            let oids: Int32Array = names.iter().map(|n| n.and_then(lookup)).collect();
            Ok(ColumnarValue::Array(Arc::new(oids)))
        }),
    )
}
