//! tierdb's columnar tables: what MariaDB ColumnStore's extents and extent map are, on the
//! tiered store.
//!
//! - [`catalog`]: schemas, tables, segments and the extent map (per segment and column:
//!   min, max, null count), kept in the KV engine and changed atomically.
//! - [`segment`]: segments are plain Parquet files with page indexes.
//! - [`segment_layout`]: each column's encoding and codec, chosen per segment.
//! - [`write`]: the shared write path: sort on ingest (spilling), cut, upload, commit.
//! - [`provider`]: DataFusion's view: extent elimination before any file is opened.
//! - [`readahead`]: fetching the next row groups of a sequential segment scan.
//! - [`sql`]: the SQL engine (DataFusion), with CREATE/DROP TABLE on the catalog.
//! - [`alter`]: ALTER TABLE (rename, add and drop columns) as catalog-only commits.
//! - [`joinorder`]: a join-reordering rule for star joins.
//! - [`semijoin`]: semi-join reduction of grouped aggregates (decorrelated subqueries).
//! - [`checked`]: integer arithmetic that fails on overflow, `sum(bigint)` as numeric.
//! - [`inlist`]: IN-lists written out where DataFusion's list algebra ignores NULLs.
//! - [`literals`]: integer literals as int4 where they fit, as PostgreSQL types them.
//! - [`rows`]: row tables (a PRIMARY KEY): rows in the KV engine, by key, with row locks.
//! - [`txn`]: transactions (BEGIN … COMMIT) and what their statements see.
//! - [`views`]: views, kept as their query and expanded into the statements that read them.
//! - [`import`]: bulk import of CSV, TSV, `.tbl` and Parquet files ([`textvalue`]: the
//!   text forms of timestamps and BYTEA).

pub mod alter;
pub mod bpchar;
pub mod castinput;
pub mod catalog;
pub mod charcast;
pub mod checked;
pub mod checksum;
pub mod ddlundo;
pub mod delta;
mod delta_checkpoint;
pub mod dfstore;
pub mod distributed;
mod dml;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod guard;
pub mod import;
pub mod inlist;
pub mod interrupt;
pub mod intervalmul;
pub mod joinorder;
pub mod jsonops;
pub mod jsonpath;
pub mod literals;
pub mod merge;
pub mod origin;
mod ownddl;
pub mod paramdecl;
pub mod parsefix;
mod parsort;
mod pgarith;
pub mod pgtext;
mod plancodes;
pub mod provider;
pub mod readahead;
pub mod rows;
pub mod schemas;
pub mod segment;
pub mod segment_layout;
pub mod semijoin;
pub mod setschema;
pub mod shared;
pub mod sleep;
pub mod sql;
pub mod tables;
pub mod textin;
pub mod textvalue;
mod tochar;
mod tochar_time;
pub mod txn;
pub mod unknowntext;
pub mod viewdeps;
pub mod views;
pub mod violation;
pub mod write;

pub use error::{Result, TableError};
pub use sql::{EngineOptions, SqlEngine, StatementResult};
pub use tables::{NewTable, PendingWrite, Tables, VacuumPlan};
pub use txn::{Transaction, TxSlot};
