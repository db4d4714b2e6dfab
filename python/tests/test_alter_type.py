"""ALTER TABLE … ALTER COLUMN … TYPE (issue 27), against PostgreSQL 15 as the oracle: the
same statements on a columnar table and on a row table with a primary key, a plain index
and a unique index; after each statement the answer (or SQLSTATE), the table's rows, the
columns as information_schema describes them, and lookups through the key and the
indexes must be PostgreSQL's. A cast that fails (22P02, 22003, 22001), a type with no
assignment cast and no USING (42804), keys that become equal (23505): nothing changes.

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
    "CREATE TABLE c (id INT, n INT, s TEXT, d NUMERIC(10,3), v VARCHAR(10), t TIMESTAMP)",
    "INSERT INTO c VALUES (1, 10, '42', 1.255, 'abc', '2024-01-02 03:04:05'), "
    "(2, NULL, '-7', 2.5, 'defgh', NULL), (3, 300, NULL, NULL, NULL, '1999-12-31 23:59:59')",
    "CREATE TABLE r (id INT PRIMARY KEY, k INT NOT NULL, s TEXT, u VARCHAR(8))",
    "CREATE INDEX r_k ON r (k)",
    "CREATE UNIQUE INDEX r_u ON r (u)",
    "INSERT INTO r VALUES (1, 5, '1.5', 'x1'), (2, 6, '2', 'x02'), (3, 5, NULL, NULL), "
    "(4, 7, '04', 'x4')",
]

STEPS = [
    # Columnar.
    "ALTER TABLE c ALTER COLUMN n TYPE BIGINT",
    "ALTER TABLE c ALTER COLUMN s TYPE INT",                           # 42804: needs USING
    "ALTER TABLE c ALTER COLUMN s TYPE INT USING s::integer",
    "ALTER TABLE c ALTER COLUMN d TYPE NUMERIC(4,1)",                  # rounds 1.255 -> 1.3
    "ALTER TABLE c ALTER COLUMN d TYPE NUMERIC(2,2)",                  # 22003: 1.3
    "ALTER TABLE c ALTER COLUMN v TYPE VARCHAR(3)",                    # 22001: 'defgh'
    "ALTER TABLE c ALTER COLUMN v TYPE VARCHAR(5)",
    "ALTER TABLE c ALTER COLUMN v SET DATA TYPE TEXT",
    "ALTER TABLE c ALTER COLUMN t TYPE DATE",
    "ALTER TABLE c ALTER COLUMN n TYPE SMALLINT",
    "ALTER TABLE c ALTER COLUMN n TYPE BOOLEAN",                       # 42804
    "ALTER TABLE c ALTER COLUMN n TYPE TEXT USING 'n=' || n",
    "ALTER TABLE c ALTER COLUMN nope TYPE INT",                        # 42703
    "ALTER TABLE c ALTER COLUMN id TYPE DOUBLE PRECISION, ALTER COLUMN s TYPE BIGINT",
    "ALTER TABLE nosuch ALTER COLUMN a TYPE INT",                      # 42P01
    "ALTER TABLE c ALTER COLUMN v TYPE INT USING v::integer",          # 22P02: 'abc'
    # Row table: the key, a plain and a unique index follow the new types.
    "ALTER TABLE r ALTER COLUMN k TYPE BIGINT",
    "ALTER TABLE r ALTER COLUMN id TYPE BIGINT",
    "ALTER TABLE r ALTER COLUMN s TYPE NUMERIC(5,2) USING s::numeric",
    "ALTER TABLE r ALTER COLUMN u TYPE VARCHAR(2)",                    # 22001: 'x02'
    "ALTER TABLE r ALTER COLUMN u TYPE TEXT USING left(u, 1)",         # 23505: 'x' twice
    "ALTER TABLE r ALTER COLUMN u TYPE VARCHAR(20) USING upper(u)",
    "ALTER TABLE r ALTER COLUMN id TYPE TEXT",
    "ALTER TABLE r ALTER COLUMN id TYPE INT USING id::integer",
    "ALTER TABLE r ALTER COLUMN k TYPE INT USING k / 2",
    "ALTER TABLE r ALTER COLUMN k TYPE TEXT",
    "ALTER TABLE r ALTER COLUMN id TYPE INT USING (id::integer) % 2",  # 23505: keys equal
]

QUERIES = {
    "c": [
        "SELECT * FROM c ORDER BY id",
        "SELECT column_name, data_type, character_maximum_length, numeric_precision, "
        "numeric_scale, is_nullable FROM information_schema.columns WHERE table_name = 'c' "
        "ORDER BY ordinal_position",
    ],
    "r": [
        "SELECT * FROM r ORDER BY id",
        "SELECT column_name, data_type, character_maximum_length, numeric_precision, "
        "numeric_scale, is_nullable FROM information_schema.columns WHERE table_name = 'r' "
        "ORDER BY ordinal_position",
        "SELECT id, u FROM r WHERE id::text = '2'",
        "SELECT id FROM r WHERE k = (SELECT k FROM r WHERE id::text = '1') ORDER BY id",
        "SELECT id FROM r WHERE u = (SELECT u FROM r WHERE id::text = '4')",
    ],
}


def step_table(sql):
    return "r" if sql.startswith("ALTER TABLE r ") else "c"


@pytest.fixture(scope="module")
def answers():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        out = {}
        for name, port in [("postgres", pg_port), ("tierdb", t_port)]:
            with connect(name, port) as c:
                for sql in SETUP:
                    c.execute(sql)
                got = []
                for sql in STEPS:
                    got.append([answer(c, sql, None)]
                               + [answer(c, q, None) for q in QUERIES[step_table(sql)]])
                # The table takes rows in its new types afterwards.
                got.append([answer(c, "INSERT INTO r VALUES (9, '8', 1.25, 'NEW')", None),
                            answer(c, "INSERT INTO r VALUES (9, '8', 1.25, 'NEW')", None),
                            answer(c, "SELECT * FROM r ORDER BY id", None)])
            out[name] = got
        yield out


@pytest.mark.parametrize("i", range(len(STEPS) + 1))
def test_alter_column_type_as_postgresql(answers, i):
    label = (STEPS + ["insert after"])[i]
    assert answers["tierdb"][i] == answers["postgres"][i], label


@pytest.mark.parametrize("table", ["c", "r"])
def test_a_transaction_that_wrote_before_the_change_cannot_commit_after(table):
    """Invariant 3 of sql/alter_type.rs: rows written with the old column types are not
    committed into the retyped table (40001, the client retries); the ALTER's own rows
    are all there, in the new type. (PostgreSQL makes the ALTER wait for the writer's
    lock instead; either way no row is committed in a type it does not have.)"""
    with engines.tierdb(BIN) as port, connect("tierdb", port) as a, connect("tierdb", port) as b:
        if table == "c":
            a.execute("CREATE TABLE c (id INT, n INT)")
        else:
            a.execute("CREATE TABLE r (id INT PRIMARY KEY, n INT)")
            a.execute("CREATE INDEX r_n ON r (n)")
        a.execute(f"INSERT INTO {table} VALUES (1, 10), (2, 20)")
        a.autocommit = False
        a.execute(f"INSERT INTO {table} VALUES (3, 30)")
        b.execute(f"ALTER TABLE {table} ALTER COLUMN n TYPE TEXT USING n || '!'")
        with pytest.raises(psycopg.Error) as e:
            a.commit()
        assert e.value.sqlstate == "40001"
        a.autocommit = True
        assert b.execute(f"SELECT id, n FROM {table} ORDER BY id").fetchall() == [
            (1, "10!"), (2, "20!")]
        assert b.execute(f"SELECT id FROM {table} WHERE n = '20!'").fetchall() == [(2,)]


def test_in_a_transaction_that_has_written_it_is_refused():
    with engines.tierdb(BIN) as port, connect("tierdb", port) as c:
        c.execute("CREATE TABLE w (id INT, n INT)")
        c.autocommit = False
        c.execute("INSERT INTO w VALUES (1, 1)")
        with pytest.raises(psycopg.Error) as e:
            c.execute("ALTER TABLE w ALTER COLUMN n TYPE BIGINT")
        assert e.value.sqlstate == "0A000"
        assert "in a transaction that has written rows of it" in str(e.value)
        c.rollback()
        c.autocommit = True
        c.execute("ALTER TABLE w ALTER COLUMN n TYPE BIGINT")
        assert c.execute("SELECT count(*) FROM w").fetchone() == (0,)


@pytest.mark.parametrize("alter", ["ADD COLUMN z INT", "DROP COLUMN n"])
def test_a_row_table_writer_cannot_commit_after_its_columns_changed(alter):
    """The same for ADD and DROP COLUMN on a row table: its rows were encoded with the old
    columns (committing them made the table unreadable: "damaged catalog record")."""
    with engines.tierdb(BIN) as port, connect("tierdb", port) as a, connect("tierdb", port) as b:
        a.execute("CREATE TABLE r (id INT PRIMARY KEY, n INT, m TEXT)")
        a.execute("INSERT INTO r VALUES (1, 10, 'a')")
        a.autocommit = False
        a.execute("INSERT INTO r VALUES (2, 20, 'b')")
        b.execute(f"ALTER TABLE r {alter}")
        with pytest.raises(psycopg.Error) as e:
            a.commit()
        assert e.value.sqlstate == "40001"
        assert b.execute("SELECT id, m FROM r ORDER BY id").fetchall() == [(1, "a")]


DROPS = [
    "CREATE TABLE d (id INT PRIMARY KEY, a INT, b TEXT, s SERIAL, c INT)",
    "CREATE INDEX d_a ON d (a)",
    "CREATE UNIQUE INDEX d_bc ON d (b, c)",
    "INSERT INTO d (id, a, b, c) VALUES (1, 10, 'x', 1), (2, 20, 'y', 2), (3, 10, NULL, 3)",
    "ALTER TABLE d DROP COLUMN a",
    "SELECT * FROM d ORDER BY id",
    "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname IN ('d_a', 'd_bc', 'd_pkey') "
    "ORDER BY relname",
    "ALTER TABLE d DROP COLUMN nosuch",                                  # 42703
    "ALTER TABLE d DROP COLUMN IF EXISTS nosuch",
    "ALTER TABLE d DROP COLUMN c",
    "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname IN ('d_a', 'd_bc', 'd_pkey') "
    "ORDER BY relname",
    "ALTER TABLE d DROP COLUMN s",
    "SELECT count(*) AS n FROM pg_class WHERE relkind = 'S' AND relname LIKE 'd_%'",
    "INSERT INTO d VALUES (4, 'w')",
    "INSERT INTO d VALUES (4, 'v')",                                     # 23505
    "SELECT * FROM d ORDER BY id",
    "SELECT column_name FROM information_schema.columns WHERE table_name = 'd' "
    "ORDER BY ordinal_position",
]


def test_drop_column_of_a_row_table_as_postgresql():
    """DROP COLUMN on a table with a primary key: the rows are written again without it,
    its indexes and its SERIAL sequence go with it, as PostgreSQL's answers say."""
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        got = {}
        for name, port in [("postgres", pg_port), ("tierdb", t_port)]:
            with connect(name, port) as c:
                got[name] = [answer(c, sql, None) for sql in DROPS]
        for sql, t, p in zip(DROPS, got["tierdb"], got["postgres"]):
            assert t == p, sql


