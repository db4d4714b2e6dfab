"""`pg_sleep` through `tierdb serve` beside PostgreSQL 15 (issue 27): the values it
returns, a statement timeout ending a sleep with 57014 (the server stays usable), and a
text that is no number refused as PostgreSQL refuses it. Only lower bounds of time are
asserted (a sleep takes at least its time), never an upper one.

Needs `tierdb` (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402
from test_catalog_keys import BIN  # noqa: E402

psycopg = pytest.importorskip("psycopg")


@pytest.fixture(scope="module")
def both():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        conns = [psycopg.connect(engines.pg_dsn(pg_port), autocommit=True),
                 psycopg.connect(engines.tierdb_dsn(t_port), autocommit=True)]
        yield conns
        for c in conns:
            c.close()


def test_values_are_postgresqls(both):
    sql = ("SELECT pg_sleep(0), pg_sleep(NULL), pg_sleep(-1), pg_sleep(0.01), "
           "pg_sleep(0.01) IS NULL")
    want, got = (c.execute(sql).fetchall() for c in both)
    assert got == want


def test_the_column_is_void_as_postgresqls(both):
    """RowDescription's type (void, OID 2278), and the value in the text and the binary
    format as psycopg reads them from each."""
    for binary in (False, True):
        got = []
        for c in both:
            cur = c.cursor(binary=binary)
            cur.execute("SELECT pg_sleep(0) AS s, pg_sleep(NULL) AS n")
            got.append(([(d.name, d.type_code) for d in cur.description], cur.fetchall()))
        assert got[1] == got[0], f"binary={binary}"
        assert got[0][0][0] == ("s", 2278)


def test_each_row_sleeps(both):
    _, td = both
    start = time.monotonic()
    rows = td.execute("SELECT pg_sleep(0.2) FROM generate_series(1, 3)").fetchall()
    assert len(rows) == 3
    assert time.monotonic() - start >= 0.6


def test_a_statement_timeout_ends_a_sleep(both):
    for c in both:
        c.execute("SET statement_timeout = 200")
        try:
            with pytest.raises(psycopg.errors.QueryCanceled):
                c.execute("SELECT pg_sleep(600)")
        finally:
            c.execute("RESET statement_timeout")
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_a_text_that_is_no_number_is_refused_as_postgresql_refuses_it(both):
    codes = []
    for c in both:
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT pg_sleep('soon')")
        codes.append(e.value.sqlstate)
    assert codes[1] == codes[0] == "22P02"
