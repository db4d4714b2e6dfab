"""A row table's PRIMARY KEY, indexes and column DEFAULTs as tools read them from
pg_catalog, against PostgreSQL 15 as the oracle: the same tables are made on both
servers, then psql's `\\d` (columns, defaults, the "Indexes:" list) and `\\di` must print
the same, and pg_dump 15 must write the same key and index statements. A dump of tierdb
restored with psql into a fresh tierdb database gives back the same tables: the rows,
row tables again (a duplicate key is refused with 23505), their indexes and defaults,
and a SERIAL column's sequence (CREATE SEQUENCE, OWNED BY, the default added after it,
its value by setval): the restored table draws new keys past the old ones. COMMENT ON
TABLE and COLUMN are kept: pg_description, obj_description, col_description and
pg_dump's COMMENT statements are PostgreSQL's.

Needs `tierdb` (TIERDB_BIN), psql, pg_dump and PostgreSQL 15 (scripts/postgres.sh)."""

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

psycopg = pytest.importorskip("psycopg")

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))
PG_DUMP = shutil.which("pg_dump") or "/usr/lib/postgresql/15/bin/pg_dump"

# One statement each (DDL commits at once in tierdb); the same on both servers.
SETUP = [
    "CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR(20) NOT NULL, bal NUMERIC(10,2), "
    "tier INT DEFAULT 3, email TEXT UNIQUE)",
    "INSERT INTO acct (id, owner, bal, email) VALUES (1, 'ann', 1.50, 'a@x'), (2, 'bob', 2.25, NULL), "
    "(3, 'cy', NULL, NULL)",
    "CREATE INDEX acct_owner ON acct (owner)",
    "CREATE UNIQUE INDEX acct_owner_bal ON acct (owner, bal)",
    'CREATE TABLE "Pair" (a INT, "B" TEXT, c INT NOT NULL, PRIMARY KEY (a, "B"))',
    "INSERT INTO \"Pair\" VALUES (1, 'x', 10), (1, 'y', 20)",
    'ALTER TABLE "Pair" ADD CONSTRAINT pair_c UNIQUE (c)',
    "CREATE TABLE ser (id SERIAL PRIMARY KEY, v TEXT)",
    "INSERT INTO ser (v) VALUES ('a'), ('b')",
    "CREATE SEQUENCE free_seq INCREMENT BY 3 START WITH 7",
    "CREATE TABLE plain (n BIGINT, s TEXT)",
    "INSERT INTO plain VALUES (1, 'one')",
    # Comments, kept in the catalog and listed in pg_description.
    "COMMENT ON TABLE acct IS 'accounts, one per owner'",
    "COMMENT ON COLUMN acct.bal IS 'balance in €'",
    "COMMENT ON COLUMN plain.s IS 'it''s text'",
    "COMMENT ON COLUMN plain.n IS 'gone soon'",
    "COMMENT ON COLUMN plain.n IS NULL",
]


@pytest.fixture(scope="module")
def servers():
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        made = {}
        for name, port, dsn, user, password in [
            ("postgres", pg_port, engines.pg_dsn(pg_port), "postgres", ""),
            ("tierdb", t_port, engines.tierdb_dsn(t_port), "tierdb", engines.PASSWORD),
        ]:
            with psycopg.connect(dsn, autocommit=True) as c:
                for sql in SETUP:
                    c.execute(sql)
            made[name] = (port, user, password, "postgres" if name == "postgres" else "tierdb")
        yield made


def psql(server, *commands):
    port, user, password, db = server
    args = ["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", user, db]
    for c in commands:
        args += ["-c", c]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PGPASSWORD=password))
    assert p.returncode == 0, p.stderr
    return p.stdout


def dump(server, *options):
    port, user, password, db = server
    p = subprocess.run([PG_DUMP, "-h", "127.0.0.1", "-p", str(port), "-U", user, *options, db],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PGPASSWORD=password))
    assert p.returncode == 0, p.stderr
    return p.stdout


def key_statements(text):
    """The statements of a dump that make keys, indexes and sequences, one string each.
    A default's sequence name is compared without its schema: PostgreSQL writes the
    regclass as the dump's empty search path shows it (`'public.ser_id_seq'`), tierdb as
    psql's `\\d` shows it."""
    out, current = [], None
    for line in text.splitlines():
        if line.startswith(("ALTER TABLE ONLY", "CREATE INDEX", "CREATE UNIQUE INDEX",
                            "CREATE SEQUENCE", "ALTER SEQUENCE")):
            current = [line]
        elif current is not None:
            current.append(line.strip())
        if current is not None and line.endswith(";"):
            out.append(" ".join(current))
            current = None
    return sorted(s.replace("nextval('public.", "nextval('") for s in out)


