#!/usr/bin/env bash
# Beyond one process (issue 16), release build:
#   distributed: SSB at SF (default 10) in one process, then with a coordinator and 2 and 3
#     local `tierdb worker` processes (WORKERS), on a local directory; answers checked
#     against the one-process answers; wall time, coordinator CPU, and per worker the bytes
#     its queries read and its CPU seconds (python/bench/ssb_distributed.py);
#   erasure: MinIO with 6 drives at EC:2 (one erasure set), SSB at ERASURE_SF (default 1)
#     and a ZODB workload, one drive deleted under load: nothing lost, bytes on the drives
#     against the logical bytes, latencies before and after (python/bench/erasure.py).
# SECTIONS (default "distributed erasure") picks the parts; output goes to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
SF=${SF:-10}
ERASURE_SF=${ERASURE_SF:-1}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-0,2,3}
SECTIONS=${SECTIONS:-distributed erasure}
mkdir -p "$OUT"
PY=$(scripts/python-env.sh | tail -1)
cargo build --release -q -p tierdb-cli
BIN=$CARGO_TARGET_DIR/release/tierdb
DATA=$HOME/.cache/tierdb/bench/ssb-sf$SF
WORK=$(mktemp -d -t tierdb-scale.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if [[ " $SECTIONS " == *" distributed "* ]]; then
  "$PY" python/bench/ssb_distributed.py --tierdb "$BIN" --sf "$SF" --data "$DATA" --db "$WORK/ssb" \
    --workers "$WORKERS" --threads "$THREADS" --runs "$RUNS" --out "$OUT" | tee "$OUT/distributed.txt"
fi
if [[ " $SECTIONS " == *" erasure "* ]]; then
  source scripts/minio.sh
  minio_install
  "$PY" python/bench/erasure.py --tierdb "$BIN" --minio "$MINIO_BIN" --sf "$ERASURE_SF" \
    --data "$HOME/.cache/tierdb/bench/ssb-sf$ERASURE_SF" --commits 500 --out "$OUT" | tee "$OUT/erasure.txt"
fi
