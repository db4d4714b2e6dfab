#!/usr/bin/env bash
# Seed 001's race against MinIO: builds tierdb (release), starts MinIO on 127.0.0.1 (see
# scripts/minio.sh), creates the bucket "bench" and runs `tierdb bench oltp` with the
# sizes in docs/benchmarks.md. Extra arguments go to `tierdb bench oltp`.
#   OUT   where CSV and PNG go (default: bench-results)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
source scripts/minio.sh
trap minio_stop EXIT
cargo build --release --locked -p tierdb-cli
minio_start
curl -sf -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
  "$AWS_ENDPOINT_URL/bench" >/dev/null
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), MinIO data on $(df --output=source "$MINIO_DIR" | tail -1)"
"$CARGO_TARGET_DIR/release/tierdb" bench oltp s3://bench/oltp --out "$OUT" "$@"
