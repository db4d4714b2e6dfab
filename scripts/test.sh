#!/usr/bin/env bash
# Runs every check and test tierdb has: formatting, clippy, and the test suites against a
# local directory and a MinIO started here (built with go install when absent, stopped at
# the end, also on failure). This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
export CARGO_TERM_COLOR=never
# CI builds a clean clone, whose crates cannot reuse incremental state: writing it only costs.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# Each section's wall time, printed as a table at the end (also when a section fails), so a
# run that nears CI's limit shows where its minutes went.
TIMES=()
SECTION="" SECTION_START=$SECONDS
section() {
  if [ -n "$SECTION" ]; then
    TIMES+=("$(printf '%6ds  %.90s' $((SECONDS - SECTION_START)) "$SECTION")")
  fi
  SECTION=$1 SECTION_START=$SECONDS
  if [ -n "$1" ]; then echo "== $1"; fi
}
print_times() {
  section ""
  echo "== wall time per section (total $((SECONDS / 60)) min)"
  printf '%s\n' "${TIMES[@]}"
}

command -v cargo >/dev/null || { echo "error: cargo not found; install Rust with rustup" >&2; exit 1; }
rustup component add rustfmt clippy >/dev/null 2>&1 || true

section "cargo fmt --check"
cargo fmt --all -- --check
section "cargo clippy"
cargo clippy --workspace --all-targets --locked --features tierdb-cli/debug-commands -- -D warnings

source scripts/minio.sh
trap 'print_times; minio_stop' EXIT
minio_start
export TIERDB_REQUIRE_MINIO=1

section "cargo test"
# Long torture runs and benchmarks stay out of CI; each suite is bounded here.
timeout 2400 cargo test --workspace --locked --features tierdb-cli/debug-commands -- --test-threads 2

section "ZODB conformance: ZODB's storage, MVCC and testZODB tests (pytest) on a local directory, MinIO and FileStorage"
PY=$(scripts/python-env.sh | tail -1)
VENV_BIN=$(dirname "$PY")
ZT=$(mktemp -d -t tierdb-zodb.XXXXXX)
ROOT=$(pwd)
(cd "$ZT" && timeout 1500 "$PY" -m pytest -q -p no:cacheprovider -o faulthandler_timeout=300 \
  --junitxml="$ZT/conformance.xml" "$ROOT/python/tests/test_conformance.py")
"$PY" python/tests/count.py "$ZT/conformance.xml"
section "tierdb zodb import/verify/pack/stats and the pickle reference reader (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 900 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_tools.py")
section "SQL over a ZODB database: zodb.objects/refs/revisions/transactions/blobs vs ZODB's own tools (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_zodb_sql.py")
section "SIGKILL of tierdb zodb pack at every pass: nothing lost, the next pack completes (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 900 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_pack_crash.py")
section "stats, verify, pack, undoLog, iterator, loadBefore in bounded memory (pytest; 5 x 10^4 objects here, 10^6 for the proof)"
(cd "$ZT" && TIERDB_MEMORY_OBJECTS=50000 TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 1200 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_zodb_memory.py")
section "SQL: tierdb sql/import/serve (psql) on a local directory and MinIO; SSB answers vs DuckDB at SF 0.1"
if ! command -v psql >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-client >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-client >/dev/null; }
  fi
  command -v psql >/dev/null || { echo "error: psql is needed for the pgwire test; install postgresql-client" >&2; exit 1; }
fi
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 1500 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_sql.py")
section "TPC-H's 22 queries at SF 0.01 through tierdb serve vs DuckDB, on DuckDB's dbgen data vs tpch_answers(), and the benchmark's peers (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_tpch.py")
section "SQL against the oracle: the differential tester vs PostgreSQL 15 (fixed seed, 60 rounds) and its kept regression cases"
source scripts/postgres.sh
postgres_install
PYTHONPATH="$ROOT/python" timeout 900 "$PY" -m sqlcheck.run --tierdb "$CARGO_TARGET_DIR/debug/tierdb" \
  --replay "$ROOT/python/sqlcheck/regressions"
PYTHONPATH="$ROOT/python" timeout 900 "$PY" -m sqlcheck.run --tierdb "$CARGO_TARGET_DIR/debug/tierdb" \
  --seed 20261124 --max-rounds 60 --minutes 10 --max-mismatches 1 --keep "$ZT/sqlcheck-failures"
