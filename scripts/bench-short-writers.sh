#!/usr/bin/env bash
# Short-lived writers, out of CI (issue 26 item 7): N processes (default 10000), each one
# `tierdb kv put` (KIND=kv) or one one-row INSERT (KIND=sql), on a local directory and, with
# MINIO=1, on a MinIO this script starts; every SAMPLE processes the objects and bytes in the
# store and the time of a read-only open. They must stay flat (GC, short WAL replay, segment
# merges, Delta checkpoints). Writes short-writers-<kind>-<where>.{csv,json,png} to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
N=${N:-10000}
SAMPLE=${SAMPLE:-500}
KIND=${KIND:-kv}
PROFILE=${PROFILE:-release}
mkdir -p "$OUT"
PY=$(scripts/python-env.sh --deps-only | tail -1)
"$PY" -m pip install -q --disable-pip-version-check matplotlib
if [ "$PROFILE" = release ]; then cargo build --release -q -p tierdb-cli; else cargo build -q -p tierdb-cli; fi
BIN="$CARGO_TARGET_DIR/$PROFILE/tierdb"
WORK=$(mktemp -d -t tierdb-short-writers.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$PY" python/bench/short_writers.py --tierdb "$BIN" --url "$WORK/local" --kind "$KIND" \
  --processes "$N" --sample "$SAMPLE" --label local --out "$OUT" | tee "$OUT/short-writers-$KIND-local.txt"
if [ "${MINIO:-0}" = 1 ]; then
  # shellcheck source=scripts/minio.sh
  source scripts/minio.sh
  minio_start
  trap 'minio_stop; rm -rf "$WORK"' EXIT
  "$PY" python/bench/short_writers.py --tierdb "$BIN" --url "$TIERDB_TEST_S3_URL/short-writers-$KIND" \
    --kind "$KIND" --processes "$N" --sample "$SAMPLE" --label minio --out "$OUT" \
    | tee "$OUT/short-writers-$KIND-minio.txt"
fi
