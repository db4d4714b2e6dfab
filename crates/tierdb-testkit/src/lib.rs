//! # tierdb-testkit: what the test suites share
//!
//! - [`minio_prefix`]: a fresh prefix on the MinIO `scripts/test.sh` starts (or `None`, and
//!   the MinIO case is skipped, when it did not; `TIERDB_REQUIRE_MINIO` makes that a failure);
//! - [`model_cases`]: how many cases a model test runs (`TIERDB_MODEL_CASES`);
//! - [`run_with_deadline`]: runs a model case on its own runtime and reports a stall as an
//!   error instead of hanging CI. A liveness guard, never a speed check.

use std::future::Future;
use std::time::Duration;

/// A fresh `s3://…` prefix named after `name` on the test MinIO, or `None` when
/// `TIERDB_TEST_S3_URL` is not set (then the caller skips its MinIO case, saying so).
///
/// # Panics
/// When `TIERDB_REQUIRE_MINIO` is set but `TIERDB_TEST_S3_URL` is not: the test script
/// meant to run the MinIO cases and MinIO was not started.
pub fn minio_prefix(name: &str) -> Option<String> {
    let Ok(base) = std::env::var("TIERDB_TEST_S3_URL") else {
        assert!(
            std::env::var("TIERDB_REQUIRE_MINIO").is_err(),
            "TIERDB_REQUIRE_MINIO is set but TIERDB_TEST_S3_URL is not: MinIO was not started"
        );
        eprintln!(
            "TIERDB_TEST_S3_URL not set: MinIO case {name} skipped (scripts/test.sh runs it)"
        );
        return None;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Some(format!("{base}/{name}-{nanos}"))
}

/// Cases per model-test run: `default` in CI, more on demand with `TIERDB_MODEL_CASES`.
pub fn model_cases(default: u32) -> u32 {
    std::env::var("TIERDB_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `case` on a fresh two-thread runtime; `Err` with the elapsed limit if it has not
/// finished within `limit` (a stall), so a proptest case fails instead of hanging.
///
/// # Panics
/// When the runtime cannot be built.
pub fn run_with_deadline<F: Future>(limit: Duration, case: F) -> Result<F::Output, Duration> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the model case");
    rt.block_on(async { tokio::time::timeout(limit, case).await })
        .map_err(|_| limit)
}
pub mod mutate;
