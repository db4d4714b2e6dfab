//! The command line's error: a message for the person at the terminal and the kind that
//! picks the exit status ([`exit_code`]), so scripts can tell "fix the command" from "try
//! again" from "the data is damaged" without reading the message.

use tierdb_store::ErrorKind;

/// The exit statuses, documented in the README and in `tierdb --help`.
pub const EXIT_STATUSES: &str = "\
Exit status: 0 success; 1 failure of another kind; 2 invalid command, option, input or \
configuration (fix it and rerun); 3 not found (database, table, object, key); 4 conflict \
(another writer is running, a name is taken, a transaction conflicted: retry or resolve); \
5 temporary failure (store unreachable, timeout: retry); 6 damaged data (restore from a \
copy; retrying will not help); 7 the database was taken over by another writer (reopen); \
70 a bug in tierdb (please report it).";

/// The exit status for an error of `kind`.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Input => 2,
        ErrorKind::NotFound => 3,
        ErrorKind::Conflict => 4,
        ErrorKind::Retry => 5,
        ErrorKind::Data => 6,
        ErrorKind::Reopen => 7,
        ErrorKind::Bug => 70,
        _ => 1,
    }
}

/// The kind of failure a tierdb process (`python -m tierdb.tool`, which uses the same
/// statuses) reported with exit status `code`.
pub fn exit_kind(code: Option<i32>) -> ErrorKind {
    match code {
        Some(2) => ErrorKind::Input,
        Some(3) => ErrorKind::NotFound,
        Some(4) => ErrorKind::Conflict,
        Some(5) => ErrorKind::Retry,
        Some(6) => ErrorKind::Data,
        Some(7) => ErrorKind::Reopen,
        Some(70) => ErrorKind::Bug,
        // Killed by a signal, or a failure of no particular kind.
        _ => ErrorKind::Retry,
    }
}

/// A failed command: what to print and what kind of failure it was.
#[derive(Debug)]
pub struct CliError {
    pub kind: ErrorKind,
    pub message: String,
}

pub type CliResult<T = ()> = Result<T, CliError>;

impl CliError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
        }
    }

    /// The command, its arguments or a file it was given are wrong.
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Input, message)
    }

    /// Puts `what` ("cannot put x") before the message, keeping the kind.
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        CliError {
            kind: self.kind,
            message: format!("{what}: {}", self.message),
        }
    }
}

/// A failed object store request (`what` says which), with the kind of its failure.
pub fn store_failed(what: impl std::fmt::Display, e: object_store::Error) -> CliError {
    CliError::new(tierdb_store::store_error_kind(&e), format!("{what}: {e}"))
}

/// Writing the command's output failed (a closed pipe, a full disk).
pub fn output_failed(e: impl std::fmt::Display) -> CliError {
    CliError::new(ErrorKind::Retry, format!("cannot write the output: {e}"))
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The command line's own messages are about what it was given (files, arguments): an
/// engine's error converts with its kind instead (the `From` impls below).
impl From<tierdb_bench::error::BenchError> for CliError {
    fn from(e: tierdb_bench::error::BenchError) -> Self {
        CliError::new(e.kind, e.message)
    }
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        Self::input(message)
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        Self::input(message)
    }
}

macro_rules! from_kinded {
    ($($ty:ty),*) => {$(
        impl From<$ty> for CliError {
            fn from(e: $ty) -> Self {
                CliError::new(e.kind(), e.to_string())
            }
        }
    )*};
}

from_kinded!(
    tierdb_engine::Error,
    tierdb_store::Error,
    tierdb_kv::KvError,
    tierdb_objects::ObjError,
    tierdb_tables::TableError
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_documented_status() {
        let kinds = [
            ErrorKind::Input,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Retry,
            ErrorKind::Data,
            ErrorKind::Reopen,
            ErrorKind::Bug,
        ];
        let mut codes: Vec<u8> = kinds.iter().map(|k| exit_code(*k)).collect();
        for code in &codes {
            assert!(
                EXIT_STATUSES.contains(&format!(" {code} ")),
                "status {code} is not documented"
            );
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len(), "two kinds share a status");
        assert!(!codes.contains(&0) && !codes.contains(&1));
    }
}
