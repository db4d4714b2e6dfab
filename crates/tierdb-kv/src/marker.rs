//! `tierdb.json`: the object that makes a prefix a tierdb database.
//!
//! It is written (create-if-absent, straight to the capacity store) before anything else
//! when a database is created, and read before anything else when one is opened, so a
//! prefix that is missing, foreign or of another format version is refused with nothing
//! written.

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{KvError, Result};

pub const MARKER_NAME: &str = "tierdb.json";
pub const FORMAT: &str = "tierdb-kv";
/// The on-store format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Marker {
    pub format: String,
    pub version: u32,
    /// The engine that wrote the data files.
    pub engine: String,
    pub created_ms: u64,
    /// The source database, for a clone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_of: Option<String>,
    /// Set while `tierdb clone` runs; a database with it set is not opened.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
}

impl Marker {
    pub fn new(clone_of: Option<String>, incomplete: bool) -> Self {
        Marker {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            engine: format!("slatedb {}", crate::SLATEDB_VERSION),
            created_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            clone_of,
            incomplete,
        }
    }
}

pub fn marker_path(db: &Path) -> Path {
    db.clone().join(MARKER_NAME)
}

pub(crate) fn store_err(name: &str, e: object_store::Error) -> KvError {
    KvError::store(
        name,
        tierdb_store::Error::Store {
            store: name.to_string(),
            source: e,
        },
    )
}

/// Reads the marker of `db`: `Ok(None)` if the prefix is empty.
pub async fn read(store: &dyn ObjectStore, db: &Path, name: &str) -> Result<Option<Marker>> {
    if let Some(marker) = get(store, db, name).await? {
        return Ok(Some(marker));
    }
    let mut listing = store.list(Some(db));
    match listing.next().await {
        None => Ok(None),
        Some(Err(e)) => Err(store_err(name, e)),
        // Objects but no marker a moment ago: a process creating the database may have
        // written its marker (always its first object) in between. Read it once more.
        Some(Ok(meta)) => match get(store, db, name).await? {
            Some(marker) => Ok(Some(marker)),
            None => Err(KvError::NotTierdb {
                db: name.to_string(),
                example: meta.location.to_string(),
            }),
        },
    }
}

/// The marker of `db`, `None` if it has none.
async fn get(store: &dyn ObjectStore, db: &Path, name: &str) -> Result<Option<Marker>> {
    let name = name.to_string();
    match store.get(&marker_path(db)).await {
        Ok(got) => {
            let bytes = got.bytes().await.map_err(|e| store_err(&name, e))?;
            let marker: Marker =
                serde_json::from_slice(&bytes).map_err(|e| KvError::BadMarker {
                    db: name.clone(),
                    reason: e.to_string(),
                })?;
            if marker.format != FORMAT {
                return Err(KvError::BadMarker {
                    db: name,
                    reason: format!("format is {:?}, expected {FORMAT:?}", marker.format),
                });
            }
            if marker.version != FORMAT_VERSION {
                return Err(KvError::VersionMismatch {
                    db: name,
                    found: marker.version,
                    supported: FORMAT_VERSION,
                });
            }
            Ok(Some(marker))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(store_err(&name, e)),
    }
}

/// Writes `marker`; with `create`, only if there is none yet.
pub async fn write(
    store: &dyn ObjectStore,
    db: &Path,
    name: &str,
    marker: &Marker,
    create: bool,
) -> Result<()> {
    let name = name.to_string();
    let bytes = serde_json::to_vec_pretty(marker).map_err(|e| KvError::Invalid {
        db: name.clone(),
        what: format!("cannot encode tierdb.json: {e}"),
    })?;
    let mode = if create {
        PutMode::Create
    } else {
        PutMode::Overwrite
    };
    match store
        .put_opts(
            &marker_path(db),
            PutPayload::from(Bytes::from(bytes)),
            PutOptions::from(mode),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(object_store::Error::AlreadyExists { .. }) => Err(KvError::AlreadyExists { db: name }),
        Err(e) => Err(store_err(&name, e)),
    }
}
