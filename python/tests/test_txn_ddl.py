"""A transaction's own DDL after it wrote rows of the table (issue 27), against PostgreSQL
15 as the oracle: `alembic upgrade head` runs every migration in one transaction, so the
rows one migration inserts meet the next one's CREATE INDEX, ADD COLUMN, SET NOT NULL,
ALTER COLUMN TYPE of another table, or TRUNCATE. Each script runs on both servers in one
transaction; after every statement the answer (or SQLSTATE), then COMMIT's answer, the
tables' rows and lookups through the indexes must be PostgreSQL's.

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
    "CREATE TABLE c (x INT, y TEXT)",
    "INSERT INTO c VALUES (1, 'a')",
    "CREATE TABLE r (k INT PRIMARY KEY, v TEXT)",
    "INSERT INTO r VALUES (1, 'one'), (2, 'two'), (3, 'three')",
    "CREATE TABLE other (id INT PRIMARY KEY, n INT)",
    "INSERT INTO other VALUES (1, 10)",
]

# name -> (statements of one transaction, the queries after its COMMIT or ROLLBACK)
SCRIPTS = {
    # Rows inserted, updated and deleted, then indexes, columns and NOT NULL: all kept.
    "migrations": ([
        "INSERT INTO c VALUES (2, 'b'), (3, NULL)",
        "INSERT INTO r VALUES (4, 'four')",
        "UPDATE r SET v = 'uno' WHERE k = 1",
        "DELETE FROM r WHERE k = 2",
        "CREATE INDEX r_v ON r (v)",
        "ALTER TABLE r ADD COLUMN w INT",
        "ALTER TABLE c ADD COLUMN z INT",
        "ALTER TABLE c ALTER COLUMN x SET NOT NULL",
        "ALTER TABLE r ALTER COLUMN v SET NOT NULL",
        "CREATE UNIQUE INDEX r_vu ON r (v)",
        "INSERT INTO r VALUES (5, 'five', 55)",
        "SELECT k FROM r WHERE v = 'uno'",
        "SELECT k, v, w FROM r ORDER BY k",
        "SELECT x, y, z FROM c ORDER BY x",
        "ALTER TABLE other ALTER COLUMN n TYPE BIGINT",
        "ALTER TABLE r RENAME COLUMN w TO ww",
        "UPDATE r SET ww = k * 2 WHERE k < 4",
        "COMMIT",
    ], [
        "SELECT * FROM r ORDER BY k",
        "SELECT * FROM c ORDER BY x",
        "SELECT k FROM r WHERE v = 'uno'",
        "SELECT k FROM r WHERE v = 'one'",
        "SELECT k FROM r WHERE v = 'two'",
        "SELECT k FROM r WHERE v = 'four'",
        "SELECT k FROM r WHERE v = 'five'",
        "INSERT INTO r VALUES (6, 'uno')",                            # 23505 through r_vu
        "SELECT * FROM other",
    ]),
    # A unique index the transaction's own rows break: 23505, everything undone.
    "duplicate": ([
        "INSERT INTO r VALUES (7, 'dup'), (8, 'dup')",
        "CREATE UNIQUE INDEX r_dup ON r (v)",
        "COMMIT",
    ], [
        "SELECT * FROM r ORDER BY k",
        "SELECT count(*) AS n FROM pg_indexes WHERE indexname = 'r_dup'",
    ]),
    # A committed row's value taken by a row of the transaction that changed it first.
    "value moves": ([
        "UPDATE r SET v = 'old' || v WHERE k = 3",
        "INSERT INTO r VALUES (9, 'three')",
        "CREATE UNIQUE INDEX r_move ON r (v)",
        "COMMIT",
    ], [
        "SELECT * FROM r ORDER BY k",
        "SELECT k FROM r WHERE v = 'three'",
        "SELECT k FROM r WHERE v = 'oldthree'",
    ]),
    # NOT NULL the transaction's own rows break: 23502.
    "not null": ([
        "INSERT INTO c VALUES (NULL, 'n')",
        "ALTER TABLE c ALTER COLUMN x SET NOT NULL",
        "COMMIT",
    ], [
        "SELECT * FROM c ORDER BY x",
    ]),
    "not null, row table": ([
        "INSERT INTO r VALUES (10, NULL)",
        "ALTER TABLE r ALTER COLUMN v SET NOT NULL",
        "COMMIT",
    ], [
        "SELECT * FROM r ORDER BY k",
    ]),
    # TRUNCATE takes what the transaction wrote before it, not what it writes after.
    "truncate": ([
        "INSERT INTO c VALUES (11, 'gone')",
        "INSERT INTO r VALUES (11, 'gone')",
        "TRUNCATE c, r",
        "INSERT INTO c VALUES (12, 'kept')",
        "INSERT INTO r VALUES (12, 'kept')",
        "SELECT * FROM r ORDER BY k",
        "COMMIT",
    ], [
        "SELECT * FROM c ORDER BY x",
        "SELECT * FROM r ORDER BY k",
    ]),
    # ADD COLUMN … DEFAULT on a row table: the rows before it (committed, and this
    # transaction's own) read the value, evaluated once; DROP DEFAULT after keeps it for
    # them (Django's AddField), new rows take what they are given.
    "add column default": ([
        "INSERT INTO r VALUES (5, 'five')",
        "ALTER TABLE r ADD COLUMN n INT DEFAULT 0 NOT NULL",
        "ALTER TABLE r ALTER COLUMN n DROP DEFAULT",
        "ALTER TABLE r ADD COLUMN t TEXT DEFAULT 'x' || 'y'",
        "ALTER TABLE r ADD COLUMN d NUMERIC(6,2) DEFAULT 1.5",
        "ALTER TABLE r ADD COLUMN ts TIMESTAMP DEFAULT '2024-01-02 03:04:05'",
        "ALTER TABLE r ADD COLUMN z INT DEFAULT NULL",
        "SELECT * FROM r ORDER BY k",
        "INSERT INTO r (k, v) VALUES (6, 'six')",                       # 23502: n
        "COMMIT",
    ], [
        "SELECT count(*) AS n FROM r",
    ]),
    "add column default, committed": ([
        "ALTER TABLE r ADD COLUMN n INT DEFAULT 0 NOT NULL",
        "ALTER TABLE r ALTER COLUMN n DROP DEFAULT",
        "ALTER TABLE r ADD COLUMN t TEXT DEFAULT 'x' || 'y'",
        "INSERT INTO r (k, v, n) VALUES (6, 'six', 9)",
        "UPDATE r SET n = n + 1 WHERE k = 1",
        "CREATE INDEX r_n ON r (n)",
        "SELECT k FROM r WHERE n = 0 ORDER BY k",
        "ALTER TABLE r RENAME COLUMN t TO tt",
        "COMMIT",
    ], [
        "SELECT * FROM r ORDER BY k",
        "SELECT k FROM r WHERE n = 0 ORDER BY k",
        "SELECT k FROM r WHERE n = 1 ORDER BY k",
        "ALTER TABLE r ALTER COLUMN n TYPE BIGINT",
        "ALTER TABLE r DROP COLUMN tt",
        "SELECT * FROM r ORDER BY k",
        "ALTER TABLE r ADD COLUMN bad INT NOT NULL",                     # 23502
    ]),
    # ROLLBACK TO SAVEPOINT takes the index back and keeps the rows before it.
    "savepoint": ([
        "INSERT INTO r VALUES (13, 'thirteen')",
        "INSERT INTO c VALUES (13, 'thirteen')",
        "SAVEPOINT p",
        "CREATE INDEX r_sp ON r (v)",
        "ALTER TABLE c ADD COLUMN q INT",
        "INSERT INTO r VALUES (14, 'fourteen')",
        "ROLLBACK TO SAVEPOINT p",
        "INSERT INTO r VALUES (15, 'fifteen')",
        "COMMIT",
    ], [
        "SELECT * FROM r ORDER BY k",
        "SELECT * FROM c ORDER BY x",
        "SELECT count(*) AS n FROM pg_indexes WHERE indexname = 'r_sp'",
    ]),
    # pg_dump's data restored in one transaction (psql -1, pg_restore -1): the table
    # created, loaded, then given its key and indexes; the COMMIT failed with 40001.
    "restore in one transaction": ([
        "DROP TABLE IF EXISTS pd",
        "CREATE TABLE pd (a INT NOT NULL, b TEXT)",
        "INSERT INTO pd VALUES (1, 'x'), (2, 'y')",
        "ALTER TABLE ONLY pd ADD CONSTRAINT pd_pkey PRIMARY KEY (a)",
        "CREATE INDEX pd_b ON pd (b)",
        "INSERT INTO pd VALUES (3, 'z')",
        "UPDATE pd SET b = 'q' WHERE a = 1",
        "SELECT * FROM pd ORDER BY a",
        "COMMIT",
    ], [
        "SELECT * FROM pd ORDER BY a",
        "SELECT a FROM pd WHERE b = 'q'",
    ]),
    # The same on a table with committed rows, rolled back: the rows and no key.
    "key added then rolled back": ([
        "INSERT INTO c VALUES (2, 'b')",
        "ALTER TABLE c ALTER COLUMN x SET NOT NULL",
        "ALTER TABLE c ADD PRIMARY KEY (x)",
        "INSERT INTO c VALUES (3, 'c')",
        "INSERT INTO c VALUES (3, 'd')",
    ], [
        "SELECT * FROM c ORDER BY x",
        "INSERT INTO c VALUES (1, 'again')",
        "SELECT count(*) FROM c",
    ]),
}


def run(name, port, script, after):
    with connect(name, port) as c:
        c.execute("DROP TABLE IF EXISTS c, r, other")
        for sql in SETUP:
            c.execute(sql)
        c.autocommit = False
        got = []
        for sql in script:
            if sql == "COMMIT":
                try:
                    c.commit()
                    got.append(("committed",))
                except psycopg.Error as e:
                    got.append(("error", e.sqlstate))
                continue
            got.append(answer(c, sql, None))
        c.rollback()
        c.autocommit = True
        got += [answer(c, q, None) for q in after]
        return got


@pytest.fixture(scope="module")
def ports():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        yield pg_port, t_port


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_own_ddl_after_own_writes_as_postgresql(ports, script):
    statements, after = SCRIPTS[script]
    pg = run("postgres", ports[0], statements, after)
    tdb = run("tierdb", ports[1], statements, after)
    labels = statements + after
    for label, p, t in zip(labels, pg, tdb):
        assert t == p, f"{script}: {label}"


# Another session's DDL, not yet committed. PostgreSQL makes the writer wait for it (it
# holds the table's lock until its transaction ends); tierdb shows it at once, so a write
# made against it must not commit: ROLLBACK would take the definition back from under the
# rows (a row of three columns in a table of two read as damaged; rows put in a table whose
# creation is undone went with it). The write fails with 40001 instead (ddlundo.rs
# invariant 7) and, retried after the DDL's transaction ended, commits.
OTHERS_DDL = {
    "create": ("CREATE TABLE t2 (id INT PRIMARY KEY, v INT)", "INSERT INTO t2 VALUES (1, 1)"),
    "add column": ("ALTER TABLE r ADD COLUMN x INT", "INSERT INTO r (k, v, x) VALUES (9, 'n', 5)"),
    "add column, columnar": ("ALTER TABLE c ADD COLUMN z INT", "INSERT INTO c VALUES (9, 'n', 5)"),
    "rename": ("ALTER TABLE r RENAME TO r2", "UPDATE r2 SET v = 'x' WHERE k = 1"),
}


@pytest.mark.parametrize("end", ["rollback", "commit"])
@pytest.mark.parametrize("case", list(OTHERS_DDL))
def test_a_write_against_another_sessions_uncommitted_ddl_does_not_commit(ports, case, end):
    ddl, write = OTHERS_DDL[case]
    with connect("tierdb", ports[1]) as a, connect("tierdb", ports[1]) as b:
        a.execute("DROP TABLE IF EXISTS c, r, other, t2, r2")
        for sql in SETUP:
            a.execute(sql)
        before = {t: answer(b, f"SELECT * FROM {t} ORDER BY 1", None) for t in ("c", "r")}
        a.autocommit = False
        a.execute(ddl)
        assert answer(b, write, None) == ("error", "40001")
        b.autocommit = False  # the same inside a transaction, at its COMMIT or before
        try:
            b.execute(write)
            b.commit()
            pytest.fail("committed against uncommitted DDL")
        except psycopg.Error as e:
            assert e.sqlstate == "40001", e
        b.rollback()
        b.autocommit = True
        (a.rollback if end == "rollback" else a.commit)()
        a.autocommit = True
        # Nothing was lost or damaged, and the write now commits.
        if end == "rollback":
            assert {t: answer(b, f"SELECT * FROM {t} ORDER BY 1", None) for t in ("c", "r")} == before
        else:
            assert answer(b, write, None)[0] != "error"
            for t in ("c", "r", "r2", "t2"):
                if case.startswith(("create", "rename")) or t in ("c", "r"):
                    got = answer(b, f"SELECT * FROM {t} ORDER BY 1", None)
                    assert got[0] != "error" or got[1] == "42P01", (t, got)
