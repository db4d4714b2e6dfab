"""pg_dump 15 round trips between tierdb and PostgreSQL 15 (issue 27's test): a database with
a table of every type, a row table with a SERIAL key, a UNIQUE column and an index, a view
and a schema of its own is made alike on both servers; then

1. pg_dump of tierdb restored with psql (ON_ERROR_STOP) into a fresh tierdb database,
2. the same dump restored into a fresh PostgreSQL database,
3. pg_dump of PostgreSQL restored into a fresh tierdb database,

and every table and view read back from each restored database equals the original's, as
psql prints it (unaligned); the restored row table still refuses a duplicate key and its
sequence goes on past the dumped keys. A dump moved to the other server is taken with
`--no-owner`, as between any two PostgreSQL servers without the same roles (tierdb has
one, `tierdb`).

Needs `tierdb` (TIERDB_BIN), psql, pg_dump and PostgreSQL 15 (scripts/postgres.sh)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402
from test_catalog_keys import BIN, dump, engines_tierdb_at  # noqa: E402
from test_types import COLUMNS, ROWS  # noqa: E402

psycopg = pytest.importorskip("psycopg")

SETUP = [
    "CREATE TABLE ty (%s)" % ", ".join(f"{n} {t}" for n, t in COLUMNS),
    "CREATE SCHEMA app",
    "CREATE TABLE app.orders (id SERIAL PRIMARY KEY, who VARCHAR(20) NOT NULL, "
    "code TEXT UNIQUE, amount NUMERIC(10,2) DEFAULT 0, at TIMESTAMPTZ)",
    "INSERT INTO app.orders (who, code, amount, at) VALUES ('ann', 'A1', 1.50, "
    "'2024-05-17 10:00:00+00'), ('bob', 'B2', 20.25, NULL), ('cy', NULL, 0, "
    "'1999-12-31 23:59:59.5+00')",
    "CREATE INDEX orders_who ON app.orders (who)",
    "CREATE VIEW app.big AS SELECT id, who, amount FROM app.orders WHERE amount > 1",
    "CREATE VIEW recent AS SELECT id, ts, tz FROM ty WHERE ts > '2000-01-01'",
]

READS = ["ty", "app.orders", "app.big", "recent"]


def read_all(server):
    """Every table and view as psql prints it (unaligned, ordered by the first column)."""
    port, user, password, db = server
    out = {}
    for rel in READS:
        p = subprocess.run(["psql", "-X", "-A", "-h", "127.0.0.1", "-p", str(port), "-U", user,
                            db, "-c", "SET TIME ZONE 'UTC'", "-c", f"SELECT * FROM {rel} ORDER BY 1"],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PGPASSWORD=password))
        assert p.returncode == 0, p.stderr
        out[rel] = p.stdout
    return out


def restore(server, text):
    port, user, password, db = server
    p = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                        "-U", user, db], input=text, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PGPASSWORD=password))
    assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def servers():
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        marks = ", ".join(["%s"] * len(COLUMNS))
        for dsn in (engines.pg_dsn(pg_port), engines.tierdb_dsn(t_port)):
            with psycopg.connect(dsn, autocommit=True) as c:
                for sql in SETUP:
                    c.execute(sql)
                with c.cursor() as cur:
                    cur.executemany(f"INSERT INTO ty VALUES ({marks})", ROWS)
        with psycopg.connect(engines.pg_dsn(pg_port), autocommit=True) as c:
            c.execute("CREATE DATABASE from_tierdb")
        yield {
            "postgres": (pg_port, "postgres", "", "postgres"),
            "tierdb": (t_port, "tierdb", engines.PASSWORD, "tierdb"),
            "pg_from_tierdb": (pg_port, "postgres", "", "from_tierdb"),
        }


def test_both_originals_read_alike(servers):
    assert read_all(servers["tierdb"]) == read_all(servers["postgres"])


# PostgreSQL's pg_dump adds constraints in name order after the data: here the UNIQUE
# `orders_code_key` before `orders_pkey`, while the table is still columnar, and tierdb keeps
# UNIQUE constraints and indexes on row tables only (strict: passes once that is lifted).
FROM_POSTGRES = pytest.mark.xfail(strict=True, reason="ADD CONSTRAINT … UNIQUE on a table "
                                  "before its PRIMARY KEY is refused (0A000)")


@pytest.mark.parametrize("source", ["tierdb", pytest.param("postgres", marks=FROM_POSTGRES)])
def test_a_dump_restores_into_a_fresh_tierdb(servers, source, tmp_path):
    text = dump(servers[source], *(["--no-owner"] if source == "postgres" else []))
    fresh = str(tmp_path / "restored")
    subprocess.run([BIN, "sql", fresh, "--create", "-c", "SELECT 1"], check=True,
                   capture_output=True)
    with engines_tierdb_at(fresh) as port:
        restored = (port, "tierdb", engines.PASSWORD, "tierdb")
        restore(restored, text)
        assert read_all(restored) == read_all(servers["postgres"])
        with psycopg.connect(engines.tierdb_dsn(port), autocommit=True) as c:
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO app.orders (id, who) VALUES (1, 'dup')")
            with pytest.raises(psycopg.errors.UniqueViolation):
                c.execute("INSERT INTO app.orders (who, code) VALUES ('dup', 'A1')")
            c.execute("INSERT INTO app.orders (who) VALUES ('dee')")
            assert c.execute("SELECT id FROM app.orders WHERE who = 'dee'").fetchone()[0] > 3


def test_a_tierdb_dump_restores_into_postgresql(servers):
    restore(servers["pg_from_tierdb"], dump(servers["tierdb"], "--no-owner"))
    assert read_all(servers["pg_from_tierdb"]) == read_all(servers["postgres"])
    port = servers["pg_from_tierdb"][0]
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=from_tierdb",
                         autocommit=True) as c:
        with pytest.raises(psycopg.errors.UniqueViolation):
            c.execute("INSERT INTO app.orders (id, who) VALUES (1, 'dup')")
        c.execute("INSERT INTO app.orders (who) VALUES ('dee')")
        assert c.execute("SELECT id FROM app.orders WHERE who = 'dee'").fetchone()[0] > 3
