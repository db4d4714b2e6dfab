"""Issue 27's table, the rows a tool must be run for by hand, on `tierdb serve` and
PostgreSQL 15 side by side: a TIMESTAMP/TIMESTAMPTZ/BYTEA/DOUBLE table through psql,
pg_dump --schema-only and --data-only, pgbench -i and a short select-only run, DROP TABLE
a, b; then dbt-postgres's build (twice) and docs generate on tierdb. Prints what each
printed. Out of CI (each row is asserted by a CI test: test_types, test_oltp, test_dbt,
test_dump_round_trip, test_clients). Run: python python/bench/tools_table.py"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
from sqlcheck import engines  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    return (p.stdout + p.stderr).strip()


def tools():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        for name, port, user, db, pw in [("tierdb", t_port, "tierdb", "tierdb", engines.PASSWORD),
                                         ("postgres", pg_port, "postgres", "postgres", "")]:
            env = dict(os.environ, PGPASSWORD=pw)
            conn = ["-h", "127.0.0.1", "-p", str(port), "-U", user]
            psql = ["psql", "-X", "-A", "-t", *conn, db]
            print(f"=== {name}")
            print("create:", run(psql + ["-c", "CREATE TABLE ev (id INT, created_at TIMESTAMP, at TIMESTAMPTZ, payload BYTEA, d DOUBLE PRECISION)"], env))
            print("insert:", run(psql + ["-c", "INSERT INTO ev VALUES (1, '2024-05-17 10:00', '2024-05-17 10:00+02', '\\x00ff', 30000000000)"], env))
            print("psql rows:", run(psql + ["-c", "SET TIME ZONE 'UTC'", "-c", "SELECT d, payload, created_at, at FROM ev"], env).replace("\n", " / "))
            s = run(["pg_dump", "-s", *conn, db], env)
            print("pg_dump -s:", "ok, CREATE TABLE public.ev" if "CREATE TABLE public.ev" in s else s[:300])
            a = run(["pg_dump", "-a", *conn, db], env)
            print("pg_dump -a:", "ok, COPY public.ev" if "COPY public.ev" in a else a[:300])
            print("pgbench -i:", run(["pgbench", "-i", "-s", "1", *conn, db], env).splitlines()[-1])
            out = run(["pgbench", "-S", "-T", "5", "-c", "2", "-j", "2", *conn, db], env)
            print("pgbench -S 5 s:", " | ".join(l for l in out.splitlines() if "tps" in l or "failed" in l))
            print("DROP TABLE a, b:", run(psql + ["-c", "DROP TABLE pgbench_accounts, pgbench_branches"], env))


def dbt():
    from pg_clients import serve
    from test_dbt import DBT, profiles
    tmp = Path(tempfile.mkdtemp())
    db = str(tmp / "db")
    subprocess.run([BIN, "sql", db, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
    with serve(BIN, db, log=str(tmp / "serve.log")) as (_, port):
        project = tmp / "p"
        shutil.copytree(HERE.parent / "tests" / "dbt" / "project", project)
        (project / "profiles.yml").write_text(profiles(port, 1))
        for args in (["build"], ["build"], ["docs", "generate"]):
            p = subprocess.run([DBT, *args, "--profiles-dir", str(project), "--project-dir", str(project),
                                "--target", "tierdb", "--no-use-colors"], capture_output=True, text=True, cwd=project)
            keep = [l for l in p.stdout.splitlines() if any(k in l for k in ("OK created", "OK loaded", "PASS ", "Done.", "Completed", "Catalog written", "ERROR", "incremental", "OK inserted"))]
            print(f"$ dbt {' '.join(args)}  (exit {p.returncode})")
            print("\n".join(l.split(" ", 1)[1] if l[:2].isdigit() else l for l in keep))


if __name__ == "__main__":
    tools()
    dbt()
