//! Two writers starting together: the one that loses acknowledges nothing.
//!
//! A writer owns a database once its lease claim (an atomic create in the capacity store) has
//! succeeded, and it opens SlateDB only after that. The deterministic test stops the first
//! writer right after its claim (the debug build's pause point `kv-lease-claimed`), starts a
//! second one and proves it is refused with a clear error, in write-back mode with its own
//! cache directory, on a local directory and on MinIO. The race test starts two `kv put`
//! processes at once, several times, and proves that every put that exited 0 is in the
//! database afterwards.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

fn tierdb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(args)
        .output()
        .unwrap()
}

fn put_args<'a>(db: &'a str, key: &'a str, cache: &'a str) -> Vec<&'a str> {
    vec![
        "kv",
        "put",
        db,
        key,
        key,
        "--create",
        "--cache-dir",
        cache,
        "--cache-bytes",
        "8MiB",
        "--write-mode",
        "write-back",
    ]
}

fn loser_is_refused_before_acknowledging(db: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (c1, c2) = (tmp.path().join("c1"), tmp.path().join("c2"));
    let (c1, c2) = (c1.to_str().unwrap(), c2.to_str().unwrap());
    let mut first = common::spawn_paused_at(&put_args(db, "first", c1), "kv-lease-claimed");
    let second = tierdb(&put_args(db, "second", c2));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "the second writer must be refused: {stderr}"
    );
    assert!(
        stderr.contains("has a running writer") && stderr.contains(&first.id().to_string()),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&second.stdout).contains("committed"));
    common::sigkill(&mut first);
    // The first writer died holding the lease; a writer on this host sees its process is
    // gone and takes over at once.
    let third = tierdb(&put_args(db, "third", c2));
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    let got = tierdb(&["kv", "get", db, "third"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout), "third");
}

#[test]
fn a_writer_that_loses_a_start_race_is_refused_local() {
    let tmp = tempfile::tempdir().unwrap();
    loser_is_refused_before_acknowledging(tmp.path().join("db").to_str().unwrap());
}

#[test]
fn a_writer_that_loses_a_start_race_is_refused_minio() {
    if let Some(db) = common::minio("kv-start-race") {
        loser_is_refused_before_acknowledging(&db);
    }
}

/// Two `kv put`s started at the same moment, 4 times: whatever the interleaving, each one
/// either fails or its key is in the database.
#[test]
fn every_put_that_exits_zero_is_kept_when_two_start_together() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    for trial in 0..4 {
        let keys = [format!("a{trial}"), format!("b{trial}")];
        let caches: Vec<String> = keys
            .iter()
            .map(|k| {
                tmp.path()
                    .join(format!("cache-{k}"))
                    .to_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let children: Vec<_> = keys
            .iter()
            .zip(&caches)
            .map(|(k, c)| {
                Command::new(env!("CARGO_BIN_EXE_tierdb"))
                    .args(put_args(db, k, c))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (key, child) in keys.iter().zip(children) {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("panicked"), "{stderr}");
            if out.status.success() {
                let got = tierdb(&["kv", "get", db, key]);
                assert_eq!(
                    String::from_utf8_lossy(&got.stdout),
                    key.as_str(),
                    "{key} was acknowledged and is lost"
                );
            } else {
                assert!(stderr.contains("has a running writer"), "{stderr}");
            }
        }
    }
}
