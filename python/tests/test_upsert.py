"""INSERT … ON CONFLICT (issue 27), against PostgreSQL 15 as the oracle: the same statements
on both servers, by the simple and the extended protocol (psycopg with and without
parameters): DO NOTHING with and without a conflict target, DO UPDATE with `excluded`,
a WHERE, the table's alias, a unique index or a constraint name as the arbiter, RETURNING;
a columnar table and a temporary table (no unique constraint); and the mistakes (21000, 42P10, 42601, 42704,
23502, 23505 from an index that is not the arbiter) with nothing written. The returned
rows, command tags and the tables after them must be PostgreSQL's. Concurrent upserts of
one counter from several connections must add up as they do on PostgreSQL, and
SQLAlchemy's `on_conflict_do_update` must work.

Needs `tierdb` (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import sys
import threading
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
    "CREATE TABLE u (id INT PRIMARY KEY, email VARCHAR(30) UNIQUE, n INT NOT NULL DEFAULT 0, "
    "note TEXT)",
    "CREATE TABLE k2 (a INT, b TEXT, v INT, PRIMARY KEY (a, b))",
    "CREATE UNIQUE INDEX k2_v ON k2 (v)",
    "CREATE TABLE col (a INT, b TEXT)",
]

# (statement, parameters or None): each is run on both servers, in this order.
STATEMENTS = [
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'one'), (2, 'b@x', 2, 'two')", None),
    # DO NOTHING: any arbiter, the key, a unique column, the key's constraint name.
    ("INSERT INTO u VALUES (1, 'new@x', 5, 'dup key'), (3, 'c@x', 3, 'three') "
     "ON CONFLICT DO NOTHING", None),
    ("INSERT INTO u VALUES (4, 'a@x', 4, 'dup email') ON CONFLICT DO NOTHING RETURNING id", None),
    ("INSERT INTO u VALUES (2, 'z@x', 9, 'x') ON CONFLICT (id) DO NOTHING", None),
    ("INSERT INTO u VALUES (5, 'b@x', 9, 'x') ON CONFLICT (email) DO NOTHING RETURNING *", None),
    ("INSERT INTO u VALUES (2, 'q@x', 9, 'x') ON CONFLICT ON CONSTRAINT u_pkey DO NOTHING", None),
    ("INSERT INTO u VALUES (6, 'f@x', 6, 'six'), (6, 'g@x', 7, 'again') ON CONFLICT DO NOTHING",
     None),
    # DO UPDATE.
    ("INSERT INTO u VALUES (1, 'a@x', 10, 'up') ON CONFLICT (id) DO UPDATE "
     "SET n = u.n + excluded.n, note = excluded.note", None),
    ("INSERT INTO u AS t VALUES (2, 'b@x', 20, 'up2'), (7, 'h@x', 7, 'seven') "
     "ON CONFLICT (id) DO UPDATE SET n = t.n * 2 RETURNING t.id, t.n, t.note", None),
    ("INSERT INTO u VALUES (3, 'c@x', 0, 'skip') ON CONFLICT (id) DO UPDATE SET note = 'no' "
     "WHERE u.n > 100 RETURNING id", None),
    ("INSERT INTO u VALUES (99, 'c@x', 0, 'by email') ON CONFLICT (email) DO UPDATE "
     "SET note = excluded.note || '!', n = u.n + 1 RETURNING *", None),
    ("INSERT INTO u VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET n = %s, "
     "note = excluded.note RETURNING id, n, note", (1, "a@x", 0, "param", 42)),
    ("INSERT INTO u VALUES (%s, %s, 1, 'p') ON CONFLICT (id) DO UPDATE SET n = u.n + 1 "
     "WHERE u.note <> %s RETURNING n", (2, "b@x", "nothing")),
    ("INSERT INTO u (id, email) VALUES (8, 'i@x') ON CONFLICT (email) DO UPDATE SET n = 1 "
     "RETURNING id, n, note", None),
    # A two-column key and a unique index of another column.
    ("INSERT INTO k2 VALUES (1, 'x', 1), (1, 'y', 2)", None),
    ("INSERT INTO k2 VALUES (1, 'x', 5) ON CONFLICT (b, a) DO UPDATE SET v = excluded.v "
     "RETURNING *", None),
    ("INSERT INTO k2 VALUES (2, 'z', 2) ON CONFLICT (v) DO UPDATE SET b = 'yy' RETURNING *",
     None),
    ("INSERT INTO k2 VALUES (3, 'w', 5) ON CONFLICT (a, b) DO NOTHING", None),      # 23505
    # A columnar table: no unique constraint, so nothing conflicts.
    ("INSERT INTO col VALUES (1, 'a'), (1, 'a') ON CONFLICT DO NOTHING", None),
    ("INSERT INTO col VALUES (2, 'b') ON CONFLICT DO NOTHING RETURNING a, b", None),
    ("INSERT INTO col VALUES (3, 'c') ON CONFLICT (a) DO NOTHING", None),           # 42P10
    # A temporary table: no constraints either (PostgreSQL answers the same for one
    # created without any).
    ("CREATE TEMPORARY TABLE tmp (a INT, b TEXT)", None),
    ("INSERT INTO tmp VALUES (1, 'a'), (1, 'a') ON CONFLICT DO NOTHING", None),
    ("INSERT INTO tmp VALUES (2, 'b') ON CONFLICT DO NOTHING RETURNING b, a", None),
    ("INSERT INTO tmp VALUES (3, 'c') ON CONFLICT (a) DO NOTHING", None),           # 42P10
    ("INSERT INTO tmp VALUES (3, 'c') ON CONFLICT (a) DO UPDATE SET b = 'x'", None),  # 42P10
    ("SELECT * FROM tmp ORDER BY a", None),
    # Mistakes, each with PostgreSQL's SQLSTATE and nothing written.
    ("INSERT INTO u VALUES (10, 'j@x', 1, 'x'), (10, 'k@x', 2, 'y') "
     "ON CONFLICT (id) DO UPDATE SET n = 0", None),                               # 21000
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT (note) DO NOTHING", None),  # 42P10
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT DO UPDATE SET n = 0", None),  # 42601
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT ON CONSTRAINT nosuch DO NOTHING",
     None),                                                                       # 42704
    ("INSERT INTO u VALUES (11, 'l@x', NULL, 'x') ON CONFLICT DO NOTHING", None),   # 23502
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT (id) DO UPDATE SET n = NULL",
     None),                                                                       # 23502
    ("INSERT INTO u VALUES (12, 'b@x', 1, 'x') ON CONFLICT (id) DO NOTHING", None),  # 23505
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT (id) DO UPDATE SET email = 'b@x'",
     None),                                                                       # 23505
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT (id) DO UPDATE SET nosuch = 1",
     None),                                                                       # 42703
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT (id) DO UPDATE SET n = 2147483647 + "
     "u.n", None),                                                                # 22003
    ("INSERT INTO u VALUES (1, 'a@x', 1, 'x') ON CONFLICT (id) DO UPDATE SET n = n + 1",
     None),                                                                       # 42702
]

QUERIES = [
    "SELECT * FROM u ORDER BY id",
    "SELECT * FROM k2 ORDER BY a, b",
    "SELECT * FROM col ORDER BY a, b",
]


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
                # In a transaction: the changes are seen, and ROLLBACK takes them away.
                c.autocommit = False
                got.append(answer(c, "INSERT INTO u VALUES (1, 'a@x', 0, 'tx'), (20, 't@x', 0, "
                                     "'tx') ON CONFLICT (id) DO UPDATE SET note = 'tx' "
                                     "RETURNING id, note", None))
                got.append(answer(c, "SELECT id, note FROM u WHERE note = 'tx' ORDER BY id", None))
                c.rollback()
                c.autocommit = True
                got.append(answer(c, "SELECT count(*) FROM u WHERE note = 'tx'", None))
            out[name] = got
        yield out


AFTER = 3  # the statements of the fixture after STATEMENTS and QUERIES


@pytest.mark.parametrize("i", range(len(STATEMENTS) + len(QUERIES) + AFTER))
def test_upsert_answers_as_postgresql(answers, i):
    label = (STATEMENTS + [(q, None) for q in QUERIES] + [("transaction", None)] * AFTER)[i][0]
    assert answers["tierdb"][i] == answers["postgres"][i], label


def test_the_mistakes_are_refused(answers):
    """Not only equal to PostgreSQL's: each mistake failed (an oracle that also accepted
    one would hide it)."""
    first = next(i for i, (s, _) in enumerate(STATEMENTS) if "(10, 'j@x'" in s)
    for i in range(first, len(STATEMENTS)):
        assert answers["tierdb"][i][0] == "error", STATEMENTS[i][0]


def counter_total(name, port, threads=4, each=25):
    """`threads` connections each upsert one counter `each` times; returns the counter."""
    with connect(name, port) as c:
        c.execute("CREATE TABLE hits (k INT PRIMARY KEY, n INT NOT NULL)")
    errors = []

    def work():
        try:
            with connect(name, port) as c:
                for _ in range(each):
                    c.execute("INSERT INTO hits VALUES (1, 1) ON CONFLICT (k) DO UPDATE "
                              "SET n = hits.n + 1")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    with connect(name, port) as c:
        return c.execute("SELECT n FROM hits WHERE k = 1").fetchone()[0]


def test_concurrent_upserts_add_up():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        assert counter_total("postgres", pg_port) == 100
        assert counter_total("tierdb", t_port) == 100


def test_sqlalchemy_on_conflict_do_update():
    sa = pytest.importorskip("sqlalchemy")
    from sqlalchemy.dialects.postgresql import insert

    def run(url):
        engine = sa.create_engine(url)
        meta = sa.MetaData()
        t = sa.Table("kv", meta, sa.Column("k", sa.Text, primary_key=True),
                     sa.Column("v", sa.Integer))
        meta.create_all(engine)
        with engine.begin() as conn:
            for rows in ([{"k": "a", "v": 1}, {"k": "b", "v": 2}],
                         [{"k": "a", "v": 10}, {"k": "c", "v": 3}]):
                stmt = insert(t).values(rows)
                stmt = stmt.on_conflict_do_update(index_elements=["k"],
                                                  set_={"v": stmt.excluded.v + t.c.v})
                conn.execute(stmt)
            ignored = insert(t).values(k="b", v=99).on_conflict_do_nothing()
            conn.execute(ignored)
        with engine.connect() as conn:
            got = conn.execute(sa.select(t).order_by(t.c.k)).all()
        engine.dispose()
        return [tuple(r) for r in got]

    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        pg = run(f"postgresql+psycopg://postgres@127.0.0.1:{pg_port}/postgres")
        ours = run(f"postgresql+psycopg://tierdb:{engines.PASSWORD}@127.0.0.1:{t_port}/tierdb")
    assert pg == [("a", 11), ("b", 2), ("c", 3)]
    assert ours == pg
