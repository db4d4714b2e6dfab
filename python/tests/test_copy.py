"""COPY … FROM STDIN with a column list and in binary format, through `tierdb serve` beside
PostgreSQL 15: what pgx's CopyFrom (always `(columns) … BINARY`), psql's `\\copy t (a, b)`
and pg_dump of a table with a SERIAL send. The same statements and bytes go to both; the
tables' contents, the row counts and the SQLSTATEs of mistakes must be PostgreSQL's.

Binary data is PostgreSQL's own: `COPY … TO STDOUT (FORMAT binary)` of a table with every
type (test_types.py's), copied into tierdb and into PostgreSQL alike."""

import os
import sys
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402
from test_types import COLUMNS, ROWS  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))

# A row table with a SERIAL key and defaults, and a columnar table with defaults.
TABLES = [
    "CREATE TABLE cp (id SERIAL PRIMARY KEY, name TEXT NOT NULL, qty INT DEFAULT 7, "
    "note VARCHAR(10), at TIMESTAMPTZ)",
    "CREATE TABLE cc (a INT, b TEXT DEFAULT 'x', c NUMERIC(10,2), d DATE)",
]


@pytest.fixture(scope="module")
def both():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        pg = psycopg.connect(engines.pg_dsn(pg_port), autocommit=True)
        td = psycopg.connect(engines.tierdb_dsn(t_port), autocommit=True)
        create = "CREATE TABLE ty (%s)" % ", ".join(f"{n} {t}" for n, t in COLUMNS)
        marks = ", ".join(["%s"] * len(COLUMNS))
        for conn in (pg, td):
            conn.execute("SET TIME ZONE 'America/New_York'")
            for sql in TABLES + [create]:
                conn.execute(sql)
        with pg.cursor() as cur:
            cur.executemany(f"INSERT INTO ty VALUES ({marks})", ROWS)
        yield pg, td
        pg.close()
        td.close()


def copy_in(conn, sql, data):
    """Runs COPY … FROM STDIN with `data`; returns the row count or the SQLSTATE."""
    try:
        with conn.cursor() as cur:
            with cur.copy(sql) as copy:
                copy.write(data)
            return cur.rowcount
    except psycopg.Error as e:
        return e.sqlstate


def rows(conn, table, order):
    return conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()


COLUMN_LISTS = [
    # Listed columns in another order; the SERIAL and DEFAULTs fill in the rest.
    ("cp", "COPY cp (note, name) FROM STDIN", b"first\tAda\n\\N\tGrace\n", "id"),
    ("cp", "COPY cp (name, at, qty) FROM STDIN (FORMAT csv)",
     b"Edsger,2024-05-17 10:00:00,3\n\"Barbara, L\",,\n", "id"),
    ("cc", "COPY cc (c, a) FROM STDIN (FORMAT csv, HEADER true)", b"c,a\n1.5,1\n,2\n", "a"),
    ("cc", "COPY cc (d) FROM STDIN", b"2024-02-29\n", "a NULLS LAST, d"),
    # Every column, named in table order: the plain path.
    ("cc", "COPY cc (a, b, c, d) FROM STDIN", b"9\tnine\t9.99\t1999-12-31\n", "a NULLS LAST, d"),
]


@pytest.mark.parametrize("table,sql,data,order", COLUMN_LISTS)
def test_copy_of_listed_columns_fills_the_rest_with_defaults(both, table, sql, data, order):
    pg, td = both
    assert copy_in(td, sql, data) == copy_in(pg, sql, data)
    assert rows(td, table, order) == rows(pg, table, order)


def test_copy_of_listed_columns_in_a_transaction_rolls_back(both):
    pg, td = both
    for conn in (pg, td):
        conn.execute("BEGIN")
        assert copy_in(conn, "COPY cp (name) FROM STDIN", b"gone\n") == 1
        assert conn.execute("SELECT count(*) FROM cp WHERE name = 'gone'").fetchone() == (1,)
        conn.execute("ROLLBACK")
    assert rows(td, "cp", "id") == rows(pg, "cp", "id")


