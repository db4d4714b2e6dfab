"""UPDATE … RETURNING and DELETE … RETURNING on row tables (issue 27), against PostgreSQL 15
as the oracle: the same statements on both servers by the simple and the extended protocol
(a job queue's claim and delete, subqueries, the table's alias, parameters, `*`); the
returned rows, their names, the command tags and the table after them must be
PostgreSQL's. An item that fails (an overflow) changes nothing; a rolled back statement
leaves nothing. The same on a columnar table (no primary key), whose segments are rewritten.

Needs `tierdb` (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402
from test_catalog_keys import BIN  # noqa: E402
from test_returning import answer, connect  # noqa: E402

psycopg = pytest.importorskip("psycopg")

SETUP = [
    "CREATE TABLE jobs (id SERIAL PRIMARY KEY, state VARCHAR(10) NOT NULL DEFAULT 'new', "
    "tries INT NOT NULL DEFAULT 0, payload TEXT)",
    "CREATE INDEX jobs_state ON jobs (state)",
    "INSERT INTO jobs (payload) VALUES ('a'), ('b'), ('c'), ('d'), ('e')",
]

STATEMENTS = [
    ("UPDATE jobs SET state = 'running', tries = tries + 1 WHERE id = (SELECT min(id) FROM jobs "
     "WHERE state = 'new') RETURNING id, state, tries", None),
    ("UPDATE jobs SET tries = tries + 1 WHERE state = 'new' AND id <= 3 RETURNING *", None),
    ("UPDATE jobs AS j SET payload = upper(j.payload) WHERE j.id = 4 RETURNING j.id, "
     "j.payload || '!' AS shout", None),
    ("UPDATE jobs SET tries = %s WHERE id = %s RETURNING id, tries * 2 AS twice", (7, 5)),
    ("UPDATE jobs SET state = 'done' WHERE false RETURNING id", None),
    # A key compared with NULL is never true: nothing changes (tierdb changed every row
    # once the optimizer had simplified the pushed-down `id = NULL` to NULL).
    ("UPDATE jobs SET tries = 99 WHERE id IN (CAST(NULL AS INT)) RETURNING id", None),
    ("DELETE FROM jobs WHERE id IN (NULL) RETURNING id", None),
    ("DELETE FROM jobs WHERE id = %s RETURNING id", (None,)),
    ("DELETE FROM jobs WHERE state = 'running' RETURNING *", None),
    ("DELETE FROM jobs WHERE id = %s RETURNING id, payload", (5,)),
    ("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE tries > 0 ORDER BY id LIMIT 1) "
     "RETURNING id", None),
    # An item that overflows: nothing changes.
    ("UPDATE jobs SET tries = 1 WHERE id = 3 RETURNING tries + 2147483647", None),   # 22003
    ("DELETE FROM jobs WHERE id = 3 RETURNING tries + 2147483647", None),            # 22003
    ("UPDATE jobs SET tries = 1 RETURNING nosuch", None),                             # 42703
]

QUERIES = ["SELECT * FROM jobs ORDER BY id"]


@pytest.fixture(scope="module")
def answers():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        out = {}
        for name, port in [("postgres", pg_port), ("tierdb", t_port)]:
            with connect(name, port) as c:
                for sql in SETUP:
                    c.execute(sql)
                got = [answer(c, sql, params) for sql, params in STATEMENTS]
                got += [answer(c, sql, None) for sql in QUERIES]
                c.autocommit = False
                got.append(answer(c, "DELETE FROM jobs RETURNING id", None))
                got.append(answer(c, "SELECT count(*) FROM jobs", None))
                c.rollback()
                c.autocommit = True
                got += [answer(c, sql, None) for sql in QUERIES]
            out[name] = got
        yield out


AFTER = 3


@pytest.mark.parametrize("i", range(len(STATEMENTS) + len(QUERIES) + AFTER))
def test_dml_returning_answers_as_postgresql(answers, i):
    label = (STATEMENTS + [(q, None) for q in QUERIES] + [("transaction", None)] * AFTER)[i][0]
    assert answers["tierdb"][i] == answers["postgres"][i], label


def test_returned_rows_were_changed(answers):
    """Not only PostgreSQL's answer: the claimed job is the one stored as running, and the
    failed statements (the last three) were refused."""
    claimed = answers["tierdb"][0][2]
    assert claimed == [("1", "running", "1")]
    for i in range(len(STATEMENTS) - 3, len(STATEMENTS)):
        assert answers["tierdb"][i][0] == "error", STATEMENTS[i][0]


COLUMNAR = [
    "CREATE TABLE col (a INT, b TEXT, n INT NOT NULL)",
    "INSERT INTO col VALUES (1, 'x', 1), (2, 'y', 2), (3, NULL, 3), (4, 'w', 4)",
]

COLUMNAR_STATEMENTS = [
    "UPDATE col SET b = upper(b), n = n * 10 WHERE a >= 2 RETURNING a, b, n",
    "UPDATE col SET n = n + 1 WHERE a IN (SELECT a FROM col WHERE b IS NULL) RETURNING *",
    "UPDATE col AS c SET b = 'z' WHERE c.a = 9 RETURNING c.a",
    "DELETE FROM col WHERE a = (SELECT max(a) FROM col) RETURNING a, b || '!' AS shout",
    "UPDATE col SET n = NULL WHERE a = 1 RETURNING a",                 # 23502
    "UPDATE col SET n = 1 WHERE a = 1 RETURNING n + 2147483647",       # 22003
    "DELETE FROM col RETURNING nosuch",                                # 42703
    "SELECT * FROM col ORDER BY a",
    "DELETE FROM col RETURNING *",
    "SELECT count(*) FROM col",
]


def unordered(a):
    """An answer with its rows sorted: RETURNING gives them in the order the table is
    read, which is PostgreSQL's heap order there and the segments' order here."""
    if a[0] == "rows" and a[2] is not None:
        return a[:2] + (sorted(a[2]),) + a[3:]
    return a


@pytest.fixture(scope="module")
def columnar_answers():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        out = {}
        for name, port in [("postgres", pg_port), ("tierdb", t_port)]:
            with connect(name, port) as c:
                for sql in COLUMNAR:
                    c.execute(sql)
                out[name] = [unordered(answer(c, sql, None)) for sql in COLUMNAR_STATEMENTS]
        yield out


@pytest.mark.parametrize("i", range(len(COLUMNAR_STATEMENTS)))
def test_columnar_dml_returning_as_postgresql(columnar_answers, i):
    """A table without a primary key (segments rewritten): the same rows, tags and errors;
    a failed statement changes nothing."""
    assert columnar_answers["tierdb"][i] == columnar_answers["postgres"][i], \
        COLUMNAR_STATEMENTS[i]
