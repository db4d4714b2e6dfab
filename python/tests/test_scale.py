"""Beyond one process: queries spread over `tierdb worker` processes (answers equal to one
process's), `tierdb serve --read-only` replicas following a writer, and tierdb on an
erasure-coded MinIO that loses a drive under load (python/bench/erasure.py).

Needs the `tierdb` binary: TIERDB_BIN, else the debug build in CARGO_TARGET_DIR; MinIO
(TIERDB_TEST_S3_URL, set by scripts/test.sh) where a test says so."""

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from test_sql import BIN, ROOT, free_port, psql, sql, tierdb, wait_port


def minio_url(name):
    if not os.environ.get("TIERDB_TEST_S3_URL"):
        pytest.skip("needs MinIO (TIERDB_TEST_S3_URL; scripts/test.sh starts one)")
    return os.environ["TIERDB_TEST_S3_URL"].rstrip("/") + f"/{name}-" + uuid.uuid4().hex[:8]


def ssb_data(tmp_path):
    return Path(os.environ.get("TIERDB_SSB_DATA", tmp_path / "ssb-data"))


def test_ssb_over_two_workers_equals_one_process(tmp_path):
    """SSB SF 0.1 on MinIO: 13 answers from a coordinator with 2 worker processes equal the
    answers of one process, and both workers read segments."""
    db = minio_url("dist")
    p = subprocess.run([sys.executable, ROOT / "python/bench/ssb_distributed.py", "--tierdb", BIN,
                        "--sf", "0.1", "--data", ssb_data(tmp_path), "--db", db, "--workers", "2",
                        # SF 0.1 fits one 2M-row segment: smaller ones, so there is a scan to split.
                        "--load-args=--segment-rows 150000",
                        "--check-only", "--out", tmp_path / "out"],
                       capture_output=True, text=True, timeout=1800)
    print(p.stdout[-5000:])
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    assert "every answer of 2-workers equals the one-process answer" in p.stdout
    import json
    result = json.load(open(tmp_path / "out" / "distributed.json"))["results"]["2-workers"]
    for w in result["worker_summaries"]:
        assert w["query_bytes"] > 0, f"worker {w['worker']} read nothing: the query was not spread"


def test_workers_refuse_bad_input(tmp_path):
    db = str(tmp_path / "db")
    # Over 1 MiB in 4 segments, so its scan is one the coordinator sends to workers: the
    # keys unsorted (a sorted run of them is delta encoded in a few bits a value; these
    # take about 20, 2.5 MB in all).
    sql(db, "CREATE TABLE t (k BIGINT NOT NULL); "
            "INSERT INTO t SELECT (value * 7919) % 1000003 FROM generate_series(1, 1000000)",
        "--segment-rows", "250000")
    p = tierdb("worker", db, "--listen", "0.0.0.0:0", ok=False)
    assert p.returncode == 2 and "no authentication" in p.stderr, p.stderr
    p = tierdb("sql", db, "--workers", "nohost", "-c", "SELECT 1", ok=False)
    assert p.returncode == 2 and "HOST:PORT" in p.stderr, p.stderr
    # A worker that is not there: an error naming it, not a hang and not a wrong answer.
    port = free_port()
    p = tierdb("sql", db, "--workers", f"127.0.0.1:{port},127.0.0.1:{free_port()}",
               "-c", "SELECT count(*) FROM t WHERE k % 2 = 0", ok=False, timeout=300)
    assert p.returncode != 0 and "127.0.0.1" in p.stderr, p.stdout + p.stderr


