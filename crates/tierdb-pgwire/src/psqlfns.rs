//! Functions psql's describe commands call that datafusion-pg-catalog lacks or answers for
//! another server: `pg_size_pretty` (`\dt+`, `\l+`), `pg_function_is_visible` (`\df`), and
//! `pg_get_userbyid` naming the one role (`\dv`, `\l`: the crate's says "postgres", where
//! `pg_roles` lists the server's user).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use tierdb_tables::SqlEngine;

/// PostgreSQL 15's `pg_size_pretty(bigint)`: bytes below 10 kB, then kB, MB, GB, TB
/// (below 20 units of each, half rounded), as `dbsize.c` writes it.
pub(crate) fn size_pretty(mut size: i64) -> String {
    // (name, limit, rounded, bits of the unit)
    const UNITS: [(&str, i64, bool, u32); 5] = [
        ("bytes", 10 * 1024, false, 0),
        ("kB", 20 * 1024 - 1, true, 10),
        ("MB", 20 * 1024 - 1, true, 20),
        ("GB", 20 * 1024 - 1, true, 30),
        ("TB", 20 * 1024 - 1, true, 40),
    ];
    let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
    for (i, &(name, limit, round, bits)) in UNITS.iter().enumerate() {
        let last = i + 1 == UNITS.len();
        if last || size.unsigned_abs() < limit.unsigned_abs() {
            if round {
                size = half_rounded(size);
            }
            return format!("{size} {name}");
        }
        let (_, _, next_round, next_bits) = UNITS[i + 1];
        // One bit kept for the rounding of the next unit, as PostgreSQL does.
        let shift = next_bits - bits - u32::from(next_round) + u32::from(round);
        size /= 1i64 << shift;
    }
    unreachable!("the last unit always answers")
}

/// Registers the functions of the module doc on `engine`'s context; `user` is the role
/// `pg_roles` lists (oid 10).
pub(crate) fn install(engine: &SqlEngine, user: &str) {
    let ctx = engine.context();
    ctx.register_udf(create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let sizes = arrays[0].as_primitive::<Int64Type>();
            let out: StringArray = (0..sizes.len())
                .map(|i| sizes.is_valid(i).then(|| size_pretty(sizes.value(i))))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    ));
    // Every function pg_proc lists is in a schema on the search path (pg_catalog).
    ctx.register_udf(crate::catalogfns::constant_bool(
        "pg_function_is_visible",
        true,
    ));
    let name = user.to_string();
    ctx.register_udf(create_udf(
        "pg_get_userbyid",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let ids = arrays[0].as_primitive::<Int64Type>();
            // The one role owns everything; another oid is unknown, as PostgreSQL writes it.
            let out: StringArray = (0..ids.len())
                .map(|i| {
                    ids.is_valid(i).then(|| match ids.value(i) {
                        10 => name.clone(),
                        other => format!("unknown (OID={other})"),
                    })
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    ));
}

#[cfg(test)]
mod tests {
    use super::size_pretty;

    #[test]
    fn sizes_are_written_as_postgresql_writes_them() {
        // Expected values from PostgreSQL 15's pg_size_pretty.
        for (size, want) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (20971519, "20 MB"),
            (10485759, "10 MB"),
            (20971520, "20 MB"),
            (1_000_000_000, "954 MB"),
            (-10240, "-10 kB"),
            (1 << 50, "1024 TB"),
        ] {
            assert_eq!(size_pretty(size), want, "{size}");
        }
    }
}
