"""pgjdbc's DatabaseMetaData (the calls DBeaver, DataGrip, Liquibase, Hibernate and
Metabase make at start-up) and ResultSetMetaData against `tierdb serve`, beside
PostgreSQL 15: jdbc/MetaCheck.java prints one line per call; each must be what
PostgreSQL's is, except the calls listed in GAPS (what tierdb's catalog does not have
yet), which are printed for the record.

Needs the `tierdb` binary (TIERDB_BIN), javac and java, and pgjdbc's jar (TIERDB_PGJDBC,
else ~/.m2/repository/org/postgresql/postgresql/42.7.4/: scripts/test.sh fetches it with
mvn)."""

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
JAR = os.environ.get("TIERDB_PGJDBC", os.path.expanduser(
    "~/.m2/repository/org/postgresql/postgresql/42.7.4/postgresql-42.7.4.jar"))

# What tierdb answers otherwise than PostgreSQL, and why. (A row table's PRIMARY KEY and
# indexes are in pg_class, pg_index and pg_constraint: getTables, getPrimaryKeys,
# getIndexInfo, getBestRowIdentifier, getImportedKeys and getExportedKeys answer as on
# PostgreSQL.)
GAPS = {
    "getUDTs": "a table's composite type is not in pg_type",
}
# Counted, not listed, by MetaCheck: PostgreSQL has more types and schemas; both must answer.
COUNTED = {"getTypeInfo", "getCatalogs", "getTableTypes", "getSchemas", "getClientInfoProperties",
           "getTablePrivileges", "getColumnPrivileges"}
SETUP = ["CREATE TABLE meta_t (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, n NUMERIC(10,2))",
         "CREATE INDEX meta_t_v ON meta_t (v)",
         "CREATE VIEW meta_v AS SELECT id, v FROM meta_t"]

pytestmark = pytest.mark.skipif(not (shutil.which("javac") and os.path.exists(JAR)),
                                reason="javac or pgjdbc's jar is missing (scripts/test.sh installs them)")


def lines(out):
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def test_database_metadata_as_on_postgresql(tmp_path):
    classes = tmp_path / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp", JAR, str(HERE / "jdbc" / "MetaCheck.java")],
                   check=True, capture_output=True, timeout=300)
    db = str(tmp_path / "db")
    subprocess.run([BIN, "sql", db, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
    got = {}
    with engines.postgres() as pg_port, serve(BIN, db, log=str(tmp_path / "serve.log")) as (_, port):
        for name, conninfo, url, user, password in [
            ("pg", f"host=127.0.0.1 port={pg_port} user=postgres dbname=postgres",
             f"jdbc:postgresql://127.0.0.1:{pg_port}/postgres", "postgres", "x"),
            ("tierdb", f"host=127.0.0.1 port={port} user=tierdb password={PASSWORD} dbname=tierdb",
             f"jdbc:postgresql://127.0.0.1:{port}/tierdb", "tierdb", PASSWORD),
        ]:
            with psycopg.connect(conninfo, autocommit=True) as c:
                for sql in SETUP:
                    c.execute(sql)
            p = subprocess.run(["java", "-cp", f"{classes}:{JAR}", "MetaCheck", url, user, password],
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr
            got[name] = lines(p.stdout)
    pg, td = got["pg"], got["tierdb"]
    print("\ncall | PostgreSQL 15 | tierdb")
    for call in pg:
        print(f"{call} | {pg[call][:90]} | {td.get(call, '')[:90]}")
    assert set(td) == set(pg)
    for call, want in pg.items():
        if call in GAPS:
            assert td[call] != want, f"{call} now answers as PostgreSQL does: take it out of GAPS"
            continue
        if call in COUNTED:
            assert td[call].startswith("OK") == want.startswith("OK"), (call, td[call], want)
            continue
        assert td[call] == want, call
