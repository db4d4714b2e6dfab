"""dbt-postgres against `tierdb serve`, beside PostgreSQL 15 as the oracle: the project in
dbt/project (a seed, a table, a view and an incremental model, six data tests) is built
twice (`dbt build`: the second run is incremental: a temporary table, DELETE … USING,
INSERT … SELECT, all in transactions) and documented (`dbt docs generate`: the catalog
query). Every command must succeed on both; the models' rows and the documented columns
(names, types, order) must be PostgreSQL's.

Needs the `tierdb` binary (TIERDB_BIN), dbt (TIERDB_DBT, else the venv
scripts/python-env.sh makes in ~/.cache/tierdb/venv-dbt) and PostgreSQL 15's binaries."""

import json
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
DBT = os.environ.get("TIERDB_DBT", os.path.expanduser("~/.cache/tierdb/venv-dbt/bin/dbt"))
MODELS = ["raw_orders", "orders", "customer_totals", "orders_incremental"]

pytestmark = pytest.mark.skipif(not os.path.exists(DBT), reason="dbt is not installed (scripts/python-env.sh)")


def profiles(tierdb_port, pg_port):
    return f"""tierdb_check:
  target: tierdb
  outputs:
    tierdb:
      {{type: postgres, host: 127.0.0.1, port: {tierdb_port}, user: tierdb, password: {PASSWORD},
       dbname: tierdb, schema: public, threads: 1}}
    pg:
      {{type: postgres, host: 127.0.0.1, port: {pg_port}, user: postgres, password: x,
       dbname: postgres, schema: public, threads: 1}}
"""


def dbt(project, target, *args):
    p = subprocess.run([DBT, *args, "--profiles-dir", str(project), "--project-dir", str(project),
                        "--target", target, "--no-use-colors"],
                       capture_output=True, text=True, timeout=600, cwd=project)
    assert p.returncode == 0, f"dbt {' '.join(args)} on {target} failed:\n{p.stdout[-6000:]}\n{p.stderr[-2000:]}"
    return p.stdout


def rows(conn_str):
    out = {}
    with psycopg.connect(conn_str, autocommit=True) as c:
        for m in MODELS:
            out[m] = [tuple(str(v) for v in r) for r in c.execute(f"SELECT * FROM {m} ORDER BY 1, 2").fetchall()]
    return out


def columns(project):
    cat = json.loads((project / "target" / "catalog.json").read_text())
    assert not cat.get("errors"), cat["errors"]
    return {k: (v["metadata"]["type"], sorted((c["index"], n, c["type"]) for n, c in v["columns"].items()))
            for k, v in cat["nodes"].items()}


def test_dbt_project_runs_as_on_postgresql(tmp_path):
    db = str(tmp_path / "db")
    subprocess.run([BIN, "sql", db, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
    with engines.postgres() as pg_port, serve(BIN, db, log=str(tmp_path / "serve.log")) as (_, port):
        got = {}
        for target, conn in [("pg", f"host=127.0.0.1 port={pg_port} user=postgres dbname=postgres"),
                             ("tierdb", f"host=127.0.0.1 port={port} user=tierdb password={PASSWORD} dbname=tierdb")]:
            project = tmp_path / target
            shutil.copytree(HERE / "dbt" / "project", project)
            (project / "profiles.yml").write_text(profiles(port, pg_port))
            first = dbt(project, target, "build")
            assert "Completed successfully" in first and "PASS=10" in first.replace(" ", ""), first
            # The second build's incremental model runs as an increment, not a full load.
            second = dbt(project, target, "build")
            assert "Completed successfully" in second, second
            log = (project / "logs" / "dbt.log").read_text()
            assert "create temporary table" in log.lower(), "the incremental run made its temporary table"
            dbt(project, target, "docs", "generate")
            got[target] = (rows(conn), columns(project))
        assert got["tierdb"][0] == got["pg"][0]
        assert len(got["pg"][0]["orders_incremental"]) == 5
        assert got["tierdb"][1] == got["pg"][1]