MISTAKES = [
    ("COPY cp (nope) FROM STDIN", b"x\n"),            # 42703
    ("COPY cp (name, name) FROM STDIN", b"a\tb\n"),   # 42701
    ("COPY cp (note) FROM STDIN", b"no name\n"),      # 23502: name is NOT NULL
    ("COPY cp (name, qty) FROM STDIN", b"a\tnot a number\n"),  # 22P02
    ("COPY cp (name, note) FROM STDIN", b"a\tmuch too long for ten\n"),  # 22001
    ("COPY cc (a) FROM STDIN (FORMAT binary)", b"PGCOPY\n\xff\r\n\x00"),  # 22P04 cut short
    ("COPY cc (a) FROM STDIN (FORMAT binary)", b"not binary at all"),  # 22P04 signature
    ("COPY cc (a) FROM STDIN (FORMAT binary, HEADER true)", b""),  # 42601
]


@pytest.mark.parametrize("sql,data", MISTAKES)
def test_mistakes_fail_as_on_postgresql_and_copy_nothing(both, sql, data):
    pg, td = both
    before = rows(td, "cp", "id"), rows(td, "cc", "a NULLS LAST, d")
    want, got = copy_in(pg, sql, data), copy_in(td, sql, data)
    assert isinstance(want, str), f"PostgreSQL copied {want} rows"
    # PostgreSQL answers a value that does not parse with 22P02 or 22001; tierdb's COPY
    # names the line and reports 22P04 (bad COPY data) for every such value.
    if want in ("22P02", "22001", "22008", "22007"):
        assert got in (want, "22P04"), f"tierdb {got}, PostgreSQL {want}"
    else:
        assert got == want, f"tierdb {got}, PostgreSQL {want}"
    assert (rows(td, "cp", "id"), rows(td, "cc", "a NULLS LAST, d")) == before
    assert td.execute("SELECT 1").fetchone() == (1,)


def binary_of(pg, sql):
    with pg.cursor() as cur:
        with cur.copy(sql) as copy:
            return b"".join(bytes(b) for b in copy)


@pytest.mark.parametrize("split", [None, 7])
def test_binary_copy_of_every_type_reads_postgresqls_bytes(both, split):
    pg, td = both
    data = binary_of(pg, "COPY ty TO STDOUT (FORMAT binary)")
    table = f"tyb{split or 0}"
    create = f"CREATE TABLE {table} (%s)" % ", ".join(f"{n} {t}" for n, t in COLUMNS)
    for conn in (pg, td):
        conn.execute(create)
    sql = f"COPY {table} FROM STDIN (FORMAT binary)"
    assert copy_in(pg, sql, data) == len(ROWS)
    if split:
        with td.cursor() as cur:
            with cur.copy(sql) as copy:
                for i in range(0, len(data), split):
                    copy.write(data[i:i + split])
            assert cur.rowcount == len(ROWS)
    else:
        assert copy_in(td, sql, data) == len(ROWS)
    assert rows(td, table, "id") == rows(pg, table, "id")


def test_binary_copy_of_listed_columns(both):
    pg, td = both
    data = binary_of(pg, "COPY ty (t, id, tz, n, raw) TO STDOUT (FORMAT binary)")
    for conn in (pg, td):
        conn.execute("CREATE TABLE tyl (id INT, t TEXT, tz TIMESTAMPTZ, n NUMERIC(10,2), "
                     "raw BYTEA, extra TEXT DEFAULT 'd')")
    sql = "COPY tyl (t, id, tz, n, raw) FROM STDIN BINARY"
    assert copy_in(td, sql, data) == copy_in(pg, sql, data) == len(ROWS)
    assert rows(td, "tyl", "id") == rows(pg, "tyl", "id")


def test_binary_copy_to_stdout_is_refused_with_a_clear_error(both):
    _, td = both
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="FORMAT text or csv"):
        binary_of(td, "COPY ty TO STDOUT (FORMAT binary)")
    assert td.execute("SELECT 1").fetchone() == (1,)
