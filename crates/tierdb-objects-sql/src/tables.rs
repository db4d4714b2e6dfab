//! The `zodb` schema: its tables, their columns, and their scans.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use tierdb_objects::{Tid, VersionedStore};
use tierdb_tables::catalog::DECLARED_TYPE;

use crate::snapshot::Snapshots;

/// One of the tables of the `zodb` schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    Objects,
    Refs,
    Revisions,
    Transactions,
    Blobs,
}

impl TableKind {
    pub const ALL: [TableKind; 5] = [
        TableKind::Objects,
        TableKind::Refs,
        TableKind::Revisions,
        TableKind::Transactions,
        TableKind::Blobs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TableKind::Objects => "objects",
            TableKind::Refs => "refs",
            TableKind::Revisions => "revisions",
            TableKind::Transactions => "transactions",
            TableKind::Blobs => "blobs",
        }
    }

    /// The table's columns (oids and tids are BIGINT: both are 8-byte big-endian numbers,
    /// and every tid of this era is below 2^63).
    pub fn schema(self) -> SchemaRef {
        let int = |n: &str, null: bool| Field::new(n, DataType::Int64, null);
        let text = |n: &str| Field::new(n, DataType::Utf8, true);
        let json = |n: &str| {
            Field::new(n, DataType::Utf8, true).with_metadata(HashMap::from([(
                DECLARED_TYPE.to_string(),
                "JSON".to_string(),
            )]))
        };
        let fields = match self {
            TableKind::Objects => vec![
                int("oid", false),
                int("tid", false),
                text("class_name"),
                int("size", false),
                int("stored_size", false),
                json("state"),
                text("state_error"),
            ],
            TableKind::Refs => vec![int("oid", false), int("tid", false), int("ref_oid", false)],
            TableKind::Revisions => vec![
                int("oid", false),
                int("tid", false),
                int("prev_tid", true),
                int("size", true),
                text("data_hash"),
                int("data_tid", true),
                text("blob_hash"),
            ],
            TableKind::Transactions => vec![
                int("tid", false),
                Field::new(
                    "time",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                    false,
                ),
                text("user_name"),
                text("description"),
                json("extension"),
                Field::new("packed", DataType::Boolean, false),
            ],
            TableKind::Blobs => vec![
                int("oid", false),
                int("tid", false),
                text("blob_hash"),
                int("size", false),
            ],
        };
        Arc::new(Schema::new(fields))
    }
}

/// The `zodb` schema over one object store.
#[derive(Debug)]
pub struct ZodbSchema {
    store: Arc<VersionedStore>,
    snapshots: Arc<Snapshots>,
}

impl ZodbSchema {
    pub fn new(store: Arc<VersionedStore>) -> Self {
        ZodbSchema {
            store,
            snapshots: Arc::default(),
        }
    }
}

#[async_trait]
impl datafusion::catalog::SchemaProvider for ZodbSchema {
    fn table_names(&self) -> Vec<String> {
        TableKind::ALL
            .iter()
            .map(|k| k.name().to_string())
            .collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(TableKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .map(|kind| {
                Arc::new(ZodbTable {
                    kind,
                    schema: kind.schema(),
                    store: self.store.clone(),
                    snapshots: self.snapshots.clone(),
                }) as Arc<dyn TableProvider>
            }))
    }

    fn table_exist(&self, name: &str) -> bool {
        TableKind::ALL.iter().any(|k| k.name() == name)
    }
}

#[derive(Debug)]
struct ZodbTable {
    kind: TableKind,
    schema: SchemaRef,
    store: Arc<VersionedStore>,
    snapshots: Arc<Snapshots>,
}

#[async_trait]
impl TableProvider for ZodbTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let at = self.snapshots.tid(&self.store, state).await?;
        let wanted = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let partition = Arc::new(Scan {
            kind: self.kind,
            schema: self.schema.clone(),
            store: self.store.clone(),
            at,
            wanted,
        });
        Ok(Arc::new(StreamingTableExec::try_new(
            self.schema.clone(),
            vec![partition],
            projection,
            [],
            false,
            limit,
        )?))
    }
}

/// One scan: the table's rows as of `at`, with the `wanted` columns filled (the others
/// are NULL or zero, and projected away).
#[derive(Debug)]
pub(crate) struct Scan {
    pub kind: TableKind,
    pub schema: SchemaRef,
    pub store: Arc<VersionedStore>,
    pub at: Tid,
    pub wanted: Vec<usize>,
}

impl Scan {
    pub fn wants(&self, column: &str) -> bool {
        self.schema
            .index_of(column)
            .is_ok_and(|i| self.wanted.contains(&i))
    }
}

impl PartitionStream for Scan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let scan = Arc::new(Scan {
            kind: self.kind,
            schema: self.schema.clone(),
            store: self.store.clone(),
            at: self.at,
            wanted: self.wanted.clone(),
        });
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            crate::rows::batches(scan),
        ))
    }
}
