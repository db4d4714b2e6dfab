//! # tierdb-objects-sql: SQL over a ZODB database
//!
//! A tierdb database that holds a ZODB object store shows it to `tierdb sql` and
//! `tierdb serve` as read-only tables in the schema `zodb` (documented in
//! `docs/design/objects.md`, "SQL over a ZODB database"):
//!
//! | table | one row per | columns |
//! |---|---|---|
//! | `zodb.objects` | object, as of the query's tid | `oid, tid, class_name, size, stored_size, state` (JSON), `state_error` |
//! | `zodb.refs` | reference from an object's current revision | `oid, tid, ref_oid` |
//! | `zodb.revisions` | revision kept | `oid, tid, prev_tid, size, data_hash, data_tid, blob_hash` |
//! | `zodb.transactions` | transaction | `tid, time, user_name, description, extension` (JSON), `packed` |
//! | `zodb.blobs` | revision with a blob | `oid, tid, blob_hash, size` |
//!
//! Invariants:
//! 1. One query reads one tid: every scan of a query (a join of `objects` and `refs`, say)
//!    uses the tid taken when the query's first scan was planned ([`snapshot`]); commits
//!    after it are not seen and never block it, nor does it block them.
//! 2. A state that cannot be decoded shows its class and size with `state` NULL and
//!    `state_error` saying why; a stored record that is damaged (its bytes do not match
//!    their hash) fails the query naming the object.
//! 3. Only the columns a query reads are computed: a count of objects by class reads
//!    every current pickle, a count of objects reads none.

mod rows;
mod snapshot;
mod tables;

use std::sync::Arc;

use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use tierdb_objects::VersionedStore;

pub use tables::{TableKind, ZodbSchema};

/// The schema the tables are in.
pub const SCHEMA: &str = "zodb";

/// Registers schema [`SCHEMA`] over `store` in the default catalog of `ctx` (sessions
/// made from `ctx` afterwards see it too).
pub fn register(ctx: &SessionContext, store: Arc<VersionedStore>) -> Result<()> {
    let state = ctx.state();
    let catalog_name = &state.config_options().catalog.default_catalog;
    let catalog: Arc<dyn CatalogProvider> = ctx.catalog(catalog_name).ok_or_else(|| {
        DataFusionError::Plan(format!(
            "no catalog {catalog_name} to add schema {SCHEMA} to"
        ))
    })?;
    let schema: Arc<dyn SchemaProvider> = Arc::new(ZodbSchema::new(store));
    catalog.register_schema(SCHEMA, schema)?;
    Ok(())
}
