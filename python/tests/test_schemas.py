"""Schemas other than `public` (issue 27), against PostgreSQL 15 as the oracle: the same
statements on both servers (tables, a row table with a SERIAL key, a UNIQUE constraint and
an index, a view, a table of the same name in `public`), then the rows of every query,
psql's `\\dn+`, `\\dt`, `\\d`, `\\dv` and `\\ds` of the schema, pg_dump's statements for it
(`pg_dump -n`), and the SQLSTATE of each mistake must be PostgreSQL's. A pg_dump of the
tierdb database restores with psql into a fresh tierdb database with the same tables,
rows and keys; DROP SCHEMA … CASCADE leaves `public` as it was. A session's search path resolves
unqualified names, CREATE's and COPY's as PostgreSQL does.

Needs `tierdb` (TIERDB_BIN), psql, pg_dump and PostgreSQL 15 (scripts/postgres.sh)."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402
from test_catalog_keys import BIN, dump, engines_tierdb_at, key_statements, psql  # noqa: E402

psycopg = pytest.importorskip("psycopg")

# One statement each, the same on both servers.
SETUP = [
    "CREATE SCHEMA an",
    "CREATE SCHEMA IF NOT EXISTS an",
    "COMMENT ON SCHEMA an IS 'analytics'",
    "CREATE TABLE an.t (a INT, b VARCHAR(20), c NUMERIC(10,2))",
    "CREATE TABLE t (a INT, b TEXT)",
    "INSERT INTO an.t VALUES (1, 'x', 1.50), (2, 'y', NULL), (3, 'z', 3.25)",
    "INSERT INTO t VALUES (1, 'public one'), (2, 'public two')",
    "CREATE TABLE an.r (id SERIAL PRIMARY KEY, v TEXT UNIQUE, n INT DEFAULT 7)",
    "INSERT INTO an.r (v) VALUES ('a'), ('b'), ('c')",
    "CREATE INDEX r_n ON an.r (n)",
    "CREATE VIEW an.v AS SELECT a, b FROM an.t WHERE a > 1",
    "COMMENT ON TABLE an.t IS 'facts'",
    # Writes name the schema's table, never public's of the same name.
    "UPDATE an.t SET b = 'changed' WHERE a IN (SELECT a FROM t WHERE b = 'public one')",
    "DELETE FROM an.t WHERE a = 3",
    "UPDATE an.r SET n = 9 WHERE id = 2",
    "DELETE FROM an.r WHERE v = 'c'",
    "INSERT INTO t SELECT a + 10, b FROM an.t",
    "ALTER TABLE an.t ADD COLUMN d INT",
    "CREATE TABLE an.gone (x INT)",
    "ALTER TABLE an.gone RENAME TO kept",
]

QUERIES = [
    "SELECT * FROM an.t ORDER BY a",
    "SELECT * FROM t ORDER BY a",
    "SELECT * FROM public.t ORDER BY a",
    "SELECT * FROM an.r ORDER BY id",
    "SELECT * FROM an.r WHERE n = 9",
    "SELECT * FROM an.v ORDER BY a",
    "SELECT p.b, s.b FROM t p JOIN an.t s ON p.a = s.a ORDER BY 1",
    "SELECT count(*) FROM an.kept",
    "SELECT nextval('an.r_id_seq')",
    "SELECT table_schema, table_name FROM information_schema.tables "
    "WHERE table_schema IN ('an', 'public') ORDER BY 1, 2",
    "SELECT table_name, column_name, data_type, character_maximum_length, numeric_precision "
    "FROM information_schema.columns WHERE table_schema = 'an' ORDER BY 1, ordinal_position",
    "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname IN ('an', 'public') ORDER BY 1",
    "SELECT obj_description(n.oid, 'pg_namespace') FROM pg_catalog.pg_namespace n "
    "WHERE nspname = 'an'",
]

# A mistake each, with the SQLSTATE PostgreSQL answers.
MISTAKES = [
    "CREATE SCHEMA an",                  # 42P06
    "CREATE TABLE nosuch.t (a INT)",     # 3F000
    "SELECT * FROM nosuch.t",            # 42P01
    "SELECT * FROM an.nosuch",           # 42P01
    "DROP SCHEMA an",                    # 2BP01: it is not empty
    "DROP SCHEMA nosuch",                # 3F000
    "CREATE SCHEMA pg_mine",             # 42939
]


def connect(name, port):
    dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
    return psycopg.connect(dsn, autocommit=True)


@contextlib.contextmanager
def servers_after(setup):
    """PostgreSQL 15 and tierdb, each after the statements of `setup`: {name: (port, user,
    password, database)}."""
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        made = {}
        for name, port, user, password in [
            ("postgres", pg_port, "postgres", ""),
            ("tierdb", t_port, "tierdb", engines.PASSWORD),
        ]:
            with connect(name, port) as c:
                for sql in setup:
                    c.execute(sql)
            made[name] = (port, user, password, "postgres" if name == "postgres" else "tierdb")
        yield made


@pytest.fixture(scope="module")
def servers():
    with servers_after(SETUP) as made:
        yield made


def run_all(server_name, server, statements):
    out = []
    with connect(server_name, server[0]) as c:
        for sql in statements:
            try:
                out.append(("rows", [tuple(str(v) for v in r) for r in c.execute(sql).fetchall()]))
            except psycopg.Error as e:
                out.append(("error", e.sqlstate))
    return out


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_answer_as_postgresql(servers, sql):
    got = {name: run_all(name, s, [sql]) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got
    assert got["tierdb"][0][0] == "rows", got


def test_mistakes_fail_with_postgresqls_sqlstate(servers):
    got = {name: run_all(name, s, MISTAKES) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], list(zip(MISTAKES, got["tierdb"], got["postgres"]))
    assert all(kind == "error" for kind, _ in got["tierdb"]), got


# A search path through a schema: one session's statements, in order, the same on both
# servers. Names resolve to the first schema of the path holding them (a table of `sp`
# hides public's `t`), CREATE goes to the first that exists, a view keeps the relations it
# was created over, CTEs come first, COPY finds its table by the path, and a path without
# public hides public's relations.
SEARCH_PATH = [
    "CREATE SCHEMA sp",
    "SET search_path TO nosuch, sp, public",
    "SHOW search_path",
    "SELECT current_schema(), current_schemas(false), current_setting('search_path')",
    "CREATE TABLE t (a INT PRIMARY KEY, b TEXT)",
    "INSERT INTO t VALUES (1, 'sp one'), (5, 'sp five')",
    "SELECT * FROM t ORDER BY a",
    "SELECT * FROM public.t ORDER BY a",
    "CREATE TABLE s (id SERIAL PRIMARY KEY, v TEXT)",
    "INSERT INTO s (v) VALUES ('x'), ('y')",
    "COPY s (id, v) FROM STDIN",
    "SELECT * FROM s ORDER BY id",
    "SELECT nextval('s_id_seq'), currval('s_id_seq')",
    "SELECT setval('s_id_seq', 20)",
    "UPDATE t SET b = 'changed' WHERE a IN (SELECT a FROM public.t)",
    "DELETE FROM t WHERE a = 5",
    "INSERT INTO t SELECT id + 10, v FROM s",
    "SELECT * FROM t ORDER BY a",
    "CREATE VIEW w AS SELECT a, b FROM t WHERE a < 12",
    "SELECT table_schema, table_name FROM information_schema.tables "
    "WHERE table_schema IN ('sp', 'public') ORDER BY 1, 2",
    "WITH t AS (SELECT 42 AS a) SELECT * FROM t",
    "SELECT p.b, s.b FROM public.t p JOIN t s ON p.a = s.a ORDER BY 1",
    "ALTER TABLE t ADD COLUMN c INT",
    "SET search_path TO public",
    "SELECT * FROM sp.w ORDER BY a",
    "SELECT * FROM t ORDER BY a",
    "SET search_path = 'sp'",
    "SELECT count(*) FROM w",
    "SELECT * FROM an.t WHERE a = 1",
    "SELECT count(*) FROM kept",
    "TRUNCATE s",
    "DROP VIEW w",
    "DROP TABLE t",
    "SET search_path TO nosuch",
    "CREATE TABLE z (a INT)",
    "RESET search_path",
    "SHOW search_path",
    "SELECT * FROM t ORDER BY a",
    "SELECT table_schema, table_name FROM information_schema.tables "
    "WHERE table_schema IN ('sp', 'public') ORDER BY 1, 2",
    "DROP SCHEMA sp CASCADE",
]


def test_a_search_path_resolves_names_as_postgresql(servers):
    got = {}
    for name, server in servers.items():
        out = []
        with connect(name, server[0]) as c:
            for sql in SEARCH_PATH:
                try:
                    if sql.startswith("COPY"):
                        with c.cursor().copy(sql) as copy:
                            copy.write_row((7, "copied"))
                        out.append(("copied",))
                        continue
                    cur = c.execute(sql)
                    rows = cur.fetchall() if cur.description else []
                    out.append(("rows", [tuple(str(v) for v in r) for r in rows]))
                except psycopg.Error as e:
                    out.append(("error", e.sqlstate))
        got[name] = out
    assert got["tierdb"] == got["postgres"], [
        (sql, t, p) for sql, t, p in zip(SEARCH_PATH, got["tierdb"], got["postgres"]) if t != p
    ]
    # The script means what it says: names resolved to sp's relations, the view kept.
    assert ("rows", [("1", "changed"), ("11", "x"), ("12", "y"), ("17", "copied")]) in got["tierdb"]
    assert ("rows", [("3", "3")]) in got["tierdb"]
    assert got["tierdb"][SEARCH_PATH.index("CREATE TABLE z (a INT)")] == ("error", "3F000")


# Moving relations between schemas, the same on both servers: a row table with a SERIAL
# key, a UNIQUE constraint and an index goes with its sequence and indexes (inserts draw the
# next values), a columnar table, a view and a free sequence move, a schema is renamed with
# everything in it, and each mistake fails with PostgreSQL's SQLSTATE, changing nothing.
# (A view keeps naming what it named: moving the table it reads breaks it in tierdb, where
# PostgreSQL's views follow by OID; so the view here moves before its table.)
SET_SCHEMA = [
    "CREATE SCHEMA m1",
    "CREATE SCHEMA m2",
    "CREATE TABLE mr (id SERIAL PRIMARY KEY, v TEXT UNIQUE, n INT)",
    "CREATE INDEX mr_n ON mr (n)",
    "INSERT INTO mr (v, n) VALUES ('a', 1), ('b', 2)",
    "CREATE TABLE mc (x INT)",
    "INSERT INTO mc VALUES (1)",
    "CREATE VIEW mcv AS SELECT x FROM mc",
    "CREATE SEQUENCE mfree",
    "SELECT nextval('mfree')",
    "ALTER TABLE mr SET SCHEMA m1",
    "INSERT INTO m1.mr (v, n) VALUES ('c', 3)",
    "SELECT * FROM m1.mr ORDER BY id",
    "SELECT * FROM m1.mr WHERE n = 3",
    "INSERT INTO m1.mr (v, n) VALUES ('c', 5)",
    "SELECT * FROM mr",
    "SELECT c.relname, n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
    "ON n.oid = c.relnamespace WHERE c.relname LIKE 'mr%' ORDER BY 1",
    "ALTER VIEW mcv SET SCHEMA m1",
    "SELECT * FROM m1.mcv",
    "ALTER TABLE mc SET SCHEMA m1",
    "ALTER SEQUENCE mfree SET SCHEMA m2",
    "SELECT nextval('m2.mfree')",
    "ALTER TABLE m1.mc SET SCHEMA m2",
    "ALTER TABLE IF EXISTS nosuch SET SCHEMA m1",
    "ALTER TABLE nosuch SET SCHEMA m1",
    "ALTER TABLE m1.mr SET SCHEMA nosuch",
    "CREATE TABLE m2.mr (k INT)",
    "ALTER TABLE m1.mr SET SCHEMA m2",
    "ALTER SCHEMA m1 RENAME TO m3",
    "INSERT INTO m3.mr (v, n) VALUES ('d', 4)",
    "SELECT * FROM m3.mr ORDER BY id",
    "SELECT count(*) FROM m1.mr",
    "SELECT table_schema, table_name FROM information_schema.tables "
    "WHERE table_schema LIKE 'm_' ORDER BY 1, 2",
    "ALTER SCHEMA m2 RENAME TO m3",
    "ALTER SCHEMA nosuch RENAME TO m4",
    "ALTER SCHEMA m3 RENAME TO pg_x",
    "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname LIKE 'm_' ORDER BY 1",
    "DROP SCHEMA m3 CASCADE",
    "DROP SCHEMA m2 CASCADE",
]


def test_relations_move_between_schemas_as_in_postgresql(servers):
    got = {name: run_all(name, server, SET_SCHEMA) for name, server in servers.items()}
    assert got["tierdb"] == got["postgres"], [
        (sql, t, p) for sql, t, p in zip(SET_SCHEMA, got["tierdb"], got["postgres"]) if t != p
    ]
    # The script means what it says: the moved table kept its rows and its sequence.
    assert ("rows", [("1", "a", "1"), ("2", "b", "2"), ("3", "c", "3"), ("5", "d", "4")]) \
        in got["tierdb"], got["tierdb"]


def without_owner(text):
    """psql's listings with each server's own user as owner made `-`, and the padding that
    the owner's width changes squeezed out."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\b(postgres|tierdb)\b", "-", line)
        line = re.sub(r" +", " ", line).strip()
        if not re.fullmatch(r"[-+]*", line):
            lines.append(line)
    return lines


