//! tierdb-tables' integration tests, one binary: each file is a module (`cargo test -p
//! tierdb-tables --test tables session::` runs one of them).

mod common;
mod ddl_rollback;
mod fastdml;
mod fuzz_corpus;
mod isolation;
mod joins;
mod rows_model;
mod semijoin;
mod session;
mod shared;
mod sql;
mod tables_faults;
