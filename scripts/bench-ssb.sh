#!/usr/bin/env bash
# The Star Schema Benchmark (issue 3), release build, MinIO started here: tierdb against
# DuckDB (pip) on the same generated data in one run, with the same thread count:
#   import throughput (tierdb ssb load, sorted on ingest, vs DuckDB COPY), the 13 queries
#   warm on sorted and on unsorted tables, cold from MinIO, answers checked against
#   DuckDB's, and bytes read with and without extent elimination.
# Then the read path (issue 12, python/bench/ssb_readpath.py): the same segment files read
#   straight from local disk with no store layers, through the tiers warm, cold from MinIO,
#   after a restart, and by DuckDB 1.5.5 with httpfs cold from the same MinIO, beside MinIO's
#   raw throughput; GET requests and bytes from MinIO per query.
# SF (default 10) and THREADS (default 2) set the size; data is generated once into
# ~/.cache/tierdb/bench/ssb-sfSF. Output (tables, CSV, PNG) goes to $OUT (bench-results/).
# SECTIONS (default "compare readpath") picks the parts to run; "import" runs the import
# table alone (with the sorted load also by DataFusion's sort, --no-parallel-sort).
# COLD_VARIANTS="tag=--flag=x …" adds cold read-path runs with other flags beside the cold one (e.g.
# COLD_VARIANTS="blk64k=--block-bytes=64KiB": what the segment block size costs cold).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
SF=${SF:-10}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
SECTIONS=${SECTIONS:-compare readpath}
mkdir -p "$OUT"
# The comparison scripts need DuckDB and matplotlib, not the tierdb Python package.
PY=$(scripts/python-env.sh --deps-only | tail -1)
"$PY" -m pip install -q --disable-pip-version-check duckdb matplotlib
cargo build --release -q -p tierdb-cli
BIN=$CARGO_TARGET_DIR/release/tierdb

source scripts/minio.sh
trap minio_stop EXIT
minio_start

DATA=$HOME/.cache/tierdb/bench/ssb-sf$SF
WORK=$(mktemp -d -t tierdb-ssb.XXXXXX)
if [[ " $SECTIONS " == *" compare "* ]]; then
  "$PY" python/bench/ssb_compare.py --tierdb "$BIN" --sf "$SF" --data "$DATA" --work "$WORK" \
    --threads "$THREADS" --runs "$RUNS" --s3-url "$TIERDB_TEST_S3_URL" --out "$OUT" | tee "$OUT/ssb.txt"
fi
if [[ " $SECTIONS " == *" import "* ]]; then
  "$PY" python/bench/ssb_compare.py --import-only --tierdb "$BIN" --sf "$SF" --data "$DATA" \
    --work "$WORK" --threads "$THREADS" --out "$OUT" | tee "$OUT/ssb-import.txt"
fi
if [[ " $SECTIONS " == *" readpath "* ]]; then
  # DuckDB 1.5.5 in its own environment: its httpfs extension comes from pip and is loaded
  # by path (nothing can be downloaded at run time here).
  DUCK_ENV=$HOME/.cache/tierdb/venv-duckdb-1.5.5
  if [ ! -x "$DUCK_ENV/bin/python" ]; then python3 -m venv "$DUCK_ENV"; fi
  "$DUCK_ENV/bin/python" -m pip install -q --disable-pip-version-check \
    duckdb==1.5.5 duckdb-extension-httpfs==1.5.5
  VARIANT_ARGS=()
  for v in ${COLD_VARIANTS:-}; do VARIANT_ARGS+=(--cold-variant "$v"); done
  "$PY" python/bench/ssb_readpath.py "${VARIANT_ARGS[@]}" --tierdb "$BIN" --duckdb-python "$DUCK_ENV/bin/python" \
    --sf "$SF" --data "$DATA" --work "$WORK/readpath" --threads "$THREADS" --runs "$RUNS" \
    --bucket "s3://tierdb-test" --out "$OUT" | tee "$OUT/ssb-readpath.txt"
fi
rm -rf "$WORK"
