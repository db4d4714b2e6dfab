//! Bad input gets one clear line naming the problem and the fix, a non-zero exit, and
//! nothing written. Each case runs the real `tierdb` binary.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn tierdb(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tierdb"));
    cmd.args(args);
    for key in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT",
        "AWS_REGION",
        "TIERDB_CACHE_DIR",
    ] {
        cmd.env_remove(key);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Asserts failure with exit status `code` (the kind of error: see `tierdb --help`) and
/// exactly one error line containing every `needle`.
fn assert_clear_error(out: &Output, code: i32, needles: &[&str]) {
    assert_eq!(out.status.code(), Some(code), "exit status: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line, got: {stderr}");
    for needle in needles {
        assert!(
            errors[0].contains(needle),
            "{needle:?} missing from: {}",
            errors[0]
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn unknown_scheme() {
    let out = tierdb(&["store", "ls", "gs://bucket/x"], &[]);
    assert_clear_error(&out, 2, &["unknown scheme \"gs\"", "s3://bucket/prefix"]);
}

#[test]
fn missing_credentials() {
    let out = tierdb(
        &["store", "ls", "s3://bucket/x"],
        &[("AWS_ENDPOINT_URL", "http://127.0.0.1:9")],
    );
    assert_clear_error(&out, 2, &["no credentials", "AWS_ACCESS_KEY_ID"]);
}

#[test]
fn unreachable_endpoint() {
    // Port 9 (discard) on loopback has no listener here.
    let env = [
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ];
    let out = tierdb(&["store", "ls", "s3://bucket/x"], &env);
    assert_clear_error(&out, 2, &["cannot connect", "AWS_ENDPOINT_URL"]);
}

#[test]
fn missing_database_directory_is_not_created_by_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("absent");
    let out = tierdb(&["store", "get", db.to_str().unwrap(), "k"], &[]);
    assert_clear_error(&out, 2, &["does not exist"]);
    assert!(!db.exists());
}

#[test]
fn unwritable_cache_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let cache = file.join("cache"); // a directory below a regular file cannot exist
    std::fs::create_dir_all(&db).unwrap();
    let out2 = tierdb(
        &[
            "store",
            "ls",
            db.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &[],
    );
    assert_clear_error(&out2, 2, &["cache directory", "--cache-dir"]);
}

#[test]
fn write_back_without_a_cache_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let out = tierdb(
        &[
            "store",
            "put",
            db.to_str().unwrap(),
            "k",
            "/dev/null",
            "--write-mode",
            "write-back",
        ],
        &[],
    );
    assert_clear_error(&out, 2, &["write-back needs --cache-dir"]);
    assert!(!db.exists(), "nothing created");
}

#[test]
fn a_cache_directory_holding_unflushed_writes_is_not_handed_to_another_store() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let db_a = tmp.path().join("a");
    let db_b = tmp.path().join("b");
    std::fs::create_dir_all(&db_b).unwrap();
    // Leave unflushed data: the capacity store of A disappears before the drain.
    let input = tmp.path().join("input");
    std::fs::write(&input, b"precious").unwrap();
    let put = tierdb(
        &[
            "store",
            "put",
            db_a.to_str().unwrap(),
            "k",
            input.to_str().unwrap(),
            "--write-mode",
            "write-back",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &[],
    );
    assert!(put.status.success(), "{put:?}");
    // A clean directory may change owner...
    let ok = tierdb(
        &[
            "store",
            "ls",
            db_b.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &[],
    );
    assert!(ok.status.success(), "{ok:?}");
    // ...and one holding dirty data may not. Write without draining by killing the writer.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "debug",
            "write-stream",
            db_a.to_str().unwrap(),
            "--count",
            "1000000",
            "--write-mode",
            "write-back",
            "--cache-dir",
            cache.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let refused = tierdb(
        &[
            "store",
            "ls",
            db_b.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &[],
    );
    assert_clear_error(&refused, 2, &["unflushed writes", "open it with"]);
    // The owner can still open it, and the acknowledged object is there. Four writers
    // run, so the first acknowledgement may name any of k0..k3: read the one it names.
    let acked = line
        .trim()
        .strip_prefix("acked ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    let get = tierdb(
        &[
            "store",
            "get",
            db_a.to_str().unwrap(),
            acked,
            "--write-mode",
            "write-back",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &[],
    );
    assert!(get.status.success(), "{get:?}");
    let expected = format!("object {} of the write stream", &acked[1..]);
    assert!(String::from_utf8_lossy(&get.stdout).starts_with(&expected));
}

#[test]
fn put_get_ls_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let input = tmp.path().join("in");
    std::fs::write(&input, b"hello tierdb").unwrap();
    let d = db.to_str().unwrap();
    assert!(
        tierdb(
            &["store", "put", d, "dir/hello", input.to_str().unwrap()],
            &[]
        )
        .status
        .success()
    );
    let out = tmp.path().join("out");
    let get = tierdb(
        &["store", "get", d, "dir/hello", "-o", out.to_str().unwrap()],
        &[],
    );
    assert!(get.status.success(), "{get:?}");
    assert_eq!(std::fs::read(&out).unwrap(), b"hello tierdb");
    let ls = tierdb(&["store", "ls", d, "dir"], &[]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("dir/hello"));
    let missing = tierdb(
        &[
            "store",
            "get",
            d,
            "dir/nope",
            "-o",
            tmp.path().join("x").to_str().unwrap(),
        ],
        &[],
    );
    assert_clear_error(&missing, 3, &["cannot get dir/nope"]);
    assert!(
        !tmp.path().join("x").exists(),
        "no output file for a failed get"
    );
}

/// Lists every file under `dir` (for "nothing written" checks).
fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.extend(files(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn kv_open_of_a_missing_database_names_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("nodb");
    let db = db.to_str().unwrap();
    for args in [
        vec!["kv", "get", db, "k"],
        vec!["kv", "put", db, "k", "v"],
        vec!["kv", "scan", db],
        vec!["info", db],
    ] {
        let out = tierdb(&args, &[]);
        assert_clear_error(&out, 3, &[db, "does not exist", "--create"]);
    }
    assert!(
        files(tmp.path()).is_empty(),
        "nothing written: {:?}",
        files(tmp.path())
    );
}

#[test]
fn kv_open_of_a_foreign_prefix_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("photos");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cat.jpg"), b"jpeg").unwrap();
    let out = tierdb(
        &["kv", "put", dir.to_str().unwrap(), "k", "v", "--create"],
        &[],
    );
    assert_clear_error(
        &out,
        2,
        &["is not a tierdb database", "cat.jpg", "tierdb.json"],
    );
    assert_eq!(files(tmp.path()).len(), 1, "nothing written");
}

#[test]
fn kv_open_of_another_format_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tierdb.json"),
        br#"{"format":"tierdb-kv","version":7,"engine":"slatedb 9","created_ms":0}"#,
    )
    .unwrap();
    let out = tierdb(&["kv", "put", dir.to_str().unwrap(), "k", "v"], &[]);
    assert_clear_error(&out, 6, &["format version 7", "reads version 2"]);
    assert_eq!(files(tmp.path()).len(), 1, "nothing written");
}

#[test]
fn kv_on_an_unreachable_store_says_so() {
    let out = tierdb(
        &["kv", "get", "s3://bucket/db", "k"],
        &[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_ACCESS_KEY_ID", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y"),
        ],
    );
    assert_clear_error(&out, 2, &["127.0.0.1:9"]);
}

#[test]
fn kv_database_url_without_a_prefix_is_refused() {
    let out = tierdb(&["kv", "get", "s3://bucket", "k"], &[]);
    assert_clear_error(
        &out,
        2,
        &["name a prefix in the bucket", "s3://bucket/mydb"],
    );
}

#[test]
fn kv_round_trip_clone_and_info() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = tierdb(args, &[]);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["kv", "put", db, "a", "1", "--create"]);
    run(&["kv", "put", db, "b\tx", "2"]);
    assert_eq!(run(&["kv", "get", db, "a"]), "1");
    assert_eq!(run(&["kv", "scan", db]), "a\t1\nb\\tx\t2\n");
    let clone = tmp.path().join("clone");
    let clone = clone.to_str().unwrap();
    run(&["clone", db, clone]);
    run(&["kv", "del", clone, "a"]);
    assert_eq!(
        run(&["kv", "get", db, "a"]),
        "1",
        "the source keeps its key"
    );
    let out = tierdb(&["kv", "get", clone, "a"], &[]);
    assert_clear_error(&out, 3, &["key \"a\" not found", clone]);
    let info = run(&["info", clone]);
    assert!(
        info.contains("clone of") && info.contains("tierdb-kv v2"),
        "{info}"
    );
    let out = tierdb(&["clone", db, clone], &[]);
    assert_clear_error(&out, 4, &["already exists"]);
}

#[test]
fn a_second_writer_is_refused_while_the_first_runs_unless_it_takes_over() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let db = db.to_str().unwrap();
    let mut first = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "debug",
            "kv-commit-stream",
            db,
            "--create",
            "--writers",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    for _ in 0..20 {
        lines.next().unwrap().unwrap(); // the first writer is committing
    }
    let out = tierdb(&["kv", "put", db, "k", "v"], &[]);
    assert_clear_error(
        &out,
        4,
        &[
            "has a running writer",
            "--take-over",
            &first.id().to_string(),
        ],
    );
    // Reads do not need the writer's consent.
    let out = tierdb(&["kv", "scan", db, "--limit", "1"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = tierdb(&["kv", "put", db, "k", "v", "--take-over"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first writer is fenced: its next commit fails, clearly, and it exits non-zero.
    let status = first.wait().unwrap();
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("fenced"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let out = tierdb(&["kv", "get", db, "k"], &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v");
}
