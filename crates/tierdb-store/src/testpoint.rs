//! Pause points for crash tests.
//!
//! A crash test must kill a process at a known point, never "after a sleep" (a fast machine
//! finishes first, a slow one has not started). With `TIERDB_TEST_PAUSE_AT=<name>` set, a
//! debug build that reaches [`pause_at`]`(name)` prints `tierdb: paused at <name>` on
//! standard error and stops there until it is killed. Release builds compile it to nothing.

/// The environment variable naming the pause point to stop at.
pub const PAUSE_ENV: &str = "TIERDB_TEST_PAUSE_AT";

/// Stops this thread for good if the pause point `name` is selected (debug builds only).
/// `TIERDB_TEST_PAUSE_AT=<name>#<n>` stops the `n`-th time the point is reached (a pass
/// that commits in batches, killed after its second batch: `pack-sweep-batch#2`).
pub fn pause_at(name: &str) {
    #[cfg(debug_assertions)]
    if let Ok(v) = std::env::var(PAUSE_ENV) {
        let (want, nth) = match v.split_once('#') {
            Some((w, n)) => (w.to_string(), n.parse::<u64>().unwrap_or(1)),
            None => (v, 1),
        };
        if want == name {
            static REACHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            if REACHED.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1 == nth {
                eprintln!("tierdb: paused at {name}");
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
