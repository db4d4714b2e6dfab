"""INSERT … RETURNING (issue 27), against PostgreSQL 15 as the oracle: the same statements
on both servers, by the simple and the extended protocol (psycopg with and without
parameters), into a row table with a SERIAL key and defaults, a columnar table and a
temporary table; the returned rows, their column names and the command tag must be
PostgreSQL's, and so must the tables after them. A failed INSERT returns no rows and
changes nothing; a rolled back one leaves nothing. SQLAlchemy's ORM, which learns the keys
of the objects it adds from RETURNING, gets the same keys from both servers.

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
    "CREATE TABLE r (id SERIAL PRIMARY KEY, name VARCHAR(20) NOT NULL, n INT DEFAULT 7, "
    "price NUMERIC(10,2))",
    "CREATE TABLE c (a INT, b TEXT DEFAULT 'dflt', d DATE)",
]

# (statement, parameters or None): each is run on both servers, in this order.
STATEMENTS = [
    ("INSERT INTO r (name) VALUES ('a'), ('b') RETURNING id", None),
    ("INSERT INTO r (name, n) VALUES ('c', 3) RETURNING *", None),
    ("INSERT INTO r (name, price) VALUES (%s, %s) RETURNING id, n + 1, price * 2 AS twice",
     ("d", "1.25")),
    ("INSERT INTO r (name) SELECT name || '2' FROM r WHERE n = 7 ORDER BY id RETURNING r.*",
     None),
    ("INSERT INTO r (name) VALUES (%s) RETURNING upper(name), length(name) AS len", ("xyz",)),
    ("INSERT INTO r AS x (name) VALUES ('aliased') RETURNING x.id, x.name", None),
    ("INSERT INTO r (name) SELECT name FROM r WHERE false RETURNING id", None),
    ("INSERT INTO c VALUES (1, 'one', DATE '2024-05-06') RETURNING b, a", None),
    ("INSERT INTO c (a) VALUES (%s), (%s) RETURNING *", (2, 3)),
    ("INSERT INTO c (a, d) SELECT a * 10, d FROM c WHERE a = 1 RETURNING a, d, b", None),
    # Mistakes, each with PostgreSQL's SQLSTATE and nothing written.
    ("INSERT INTO r (id, name) VALUES (1, 'dup') RETURNING id", None),          # 23505
    ("INSERT INTO r (name) VALUES (NULL) RETURNING id", None),                  # 23502
    ("INSERT INTO c (a) VALUES (99) RETURNING nosuch", None),                   # 42703
    ("INSERT INTO c (a) VALUES (2147483647) RETURNING a + 1", None),            # 22003
]

QUERIES = ["SELECT * FROM r ORDER BY id", "SELECT * FROM c ORDER BY a"]


def connect(name, port):
    dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
    return psycopg.connect(dsn, autocommit=True)


def answer(c, sql, params):
    """What a statement answered: its columns, rows and tag, or its SQLSTATE."""
    try:
        cur = c.execute(sql, params, prepare=params is not None)
        names = [d.name for d in cur.description] if cur.description else None
        rows = [tuple(str(v) for v in r) for r in cur.fetchall()] if names else None
        return ("rows", names, rows, cur.statusmessage, cur.rowcount)
    except psycopg.Error as e:
        return ("error", e.sqlstate)


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
                # In a transaction: the rows are returned, and ROLLBACK takes them away.
                c.autocommit = False
                got.append(answer(c, "INSERT INTO c (a) VALUES (500) RETURNING a", None))
                got.append(answer(c, "INSERT INTO r (name) VALUES ('tx') RETURNING id, name", None))
                c.rollback()
                c.autocommit = True
                got.append(answer(c, "SELECT count(*) FROM c WHERE a = 500", None))
                # A sequence does not roll back: the next key is past the rolled back one.
                got.append(answer(c, "INSERT INTO r (name) VALUES ('after') RETURNING id", None))
                got.append(answer(c, "SELECT count(*) FROM r WHERE name = 'tx'", None))
                # A temporary table.
                c.execute("CREATE TEMPORARY TABLE tmp (k INT, v TEXT DEFAULT 'x')")
                got.append(answer(c, "INSERT INTO tmp (k) VALUES (1), (2) RETURNING v, k", None))
            out[name] = got
        yield out


AFTER = 6  # the statements of the fixture after STATEMENTS and QUERIES


@pytest.mark.parametrize("i", range(len(STATEMENTS) + len(QUERIES) + AFTER))
def test_insert_returning_answers_as_postgresql(answers, i):
    label = (STATEMENTS + [(q, None) for q in QUERIES] + [("transaction", None)] * AFTER)[i][0]
    assert answers["tierdb"][i] == answers["postgres"][i], label


def test_the_returned_rows_are_the_inserted_ones(answers):
    """Not only equal to PostgreSQL's: the keys returned are the keys stored."""
    returned = [int(r[0]) for r in answers["tierdb"][0][2]]
    stored = [int(r[0]) for r in answers["tierdb"][len(STATEMENTS)][2]]
    assert returned == stored[:2]


def test_sqlalchemy_orm_learns_the_keys_it_inserts():
    sa = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

    class Base(DeclarativeBase):
        pass

    class Item(Base):
        __tablename__ = "item"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str] = mapped_column(sa.String(30))
        qty: Mapped[int] = mapped_column(server_default=sa.text("5"))

    def run(url):
        e = sa.create_engine(url)
        Base.metadata.create_all(e)
        with Session(e) as s:
            items = [Item(name=f"item {i}") for i in range(3)]
            s.add_all(items)
            s.flush()
            keys = [(i.id, i.name) for i in items]
            s.commit()
            one = Item(name="later")
            s.add(one)
            s.commit()
            keys.append((one.id, one.qty))
            stored = [(i.id, i.name, i.qty) for i in s.scalars(sa.select(Item).order_by(Item.id))]
        e.dispose()
        return keys, stored

    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        got = {}
        for name, url in [
            ("postgres", f"postgresql+psycopg://postgres@127.0.0.1:{pg_port}/postgres"),
            ("tierdb", f"postgresql+psycopg://tierdb:{engines.PASSWORD}@127.0.0.1:{t_port}/tierdb"),
        ]:
            got[name] = run(url)
    assert got["tierdb"] == got["postgres"], got
    assert [k for k, _ in got["tierdb"][0]] == [1, 2, 3, 4], got
