//! Errors of the storage tiers.
//!
//! [`Error`] is the one public error type. Its [`ErrorKind`] tells a caller what to do
//! (retry, fix the input or configuration, give up because the data is damaged, or report a
//! bug); its variants carry the fields a person needs to act. Errors that cross the
//! `object_store::ObjectStore` boundary are wrapped in `object_store::Error::Generic` with
//! this type as the source, so engines above can downcast and keep the detail.

use std::path::PathBuf;

/// What a caller should do about an error. One set of kinds for every tierdb crate: each
/// engine's error has a `kind()` returning it, so a front end (SQLSTATEs, ZODB exceptions,
/// exit codes) decides by kind, never by message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A transient condition (network, throttling, a stalled device): retrying may succeed.
    Retry,
    /// The request or configuration is wrong (URL, credentials, options, SQL): fix it and rerun.
    Input,
    /// What was asked for does not exist (a database, table, object or revision).
    NotFound,
    /// Another writer or transaction got there first (a write conflict, a running writer, a
    /// name taken): retry the whole transaction, or resolve the conflict.
    Conflict,
    /// Stored bytes are damaged or belong to something else: retrying will not help.
    Data,
    /// The handle can no longer be used (fenced by another writer, closed, or poisoned after
    /// a failed fsync): reopen it.
    Reopen,
    /// A bug in tierdb: please report it.
    Bug,
}

/// The error type of `tierdb-store`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL naming a store could not be understood.
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },

    /// A configuration value is missing or out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        option: &'static str,
        reason: String,
    },

    /// The capacity store refused or failed a request.
    #[error("object store {store}: {source}")]
    Store {
        store: String,
        #[source]
        source: object_store::Error,
    },

    /// A local file or directory operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The cache directory is locked by another process.
    #[error(
        "cache directory {dir} is in use by another process (lock held on {dir}/LOCK); \
         stop that process or choose another --cache-dir"
    )]
    CacheDirLocked { dir: PathBuf },

    /// The cache directory holds unflushed writes of a different capacity store.
    #[error(
        "cache directory {dir} holds {dirty_bytes} bytes of unflushed writes for {owner}, \
         not for {requested}; open it with {owner} first so they are uploaded, or choose another --cache-dir"
    )]
    CacheDirOwnedByOther {
        dir: PathBuf,
        owner: String,
        requested: String,
        dirty_bytes: u64,
    },

    /// A write-back log record is damaged somewhere other than the unacknowledged tail.
    #[error(
        "write-back log {segment} is damaged at byte {offset}: {reason}; it may hold acknowledged \
         writes that are not yet in the capacity store, so tierdb will not open it and has changed \
         nothing. Restore the device if you can; otherwise `tierdb store salvage-log --cache-dir DIR` \
         keeps every readable record, reports what it drops and moves the damaged file aside"
    )]
    LogCorrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },

    /// An fsync of the write-back log failed; the log refuses further writes.
    #[error(
        "write-back log {segment} is poisoned after a failed write or fsync: {reason}; reopen the store"
    )]
    LogPoisoned { segment: PathBuf, reason: String },

    /// Uploads of write-back data keep failing, so a flush cannot complete.
    #[error(
        "write-back upload of {path} failed {attempts} times (last error: {last_error}); the data is \
         safe in the write-back log and uploads keep retrying; check the capacity store"
    )]
    UploadFailing {
        path: String,
        attempts: u32,
        last_error: String,
    },

    /// A write-back writer found no room under the dirty cap within `dirty_wait_max`
    /// (uploads are not draining the log). The store then writes through instead.
    #[error(
        "write-back log full: {dirty_bytes} of {dirty_bytes_max} dirty bytes are not yet \
         uploaded and no room freed up in {waited_ms} ms; check the capacity store"
    )]
    WriteBackFull {
        dirty_bytes: u64,
        dirty_bytes_max: u64,
        waited_ms: u64,
    },

    /// The store has been closed.
    #[error("the tiered store is closed")]
    Closed,

    /// A create-if-absent found the path already there (in the write-back log).
    #[error("{path} already exists")]
    AlreadyExists { path: String },

    /// A logged create in this directory lost to another writer's object: this process is
    /// no longer the directory's writer.
    #[error(
        "fenced: another writer owns {path}'s directory ({reason}); this writer's unuploaded \
         creates there were discarded; reopen the database to continue as its writer"
    )]
    Fenced { path: String, reason: String },

    /// Stored bytes do not match the checksum written with them: a byte changed in the
    /// capacity store, a cache tier or on the way. Never served as data.
    #[error(
        "stored object {object} is damaged: {reason}; its bytes changed after they were \
         written (bit rot, a damaged disk or cache device, or another program); restore it \
         from a copy or the object store's redundancy"
    )]
    ChecksumMismatch { object: String, reason: String },

    /// A foyer cache operation failed.
    #[error("cache: {0}")]
    Cache(String),
}

