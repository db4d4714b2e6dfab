#!/usr/bin/env bash
# The differential tester against PostgreSQL 15, out of CI: random schemas, data, queries
# and DML on tierdb and on PostgreSQL, compared after every statement, for MINUTES minutes
# (default 30) with a random seed (or SEED=N). A mismatch is shrunk and kept in
# python/sqlcheck/regressions/ (CI replays that folder); the run prints its statistics and
# writes sqlcheck.json. Usage: scripts/sqlcheck.sh [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-30}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
source scripts/postgres.sh
postgres_install
cargo build --locked -p tierdb-cli
PY=$(scripts/python-env.sh --deps-only | tail -1)
SEED_ARGS=()
if [ -n "${SEED:-}" ]; then SEED_ARGS=(--seed "$SEED"); fi
PYTHONPATH=python "$PY" -m sqlcheck.run --tierdb "$CARGO_TARGET_DIR/debug/tierdb" --minutes "$MINUTES" \
  "${SEED_ARGS[@]}" --keep python/sqlcheck/regressions --json sqlcheck.json --max-mismatches 20