def test_workers_answer_like_one_process_and_transactions_read_their_own_writes(tmp_path):
    """With a worker: a query over 4 segments equals the answer of one process; a
    transaction's own uncommitted segments (in no catalog, so no worker can verify them) are
    read in the coordinator alone, and its answer includes them."""
    db = str(tmp_path / "db")
    # Unsorted keys: over 1 MiB in 4 segments (see test_workers_refuse_bad_input).
    sql(db, "CREATE TABLE t (k BIGINT NOT NULL); "
            "INSERT INTO t SELECT (value * 7919) % 1000003 FROM generate_series(1, 1000000)",
        "--segment-rows", "250000")
    # Two workers: a stage of one task runs where it was planned.
    workers = [subprocess.Popen([BIN, "worker", db, "--listen", "127.0.0.1:0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        addrs = []
        for w in workers:
            line = w.stdout.readline()
            assert line.startswith("tierdb worker listening on "), line + w.stderr.read()
            addrs.append(line.split()[-1])
        spread = ["--workers", ",".join(addrs)]
        q = "SELECT k % 10 AS r, count(*) AS n, sum(k) AS s FROM t GROUP BY k % 10 ORDER BY r"
        alone = tierdb("sql", db, "--format", "csv", "-c", q).stdout
        assert tierdb("sql", db, *spread, "--format", "csv", "-c", q).stdout == alone
        out = tierdb("sql", db, *spread, "--format", "csv", "-c",
                     "BEGIN; INSERT INTO t SELECT value FROM generate_series(1, 300000); "
                     "SELECT count(*) FROM t; COMMIT; SELECT count(*) FROM t").stdout
        assert out.count("1300000") == 2, out
    finally:
        for w in workers:
            w.terminate()
    import json
    for w in workers:
        rest, _ = w.communicate(timeout=60)
        summary = json.loads(rest.strip().splitlines()[-1])
        assert summary["query_bytes"] > 0, summary


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
def test_read_only_replica_follows_the_writer(tmp_path):
    """A writer (`tierdb serve`) and a replica (`tierdb serve --read-only`) on the same
    database: the replica refuses writes with 25006, says what it is, and sees each of the
    writer's commits (waited for, within a bound)."""
    db = minio_url("replica")
    sql(db, "CREATE TABLE r (k INT NOT NULL) ORDER BY (k); INSERT INTO r VALUES (1)")
    env = dict(os.environ, TIERDB_PASSWORD="s3cret")
    wport, rport = free_port(), free_port()
    writer = subprocess.Popen([BIN, "serve", db, "--listen", f"127.0.0.1:{wport}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    replica = subprocess.Popen([BIN, "serve", db, "--listen", f"127.0.0.1:{rport}", "--read-only",
                                "--poll-interval", "200ms"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(writer, wport)
        wait_port(replica, rport)
        assert psql(rport, "SHOW tierdb.role").stdout.strip() == "replica"
        assert psql(wport, "SHOW tierdb.role").stdout.strip() == "writer"
        p = psql(rport, "INSERT INTO r VALUES (9)")
        assert p.returncode != 0 and "read-only" in p.stderr, p.stderr
        for n in (2, 3):
            p = psql(wport, f"INSERT INTO r VALUES ({n})")
            assert p.returncode == 0, p.stderr
            deadline = time.time() + 60
            while psql(rport, "SELECT count(*) FROM r").stdout.strip() != str(n):
                assert time.time() < deadline, "the replica did not see the writer's commit within 60 s"
                time.sleep(0.1)
        lag = psql(rport, "SHOW tierdb.replica_lag").stdout.strip()
        assert lag.endswith("(since the newest commit this replica sees)"), lag
        assert 0 <= float(lag.split()[0]) < 600, lag
        info = tierdb("info", db).stdout
        assert "newest table commit" in info and " s ago" in info, info
        assert writer.poll() is None and replica.poll() is None
    finally:
        for s in (writer, replica):
            s.terminate()
            s.wait(timeout=60)


def test_erasure_coded_minio_loses_a_drive_under_load(tmp_path):
    """MinIO with 6 drives (EC:2) on this machine; SSB and a ZODB workload on it; one drive
    deleted under load: nothing acknowledged is lost, every answer stays right, writes go on."""
    minio = os.environ.get("MINIO_BIN", os.path.expanduser("~/.cache/tierdb/bin/minio"))
    if not os.path.exists(minio):
        pytest.skip("needs the MinIO binary (scripts/minio.sh builds it)")
    p = subprocess.run([sys.executable, ROOT / "python/bench/erasure.py", "--tierdb", BIN, "--minio", minio,
                        "--sf", "0.02", "--commits", "60", "--out", tmp_path / "out"],
                       capture_output=True, text=True, timeout=1800)
    print(p.stdout[-5000:])
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    assert "nothing lost" in p.stdout


def readers_python():
    py = os.environ.get("TIERDB_READERS_PY", os.path.expanduser("~/.cache/tierdb/venv-readers/bin/python"))
    if not os.path.exists(py):
        pytest.skip("needs the readers' environment (scripts/python-env.sh makes it)")
    return py


def check_readers(uri, expected_csv, engines):
    """Each engine in its own process (DuckDB's delta extension and delta-rs loaded in one
    process that read S3 abort at its exit)."""
    out = ""
    for engine in engines.split(","):
        p = subprocess.run([readers_python(), ROOT / "python/tests/external_readers.py", uri, expected_csv,
                            "--engines", engine], capture_output=True, text=True, timeout=600)
        print(p.stdout)
        assert p.returncode == 0, p.stdout + p.stderr
        out += p.stdout
    return out


TYPES_TABLE = ("CREATE TABLE m (id BIGINT NOT NULL, name VARCHAR, price DECIMAL(10,2), day DATE, "
               "ok BOOLEAN, x DOUBLE, n INT) ORDER BY (id);"
               "INSERT INTO m SELECT value, 'n' || value, CAST(value AS DECIMAL(10,2)) / 4, "
               "DATE '2024-01-01' + CAST(value % 300 AS INT), value % 3 = 0, value * 0.5, "
               "CAST(value % 1000 AS INT) FROM generate_series(1, 20000)")


@pytest.mark.parametrize("where", ["local", "minio", "minio-write-back"])
def test_other_engines_read_tables_from_the_bucket(tmp_path, where):
    """Every commit of a table (load, INSERT, UPDATE, DELETE, DROP) reaches its Delta log:
    DuckDB's delta extension and delta-rs read exactly tierdb's rows from the bucket (in
    write-back mode once each process has closed: its versions upload after its segments)."""
    db = str(tmp_path / "db") if where == "local" else minio_url("delta")
    tiers = ["--cache-dir", tmp_path / "cache", "--cache-bytes", "64MiB", "--write-mode", "write-back"] \
        if where == "minio-write-back" else []

    def sql(db, statements, *extra):
        return tierdb("sql", db, "--create", "--format", "csv", "-c", statements, *extra, *tiers)

    # On MinIO, DuckDB reads through its httpfs extension (from pip, by path) with a secret.
    engines = "duckdb,deltalake"
    sql(db, TYPES_TABLE, "--segment-rows", "5000")
    sql(db, "INSERT INTO m VALUES (30000, NULL, NULL, NULL, NULL, NULL, NULL)")
    sql(db, "UPDATE m SET name = 'changed' WHERE id % 10 = 0")
    sql(db, "DELETE FROM m WHERE id % 7 = 0")
    # One-row INSERTs, a version each (and segment merges): past versions 10 and 20, so the
    # readers start from tierdb's checkpoints.
    for i in range(16):
        sql(db, f"INSERT INTO m VALUES ({40000 + i}, 'one', 1.25, DATE '2024-02-01', true, 0.5, {i})")
    expected = tmp_path / "expected.csv"
    expected.write_text(sql(db, "SELECT * FROM m").stdout)
    if where == "local":
        [log] = list(Path(db, "tables").glob("*/_delta_log"))
        uri = str(log.parent)
    else:
        listing = tierdb("store", "ls", db).stdout
        [table_id] = set(re.findall(r"(?:\s|/)tables/(\d+)/_delta_log/", listing))
        uri = f"{db}/tables/{table_id}"
    rows = len(expected.read_text().splitlines()) - 1
    assert rows == 20000 - 20000 // 7 + 1 + 16
    listing = tierdb("store", "ls", db).stdout
    assert ".checkpoint.parquet" in listing, listing
    out = check_readers(uri, expected, engines)
    assert f"{rows} rows, equal to" in out, out
    sql(db, "DROP TABLE m")
    empty = tmp_path / "empty.csv"
    empty.write_text(expected.read_text().splitlines()[0] + "\n")
    check_readers(uri, empty, engines)
