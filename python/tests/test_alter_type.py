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
