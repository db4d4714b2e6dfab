"""UPDATE … RETURNING and DELETE … RETURNING on row tables (issue 27), against PostgreSQL 15
as the oracle: the same statements on both servers by the simple and the extended protocol
(a job queue's claim and delete, subqueries, the table's alias, parameters, `*`); the
returned rows, their names, the command tags and the table after them must be
PostgreSQL's. An item that fails (an overflow) changes nothing; a rolled back statement
leaves nothing. A columnar table refuses RETURNING with 0A000 (tierdb's limit).

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


def test_a_columnar_table_refuses_returning():
    with engines.tierdb(BIN) as port, connect("tierdb", port) as c:
        c.execute("CREATE TABLE col (a INT)")
        c.execute("INSERT INTO col VALUES (1)")
        for sql in ["UPDATE col SET a = 2 RETURNING a", "DELETE FROM col RETURNING a"]:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert e.value.sqlstate == "0A000"
            assert "row tables" in str(e.value)
        assert c.execute("SELECT a FROM col").fetchall() == [(1,)]
