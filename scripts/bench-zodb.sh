#!/usr/bin/env bash
# The ZODB benchmarks (issue 4), release builds, MinIO started here:
#  1. zodbshootout's operations (add, update, cold, warm, hot) on TierStorage (local
#     directory; MinIO with a device tier in write-back mode) beside FileStorage,
#     RelStorage on SQLite, ZEO over FileStorage and ZEO over TierStorage, with one client
#     process and with CLIENTS (default 4) at once, best of RUNS (default 3) runs:
#     python/bench/zodb_bench.py.
#  2. Import throughput: a generated Data.fs of SIZE (default 1GiB, kept in
#     ~/.cache/tierdb/bench) imported with `tierdb zodb import` into a local directory and
#     into MinIO, with the dedup and compression ratios it reports.
# Output goes to $OUT (default bench-results/).   OBJECTS, TXNS, SIZE override the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
OBJECTS=${OBJECTS:-20000}
TXNS=${TXNS:-200}
SIZE=${SIZE:-1GiB}
mkdir -p "$OUT"
PY=$(scripts/python-env.sh --deps-only | tail -1)
"$PY" -m pip install -q --disable-pip-version-check relstorage matplotlib
(cd python && VIRTUAL_ENV="$(dirname "$(dirname "$PY")")" PATH="$(dirname "$PY"):$PATH" maturin develop -q --release)
cargo build --release -q -p tierdb-cli
BIN=$CARGO_TARGET_DIR/release/tierdb

source scripts/minio.sh
trap minio_stop EXIT
minio_start
export TIERDB_BENCH_S3_URL=$TIERDB_TEST_S3_URL

echo "== zodbshootout operations, $OBJECTS objects in $TXNS transactions"
"$PY" python/bench/zodb_bench.py --objects "$OBJECTS" --txns "$TXNS" --clients "${CLIENTS:-4}" --runs "${RUNS:-3}" --out "$OUT" | tee "$OUT/zodb-bench.txt"

DATAFS=$HOME/.cache/tierdb/bench/Data-$SIZE.fs
if [ ! -f "$DATAFS" ]; then
  echo "== generating $DATAFS"
  mkdir -p "$(dirname "$DATAFS")"
  "$PY" python/bench/make_datafs.py "$DATAFS.part" --size "$SIZE"
  mv "$DATAFS.part" "$DATAFS"
  rm -f "$DATAFS.part".*
fi
WORK=$(mktemp -d -t tierdb-import.XXXXXX)
echo "== import $DATAFS ($(du -h "$DATAFS" | cut -f1)) into a local directory"
"$BIN" zodb import --compression lz4 "$DATAFS" "$WORK/local" | tee "$OUT/zodb-import.txt"
echo "== import into MinIO"
"$BIN" zodb import --compression lz4 "$DATAFS" "$TIERDB_TEST_S3_URL/import-$$" | tee -a "$OUT/zodb-import.txt"
"$BIN" zodb stats "$WORK/local" | tee -a "$OUT/zodb-import.txt"
rm -rf "$WORK"
