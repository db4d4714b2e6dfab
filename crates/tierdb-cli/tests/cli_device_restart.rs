//! The device tier across restarts: a process SIGKILLed after its blocks reached the device
//! leaves them for the next process, which serves blocks of unchanged objects from there and
//! reads an object rewritten while no process ran fresh from the capacity store; damaged
//! device-tier files are detected and the blocks fetched again, never served.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn tierdb(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tierdb {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Object `name`'s content, `bytes` long, different for each `seed`.
fn content(seed: u8, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (i as u64 * 2654435761 % 251) as u8 ^ seed)
        .collect()
}

fn saved_stats(cache: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(cache.join("STATS.json")).unwrap()).unwrap()
}

/// Device-tier statistics the last process left in the cache directory: (hits, hit bytes).
fn device_hits(cache: &Path) -> (u64, u64) {
    let device = &saved_stats(cache)["stats"]["device"];
    (
        device["hits"].as_u64().unwrap(),
        device["hit_bytes"].as_u64().unwrap(),
    )
}

/// Bytes the last process fetched from the capacity store.
fn capacity_bytes(cache: &Path) -> u64 {
    saved_stats(cache)["stats"]["capacity"]["get_bytes"]
        .as_u64()
        .unwrap()
}

/// `tierdb store get` of `key` through the tiers in `cache` (DRAM off, so every hit is a
/// device hit).
fn get(store: &str, key: &str, cache: &Path) -> Vec<u8> {
    let c = cache.to_str().unwrap();
    let args = [
        "store",
        "get",
        store,
        key,
        "--cache-dir",
        c,
        "--cache-bytes",
        "64MiB",
        "--memory-bytes",
        "0",
    ];
    tierdb(&args).stdout
}

const BYTES: usize = 700 << 10;

#[test]
fn a_restarted_process_serves_unchanged_blocks_from_the_device_and_changed_objects_fresh() {
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tmp.path().join("store");
    std::fs::create_dir_all(&store_dir).unwrap();
    let store = store_dir.to_str().unwrap();
    let cache = tmp.path().join("cache");
    for (key, seed) in [("same", 1u8), ("changed", 2)] {
        std::fs::write(store_dir.join(key), content(seed, BYTES)).unwrap();
    }

    // A reader fills the device tier (DRAM off: blocks go to the device as inserted), then
    // is killed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["debug", "read-and-hold", store, "same", "changed"])
        .args([
            "--cache-dir",
            cache.to_str().unwrap(),
            "--cache-bytes",
            "64MiB",
        ])
        .args(["--memory-bytes", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "cached");
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0);
    assert!(!child.wait().unwrap().success());

    // While no process runs, one object is rewritten in place with other bytes of the same
    // length (its e_tag changes with its modification time).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(store_dir.join("changed"), content(3, BYTES)).unwrap();

    assert_eq!(get(store, "same", &cache), content(1, BYTES));
    let (hits, hit_bytes) = device_hits(&cache);
    assert!(hits > 0, "the unchanged object came from the device tier");
    assert_eq!(hit_bytes, BYTES as u64, "all of it");

    assert_eq!(
        get(store, "changed", &cache),
        content(3, BYTES),
        "the rewritten object is read fresh, never from the old blocks"
    );
    assert_eq!(
        device_hits(&cache).0,
        0,
        "nothing of it came from the device"
    );
}

#[test]
fn damaged_device_files_are_detected_and_the_blocks_fetched_again() {
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tmp.path().join("store");
    std::fs::create_dir_all(&store_dir).unwrap();
    let store = store_dir.to_str().unwrap();
    std::fs::write(store_dir.join("obj"), content(7, BYTES)).unwrap();

    for damage in ["flip", "truncate"] {
        let cache = tmp.path().join(format!("cache-{damage}"));
        assert_eq!(get(store, "obj", &cache), content(7, BYTES));
        assert_eq!(get(store, "obj", &cache), content(7, BYTES));
        assert!(device_hits(&cache).0 > 0, "the second read used the device");

        // Damage every device-tier file: flip a byte every 4 KiB, or cut each file short.
        let mut damaged = 0;
        for f in std::fs::read_dir(cache.join("blocks")).unwrap() {
            let f = f.unwrap().path();
            let mut bytes = std::fs::read(&f).unwrap();
            if bytes.is_empty() {
                continue;
            }
            match damage {
                "flip" => {
                    for i in (0..bytes.len()).step_by(4096) {
                        bytes[i] ^= 0x5a;
                    }
                    std::fs::write(&f, &bytes).unwrap();
                }
                _ => {
                    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
                    // Into the first entries (the device file is much larger than the data).
                    file.set_len((bytes.len() as u64 / 3).min(128 << 10))
                        .unwrap();
                }
            }
            damaged += 1;
        }
        assert!(damaged > 0, "the device tier has files to damage");
        assert_eq!(
            get(store, "obj", &cache),
            content(7, BYTES),
            "{damage}: the right bytes, fetched again"
        );
        if damage == "flip" {
            // Every entry was hit: none passes its checksum.
            assert_eq!(
                device_hits(&cache).0,
                0,
                "{damage}: nothing served from damaged files"
            );
            assert_eq!(capacity_bytes(&cache), BYTES as u64);
        } else {
            // Entries in the part that is left are whole and may be served; the rest is
            // fetched again.
            let (_, served) = device_hits(&cache);
            assert!(
                capacity_bytes(&cache) > 0,
                "{damage}: lost blocks fetched again"
            );
            assert_eq!(served + capacity_bytes(&cache), BYTES as u64);
        }
        assert_eq!(
            get(store, "obj", &cache),
            content(7, BYTES),
            "{damage}: and again"
        );
    }
}

#[test]
fn tierdb_warm_fills_the_device_tier_for_the_next_process() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let db = tmp.path().join("db");
    let cache = tmp.path().join("cache");
    let (data_s, db_s, cache_s) = (
        data.to_str().unwrap(),
        db.to_str().unwrap(),
        cache.to_str().unwrap(),
    );
    tierdb(&["ssb", "generate", "--sf", "0.01", data_s]);
    tierdb(&["ssb", "load", db_s, data_s, "--create"]);
    let warm = |tables: &[&str]| {
        let mut args = vec!["warm", db_s];
        args.extend_from_slice(tables);
        args.extend_from_slice(&["--cache-dir", cache_s, "--cache-bytes", "256MiB"]);
        let out = tierdb(&args);
        // What a failed assertion shows: the output, the warnings (foyer's included) and
        // the statistics the process left in the cache directory.
        format!(
            "{}\n--- stderr\n{}\n--- STATS.json\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            saved_stats(&cache)
        )
    };
    let first = warm(&["lineorder"]);
    assert!(first.starts_with("warmed 1 object,"), "{first}");
    assert!(!first.contains(": 0 B from the capacity store"), "{first}");
    // A new process finds it all on the device.
    let second = warm(&["lineorder"]);
    assert!(second.contains(": 0 B from the capacity store"), "{second}");
    // The whole database: every object.
    let all = warm(&[]);
    assert!(all.starts_with("warmed "), "{all}");

    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args(["warm", db_s])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "no device tier: a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cache-dir"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_tierdb"))
        .args([
            "warm",
            db_s,
            "nosuch",
            "--cache-dir",
            cache_s,
            "--cache-bytes",
            "256MiB",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch"));
}
