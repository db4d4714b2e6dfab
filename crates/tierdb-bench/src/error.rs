//! The benchmarks' error: a message and the kind of failure, for the command line's exit
//! status. Failures inside a benchmark are the environment's (the store, the disk, the
//! plot font) far more often than the input's, so a plain message counts as retryable.

use tierdb_store::ErrorKind;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BenchError {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

impl BenchError {
    /// The benchmark was given something it cannot use (a directory, a scale factor).
    pub fn input(message: String) -> Self {
        BenchError {
            kind: ErrorKind::Input,
            message,
        }
    }

    /// Something that cannot happen did.
    pub fn bug(message: &str) -> Self {
        BenchError {
            kind: ErrorKind::Bug,
            message: message.to_string(),
        }
    }
}

impl From<String> for BenchError {
    fn from(message: String) -> Self {
        BenchError {
            kind: ErrorKind::Retry,
            message,
        }
    }
}

impl From<&str> for BenchError {
    fn from(message: &str) -> Self {
        Self::from(message.to_string())
    }
}

impl From<tierdb_store::Error> for BenchError {
    fn from(e: tierdb_store::Error) -> Self {
        BenchError {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl From<tierdb_kv::KvError> for BenchError {
    fn from(e: tierdb_kv::KvError) -> Self {
        BenchError {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// Writing generated data or results: a path that cannot be used is the input's fault,
/// anything else (a full disk) may pass.
impl From<std::io::Error> for BenchError {
    fn from(e: std::io::Error) -> Self {
        let kind = match e.kind() {
            std::io::ErrorKind::PermissionDenied
            | std::io::ErrorKind::NotADirectory
            | std::io::ErrorKind::NotFound => ErrorKind::Input,
            _ => ErrorKind::Retry,
        };
        BenchError {
            kind,
            message: e.to_string(),
        }
    }
}
