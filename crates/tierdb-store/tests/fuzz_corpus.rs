//! Proves that write-back log recovery never panics on a damaged segment: replay,
//! dirty-byte counting and salvage get the kept fuzz corpus (`fuzz/corpus/wblog`, grown by
//! `scripts/fuzz.sh`) and thousands of deterministic mutations of a real segment. A panic
//! fails the test; refusing to open (an error naming the damage) is the right answer.

use tierdb_testkit::mutate::{corpus, mutations, seeds};

#[test]
fn log_recovery_survives_damaged_segments() {
    let made = seeds("wblog");
    assert!(!made.is_empty(), "fuzz/corpus/wblog holds a log segment");
    for seed in &made {
        for m in mutations(seed, 1500, 0x7b) {
            tierdb_store::fuzzing::wblog(&m);
        }
    }
    for input in corpus("wblog") {
        tierdb_store::fuzzing::wblog(&input);
    }
}
