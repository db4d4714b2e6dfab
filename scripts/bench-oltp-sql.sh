#!/usr/bin/env bash
# Seed 001's experiment through SQL (issue 28): sysbench oltp_read_write, oltp_point_select,
# oltp_write_only and pgbench tpcb-like, select-only through `tierdb serve` on MinIO with no
# device tier, a write-through and a write-back device tier, beside PostgreSQL 15 on local
# disk (fsync on), in one run.
# Builds tierdb (release), installs sysbench, PostgreSQL 15 and matplotlib when absent,
# starts MinIO on 127.0.0.1. Out of CI. Extra arguments go to scripts/bench_oltp_sql.py
# (--tables, --table-size, --threads, --time, --memory, --workloads, --pgbench-workloads,
# --pgbench-scale).
#   OUT         where CSV, JSON and PNG go (default: bench-results)
#   TIERDB_BIN  a tierdb binary to measure instead of building this checkout (release)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
OUT=${OUT:-bench-results}
PY=$(scripts/python-env.sh --deps-only | tail -1)
VENV=$(dirname "$(dirname "$PY")")
source scripts/postgres.sh
postgres_install
if ! command -v sysbench >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q sysbench >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q sysbench >/dev/null; }
fi
"$VENV/bin/pip" install -q --disable-pip-version-check matplotlib
source scripts/minio.sh
trap minio_stop EXIT
if [ -z "${TIERDB_BIN:-}" ]; then
  cargo build --release --locked -p tierdb-cli
  TIERDB_BIN=$CARGO_TARGET_DIR/release/tierdb
fi
minio_start
curl -sf -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
  "$AWS_ENDPOINT_URL/bench" >/dev/null
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), MinIO data on $(df --output=source "$MINIO_DIR" | tail -1)"
"$VENV/bin/python" scripts/bench_oltp_sql.py --tierdb "$TIERDB_BIN" --out "$OUT" "$@"
