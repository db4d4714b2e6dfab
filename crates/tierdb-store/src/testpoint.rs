//! Pause points for crash tests.
//!
//! A crash test must kill a process at a known point, never "after a sleep" (a fast machine
//! finishes first, a slow one has not started). With `TIERDB_TEST_PAUSE_AT=<name>` set, a
//! debug build that reaches [`pause_at`]`(name)` prints `tierdb: paused at <name>` on
//! standard error and stops there until it is killed. Release builds compile it to nothing.

/// The environment variable naming the pause point to stop at.
pub const PAUSE_ENV: &str = "TIERDB_TEST_PAUSE_AT";

/// Stops this thread for good if the pause point `name` is selected (debug builds only).
pub fn pause_at(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var(PAUSE_ENV).is_ok_and(|v| v == name) {
        eprintln!("tierdb: paused at {name}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