section "column types through tierdb serve vs PostgreSQL 15: values, RowDescription types and typmods, COPY TO/FROM (column lists, binary), refused values, text input in a session time zone (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_types.py" "$ROOT/python/tests/test_text_input.py" "$ROOT/python/tests/test_copy.py")
section "SQLSTATEs of statements the planner refuses, and pg_sleep, beside PostgreSQL 15 (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 300 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_sqlstates.py" "$ROOT/python/tests/test_sleep.py")
section "row tables through tierdb serve beside PostgreSQL 15: sysbench oltp_read_write and pgbench -i, tpcb-like, select-only unmodified (a few s each), index entries agree with rows, balances agree, concurrent transfers keep the total (pytest)"
if ! command -v sysbench >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q sysbench >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q sysbench >/dev/null; }
fi
command -v sysbench >/dev/null || { echo "error: sysbench is needed for the OLTP test; install sysbench" >&2; exit 1; }
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 900 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_oltp.py")
section "tierdb serve with PostgreSQL clients: psycopg 3, psycopg2, SQLAlchemy, pandas, asyncpg, psql; bad input, SIGKILL during COMMIT, TLS, VACUUM (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 900 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_pg.py")
section "keys, indexes and defaults in pg_catalog beside PostgreSQL 15: psql \\d and \\di, pg_dump's key and index statements, a dump restored into tierdb keeps its row tables; pg_dump round trips tierdb→tierdb, tierdb→PostgreSQL, PostgreSQL→tierdb; DataGrip's and Grafana's recorded startup queries (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 900 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_catalog_keys.py" "$ROOT/python/tests/test_dump_round_trip.py" "$ROOT/python/tests/test_recorded.py")
section "schemas other than public beside PostgreSQL 15: queries, mistakes' SQLSTATEs, psql \\dn+ \\dt \\d \\di \\ds, pg_dump -n, a dump restored, DROP SCHEMA CASCADE (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_schemas.py")
section "INSERT … RETURNING beside PostgreSQL 15: rows, names and tags by both protocols, failed and rolled back inserts, SQLAlchemy's ORM keys (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_returning.py")
section "INSERT … ON CONFLICT beside PostgreSQL 15: DO NOTHING and DO UPDATE by key, unique index and constraint name, RETURNING, both protocols, mistakes' SQLSTATEs, concurrent upserts of one counter, SQLAlchemy's on_conflict_do_update (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_upsert.py")
section "UPDATE/DELETE … RETURNING on row and columnar tables beside PostgreSQL 15: a job queue's claim and delete, subqueries, aliases, parameters, a failing item changes nothing (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_dml_returning.py")
section "ALTER COLUMN … TYPE beside PostgreSQL 15: columnar and row tables (key, plain and unique index), USING, assignment casts, failed casts change nothing; a transaction's own DDL after its writes (CREATE INDEX, ADD COLUMN, SET NOT NULL, TRUNCATE, savepoints) (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_alter_type.py" "$ROOT/python/tests/test_txn_ddl.py")
section "prepared statements whose plans the server keeps, beside PostgreSQL 15: ALTER TABLE, a renamed and a new table under the name, a replaced view, an index, a hiding temporary table, DROP TABLE between executions (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_plan_cache.py")
section "comments on views beside PostgreSQL 15: obj_description, col_description, psql \\dv+ and \\d+, pg_dump's COMMENT statements (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_view_comments.py")
section "dbt-postgres on tierdb serve beside PostgreSQL 15: seed, table, view and incremental models built twice, data tests, docs generate; equal rows and documented columns (pytest)"
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_dbt.py")
section "pgjdbc DatabaseMetaData and ResultSetMetaData on tierdb serve beside PostgreSQL 15 (pytest; a small Java program)"
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jdk-headless maven >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jdk-headless maven >/dev/null; }
  fi
fi
command -v javac >/dev/null && command -v mvn >/dev/null || { echo "error: javac and mvn are needed for the JDBC test; install default-jdk-headless and maven" >&2; exit 1; }
timeout 600 mvn -q dependency:get -Dartifact=org.postgresql:postgresql:42.7.4 >/dev/null
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 600 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_jdbc.py")
section "node-postgres and pgx on tierdb serve beside PostgreSQL 15: values and types handed back, RowDescription fields, binary and text formats, parameters, errors, transactions, COPY (pytest; pg from npm, pgx from the Go module proxy)"
command -v node >/dev/null && command -v npm >/dev/null && command -v go >/dev/null \
  || { echo "error: node, npm and go are needed for the node-postgres and pgx test; install nodejs, npm and golang" >&2; exit 1; }
(cd "$ZT" && TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 900 "$PY" -m pytest -q -p no:cacheprovider \
  "$ROOT/python/tests/test_clients.py")
section "beyond one process: SSB SF 0.1 over 2 tierdb workers vs one process, serve --read-only replicas, MinIO erasure set losing a drive under a ZODB and SQL load (pytest)"
(cd "$ZT" && MINIO_BIN="$MINIO_BIN" TIERDB_BIN="$CARGO_TARGET_DIR/debug/tierdb" timeout 1800 "$PY" -m pytest -q -s -p no:cacheprovider \
  "$ROOT/python/tests/test_scale.py")
section "ZODB blob suites and IExternalGC (zope.testrunner) on a local directory, MinIO and FileStorage"
# The doctests check that a committed blob file cannot be opened for writing, which root
# (CAP_DAC_OVERRIDE) always can: as root, run them with every capability dropped.
UNPRIV=()
if [ "$(id -u)" = 0 ]; then UNPRIV=(setpriv --bounding-set=-all --inh-caps=-all --no-new-privs); fi
mkdir -p "$ZT/blobs"
(cd "$ZT/blobs" && PYTHONPATH="$ROOT/python/tests" timeout 900 "${UNPRIV[@]}" "$VENV_BIN/zope-testrunner" \
  --test-path "$ROOT/python/tests" --tests-pattern '^blob_suites$')
section "ZEO's own client-server tests over TierStorage (local, write-back device tier, blobs) and FileStorage (zope.testrunner)"
mkdir -p "$ZT/zeo"
(cd "$ZT/zeo" && PYTHONPATH="$ROOT/python/tests" timeout 1200 "$VENV_BIN/zope-testrunner" \
  --test-path "$ROOT/python/tests" --tests-pattern '^zeo_suites$')
section "runzeo over TierStorage: several client processes, new objects, conflict resolution, SIGTERM (pytest)"
(cd "$ZT" && timeout 900 "$PY" -m pytest -q -p no:cacheprovider "$ROOT/python/tests/test_zeo.py")
rm -rf "$ZT"
echo "== all tests passed"