/// Why stored bytes failed a check (a checksum, a length, a magic number, a format that
/// cannot be parsed): the reason inside an [`ErrorKind::Data`] error. Checks return it;
/// their callers wrap it with what was being read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Damage(pub String);

impl Damage {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Data
    }
}

impl From<String> for Damage {
    fn from(reason: String) -> Self {
        Damage(reason)
    }
}

impl From<&str> for Damage {
    fn from(reason: &str) -> Self {
        Damage(reason.to_string())
    }
}

/// What the caller should do about an object store's error: the one mapping every tierdb
/// crate uses for `object_store::Error`.
pub fn store_error_kind(e: &object_store::Error) -> ErrorKind {
    match e {
        object_store::Error::NotFound { .. } => ErrorKind::NotFound,
        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } => {
            ErrorKind::Conflict
        }
        object_store::Error::NotModified { .. }
        | object_store::Error::InvalidPath { .. }
        | object_store::Error::NotSupported { .. }
        | object_store::Error::NotImplemented { .. }
        | object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. }
        | object_store::Error::UnknownConfigurationKey { .. } => ErrorKind::Input,
        // The tiers report their own errors (a damaged cache block, a fenced log) wrapped
        // in Generic: those keep their kind.
        object_store::Error::Generic { source, .. } => source
            .downcast_ref::<Error>()
            .map_or(ErrorKind::Retry, Error::kind),
        _ => ErrorKind::Retry,
    }
}

impl Error {
    /// What the caller should do about this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidUrl { .. }
            | Error::InvalidOption { .. }
            | Error::CacheDirLocked { .. }
            | Error::CacheDirOwnedByOther { .. }
            | Error::AlreadyExists { .. } => ErrorKind::Input,
            Error::Store { source, .. } => store_error_kind(source),
            // A path that cannot be used as given (permissions, a file where a directory
            // must be) is fixed by the operator; anything else may pass.
            Error::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::PermissionDenied
                | std::io::ErrorKind::NotADirectory
                | std::io::ErrorKind::IsADirectory
                | std::io::ErrorKind::ReadOnlyFilesystem => ErrorKind::Input,
                _ => ErrorKind::Retry,
            },
            Error::UploadFailing { .. } | Error::WriteBackFull { .. } | Error::Cache(_) => {
                ErrorKind::Retry
            }
            Error::LogCorrupt { .. } | Error::ChecksumMismatch { .. } => ErrorKind::Data,
            Error::LogPoisoned { .. } | Error::Closed | Error::Fenced { .. } => ErrorKind::Reopen,
        }
    }

    /// Whether a write-back append failed for want of room (the dirty cap stayed full, or
    /// the cache device is full) rather than for a reason writing elsewhere cannot fix.
    pub(crate) fn log_is_full(&self) -> bool {
        match self {
            Error::WriteBackFull { .. } => true,
            Error::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.to_string().contains("No space left")
            }
            _ => false,
        }
    }

    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// The name used for errors of this crate inside `object_store::Error::Generic`.
pub const STORE_NAME: &str = "tierdb";

impl From<Error> for object_store::Error {
    fn from(err: Error) -> Self {
        match err {
            // Keep the capacity store's own error so callers can match NotFound, Precondition...
            Error::Store { source, .. } => source,
            // Both read as "already exists" to a writer using PutMode::Create; SlateDB, for
            // one, takes that as being fenced.
            e @ (Error::AlreadyExists { .. } | Error::Fenced { .. }) => {
                let path = match &e {
                    Error::AlreadyExists { path } | Error::Fenced { path, .. } => path.clone(),
                    _ => String::new(),
                };
                object_store::Error::AlreadyExists {
                    path,
                    source: Box::new(e),
                }
            }
            other => object_store::Error::Generic {
                store: STORE_NAME,
                source: Box::new(other),
            },
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
