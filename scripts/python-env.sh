#!/usr/bin/env bash
# Creates the Python environment for the tierdb package and its ZODB tests in
# ~/.cache/tierdb/venv (pip: ZODB, zodburi, ZConfig, pytest, maturin, DuckDB for the SQL
# comparison, and the PostgreSQL drivers `tierdb serve` is tested with) and builds the
# package into it with maturin (not with --deps-only: for scripts that build it themselves,
# in release, or do not need it). Prints the venv's python path last.
# Beside it, ~/.cache/tierdb/venv-readers holds the engines that read tierdb tables as Delta
# tables from the bucket (python/tests/external_readers.py): DuckDB 1.5.5 with the delta and
# httpfs extensions their pip packages ship (loaded by path: nothing is downloaded at run time), and
# `deltalake` (delta-rs); and DuckDB's tpch extension, whose tpch_answers() check TPC-H
# answers (python/tests/test_tpch.py). A venv of its own: the SQL comparison keeps its
# DuckDB version. tpchgen-cli (TPC-H's data) goes into the main venv.
# ~/.cache/tierdb/venv-dbt holds dbt-postgres (below).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TIERDB_VENV:-$HOME/.cache/tierdb/venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check "ZODB[test]>=6" zodburi ZConfig zope.testing manuel pytest "maturin>=1.5,<2" duckdb \
  "psycopg[binary]>=3.2" psycopg2-binary "sqlalchemy>=2" pandas asyncpg ZEO tpchgen-cli
READERS=${TIERDB_READERS_VENV:-$HOME/.cache/tierdb/venv-readers}
if [ ! -x "$READERS/bin/python" ]; then
  python3 -m venv "$READERS"
fi
"$READERS/bin/pip" install -q --disable-pip-version-check duckdb==1.5.5 duckdb-extension-delta==1.5.5 \
  duckdb-extension-httpfs==1.5.5 duckdb-extension-tpch==1.5.5 \
  "deltalake>=1.6,<2" pyarrow
# dbt-postgres in a venv of its own (python/tests/test_dbt.py): dbt pins its own versions of
# common packages. dbt-core 1.11 and later download a parser from GitHub while installing,
# which this machine's network cannot reach: 1.10 is the newest that installs from PyPI.
DBT_VENV=${TIERDB_DBT_VENV:-$HOME/.cache/tierdb/venv-dbt}
if [ ! -x "$DBT_VENV/bin/python" ]; then
  python3 -m venv "$DBT_VENV"
fi
"$DBT_VENV/bin/pip" install -q --disable-pip-version-check "dbt-core>=1.10,<1.11" "dbt-postgres>=1.10,<1.11"
if [ "${1:-}" != "--deps-only" ]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
  (cd python && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" maturin develop -q)
fi
echo "$VENV/bin/python"
