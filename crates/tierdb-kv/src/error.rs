//! Errors of the key-value engine. Every error names the database it is about and says what
//! to do; [`KvError::kind`] tells a program whether to retry, fix its input, or reopen.

use std::fmt;

pub use tierdb_store::ErrorKind;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    #[error(
        "database {db} does not exist (no objects under that prefix); \
         create it (--create) or check the URL"
    )]
    NotFound { db: String },

    #[error(
        "{db} is not a tierdb database: the prefix holds objects ({example}) but no \
         tierdb.json; pick an empty prefix or the root of a tierdb database"
    )]
    NotTierdb { db: String, example: String },

    #[error(
        "database {db}: its tierdb.json is unreadable ({reason}); it was not written by tierdb"
    )]
    BadMarker { db: String, reason: String },

    #[error(
        "database {db} has format version {found}, this tierdb reads version {supported}; \
         use a tierdb release that supports version {found}"
    )]
    VersionMismatch {
        db: String,
        found: u32,
        supported: u32,
    },

    #[error(
        "database {db} already exists; choose another destination or open it instead of \
         creating it"
    )]
    AlreadyExists { db: String },

    #[error(
        "database {db}: this writer was fenced: another process opened the database for \
         writing and now owns it; this handle accepts no more writes (reopen to take over \
         again, which fences the other writer)"
    )]
    Fenced { db: String },

    #[error(
        "database {db} has a running writer (process {pid} on {host}, heartbeat {age_ms} ms \
         ago); stop it first, read with a read-only open, or pass --take-over \
         (KvOptions::take_over) to fence it and become the writer"
    )]
    WriterActive {
        db: String,
        host: String,
        pid: u32,
        age_ms: u64,
    },

    #[error("database {db} is closed")]
    Closed { db: String },

    #[error("database {db}: {what}")]
    Invalid { db: String, what: String },

    #[error("database {db}: {source}")]
    Store {
        db: String,
        #[source]
        source: tierdb_store::Error,
    },

    #[error("database {db}: {what}: {source}")]
    Engine {
        db: String,
        what: &'static str,
        #[source]
        source: slatedb::Error,
    },
}

impl KvError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            KvError::NotFound { .. } => ErrorKind::NotFound,
            KvError::AlreadyExists { .. } | KvError::WriterActive { .. } => ErrorKind::Conflict,
            KvError::NotTierdb { .. } | KvError::Invalid { .. } => ErrorKind::Input,
            KvError::BadMarker { .. } | KvError::VersionMismatch { .. } => ErrorKind::Data,
            KvError::Fenced { .. } | KvError::Closed { .. } => ErrorKind::Reopen,
            KvError::Store { source, .. } => source.kind(),
            KvError::Engine { source, .. } => match source.kind() {
                slatedb::ErrorKind::Closed(_) => ErrorKind::Reopen,
                slatedb::ErrorKind::Unavailable => ErrorKind::Retry,
                slatedb::ErrorKind::Invalid => ErrorKind::Input,
                slatedb::ErrorKind::Data => ErrorKind::Data,
                _ => ErrorKind::Retry,
            },
        }
    }

    /// Wraps a SlateDB error, recognizing fencing and closing.
    pub(crate) fn engine(db: &str, what: &'static str, source: slatedb::Error) -> Self {
        match source.kind() {
            slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced) => {
                KvError::Fenced { db: db.to_string() }
            }
            slatedb::ErrorKind::Closed(slatedb::CloseReason::Clean) => {
                KvError::Closed { db: db.to_string() }
            }
            _ => KvError::Engine {
                db: db.to_string(),
                what,
                source,
            },
        }
    }

    pub(crate) fn store(db: &str, source: impl Into<tierdb_store::Error>) -> Self {
        KvError::Store {
            db: db.to_string(),
            source: source.into(),
        }
    }
}

/// `Result` with [`KvError`].
pub type Result<T, E = KvError> = std::result::Result<T, E>;

/// Shown in messages: a key as text if printable, else hex.
#[derive(Debug)]
pub struct ShowKey<'a>(pub &'a [u8]);

impl fmt::Display for ShowKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(self.0) {
            Ok(s) if s.chars().all(|c| !c.is_control()) => write!(f, "{s:?}"),
            _ => {
                f.write_str("0x")?;
                for b in self.0 {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}
