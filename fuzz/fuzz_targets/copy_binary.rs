#![no_main]
//! See fuzz/Cargo.toml; the entry point documents what must hold.

libfuzzer_sys::fuzz_target!(|data: &[u8]| tierdb_pgwire::fuzzing::copy_binary(data));
