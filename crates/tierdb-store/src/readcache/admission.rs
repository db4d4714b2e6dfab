//! Admission policies: which misses may enter the read tiers.
//!
//! Policy is kept apart from the cache mechanism so it can be swapped and simulated. The
//! default, [`SequentialCutoff`], is Open CAS's rule: a large sequential read (a table scan, a
//! compaction reading a whole SST) would otherwise push the hot set out of the cache for data
//! that will not be read again soon, so once a sequential run of one object passes the cutoff
//! its misses are served from the capacity store without being cached.

use std::collections::HashMap;
use std::ops::Range;

use parking_lot::Mutex;

/// Decides whether the blocks a read misses are inserted into the read tiers.
pub trait AdmissionPolicy: Send + Sync + std::fmt::Debug {
    /// Called once per read of `range` of the object at `path`; returns whether its misses
    /// are admitted.
    fn admit(&self, path: &str, range: Range<u64>) -> bool;
}

/// Admits everything.
#[derive(Debug, Default)]
pub struct AdmitAll;

impl AdmissionPolicy for AdmitAll {
    fn admit(&self, _path: &str, _range: Range<u64>) -> bool {
        true
    }
}

/// Open CAS's sequential cutoff, tracked per object.
#[derive(Debug)]
pub struct SequentialCutoff {
    cutoff_bytes: u64,
    streams: Mutex<HashMap<String, Run>>,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    next_offset: u64,
    run_bytes: u64,
}

/// Streams remembered at most; the table is cleared when it is full (a new scan starts a
/// new run either way, so forgetting only delays a cutoff by one cutoff's worth of bytes).
const STREAMS_MAX: usize = 4096;

impl SequentialCutoff {
    pub fn new(cutoff_bytes: u64) -> Self {
        Self {
            cutoff_bytes,
            streams: Mutex::new(HashMap::new()),
        }
    }
}

impl AdmissionPolicy for SequentialCutoff {
    fn admit(&self, path: &str, range: Range<u64>) -> bool {
        let len = range.end.saturating_sub(range.start);
        let mut streams = self.streams.lock();
        if streams.len() >= STREAMS_MAX && !streams.contains_key(path) {
            streams.clear();
        }
        let run = streams.entry(path.to_string()).or_insert(Run {
            next_offset: u64::MAX,
            run_bytes: 0,
        });
        run.run_bytes = if run.next_offset == range.start {
            run.run_bytes.saturating_add(len)
        } else {
            len
        };
        run.next_offset = range.end;
        run.run_bytes <= self.cutoff_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_reads_are_admitted_and_long_runs_are_cut_off() {
        let policy = SequentialCutoff::new(100);
        assert!(policy.admit("a", 0..40));
        assert!(policy.admit("a", 40..80));
        assert!(
            !policy.admit("a", 80..120),
            "run of 120 bytes passes the 100-byte cutoff"
        );
        assert!(!policy.admit("a", 120..160));
        assert!(policy.admit("b", 120..160), "runs are per object");
        assert!(policy.admit("a", 0..40), "a jump starts a new run");
        assert!(
            !policy.admit("c", 0..1000),
            "one read larger than the cutoff"
        );
    }
}
