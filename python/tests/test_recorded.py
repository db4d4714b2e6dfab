"""Tools' recorded startup queries (python/tests/recorded/*.sql: DataGrip's connection and
introspection start, Grafana's version detection), sent by psycopg over the extended
protocol as the tools' JDBC and Go drivers send them, to tierdb serve and PostgreSQL 15:
each must succeed on tierdb where it succeeds on PostgreSQL, with the same column names and
type OIDs, and the same rows where the answer does not name the server (its version, start
time, database and role names and oids differ by design).

Needs `tierdb` (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import os
import sys
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from sqlcheck import engines  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))

# Types tierdb describes otherwise, and why (every other column's type OID must be
# PostgreSQL's): tierdb has no `name` type (catalog names are text), the xmin system column
# is an int4 constant (no xid type), and EXTRACT returns double precision (DataFusion's;
# PostgreSQL 14+ numeric). The values read the same through every driver.
TYPE_GAPS = {19: 25, 1003: 1009, 28: 23, 1700: 701}

# Answers that name the server: compared by shape only.
SERVER_SPECIFIC = ("version()", "current_database()", "pg_postmaster_start_time", "N.oid",
                   "server_version_num")


def statements(name):
    text = (HERE / "recorded" / name).read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("--")]


@pytest.fixture(scope="module")
def both():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        pg = psycopg.connect(engines.pg_dsn(pg_port), autocommit=True)
        td = psycopg.connect(engines.tierdb_dsn(t_port), autocommit=True)
        yield pg, td
        pg.close()
        td.close()


def answer(conn, sql):
    try:
        cur = conn.execute(sql, prepare=True)
    except psycopg.Error as e:
        return ("error", e.sqlstate)
    if cur.description is None:
        return ("command", None, None)
    shape = [(d.name, d.type_code) for d in cur.description]
    rows = cur.fetchall()
    return ("rows", shape, None if any(s in sql for s in SERVER_SPECIFIC) else rows)


@pytest.mark.parametrize("sql", statements("datagrip_startup.sql") + statements("grafana_version.sql"))
def test_a_recorded_query_answers_as_on_postgresql(both, sql):
    pg, td = both
    want = answer(pg, sql)
    assert want[0] != "error", f"PostgreSQL failed: {want}"
    got = answer(td, sql)
    if want[0] == "rows" and got[0] == "rows":
        gap = [(n, TYPE_GAPS.get(t, t)) for n, t in want[1]]
        assert got[1] in (want[1], gap), f"columns: tierdb {got[1]}, PostgreSQL {want[1]}"
        got = (got[0], want[1], got[2])
    assert got == want


def test_grafana_reads_a_version_it_supports(both):
    _, td = both
    (version,) = td.execute(statements("grafana_version.sql")[0]).fetchone()
    assert version >= 1000, version
