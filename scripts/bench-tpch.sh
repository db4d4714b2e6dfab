#!/usr/bin/env bash
# TPC-H (issue 29), release build, MinIO started here: tierdb beside DuckDB 1.5.5 and plain
# DataFusion on the same tpchgen-cli data in one run, with the same thread count
# (python/bench/tpch.py): import time against DuckDB's COPY, the 22 queries warm (best of
# RUNS), tierdb cold from MinIO beside DuckDB + httpfs cold over the same segment files,
# every answer checked against DuckDB's and, on DuckDB's own
# dbgen data, against the tpch extension's tpch_answers() (SF 0.01, 0.1 and 1 only).
# SF (default 1; "1 10" runs both) and THREADS (default 2) set the size; data is generated
# once into ~/.cache/tierdb/bench/tpch-sfSF. Output (tables, CSV, JSON, PNG) goes to $OUT
# (bench-results/). VARIANTS="tag=--flag …" adds warm tierdb columns run with other flags
# (e.g. VARIANTS="no_reduce=--no-semi-join-reduction": what that rule buys). PROFILE=1
# then profiles every query of tierdb's run (python/bench/profile_queries.py, needs perf):
# where each query's time goes, as a table, JSON and PNG in $OUT/tpch-sfSF-profile/.
# Out of CI: test_tpch.py checks the answers at SF 0.01 there.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
SFS=${SF:-1}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
mkdir -p "$OUT"
# DuckDB 1.5.5 with its tpch extension from pip (loaded by path: nothing is downloaded at
# run time), psycopg, tpchgen-cli and matplotlib, in an environment of their own.
DUCK_ENV=$HOME/.cache/tierdb/venv-duckdb-1.5.5
if [ ! -x "$DUCK_ENV/bin/python" ]; then python3 -m venv "$DUCK_ENV"; fi
"$DUCK_ENV/bin/python" -m pip install -q --disable-pip-version-check \
  duckdb==1.5.5 duckdb-extension-tpch==1.5.5 duckdb-extension-httpfs==1.5.5 tpchgen-cli matplotlib
EXT=$("$DUCK_ENV/bin/python" -c "import duckdb_extension_tpch as m, pathlib; print(next(pathlib.Path(m.__file__).parent.rglob('tpch.duckdb_extension')))")
cargo build --release -q -p tierdb-cli
if [ "${PROFILE:-0}" = 1 ] && ! command -v perf >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-perf >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-perf >/dev/null; }
fi
BIN=$CARGO_TARGET_DIR/release/tierdb

source scripts/minio.sh
trap minio_stop EXIT
minio_start

for SF in $SFS; do
  WORK=$(mktemp -d -t tierdb-tpch.XXXXXX)
  SPEC=()
  case "$SF" in 0.01|0.1|1) SPEC=(--duckdb-tpch "$EXT") ;; esac
  VARIANT_ARGS=()
  for v in ${VARIANTS:-}; do VARIANT_ARGS+=(--variant "$v"); done
  "$DUCK_ENV/bin/python" python/bench/tpch.py --tierdb "$BIN" --sf "$SF" "${VARIANT_ARGS[@]}" \
    --data "$HOME/.cache/tierdb/bench/tpch-sf$SF" --work "$WORK" --threads "$THREADS" --runs "$RUNS" \
    --s3-url "$TIERDB_TEST_S3_URL" "${SPEC[@]}" --out "$OUT/tpch-sf$SF" | tee "$OUT/tpch-sf$SF.txt"
  if [ "${PROFILE:-0}" = 1 ]; then
    "$DUCK_ENV/bin/python" python/bench/profile_queries.py --tierdb "$BIN" --db "$WORK/tierdb" \
      --queries python/bench/tpch_queries --threads "$THREADS" --out "$OUT/tpch-sf$SF-profile"
  fi
  rm -rf "$WORK"
done
