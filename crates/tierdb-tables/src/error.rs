//! Errors of the tables layer. Each names what is wrong and, where it can, how to fix it.

use datafusion::error::DataFusionError;

#[derive(Debug, thiserror::Error)]
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
}

pub type Result<T, E = TableError> = std::result::Result<T, E>;

impl From<TableError> for DataFusionError {
    fn from(e: TableError) -> Self {
        match e {
            TableError::DataFusion(e) => e,
            other => DataFusionError::External(Box::new(other)),
        }
    }
}