@pytest.mark.parametrize("table", ["c", "r"])
def test_a_repeatable_read_snapshot_does_not_drop_rows_committed_since(table):
    """A REPEATABLE READ transaction that has read sees an older table: rewriting the table
    from its snapshot would drop the rows committed since, so it is refused (0A000) and
    every row stays; under READ COMMITTED it runs and keeps them all."""
    key = " PRIMARY KEY" if table == "r" else ""
    with engines.tierdb(BIN) as port, connect("tierdb", port) as a, connect("tierdb", port) as b:
        a.execute(f"CREATE TABLE {table} (id INT{key}, n INT)")
        a.execute(f"INSERT INTO {table} VALUES (1, 10)")
        a.autocommit = False
        a.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert a.execute(f"SELECT count(*) FROM {table}").fetchone() == (1,)
        b.execute(f"INSERT INTO {table} VALUES (2, 20)")
        with pytest.raises(psycopg.Error) as e:
            a.execute(f"ALTER TABLE {table} ALTER COLUMN n TYPE BIGINT")
        assert e.value.sqlstate == "0A000"
        a.rollback()
        a.execute(f"ALTER TABLE {table} ALTER COLUMN n TYPE BIGINT")
        a.commit()
        a.autocommit = True
        assert b.execute(f"SELECT id, n FROM {table} ORDER BY id").fetchall() == [(1, 10), (2, 20)]