@pytest.mark.parametrize("command", ["\\dn+ an", "\\dt an.*", "\\d an.t", "\\d an.r",
                                     "\\dv an.*", "\\ds an.*", "\\di an.*"])
def test_psql_describes_the_schema_as_postgresql(servers, command):
    got = {name: without_owner(psql(s, command)) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got


def test_pg_dump_of_the_schema_writes_postgresqls_statements(servers):
    def schema_statements(text):
        made = sorted(re.findall(r"^(CREATE (?:SCHEMA|TABLE|VIEW|SEQUENCE) \S+)", text, re.M))
        comments = sorted(line for line in text.splitlines() if line.startswith("COMMENT ON"))
        return made, comments, key_statements(text)
    got = {name: schema_statements(dump(s, "-n", "an")) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got
    assert "CREATE SCHEMA an;" in got["tierdb"][0], got


def test_a_dump_restores_the_schema(servers, tmp_path):
    text = dump(servers["tierdb"])
    fresh = str(tmp_path / "restored")
    subprocess.run([BIN, "sql", fresh, "--create", "-c", "SELECT 1"], check=True,
                   capture_output=True)
    with engines_tierdb_at(fresh) as port:
        restored = (port, "tierdb", engines.PASSWORD, "tierdb")
        p = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p",
                            str(port), "-U", "tierdb", "tierdb"], input=text,
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PGPASSWORD=engines.PASSWORD))
        assert p.returncode == 0, p.stderr
        for command in ["\\dn+ an", "\\d an.t", "\\d an.r", "\\d+ an.v", "\\ds an.*"]:
            assert psql(restored, command) == psql(servers["tierdb"], command), command
        for sql in QUERIES[:7]:
            assert psql(restored, sql) == psql(servers["tierdb"], sql), sql
        with psycopg.connect(engines.tierdb_dsn(port), autocommit=True) as c:
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO an.r (id, v) VALUES (1, 'dup')")
        # The dump's own dump is the same, byte for byte (but for its random guard).
        def stable(t):
            return [line for line in t.splitlines() if "restrict" not in line]
        assert stable(dump(restored)) == stable(text)


def test_drop_schema_cascade_leaves_public_as_it_was(servers):
    statements = ["DROP SCHEMA an CASCADE", "SELECT * FROM t ORDER BY a",
                  "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname = 'an'",
                  "SELECT * FROM an.t", "CREATE SCHEMA an", "SELECT count(*) FROM "
                  "information_schema.tables WHERE table_schema = 'an'", "DROP SCHEMA an"]
    got = {name: run_all(name, s, statements) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got
    assert got["tierdb"][3] == ("error", "42P01"), got
