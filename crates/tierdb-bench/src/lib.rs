//! # tierdb-bench: workloads, the cache trace simulator and benchmarks
//!
//! Used by `tierdb bench …`. Benchmarks print what they measured and ratios against a peer
//! measured in the same run; they never assert speed. Results are also written as CSV and,
//! where a picture says more, a PNG.
//!
//! - [`zipf`]: seeded Zipfian key sequences;
//! - [`sim`]: replays a key trace against foyer's eviction policies and Belady's OPT;
//! - [`cache_bench`]: `tierdb bench cache`;
//! - [`oltp_bench`]: `tierdb bench oltp`, seed 001's race on the key-value engine;
//! - [`ssb`]: the Star Schema Benchmark: a data generator (dbgen's tables), the schema and
//!   the 13 queries; [`ssb_bench`]: `tierdb bench ssb`;
//! - [`throughput`]: `tierdb bench throughput`, the capacity store's own read speed;
//! - [`plot`]: PNG plots.

pub mod cache_bench;
pub mod error;
pub mod oltp_bench;
pub mod plot;
pub mod sim;
pub mod ssb;
pub mod ssb_bench;
pub mod throughput;
pub mod zipf;
