#!/usr/bin/env bash
# The Star Schema Benchmark (issue 3), release build, MinIO started here: tierdb against
# DuckDB (pip) on the same generated data in one run, with the same thread count:
#   import throughput (tierdb ssb load, sorted on ingest, vs DuckDB COPY), the 13 queries
#   warm on sorted and on unsorted tables, cold from MinIO, answers checked against
#   DuckDB's, and bytes read with and without extent elimination.
# SF (default 10) and THREADS (default 2) set the size; data is generated once into
# ~/.cache/tierdb/bench/ssb-sfSF. Output (tables, CSV, PNG) goes to $OUT (bench-results/).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
SF=${SF:-10}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
mkdir -p "$OUT"
PY=$(scripts/python-env.sh | tail -1)
"$PY" -m pip install -q --disable-pip-version-check duckdb matplotlib
cargo build --release -q -p tierdb-cli
BIN=$CARGO_TARGET_DIR/release/tierdb

source scripts/minio.sh
trap minio_stop EXIT
minio_start

DATA=$HOME/.cache/tierdb/bench/ssb-sf$SF
WORK=$(mktemp -d -t tierdb-ssb.XXXXXX)
"$PY" python/bench/ssb_compare.py --tierdb "$BIN" --sf "$SF" --data "$DATA" --work "$WORK" \
  --threads "$THREADS" --runs "$RUNS" --s3-url "$TIERDB_TEST_S3_URL" --out "$OUT" | tee "$OUT/ssb.txt"
rm -rf "$WORK"
