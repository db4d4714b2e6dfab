//! Helpers shared by the crash tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Runs `tierdb ARGS --cache-dir CACHE_DIR`, reads the numbers it prints after `prefix` (one per acknowledged
/// write), SIGKILLs it after `acks` of them and returns them. Asserts it was killed, not
/// finished.
pub fn kill_after_acks(
    args: &[&str],
    cache_dir: &std::path::Path,
    prefix: &str,
    acks: usize,
) -> Vec<u64> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(args)
        .arg("--cache-dir")
        .arg(cache_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut acked = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        let n = line
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected output {line:?}"));
        acked.push(n.parse::<u64>().unwrap());
        if acked.len() == acks {
            // libc::kill is a plain syscall wrapper.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            assert_eq!(rc, 0);
            break;
        }
    }
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the writer must have been killed, not finished: {status:?}"
    );
    acked
}

/// A fresh database URL on the test MinIO (`TIERDB_TEST_S3_URL`, set by scripts/test.sh), or
/// `None` (test skipped) when it is not set and `TIERDB_REQUIRE_MINIO` is not either.
pub fn minio(name: &str) -> Option<String> {
    tierdb_testkit::minio_prefix(name)
}

/// Starts `tierdb ARGS` with the debug build's pause point `point` selected and returns it
/// once it reports that it stopped there (see `tierdb_store::testpoint`).
pub fn spawn_paused_at(args: &[&str], point: &str) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(args)
        .env("TIERDB_TEST_PAUSE_AT", point)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        if line.contains(&format!("paused at {point}")) {
            return child;
        }
        seen.push(line);
    }
    let status = child.wait().unwrap();
    panic!("tierdb {args:?} ended ({status:?}) before pause point {point}: {seen:?}");
}

/// SIGKILLs `child` and reaps it.
pub fn sigkill(child: &mut std::process::Child) {
    // libc::kill is a plain syscall wrapper.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0);
    child.wait().unwrap();
}
