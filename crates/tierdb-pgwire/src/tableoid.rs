//! RowDescription's table OID and column number for the columns that come straight from a
//! stored table (`tierdb_tables::origin`), as PostgreSQL sends them: pgjdbc's
//! `ResultSetMetaData.getTableName` and updatable result sets, node-postgres' and pgx's
//! `tableID`/`columnID` read them.
//!
//! The OID is the table's `pg_class.oid` (datafusion-pg-catalog assigns OIDs once per
//! name and keeps them for the life of the server), read from `pg_class` when a name is
//! not known yet and kept per connection: a statement whose columns have no origin costs
//! nothing, and one whose tables are all known costs a map lookup.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use pgwire::api::results::FieldInfo;
use tierdb_tables::origin::Origin;
use tierdb_tables::sql::SqlSession;

/// The OIDs of the stored tables this connection has described.
#[derive(Debug, Default)]
pub(crate) struct TableOids {
    known: std::sync::Mutex<HashMap<String, i32>>,
}

/// (table OID, column number) per output column.
pub(crate) type Ids = Vec<Option<(i32, i16)>>;

impl TableOids {
    /// The ids of `origins` (`None` where a column has no origin or its table no OID).
    pub(crate) async fn resolve(&self, session: &SqlSession, origins: &[Option<Origin>]) -> Ids {
        let missing = origins
            .iter()
            .flatten()
            .any(|(t, _)| !self.lock().contains_key(t));
        if missing && let Some(listed) = list(session).await {
            *self.lock() = listed;
        }
        let known = self.lock();
        origins
            .iter()
            .map(|o| {
                let (table, column) = o.as_ref()?;
                Some((*known.get(table)?, *column))
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i32>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The stored tables (by catalog name) and their OIDs from `pg_class`; `None` if it cannot be read (the
/// catalog emulation is not installed). Run on the session's DataFusion context, outside
/// its transaction rules: a failure here is no failure of the client's statement.
async fn list(session: &SqlSession) -> Option<HashMap<String, i32>> {
    let sql = "SELECT CAST(c.relname AS VARCHAR), CAST(c.oid AS BIGINT), \
               CAST(n.nspname AS VARCHAR) \
               FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n \
               ON c.relnamespace = n.oid \
               WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')";
    let batches = session
        .context()
        .sql(sql)
        .await
        .ok()?
        .collect()
        .await
        .ok()?;
    let mut out = HashMap::new();
    for b in batches {
        let names = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8).ok()?;
        let names = names.as_string::<i32>();
        let oids = b.column(1).as_primitive::<Int64Type>();
        let schemas = datafusion::arrow::compute::cast(b.column(2), &DataType::Utf8).ok()?;
        let schemas = schemas.as_string::<i32>();
        for i in 0..b.num_rows() {
            if names.is_valid(i)
                && oids.is_valid(i)
                && schemas.is_valid(i)
                && let Ok(oid) = i32::try_from(oids.value(i))
            {
                // Keyed as the catalog names the table (`origin.rs`).
                let name = tierdb_tables::sql::qualified(schemas.value(i), names.value(i));
                out.insert(name, oid);
            }
        }
    }
    Some(out)
}

/// `fields` with the table OIDs and column numbers of `ids`.
pub(crate) fn with_ids(fields: Vec<FieldInfo>, ids: &[Option<(i32, i16)>]) -> Vec<FieldInfo> {
    fields
        .into_iter()
        .enumerate()
        .map(|(i, f)| match ids.get(i).copied().flatten() {
            Some((table, column)) => FieldInfo::new(
                f.name().to_string(),
                Some(table),
                Some(column),
                f.datatype().clone(),
                f.format(),
            )
            .with_format_options(f.format_options().clone())
            .with_type_size(f.type_size())
            .with_type_modifier(f.type_modifier()),
            None => f,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgwire::api::Type;
    use pgwire::api::results::FieldFormat;

    #[test]
    fn ids_are_set_where_a_column_has_an_origin_and_the_rest_is_kept() {
        let fields = vec![
            FieldInfo::new("a".into(), None, None, Type::VARCHAR, FieldFormat::Text)
                .with_type_modifier(24),
            FieldInfo::new("b".into(), None, None, Type::INT4, FieldFormat::Binary),
        ];
        let out = with_ids(fields, &[Some((16390, 2)), None]);
        assert_eq!(
            (out[0].table_id(), out[0].column_id()),
            (Some(16390), Some(2))
        );
        assert_eq!(out[0].type_modifier(), 24);
        assert_eq!(out[0].datatype(), &Type::VARCHAR);
        assert_eq!((out[1].table_id(), out[1].column_id()), (None, None));
        assert_eq!(out[1].format(), FieldFormat::Binary);
    }
}