@pytest.mark.parametrize("table", ["acct", '"Pair"', "ser", "plain"])
def test_describe_prints_columns_defaults_and_indexes_as_postgresql(servers, table):
    got = {name: psql(s, f"\\d {table}") for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got


def test_index_list_is_postgresqls(servers):
    # The owner column differs (each server's own user); the rest must not.
    def rows(text):
        return [re.sub(r"\|[^|]*\|([^|]*)$", r"|\1", line) for line in text.splitlines()
                if "|" in line]
    got = {name: rows(psql(s, "\\di")) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got
    assert len(got["tierdb"]) == 8, got  # the header and 7 indexes


def test_pg_dump_writes_the_keys_and_indexes_postgresql_writes(servers):
    got = {name: key_statements(dump(s)) for name, s in servers.items()}
    assert got["tierdb"] == got["postgres"], got
    # 7 keys and indexes; 2 sequences, the SERIAL one's OWNED BY, its default.
    assert len(got["tierdb"]) == 11, got


def test_pg_dump_of_chosen_tables_dumps_those_as_postgresql(servers):
    """`pg_dump -t` and `-T` (their name-pattern query writes `OPERATOR(pg_catalog.=) ANY`)."""
    def made(text):
        return sorted(re.findall(r"^CREATE (?:TABLE|SEQUENCE) (\S+)", text, re.M))
    for options in [("-t", "acct"), ("-t", "pla*"), ("-T", "acct", "-T", "ser")]:
        got = {name: (made(dump(s, *options)), key_statements(dump(s, *options)))
               for name, s in servers.items()}
        assert got["tierdb"] == got["postgres"], (options, got)
    assert got["tierdb"][0], got


def test_comments_are_kept_and_read_as_postgresql_reads_them(servers):
    sql = ("SELECT c.relname, d.objsubid, d.description FROM pg_catalog.pg_description d "
           "JOIN pg_catalog.pg_class c ON d.objoid = c.oid WHERE d.classoid = 1259 "
           "ORDER BY 1, 2")
    funcs = ("SELECT obj_description(c.oid, 'pg_class'), col_description(c.oid, 3), "
             "col_description(c.oid, 1) FROM pg_catalog.pg_class c WHERE c.relname = 'acct'")
    got = {}
    for name, (port, user, password, db) in servers.items():
        dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
        with psycopg.connect(dsn, autocommit=True) as c:
            got[name] = (c.execute(sql).fetchall(), c.execute(funcs).fetchall())
    assert got["tierdb"] == got["postgres"], got
    assert len(got["tierdb"][0]) == 3, got
    # pg_dump writes the same COMMENT statements.
    comments = {name: sorted(line for line in dump(s).splitlines() if line.startswith("COMMENT ON"))
                for name, s in servers.items()}
    assert comments["tierdb"] == comments["postgres"], comments
    assert len(comments["tierdb"]) == 3, comments


def test_system_views_answer_as_postgresql(servers):
    """pg_indexes, pg_tables, pg_views, pg_sequences and information_schema's views,
    sequences, table_constraints and key_column_usage, row for row as PostgreSQL's (the owner is each server's own user; a view's
    text is each server's own rendering of its query; tierdb's views are read-only, so
    `is_updatable` is NO where PostgreSQL's simple view says YES). A view made here and
    dropped."""
    queries = [
        "SELECT schemaname, tablename, indexname, tablespace, indexdef FROM pg_indexes "
        "WHERE schemaname = 'public' ORDER BY indexname",
        "SELECT schemaname, tablename, tablespace, hasindexes, hasrules, hastriggers, rowsecurity "
        "FROM pg_catalog.pg_tables WHERE schemaname = 'public' ORDER BY tablename",
        "SELECT schemaname, viewname, definition LIKE '%acct%' FROM pg_views "
        "WHERE schemaname = 'public'",
        "SELECT schemaname, sequencename, data_type, start_value, min_value, max_value, "
        "increment_by, cycle, cache_size FROM pg_sequences ORDER BY sequencename",
        "SELECT table_schema, table_name, view_definition LIKE '%acct%', check_option "
        "FROM information_schema.views WHERE table_schema = 'public'",
        "SELECT * FROM information_schema.sequences ORDER BY sequence_name",
        "SELECT constraint_catalog, constraint_schema, constraint_name, table_catalog, "
        "table_schema, table_name, constraint_type, is_deferrable, initially_deferred, "
        "enforced, nulls_distinct FROM information_schema.table_constraints "
        "WHERE table_schema = 'public' AND constraint_type <> 'CHECK' "
        "ORDER BY table_name, constraint_name",
        # NOT NULL columns are CHECK constraints named by oids, which differ: count them.
        "SELECT table_name, count(*) FROM information_schema.table_constraints "
        "WHERE table_schema = 'public' AND constraint_type = 'CHECK' "
        "AND constraint_name LIKE '%_not_null' GROUP BY table_name ORDER BY table_name",
        "SELECT constraint_catalog, constraint_schema, constraint_name, table_catalog, "
        "table_schema, table_name, column_name, ordinal_position, position_in_unique_constraint "
        "FROM information_schema.key_column_usage WHERE table_schema = 'public' "
        "ORDER BY table_name, constraint_name, ordinal_position",
    ]
    got = {}
    for name, (port, user, password, db) in servers.items():
        dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE VIEW acct_owners AS SELECT id, owner FROM acct")
            try:
                got[name] = [[tuple("DB" if v == db else v for v in row)
                              for row in c.execute(q).fetchall()] for q in queries]
            finally:
                c.execute("DROP VIEW acct_owners")
    for q, t, p in zip(queries, got["tierdb"], got["postgres"]):
        assert t == p, (q, t, p)
    counts = [len(rows) for rows in got["tierdb"]]
    # 7 indexes; 4 tables; the view; 2 sequences; the view; 2 sequences; 5 key
    # constraints; 3 tables with NOT NULL columns; 6 key columns.
    assert counts == [7, 4, 1, 2, 1, 2, 5, 3, 6], counts


def test_a_dump_restores_row_tables_with_their_keys(servers, tmp_path):
    text = dump(servers["tierdb"])
    fresh = str(tmp_path / "restored")
    subprocess.run([BIN, "sql", fresh, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
    with engines_tierdb_at(fresh) as port:
        restored = (port, "tierdb", engines.PASSWORD, "tierdb")
        p = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                            "-U", "tierdb", "tierdb"], input=text, capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, PGPASSWORD=engines.PASSWORD))
        assert p.returncode == 0, p.stderr
        assert psql(restored, "\\ds") == psql(servers["tierdb"], "\\ds")
        for table in ["acct", '"Pair"', "plain", "ser"]:
            assert psql(restored, f"\\d {table}") == psql(servers["tierdb"], f"\\d {table}")
            order = "1, 2" if table != "plain" else "1"
            query = f"SELECT * FROM {table} ORDER BY {order}"
            assert psql(restored, query) == psql(servers["postgres"], query)
        with psycopg.connect(engines.tierdb_dsn(port), autocommit=True) as c:
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO acct (id, owner) VALUES (1, 'dup')")
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO \"Pair\" VALUES (1, 'x', 0)")
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO acct (id, owner, email) VALUES (9, 'e', 'a@x')")
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO \"Pair\" VALUES (2, 'z', 20)")
            c.execute("INSERT INTO acct (id, owner) VALUES (4, 'dee')")
            assert c.execute("SELECT tier FROM acct WHERE id = 4").fetchone() == (3,)
            # The sequence goes on past the keys the dump holds, and is dropped with its table.
            c.execute("INSERT INTO ser (v) VALUES ('c')")
            new = c.execute("SELECT id FROM ser WHERE v = 'c'").fetchone()[0]
            assert new > 2, new
            assert c.execute("SELECT nextval('free_seq')").fetchone() == (7,)
            c.execute("DROP TABLE ser")
            with pytest.raises(psycopg.errors.UndefinedTable):
                c.execute("SELECT nextval('ser_id_seq')")


class engines_tierdb_at:
    """`tierdb serve` over the database at `path` (engines.tierdb makes a fresh one)."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.port = engines.free_port()
        self.log = open(os.path.join(os.path.dirname(self.path), "serve.log"), "w")
        self.p = subprocess.Popen([BIN, "serve", self.path, "--listen", f"127.0.0.1:{self.port}",
                                   "--memory-bytes", "256MiB"],
                                  env=dict(os.environ, TIERDB_PASSWORD=engines.PASSWORD),
                                  stdout=self.log, stderr=subprocess.STDOUT)
        engines.wait_port(self.port, self.p, "tierdb serve", self.log.name)
        return self.port

    def __exit__(self, *exc):
        self.p.terminate()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()
