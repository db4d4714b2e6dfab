//! The rows of a row table in new column types (`ALTER COLUMN … TYPE`, invariants in
//! `sql/alter_type.rs`): every row and index entry of the table is deleted and the rows of
//! the casting query are put again, with keys and entries encoded in the new types, as one
//! batch for the ALTER's commit. The caller holds the row commit gate, so the KV entries
//! read here and the rows the query read are the same committed rows.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;

use bytes::Bytes;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use super::index::{entry_key, index_range, value_prefix};
use super::{format, key_columns, row_key, table_range, values_of};
use crate::catalog::{CatalogBatch, TableDef};
use crate::error::{Result, TableError};
use crate::tables::Tables;

/// Keys read per page of the old entries.
const PAGE: usize = 8192;

/// The batch that replaces `before`'s rows and index entries by `stream`'s rows (one per
/// row, the columns of `after`), encoded as `after` declares them.
pub(crate) async fn rows(
    tables: &Tables,
    before: &TableDef,
    after: &TableDef,
    mut stream: SendableRecordBatchStream,
) -> Result<CatalogBatch> {
    // Deletes first; a key written again below replaces its delete.
    let mut ops: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
    let mut ranges = vec![table_range(before.id)];
    ranges.extend(before.indexes.iter().map(|i| index_range(i.id)));
    for (mut start, end) in ranges {
        loop {
            let page = tables.reader.scan((start, end.clone()), Some(PAGE)).await?;
            for (k, _) in &page {
                ops.insert(k.clone(), None);
            }
            match page.last() {
                Some((k, _)) if page.len() == PAGE => start = Bound::Excluded(k.clone()),
                _ => break,
            }
        }
    }
    let key_cols = key_columns(after)?;
    let schema = after.schema();
    let mut keys: HashSet<Bytes> = HashSet::new();
    let mut unique: Vec<HashSet<Vec<u8>>> = vec![HashSet::new(); after.indexes.len()];
    while let Some(batch) = stream.next().await {
        let batch = crate::write::conform(batch?, after, &schema)?;
        for row in 0..batch.num_rows() {
            let values = values_of(&batch, row)?;
            let key = row_key(after, &key_cols, &values)?;
            if !keys.insert(key.clone()) {
                return Err(TableError::Column {
                    code: "23505",
                    message: format!(
                        "could not create unique index \"{}_pkey\": {}; nothing was changed",
                        after.name,
                        super::duplicate(after, &key_cols, &values)
                    ),
                });
            }
            for (index, seen) in after.indexes.iter().zip(&mut unique) {
                let (prefix, has_null) = value_prefix(after, index, &values)?;
                if index.unique && !has_null && !seen.insert(prefix) {
                    return Err(TableError::Column {
                        code: "23505",
                        message: format!(
                            "could not create unique index \"{}\": some rows of {} have the \
                             same ({}) in the new type; nothing was changed",
                            index.name,
                            after.name,
                            index.columns.join(", ")
                        ),
                    });
                }
                ops.insert(entry_key(after, index, &values, &key)?, Some(key.clone()));
            }
            let value = Bytes::from(format::encode_row(after, &batch, row)?);
            ops.insert(key, Some(value));
        }
    }
    let mut b = CatalogBatch::default();
    for (k, v) in ops {
        match v {
            Some(v) => b.batch.put(k, v),
            None => b.batch.delete(k),
        };
    }
    Ok(b)
}
