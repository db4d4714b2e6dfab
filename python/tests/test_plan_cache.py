"""Prepared statements whose plan the server keeps between executions (issue 28: the plan of
a short statement on row tables is kept, `crates/tierdb-tables/src/sql/plancache.rs`),
against PostgreSQL 15 as the oracle: one connection executes the same prepared statements
again and again while another one (or itself) changes what they read — ALTER TABLE, a
table renamed and another created under its name, a view replaced, an index created, a
DROP TABLE. (SET TIME ZONE is not here: PostgreSQL
keeps a literal's instant from the time zone of PREPARE, tierdb plans it in the session's
time zone of the execution.) Every execution must
answer what PostgreSQL answers (rows, or the SQLSTATE: a prepared `SELECT *` whose columns
changed fails with 0A000 on both).

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

RANGE = "SELECT c FROM r WHERE id BETWEEN %s AND %s ORDER BY c"
SUM = "SELECT sum(k) FROM r WHERE id BETWEEN %s AND %s"
STAR = "SELECT * FROM r WHERE id BETWEEN %s AND %s ORDER BY id"
POINT = "SELECT c FROM r WHERE id = %s"
BY_K = "SELECT id FROM r WHERE k = %s ORDER BY id"
UPDATE = "UPDATE r SET k = k + 1 WHERE id = %s"
DELETE = "DELETE FROM r WHERE id = %s"
INSERT = "INSERT INTO r (id, k, c) VALUES (%s, %s, %s)"
VIEW = "SELECT * FROM v WHERE id BETWEEN %s AND %s ORDER BY id"
TZ = "SELECT id FROM r WHERE id BETWEEN %s AND %s AND t > '2024-01-01 10:00:00'::timestamptz ORDER BY id"

# (who, statement, parameters): "a" runs the prepared statements, "b" changes things.
# Parameters None: a plain statement.
SCRIPT = [
    ("b", "CREATE TABLE r (id INT PRIMARY KEY, k INT NOT NULL, c TEXT, t TIMESTAMPTZ)", None),
    ("b", "INSERT INTO r VALUES (1, 10, 'one', '2024-01-01 08:00:00+00'), "
          "(2, 20, 'two', '2024-01-01 11:00:00+00'), (3, 30, 'three', '2024-01-01 13:00:00+00'), "
          "(4, 40, 'four', NULL)", None),
    ("b", "CREATE VIEW v AS SELECT id, c FROM r", None),
    *[("a", q, p) for q, p in [(RANGE, (1, 3)), (RANGE, (2, 4)), (SUM, (1, 4)), (STAR, (1, 2)),
                                (POINT, (3,)), (BY_K, (20,)), (VIEW, (1, 4)), (TZ, (1, 4))]],
    # Writes, prepared, executed more than once.
    ("a", UPDATE, (1,)), ("a", UPDATE, (1,)), ("a", DELETE, (4,)), ("a", DELETE, (4,)),
    ("a", INSERT, (5, 50, "five")), ("a", INSERT, (6, 60, "six")), ("a", INSERT, (6, 61, "dup")),
    ("a", RANGE, (1, 6)), ("a", SUM, (1, 6)),
    # A column added: SELECT * of the prepared statement no longer has its columns.
    ("b", "ALTER TABLE r ADD COLUMN extra INT", None),
    ("a", STAR, (1, 2)), ("a", RANGE, (1, 6)), ("a", POINT, (5,)),
    # A column's type changed under the kept plans.
    ("b", "ALTER TABLE r ALTER COLUMN k TYPE BIGINT", None),
    ("a", SUM, (1, 6)), ("a", UPDATE, (2,)), ("a", BY_K, (21,)), ("a", INSERT, (7, 70, "seven")),
    # An index created: the same answers through it.
    ("b", "CREATE INDEX r_k ON r (k)", None),
    ("a", BY_K, (70,)), ("a", BY_K, (12,)),
    # The view replaced by another definition.
    ("b", "CREATE OR REPLACE VIEW v AS SELECT id, upper(c) AS c FROM r", None),
    ("a", VIEW, (1, 7)),
    # Another table under the name the statements read.
    ("b", "ALTER TABLE r RENAME TO r_old", None),
    ("a", RANGE, (1, 9)), ("a", POINT, (1,)),
    ("b", "CREATE TABLE r (id INT PRIMARY KEY, k INT NOT NULL, c TEXT, t TIMESTAMPTZ)", None),
    ("b", "INSERT INTO r VALUES (1, 100, 'uno', NULL), (9, 900, 'nueve', '2024-01-01 10:30:00+00')", None),
    ("a", RANGE, (1, 9)), ("a", SUM, (1, 9)), ("a", POINT, (1,)), ("a", UPDATE, (9,)),
    ("a", SUM, (1, 9)), ("a", TZ, (1, 9)),
    # Gone: the prepared statements fail as PostgreSQL's do.
    ("b", "DROP TABLE r", None),
    ("a", RANGE, (1, 9)), ("a", POINT, (1,)), ("a", INSERT, (1, 1, "x")),
    ("a", "SELECT id, k, c FROM r_old ORDER BY id", None),
]


def run_script(port, name):
    out = []
    with connect(name, port) as a, connect(name, port) as b:
        conns = {"a": a, "b": b}
        for who, sql, params in SCRIPT:
            got = answer(conns[who], sql, params)
            if got[0] == "rows" and sql.startswith("SELECT") and "ORDER BY" not in sql:
                got = (got[0], got[1], sorted(got[2]), got[3], got[4])
            out.append(got)
    return out


@pytest.fixture(scope="module")
def answers():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        return {"postgres": run_script(pg_port, "postgres"),
                "tierdb": run_script(t_port, "tierdb")}


@pytest.mark.parametrize("i", range(len(SCRIPT)))
def test_prepared_statements_follow_every_change(answers, i):
    who, sql, params = SCRIPT[i]
    assert answers["tierdb"][i] == answers["postgres"][i], f"step {i} ({who}): {sql} {params}"


def test_a_temporary_table_hides_the_stored_one_from_kept_plans():
    """A kept plan of a stored table is not used once a temporary table of the same name
    hides it (invariant 3 of plancache.rs): the prepared statement then never answers the
    stored table's rows. (tierdb refuses it with 0A000, "cached plan must not change result
    type", where PostgreSQL reads the temporary table: its columns are described with other
    Arrow types.)"""
    with engines.tierdb(BIN) as port, connect("tierdb", port) as a:
        a.execute("CREATE TABLE r (id INT PRIMARY KEY, c TEXT)")
        a.execute("INSERT INTO r VALUES (1, 'stored'), (2, 'stored2')")
        for _ in range(3):
            assert a.execute(RANGE, (1, 2), prepare=True).fetchall() == [("stored",), ("stored2",)]
        a.execute("CREATE TEMP TABLE r (id INT, c TEXT)")
        a.execute("INSERT INTO r VALUES (1, 'temp')")
        for _ in range(2):
            try:
                assert a.execute(RANGE, (1, 2), prepare=True).fetchall() == [("temp",)]
            except psycopg.Error as e:
                assert e.sqlstate == "0A000"
        assert a.execute("SELECT c FROM r WHERE id BETWEEN 1 AND 2").fetchall() == [("temp",)]
        a.execute("DROP TABLE r")
        assert a.execute(RANGE, (1, 2), prepare=True).fetchall() == [("stored",), ("stored2",)]


# Prepared queries whose optimized plan is kept (invariant 5 of plancache.rs: optimized
# once with the parameters unbound, the values bound per execution), each executed many
# times with generated values (NULL among them) while the other connection writes the
# rows they read; and queries whose plan must not be kept optimized (LIMIT $n, now()).
PARAM_QUERIES = [
    ("SELECT id, k FROM r2 WHERE id > %s AND id <= %s ORDER BY id", "ii"),
    ("SELECT count(*), sum(k) FROM r2 WHERE id BETWEEN %s AND %s", "ii"),
    ("SELECT id FROM r2 WHERE id IN (%s, %s, %s) ORDER BY id", "iii"),
    ("SELECT id FROM r2 WHERE k >= %s ORDER BY id LIMIT 5", "i"),
    ("SELECT id, k * %s FROM r2 WHERE id < %s ORDER BY id", "ii"),
    ("SELECT c, count(*) FROM r2 WHERE id >= %s GROUP BY c ORDER BY c", "i"),
    ("SELECT DISTINCT c FROM r2 WHERE id BETWEEN %s AND %s ORDER BY c", "ii"),
    ("SELECT a.id, b.k FROM r2 a JOIN r3 b ON a.id = b.id WHERE a.id > %s ORDER BY a.id", "i"),
    ("SELECT id FROM r2 WHERE id = (SELECT max(id) FROM r2 WHERE k < %s)", "i"),
    ("SELECT id FROM r2 WHERE c = %s ORDER BY id", "t"),
    ("SELECT id FROM r2 WHERE id > %s ORDER BY id LIMIT %s", "in"),
    ("SELECT id, now() > '2000-01-01'::timestamptz FROM r2 WHERE id < %s ORDER BY id", "i"),
    ("SELECT id FROM r2 WHERE id >= %s AND c <> %s ORDER BY id", "it"),
    ("SELECT id FROM r2 WHERE id = %s AND id > %s", "ii"),
    ("SELECT id FROM r2 WHERE id IN (%s, %s, %s) AND id >= %s ORDER BY id", "iiii"),
    ("SELECT id FROM r2 WHERE k = %s AND id < %s ORDER BY id", "ii"),
    ("SELECT id FROM r2 WHERE id > %s ORDER BY id DESC LIMIT 3", "i"),
    ("SELECT count(*) FROM r2 WHERE id >= %s AND id <= %s AND id > %s", "iii"),
]
WORDS = ["x", "y", "z", "w"]


def param_script(seed, steps=240):
    import random
    rnd = random.Random(seed)
    script = [
        ("b", "CREATE TABLE r2 (id INT PRIMARY KEY, k INT, c TEXT)", None),
        ("b", "CREATE TABLE r3 (id INT PRIMARY KEY, k BIGINT)", None),
        ("b", "CREATE INDEX r2_k ON r2 (k)", None),
        ("b", "INSERT INTO r2 SELECT g, g % 7, substr('xyzw', 1 + g % 4, 1) FROM "
              "generate_series(1, 20) g", None),
        ("b", "INSERT INTO r3 SELECT g, g * 100 FROM generate_series(1, 20, 3) g", None),
    ]

    def value(kind):
        if rnd.random() < 0.12:
            return None
        return {"i": lambda: rnd.randint(-3, 26), "n": lambda: rnd.randint(0, 6),
                "t": lambda: rnd.choice(WORDS)}[kind]()

    for _ in range(steps):
        if rnd.random() < 0.2:
            i = rnd.randint(1, 25)
            script.append(("b", rnd.choice([
                f"INSERT INTO r2 VALUES ({i}, {rnd.randint(0, 9)}, '{rnd.choice(WORDS)}') "
                "ON CONFLICT (id) DO NOTHING",
                f"UPDATE r2 SET k = k + 1, c = '{rnd.choice(WORDS)}' WHERE id = {i}",
                f"DELETE FROM r2 WHERE id = {i}",
            ]), None))
        else:
            sql, kinds = rnd.choice(PARAM_QUERIES)
            values = tuple(value(k) for k in kinds)
            if rnd.random() < 0.25:  # the same query with the values written as literals
                text = [("NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v))
                        for v in values]
                script.append(("a", sql.replace("%s", "{}").format(*text), None))
            else:
                script.append(("a", sql, values))
    return script


def run_param_script(port, name, script):
    out = []
    with connect(name, port) as a, connect(name, port) as b:
        conns = {"a": a, "b": b}
        for who, sql, params in script:
            got = answer(conns[who], sql, params)
            if got[0] == "rows" and got[2] is not None:
                got = (got[0], got[1], sorted(got[2]), got[3], got[4])
            out.append(got)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_kept_optimized_plans_answer_as_postgres_for_generated_values(seed):
    script = param_script(seed)
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        want = run_param_script(pg_port, "postgres", script)
        got = run_param_script(t_port, "tierdb", script)
    for i, (w, g) in enumerate(zip(want, got)):
        assert g == w, f"step {i}: {script[i]}"
