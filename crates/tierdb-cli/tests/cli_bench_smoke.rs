//! A short `tierdb bench cache` run on a local directory: the benchmark's every phase, the
//! simulator, the CSV files and the PNG plot work end to end. (The real run, against MinIO
//! and with large sizes, is in docs/benchmarks.md; benchmarks never assert speed.)

#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn bench_cache_smoke() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let out_dir = tmp.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "bench",
            "cache",
            db.to_str().unwrap(),
            "--objects",
            "8",
            "--object-bytes",
            "128KiB",
            "--memory-bytes",
            "256KiB",
            "--cache-bytes",
            "4MiB",
        ])
        .args([
            "--warmup-ops",
            "200",
            "--ops",
            "200",
            "--mix-ops",
            "100",
            "--clients",
            "2",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .args(["--cache-dir", tmp.path().join("cache").to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "capacity store only",
        "DRAM + device",
        "70/30 write-back",
        "opt ",
        "<- DRAM tier policy",
    ] {
        assert!(
            stdout.contains(needle),
            "{needle:?} missing from:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out_dir.join("cache.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 3 + 2,
        "header, 3 read runs, 2 mix runs:\n{csv}"
    );
    let png = std::fs::read(out_dir.join("cache-hit-ratio.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The benchmark leaves the capacity store as it found it.
    let left: Vec<_> = walk(&db);
    assert!(left.is_empty(), "objects left behind: {left:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path))
        } else {
            files.push(path)
        }
    }
    files
}

/// A short `tierdb bench oltp` race on a local directory: all four contestants, the table,
/// the CSV files and the PNG.
#[test]
fn bench_oltp_smoke() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["bench", "oltp", tmp.path().join("cap").to_str().unwrap()])
        .args(["--rows", "2000", "--transactions", "150", "--clients", "4"])
        .args(["--memory-bytes", "256KiB", "--cache-bytes", "8MiB"])
        .args(["--memtable-bytes", "256KiB"])
        .args(["--cache-dir", tmp.path().join("cache").to_str().unwrap()])
        .args(["--out", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "a: no device tier",
        "b: device write-through",
        "c: device write-back",
        "raw slatedb",
        "speedup of c: device write-back over a: no device tier",
        "vs raw slatedb",
    ] {
        assert!(
            stdout.contains(needle),
            "{needle:?} missing from:\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out_dir.join("oltp.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    for line in csv.lines().skip(1) {
        assert_eq!(
            line.split(',').nth(1),
            Some("150"),
            "every race ran to the end: {line}"
        );
    }
    let png = std::fs::read(out_dir.join("oltp-race.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
}
