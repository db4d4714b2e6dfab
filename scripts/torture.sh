#!/usr/bin/env bash
# Torture run (outside CI): an operator's bad days in a loop for MINUTES (default 30), with a
# MinIO started here for the object-store scenarios. Prints, per scenario, cycles,
# acknowledged writes, lost, wrong, detected, panics and hangs; exits 1 if anything was lost,
# wrong, panicked or hung. JSON goes to torture.json (or TORTURE_JSON).
#   scripts/torture.sh [MINUTES] [extra python/torture/torture.py options]
# Uses the debug build (pause points, assertions) with the debug-commands feature, which it
# builds first; or set TIERDB_BIN to such a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
MINUTES=${1:-30}
shift || true
[ -n "${TIERDB_BIN:-}" ] || cargo build -p tierdb-cli --features debug-commands
source scripts/minio.sh
trap minio_stop EXIT
minio_start
python3 python/torture/torture.py --minutes "$MINUTES" --s3 "$TIERDB_TEST_S3_URL/torture" \
  --minio-pid "$MINIO_PID" --minio-bin "$MINIO_BIN" --json "${TORTURE_JSON:-torture.json}" "$@"
