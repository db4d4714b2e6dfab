//! Errors of the object store, shaped after ZODB's: a conflict names the object and both
//! serials, a missing object names the object (POSKeyError), and so on.

use crate::ids::{Oid, Tid};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjError {
    /// The object has no revision (at that time): ZODB's POSKeyError.
    #[error("object {oid} not found{}", at.map(|t| format!(" before {t}")).unwrap_or_default())]
    NotFound { oid: Oid, at: Option<Tid> },

    /// The object has no revision with that serial.
    #[error("object {oid} has no revision {serial}")]
    NoRevision { oid: Oid, serial: Tid },

    /// A write based on an old revision: ZODB's ConflictError(oid, serials=(committed, old)).
    #[error(
        "conflict on object {oid}: committed revision is {committed}, the write was based on {old}"
    )]
    Conflict { oid: Oid, committed: Tid, old: Tid },

    /// A read-current check failed: ZODB's ReadConflictError.
    #[error(
        "object {oid} changed since it was read: committed revision is {committed}, read {read}"
    )]
    ReadConflict { oid: Oid, committed: Tid, read: Tid },

    /// Undo is impossible because a later transaction changed the object: ZODB's UndoError.
    #[error("cannot undo transaction {tid}: object {oid} was changed by a later transaction")]
    Undo { tid: Tid, oid: Oid },

    /// A write through a read-only open.
    #[error("{db} was opened read-only; open it without read_only to write")]
    ReadOnly { db: String },

    /// A blob could not be read, written or found.
    #[error("blob of object {oid} in revision {tid}: {reason}")]
    Blob {
        oid: Oid,
        tid: Tid,
        kind: ErrorKind,
        reason: String,
    },

    /// The references in an object's data could not be found (pack's garbage collection).
    #[error(
        "cannot read the references in object {oid} (revision {tid}): {reason}; \
         nothing was packed"
    )]
    References { oid: Oid, tid: Tid, reason: String },

    #[error("transaction {tid} not found")]
    NoTransaction { tid: Tid },

    /// Bad use of the API (e.g. a restore with a tid not after the last one).
    #[error("{0}")]
    Invalid(String),

    /// A FileStorage file (an import's source) could not be opened or is damaged.
    #[error("{reason}")]
    FileStorage { kind: ErrorKind, reason: String },

    /// A stored record could not be decoded.
    #[error("damaged record {key}: {reason}")]
    Damaged { key: String, reason: String },

    #[error(transparent)]
    Kv(#[from] tierdb_kv::KvError),
}

pub type Result<T, E = ObjError> = std::result::Result<T, E>;

pub use tierdb_kv::ErrorKind;

impl ObjError {
    /// What the caller should do about it (ZODB's exceptions are chosen by this and the
    /// variant: POSKeyError for not found, ConflictError for conflicts).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ObjError::NotFound { .. }
            | ObjError::NoRevision { .. }
            | ObjError::NoTransaction { .. } => ErrorKind::NotFound,
            ObjError::Conflict { .. } | ObjError::ReadConflict { .. } | ObjError::Undo { .. } => {
                ErrorKind::Conflict
            }
            ObjError::ReadOnly { .. } | ObjError::Invalid(_) => ErrorKind::Input,
            ObjError::Blob { kind, .. } | ObjError::FileStorage { kind, .. } => *kind,
            ObjError::References { .. } | ObjError::Damaged { .. } => ErrorKind::Data,
            ObjError::Kv(e) => e.kind(),
        }
    }
}
