"""Comments on views (issue 27: COMMENT ON; dbt's `persist_docs` on view models), against
PostgreSQL 15 as the oracle: `COMMENT ON VIEW` and `COMMENT ON COLUMN` of a view's column
are kept, read back by `obj_description`/`col_description` and psql's `\\dv+` and `\\d+`,
written by pg_dump as PostgreSQL 15 writes them, kept through CREATE OR REPLACE VIEW, and
gone with the view.

Needs `tierdb` (TIERDB_BIN), psql, pg_dump and PostgreSQL 15 (scripts/postgres.sh)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from test_catalog_keys import BIN, dump, psql  # noqa: E402
from test_schemas import run_all, servers_after, without_owner  # noqa: E402

SETUP = [
    "CREATE TABLE t (a INT, b TEXT)",
    "CREATE VIEW v AS SELECT a, b FROM t",
    "COMMENT ON VIEW v IS 'the view'",
    "COMMENT ON COLUMN v.b IS 'column b'",
    "CREATE VIEW w AS SELECT a FROM t",
    "COMMENT ON VIEW w IS 'replaced'",
    "COMMENT ON COLUMN w.a IS 'kept'",
    "CREATE OR REPLACE VIEW w AS SELECT a, b FROM t",
    "CREATE VIEW gone AS SELECT a FROM t",
    "COMMENT ON VIEW gone IS 'dropped'",
    "DROP VIEW gone",
    "CREATE VIEW gone AS SELECT a FROM t",
    "CREATE VIEW unsaid AS SELECT a FROM t",
    "COMMENT ON VIEW unsaid IS 'soon not'",
    "COMMENT ON VIEW unsaid IS NULL",
]

QUERIES = [
    "SELECT obj_description('v'::regclass, 'pg_class')",
    "SELECT col_description('v'::regclass, 2), col_description('v'::regclass, 1)",
    "SELECT obj_description('w'::regclass, 'pg_class'), col_description('w'::regclass, 1)",
    "SELECT obj_description('gone'::regclass, 'pg_class')",
    "SELECT obj_description('unsaid'::regclass, 'pg_class')",
]

MISTAKES = [
    "COMMENT ON COLUMN v.nosuch IS 'x'",   # 42703
    "COMMENT ON VIEW nosuch IS 'x'",       # 42P01
    "COMMENT ON TABLE v IS 'x'",           # 42809: not a table
    "COMMENT ON VIEW t IS 'x'",            # 42809: not a view
]


@pytest.fixture(scope="module")
def servers():
    with servers_after(SETUP) as made:
        yield made


@pytest.mark.parametrize("sql", QUERIES + MISTAKES)
def test_view_comments_answer_as_postgresql(servers, sql):
    got = {name: run_all(name, s, [sql]) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got


@pytest.mark.parametrize("command", ["\\dv+", "\\d+ v"])
def test_psql_shows_the_view_comments_as_postgresql(servers, command):
    """(The view's definition is left out: PostgreSQL prints its query as it deparses
    it, tierdb as it was written.)"""
    def shown(text):
        lines = without_owner(text)
        return lines[:lines.index("View definition:")] if "View definition:" in lines else lines
    got = {name: shown(psql(s, command)) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got


def test_pg_dump_writes_the_view_comments_as_postgresql(servers):
    def comments(text):
        return sorted(line for line in text.splitlines() if line.startswith("COMMENT ON"))
    got = {name: comments(dump(s)) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got
    assert "COMMENT ON VIEW public.v IS 'the view';" in got["tierdb"], got