COLUMN_SETTINGS = [
    "CREATE TABLE cs (id INT PRIMARY KEY, s TEXT, n NUMERIC)",
    "INSERT INTO cs VALUES (1, 'a', 1.5)",
    # pg_dump writes these for a column whose storage or statistics target was changed.
    "ALTER TABLE ONLY public.cs ALTER COLUMN s SET STORAGE MAIN",
    "ALTER TABLE cs ALTER n SET STORAGE EXTERNAL",
    "ALTER TABLE cs ALTER COLUMN s SET STATISTICS 200",
    "ALTER TABLE cs ALTER COLUMN nope SET STORAGE MAIN",              # 42703
    "ALTER TABLE IF EXISTS nosuch ALTER COLUMN a SET STORAGE PLAIN",  # a notice
    "ALTER TABLE nosuch ALTER COLUMN a SET STORAGE PLAIN",            # 42P01
    "SELECT * FROM cs",
]


def test_column_storage_settings_are_accepted_as_postgresql_accepts_them():
    """SET STORAGE / STATISTICS (colstorage_stmt.rs) answer as in PostgreSQL, change no
    row, and tierdb says with a notice that they change nothing."""
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        got = {}
        for name, port in [("postgres", pg_port), ("tierdb", t_port)]:
            with connect(name, port) as c:
                got[name] = [answer(c, sql, None) for sql in COLUMN_SETTINGS]
        for sql, t, p in zip(COLUMN_SETTINGS, got["tierdb"], got["postgres"]):
            assert t == p, sql
        with connect("tierdb", t_port) as c:
            notices = []
            c.add_notice_handler(lambda d: notices.append(d.message_primary))
            c.execute("ALTER TABLE cs ALTER COLUMN s SET STORAGE MAIN")
            assert any("is ignored" in n for n in notices), notices
