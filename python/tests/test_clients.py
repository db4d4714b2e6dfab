"""node-postgres (`pg` 8) and pgx (v5) against `tierdb serve`, beside PostgreSQL 15: the
two drivers an application in JavaScript or Go uses. Each driver runs a small program
(clients/node/check.js, clients/pgx/main.go) that prints one line per step: the values
and JavaScript or Go types the driver handed back, the RowDescription fields it read
(type OID, typmod, table OID, column number, format), the SQLSTATE of an error. pgx sends
and receives binary for the types it knows; node-postgres text. Both run with
TZ=America/New_York, where a timestamp told with the wrong type OID shifts. Every line
must be PostgreSQL's, except the steps in GAPS, which are printed for the record.

Needs the `tierdb` binary (TIERDB_BIN), node and npm (the `pg` package is installed from
the npm registry into ~/.cache/tierdb/clients/node with `npm ci`), and go (pgx from the Go
module proxy)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from pg_clients import PASSWORD, serve  # noqa: E402
from sqlcheck import engines  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))
CACHE = Path(os.path.expanduser("~/.cache/tierdb/clients"))
ENV = dict(os.environ, TZ="America/New_York")

# What tierdb answers otherwise than PostgreSQL, and why; a step listed here must still
# differ (take it out when it no longer does).
GAPS: dict = {}

SETUP = ["DROP TABLE IF EXISTS cl_t",
         "CREATE TABLE cl_t (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, n NUMERIC(10,2), "
         "ts TIMESTAMPTZ, b BYTEA, j JSONB, u UUID, d DATE, f DOUBLE PRECISION, s SMALLINT, "
         "big BIGINT, tm TIME, wall TIMESTAMP)",
         "SET TIME ZONE 'America/New_York'"]


def node_program():
    src = HERE / "clients" / "node"
    dest = CACHE / "node"
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json", "check.js"):
        shutil.copy(src / name, dest / name)
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=dest,
                   check=True, capture_output=True, timeout=600)
    return lambda host, port, user, password, db: ["node", str(dest / "check.js"), host, str(port),
                                                   user, password, db]


def pgx_program():
    out = CACHE / "pgxcheck"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=HERE / "clients" / "pgx",
                   check=True, capture_output=True, timeout=900)
    return lambda host, port, user, password, db: [str(out),
                                                   f"postgres://{user}:{password}@{host}:{port}/{db}?sslmode=disable"]


def lines(out):
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def run_both(tmp_path, program):
    db = str(tmp_path / "db")
    subprocess.run([BIN, "sql", db, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
    got = {}
    with engines.postgres() as pg_port, serve(BIN, db, log=str(tmp_path / "serve.log")) as (_, port):
        for name, port_, user, password, dbname in [("pg", pg_port, "postgres", "x", "postgres"),
                                                    ("tierdb", port, "tierdb", PASSWORD, "tierdb")]:
            with psycopg.connect(host="127.0.0.1", port=port_, user=user, password=password,
                                 dbname=dbname, autocommit=True) as c:
                for sql in SETUP:
                    c.execute(sql)
            p = subprocess.run(program("127.0.0.1", port_, user, password, dbname), env=ENV,
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr
            got[name] = lines(p.stdout)
    return got["pg"], got["tierdb"]


def compare(client, pg, td):
    print(f"\n{client} step | PostgreSQL 15 | tierdb")
    for step in pg:
        print(f"{step} | {pg[step]} | {td.get(step, '')}")
    assert set(td) == set(pg)
    wrong = []
    for step, want in pg.items():
        if step in GAPS.get(client, {}):
            assert td[step] != want, f"{step} now answers as PostgreSQL does: take it out of GAPS"
        elif td[step] != want:
            wrong.append(f"{step}:\n  PostgreSQL: {want}\n  tierdb:     {td[step]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(not (shutil.which("node") and shutil.which("npm")),
                    reason="node and npm are needed (scripts/test.sh requires them)")
def test_node_postgres_as_on_postgresql(tmp_path):
    compare("node", *run_both(tmp_path, node_program()))


@pytest.mark.skipif(not shutil.which("go"), reason="go is needed (scripts/test.sh requires it)")
def test_pgx_as_on_postgresql(tmp_path):
    compare("pgx", *run_both(tmp_path, pgx_program()))
