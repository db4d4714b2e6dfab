"""The SQLSTATE of a statement the planner refuses, against PostgreSQL 15 as the oracle
(issue 27): an uneven VALUES list, a column outside GROUP BY, an operator without a
matching type, an unknown function or parameter, ORDER BY past the select list, … each
sent to both servers after the same setup, and tierdb's code must be PostgreSQL's.
Clients act on the code (SQLAlchemy and psycopg raise by it, an ORM creates a missing
table on 42P01), so a wrong class misleads them: before, every such refusal was 42P01,
"undefined table". After every mistake the connection still answers.

Not compared: `WHERE text_column = 1`, where DataFusion casts the text to the number (22P02
for a text that is none) and PostgreSQL has no operator (42883).

Needs `tierdb` (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402
from test_catalog_keys import BIN  # noqa: E402

psycopg = pytest.importorskip("psycopg")

SETUP = [
    "CREATE TABLE t (a INT, b TEXT, d DATE)",
    "INSERT INTO t VALUES (1, 'x', '2024-01-01'), (2, 'y', NULL)",
    "CREATE TABLE r (id INT PRIMARY KEY, v TEXT)",
    "INSERT INTO r VALUES (1, 'one')",
]

# (statement, what PostgreSQL answers): the comment is the oracle's code, the test asks
# the oracle again.
MISTAKES = [
    "SELECT * FROM nope",                                      # 42P01
    "SELECT * FROM nosuch.t",                                  # 42P01
    "INSERT INTO t VALUES (1, 'x'), (2)",                      # 42601
    "INSERT INTO t (a) VALUES (1, 2)",                         # 42601
    "INSERT INTO t (a, b) SELECT 1",                           # 42601
    "SELECT a FROM t UNION SELECT a, b FROM t",                # 42601
    "SELECT a, b FROM t GROUP BY a",                           # 42803
    "SELECT b, count(*) FROM t GROUP BY a",                    # 42803
    "SELECT nosuchfn(a) FROM t",                               # 42883
    "SELECT a FROM t WHERE a = true",                          # 42883
    "SELECT a + b FROM t",                                     # 42883
    "SELECT sum(b) FROM t",                                    # 42883
    "SELECT upper(a, b) FROM t",                               # 42883
    "SELECT a FROM t ORDER BY 3",                              # 42P10
    "WITH x AS (SELECT 1), x AS (SELECT 2) SELECT * FROM x",   # 42712
    "INSERT INTO t (a, a) VALUES (1, 2)",                      # 42701
    "SELECT current_setting('nosuch.setting_x')",              # 42704
    "SELECT nope FROM t",                                      # 42703
    "SELECT t.nope FROM t",                                    # 42703
    "UPDATE t SET nope = 1",                                   # 42703
    "SELECT a FROM t WHERE a",                                 # 42804
    "SELECT * FROM t WHERE d = 'noon'",                        # 22007
    "SELECT 1/0",                                              # 22012
    "SELECT 'abc'::int",                                       # 22P02
    "INSERT INTO r VALUES (1, 'again')",                       # 23505
    "INSERT INTO r VALUES (NULL, 'x')",                        # 23502
    "SELEC 1",                                                 # 42601
]


def connect(port, tierdb):
    dsn = engines.tierdb_dsn(port) if tierdb else engines.pg_dsn(port)
    return psycopg.connect(dsn, autocommit=True)


@pytest.fixture(scope="module")
def codes():
    """{"postgres"|"tierdb": [SQLSTATE or "ok" per mistake]} after the same setup."""
    got = {}
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        for name, port in [("postgres", pg_port), ("tierdb", t_port)]:
            with connect(port, name == "tierdb") as c:
                for sql in SETUP:
                    c.execute(sql)
                out = []
                for sql in MISTAKES:
                    try:
                        c.execute(sql).fetchall()
                        out.append("ok")
                    except psycopg.Error as e:
                        out.append(e.sqlstate)
                    # The connection still answers after the mistake.
                    assert c.execute("SELECT 1").fetchone() == (1,), (name, sql)
                got[name] = out
    return got


@pytest.mark.parametrize("i", range(len(MISTAKES)), ids=MISTAKES)
def test_a_refused_statement_gets_postgresqls_sqlstate(codes, i):
    assert codes["postgres"][i] != "ok", f"PostgreSQL runs {MISTAKES[i]!r}: not a mistake"
    assert codes["tierdb"][i] == codes["postgres"][i], MISTAKES[i]
