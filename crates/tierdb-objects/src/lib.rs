//! # tierdb-objects: the versioned transactional object store
//!
//! What NEO is to ZODB, on tierdb's key-value engine: every revision of every object kept
//! (oid → revisions by tid), two-phase commit (`vote` checks conflicts and makes the data
//! durable, `finish` is one durable commit), data stored once per content hash and
//! compressed with zstd (from 1 KiB), large records split, undo, pack with garbage
//! collection of unreferenced data, transaction iteration, and restore for copying from
//! another storage.
//! The key layout is in [`records`]. The Python ZODB storage (`python/`) is built on it.

mod blobs;
pub mod error;
pub mod filestorage;
#[doc(hidden)]
pub mod fuzzing;
mod handle;
pub mod ids;
pub mod import;
pub mod pickle;
pub mod records;
mod store;
pub mod unpickle;

pub use blobs::SINGLE_PUT_MAX;
pub use error::{ErrorKind, ObjError, Result};
pub use ids::{Oid, Tid};
pub use import::{
    ImportOptions, ImportProgress, ImportReport, check_filestorage, import_filestorage,
};
pub use records::{TxnMeta, TxnRecord};
pub use store::{
    COMPRESS_MIN_BYTES, ClassTotal, DataRecordInfo, DataSizes, HistoryEntry, ImportState,
    NoProgress, ObjectCursor, PackPreview, PackStats, Progress, References, RestoreStats,
    RevisionCursor, RevisionRow, StoreStats, TransactionInfo, Txn, VerifyReport, VersionedStore,
    Voted, holds_objects,
};
pub use tierdb_kv::KvHandle;
pub use tierdb_store::Damage;
