//! The facade's error: the error of whichever engine failed, with its kind.

pub use tierdb_store::ErrorKind;

/// An error from opening, using or closing a database. [`Error::kind`] says what to do
/// about it; front ends map kinds to exit codes, SQLSTATEs and Python exceptions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Store(Box<tierdb_store::Error>),
    #[error(transparent)]
    Kv(Box<tierdb_kv::KvError>),
    #[cfg(feature = "objects")]
    #[error(transparent)]
    Objects(Box<tierdb_objects::ObjError>),
    #[cfg(feature = "tables")]
    #[error(transparent)]
    Tables(Box<tierdb_tables::TableError>),
    /// The store's write-back log could not upload everything at close.
    #[error(
        "{0} (acknowledged writes are safe in the write-back log and are uploaded the next \
         time this cache directory is opened)"
    )]
    Drain(#[source] Box<tierdb_store::Error>),
    /// A write was asked of a database opened as a follower.
    #[error(
        "{db} is open read-only (as a follower); {what} needs its writer: open it without --read-only"
    )]
    ReadOnly { db: String, what: String },
    /// A clone must share its source's files.
    #[error(
        "cannot clone {src} into {dst}: a clone shares its source's files, so both must be in \
         the same bucket (or on the same local filesystem)"
    )]
    CloneAcrossStores { src: String, dst: String },
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Store(e) => e.kind(),
            Error::Kv(e) => e.kind(),
            #[cfg(feature = "objects")]
            Error::Objects(e) => e.kind(),
            #[cfg(feature = "tables")]
            Error::Tables(e) => e.kind(),
            Error::Drain(e) => e.kind(),
            Error::ReadOnly { .. } | Error::CloneAcrossStores { .. } => ErrorKind::Input,
        }
    }
}

impl Error {
    /// The store's write-back log could not drain at close.
    pub fn drain(e: tierdb_store::Error) -> Self {
        Error::Drain(Box::new(e))
    }
}

// The engines' errors are boxed: an `Error` stays one pointer wide on the success path.
macro_rules! boxed_from {
    ($($(#[$cfg:meta])* $variant:ident($ty:ty)),*) => {$(
        $(#[$cfg])*
        impl From<$ty> for Error {
            fn from(e: $ty) -> Self {
                Error::$variant(Box::new(e))
            }
        }
    )*};
}

boxed_from!(
    Store(tierdb_store::Error),
    Kv(tierdb_kv::KvError),
    #[cfg(feature = "objects")]
    Objects(tierdb_objects::ObjError),
    #[cfg(feature = "tables")]
    Tables(tierdb_tables::TableError)
);

pub type Result<T, E = Error> = std::result::Result<T, E>;
