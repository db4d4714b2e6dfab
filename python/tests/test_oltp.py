"""Row tables through `tierdb serve` with real OLTP clients, beside PostgreSQL 15.

- sysbench 1.0.20 (Debian, pgsql driver) prepares `sbtest1` unmodified (SERIAL, CHAR(120),
  DEFAULT, PRIMARY KEY, CREATE INDEX) and runs `oltp_read_write` for a few seconds on
  both servers; afterwards the table has its row count and every index entry agrees with
  the rows (a lookup through the index `k_1` against the same filter that cannot use it).
- pgbench 15 unmodified: `-i -s 1` (TRUNCATE, `COPY … WITH (FREEZE ON)`, `vacuum analyze`,
  `ALTER TABLE … ADD PRIMARY KEY`, which turns the loaded columnar tables into row tables),
  then tpcb-like with `-M simple` and `-M prepared` and select-only with `-M extended`, 0
  failed transactions; the balances it leaves agree (accounts = tellers = branches =
  history).
- Concurrent transfers between accounts (4 threads, READ COMMITTED, retried on
  40001/40P01 as sysbench does): the balances sum to what they started with, on both.

A smoke in CI: throughput is the benchmark's business (scripts/bench-oltp-sql.sh), not
asserted here.
"""

import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sqlcheck import engines  # noqa: E402

psycopg = pytest.importorskip("psycopg")

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))
ROWS = 500


@pytest.fixture(scope="module")
def servers():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        yield {
            "postgres": (pg_port, "postgres", "", "postgres"),
            "tierdb": (t_port, "tierdb", engines.PASSWORD, "tierdb"),
        }


def sysbench(server, *args):
    port, user, password, db = server
    cmd = ["sysbench", "oltp_read_write", "--db-driver=pgsql", "--pgsql-host=127.0.0.1",
           f"--pgsql-port={port}", f"--pgsql-user={user}", f"--pgsql-password={password}",
           f"--pgsql-db={db}", "--tables=1", f"--table-size={ROWS}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench is not installed")
@pytest.mark.parametrize("name", ["postgres", "tierdb"])
def test_sysbench_oltp_read_write_runs_unmodified(servers, name):
    server = servers[name]
    prep = sysbench(server, "prepare")
    assert prep.returncode == 0, prep.stdout + prep.stderr
    run = sysbench(server, "--threads=4", "--time=5", "run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "transactions:" in run.stdout, run.stdout
    port, user, password, db = server
    dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
    with psycopg.connect(dsn, autocommit=True) as c:
        # oltp_read_write deletes a row and inserts it again in one transaction.
        assert c.execute("SELECT count(*) FROM sbtest1").fetchone()[0] == ROWS
        ks = [r[0] for r in c.execute("SELECT DISTINCT k FROM sbtest1 ORDER BY k LIMIT 20")]
        for k in ks:
            by_index = c.execute("SELECT id FROM sbtest1 WHERE k = %s ORDER BY id", (k,)).fetchall()
            by_scan = c.execute("SELECT id FROM sbtest1 WHERE k + 0 = %s ORDER BY id", (k,)).fetchall()
            assert by_index == by_scan, (k, by_index, by_scan)
    sysbench(server, "cleanup")


@pytest.mark.parametrize("name", ["postgres", "tierdb"])
def test_concurrent_transfers_keep_the_total(servers, name):
    port = servers[name][0]
    dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
    accounts, start = 10, 1000
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS bank")
        c.execute("CREATE TABLE bank (id INT NOT NULL, balance BIGINT NOT NULL, PRIMARY KEY (id))")
        values = ", ".join(f"({i}, {start})" for i in range(1, accounts + 1))
        c.execute(f"INSERT INTO bank VALUES {values}")
    errors, retried = [], [0]

    def worker(seed):
        rng = random.Random(seed)
        with psycopg.connect(dsn) as c:
            for _ in range(40):
                a, b = rng.sample(range(1, accounts + 1), 2)
                amount = rng.randint(1, 50)
                while True:
                    try:
                        with c.transaction():
                            c.execute("UPDATE bank SET balance = balance - %s WHERE id = %s", (amount, a))
                            c.execute("UPDATE bank SET balance = balance + %s WHERE id = %s", (amount, b))
                        break
                    except psycopg.errors.OperationalError as e:
                        if e.sqlstate in ("40001", "40P01"):
                            retried[0] += 1
                            continue
                        errors.append(e)
                        return
                    except Exception as e:  # noqa: BLE001
                        errors.append(e)
                        return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    with psycopg.connect(dsn, autocommit=True) as c:
        total = c.execute("SELECT sum(balance) FROM bank").fetchone()[0]
        n = c.execute("SELECT count(*) FROM bank").fetchone()[0]
    assert (n, int(total)) == (accounts, accounts * start), (name, n, total, retried[0])


PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"


@pytest.mark.skipif(not os.path.exists(PGBENCH), reason="pgbench is not installed")
@pytest.mark.parametrize("name", ["postgres", "tierdb"])
def test_pgbench_initializes_and_runs_tpcb_like_and_select_only(servers, name):
    port, user, password, db = servers[name]
    env = dict(os.environ, PGPASSWORD=password)
    base = [PGBENCH, "-h", "127.0.0.1", "-p", str(port), "-U", user]

    def pgbench(*args):
        r = subprocess.run([*base, *args, db], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout + r.stderr

    pgbench("-i", "-s", "1")
    # -n: no vacuum before a run (it would empty pgbench_history of the run before).
    for mode in ("simple", "prepared"):
        out = pgbench("-n", "-c", "4", "-j", "2", "-T", "3", "-M", mode)
        assert "number of failed transactions: 0 " in out, out
    out = pgbench("-n", "-S", "-c", "2", "-T", "2", "-M", "extended")
    assert "number of failed transactions: 0 " in out, out
    dsn = engines.tierdb_dsn(port) if name == "tierdb" else engines.pg_dsn(port)
    with psycopg.connect(dsn, autocommit=True) as c:
        sums = [c.execute(f"SELECT sum({col}) FROM {t}").fetchone()[0] for t, col in [
            ("pgbench_accounts", "abalance"), ("pgbench_tellers", "tbalance"),
            ("pgbench_branches", "bbalance"), ("pgbench_history", "delta")]]
        # Every transaction moved delta into one account, teller and branch, and logged it.
        assert len({int(s or 0) for s in sums}) == 1, sums
        assert c.execute("SELECT count(*) FROM pgbench_accounts").fetchone()[0] == 100000
