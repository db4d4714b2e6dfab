"""The columnar side from the outside: `tierdb sql`, `tierdb import` (good and malformed
files), `tierdb serve` with psql (password, errors, the server staying up), on a local
directory and on MinIO (TIERDB_TEST_S3_URL, set by scripts/test.sh), and the SSB answers
against DuckDB's at SF 0.1 (python/bench/ssb_compare.py --check-only).

Needs the `tierdb` binary: TIERDB_BIN, else the debug build in CARGO_TARGET_DIR."""

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))
ROOT = Path(__file__).resolve().parents[2]


def tierdb(*args, ok=True, timeout=600, **kw):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)
    if ok:
        assert p.returncode == 0, "tierdb %s failed:\n%s\n%s" % (args, p.stdout, p.stderr)
    return p


def backends():
    out = ["local"]
    if os.environ.get("TIERDB_TEST_S3_URL"):
        out.append("minio")
    return out


@pytest.fixture(params=backends())
def db(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "db")
    return os.environ["TIERDB_TEST_S3_URL"].rstrip("/") + "/sql-" + uuid.uuid4().hex[:8]


def sql(db, statements, *extra, ok=True):
    return tierdb("sql", db, "--create", "--format", "csv", "-c", statements, *extra, ok=ok)


def test_sql_statements_and_errors(db):
    sql(db, "CREATE TABLE t (k INT NOT NULL, name VARCHAR) ORDER BY (k);"
            "INSERT INTO t VALUES (2, 'b'), (1, 'a')")
    assert sql(db, "SELECT k, name FROM t").stdout.splitlines() == ["k,name", "1,a", "2,b"]
    p = tierdb("sql", db, "--format", "json", "-c", "SELECT count(*) AS n FROM t")
    assert p.stdout.strip() == '[{"n":2}]'
    # -c is parsed whole first: a syntax error names its position and nothing runs.
    p = sql(db, "INSERT INTO t VALUES (3, 'c'); SELEC 1", ok=False)
    # Exit statuses by kind (tierdb --help): 2 fix the input, 3 not found, 4 conflict.
    assert p.returncode == 2 and "SELEC at Line: 1, Column: 32" in p.stderr, p.stderr
    assert sql(db, "SELECT count(*) FROM t").stdout.splitlines()[1] == "2"
    for bad, status, message in [
        ("SELECT * FROM nosuch", 3, "table nosuch does not exist"),
        ("SELECT nosuch FROM t", 2, "No field named nosuch"),
        ("INSERT INTO t VALUES ('x', 'y')", 2, "Cannot cast string 'x'"),
        ("CREATE TABLE t (a INT)", 4, "table t already exists"),
    ]:
        p = sql(db, bad, ok=False)
        assert p.returncode == status and message in p.stderr, (bad, p.returncode, p.stderr)
    # The shell reads statements from standard input and goes on after an error.
    p = subprocess.run([BIN, "sql", db, "--format", "csv"], input="SELECT 1 AS one;\nSELEC;\nSELECT 2 AS two;\n",
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "one\n1" in p.stdout and "two\n2" in p.stdout, p.stdout + p.stderr


def test_an_update_larger_than_the_memory_limit_fails_and_changes_nothing(db):
    """UPDATE holds the new versions of the rows it changes until it rewrites their
    segments: accounted in the memory pool, so past --memory it fails (53200 over the wire)
    and changes nothing, instead of growing the process; within it, it runs."""
    sql(db, "CREATE TABLE big (k BIGINT NOT NULL, v VARCHAR) ORDER BY (k); "
            "INSERT INTO big SELECT value, repeat('x', 100) FROM generate_series(1, 100000)")
    p = sql(db, "UPDATE big SET v = v || 'y'", "--memory", "4MiB", ok=False)
    assert p.returncode != 0 and "memory limit" in p.stderr, p.stderr
    out = sql(db, "SELECT count(*) AS n FROM big WHERE length(v) = 100").stdout.split()
    assert out[-1] == "100000", out
    sql(db, "UPDATE big SET v = v || 'y'", "--memory", "256MiB")
    out = sql(db, "SELECT count(*) AS n FROM big WHERE length(v) = 101").stdout.split()
    assert out[-1] == "100000", out


def test_import_good_and_malformed_files(db, tmp_path):
    sql(db, "CREATE TABLE s (k INT NOT NULL, name VARCHAR NOT NULL, d DATE) ORDER BY (k)")
    good = tmp_path / "s.tbl"
    good.write_text("".join(f"{(i * 37) % 1000}|n{i}|2024-02-{i % 28 + 1:02d}|\n" for i in range(1000)))
    p = tierdb("import", db, "s", good)
    assert "imported 1000 rows" in p.stdout and "rows/s" in p.stdout and "MB/s" in p.stdout, p.stdout
    cases = {
        "columns.tbl": (b"1|a|\n", "columns.tbl:2: 2 fields, the table has 3 columns"),
        "number.tbl": (b"1x|a|2024-01-01|\n", 'number.tbl:2: column k: "1x" is not an INT'),
        "date.tbl": (b"1|a|2024-02-30|\n", 'date.tbl:2: column d: "2024-02-30" is not a date'),
        "utf8.tbl": (b"1|\xff|2024-01-01|\n", "utf8.tbl:2: column name: invalid UTF-8"),
        "truncated.tbl": (b"1|a", "truncated.tbl:2: 2 fields, the table has 3 columns"),
    }
    for name, (tail, message) in cases.items():
        f = tmp_path / name
        f.write_bytes(b"5|ok|2024-01-01|\n" + tail)
        p = tierdb("import", db, "s", f, "--max-rejects", "0", "--rejects", tmp_path / "r.txt", ok=False)
        assert p.returncode == 2, p.stdout
        assert message in p.stderr and "nothing was imported" in p.stderr, (name, p.stderr)
        assert sql(db, "SELECT count(*) FROM s").stdout.splitlines()[1] == "1000", name
    p = tierdb("import", db, "nosuch", good, ok=False)
    assert p.returncode == 3 and "table nosuch does not exist" in p.stderr, p.stderr
    p = tierdb("import", db, "s", tmp_path / "missing.csv", ok=False)
    assert p.returncode == 2 and "missing.csv" in p.stderr, p.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(port, query, password="s3cret", user="tierdb"):
    env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="10")
    return subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", user, "-d", "tierdb",
                           "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
def test_serve_speaks_postgres(db):
    sql(db, "CREATE TABLE p (k INT NOT NULL, v VARCHAR) ; INSERT INTO p VALUES (1, 'one'), (2, NULL)")
    port = free_port()
    env = dict(os.environ, TIERDB_PASSWORD="s3cret")
    server = subprocess.Popen([BIN, "serve", db, "--listen", f"127.0.0.1:{port}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                assert time.time() < deadline, "server did not start"
                time.sleep(0.2)
        p = psql(port, "SELECT k, v FROM p ORDER BY k")
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines() == ["1|one", "2|"], p.stdout
        p = psql(port, "SELECT 1", password="wrong")
        assert p.returncode != 0 and 'password authentication failed for user "tierdb"' in p.stderr.lower(), p.stderr
        p = psql(port, "SELECT 1", user="mallory")
        assert p.returncode != 0 and 'for user "mallory"' in p.stderr.lower(), p.stderr
        p = psql(port, "SELEC 1")
        assert p.returncode != 0 and "Line: 1, Column: 1" in p.stderr, p.stderr
        p = psql(port, "SELECT * FROM nosuch")
        assert p.returncode != 0 and "nosuch" in p.stderr, p.stderr
        p = psql(port, "INSERT INTO p VALUES (3, 'three')")
        assert p.returncode == 0 and "INSERT 0 1" in p.stdout + p.stderr, p.stdout + p.stderr
        p = psql(port, "SELECT count(*) FROM p")
        assert p.stdout.strip() == "3", p.stdout + p.stderr
        assert server.poll() is None, "the server stays up"
    finally:
        server.terminate()
        server.wait(timeout=60)
    p = tierdb("serve", db, "--listen", "127.0.0.1:0", ok=False, env={k: v for k, v in os.environ.items() if k != "TIERDB_PASSWORD"})
    assert p.returncode == 2 and "needs a password" in p.stderr, p.stderr


def test_ssb_answers_match_duckdb(tmp_path):
    pytest.importorskip("duckdb")
    data = Path(os.environ.get("TIERDB_SSB_DATA", tmp_path / "ssb-data"))
    p = subprocess.run([sys.executable, ROOT / "python/bench/ssb_compare.py", "--tierdb", BIN, "--sf", "0.1",
                        "--data", data, "--work", tmp_path / "work", "--threads", "2", "--check-only",
                        "--out", tmp_path / "out"], capture_output=True, text=True, timeout=1200)
    print(p.stdout[-4000:])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "13 of 13 answers match DuckDB's" in p.stdout


def wait_port(server, port):
    deadline = time.time() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.time() < deadline, "server did not start"
            time.sleep(0.2)


def test_sigkill_mid_import_commits_nothing(db, tmp_path):
    """An import commits at its end, in one KV batch: killed before, the table is empty."""
    sql(db, "CREATE TABLE big (k BIGINT NOT NULL, v VARCHAR NOT NULL) ORDER BY (k)")
    f = tmp_path / "big.tbl"
    with open(f, "w") as out:
        for i in range(100_000):
            out.write(f"{(i * 7919) % 100_000}|value {i}|\n")
    # Killed at a known point: every segment uploaded, the catalog commit not yet made (the
    # debug build's pause point), never "after a sleep", which races the machine's speed.
    env = dict(os.environ, TIERDB_TEST_PAUSE_AT="import-commit")
    p = subprocess.Popen([BIN, "import", db, "big", f], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, text=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "paused at import-commit" in line:
            break
    assert p.poll() is None, f"the import ended before its commit point: {''.join(seen)}"
    p.kill()
    p.wait()
    segments = [x for x in Path(db).rglob("*.parquet")] if not db.startswith("s3://") else None
    if segments is not None:
        assert segments, "the killed import had uploaded its segments"
    assert sql(db, "SELECT count(*) FROM big").stdout.splitlines()[1] == "0"
    tierdb("import", db, "big", f)
    assert sql(db, "SELECT count(*), count(DISTINCT k) FROM big").stdout.splitlines()[1] == "100000,100000"


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
@pytest.mark.parametrize("mode", ["write-through", "write-back"])
def test_acknowledged_insert_survives_sigkill(db, tmp_path, mode):
    """An INSERT is durable when psql gets INSERT 0 n: in write-back mode the segment is in
    the fsynced device log and the catalog commit in the KV engine's (same rule)."""
    cache = tmp_path / "cache"
    tiers = ["--cache-dir", cache, "--cache-bytes", "64MiB", "--write-mode", mode]
    sql(db, "CREATE TABLE d (k INT NOT NULL)", *tiers)
    port = free_port()
    env = dict(os.environ, TIERDB_PASSWORD="s3cret")
    server = subprocess.Popen([BIN, "serve", db, "--listen", f"127.0.0.1:{port}", *map(str, tiers)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(server, port)
        for i in range(3):
            p = psql(port, f"INSERT INTO d VALUES ({i})")
            assert p.returncode == 0 and "INSERT 0 1" in p.stdout + p.stderr, p.stderr
    finally:
        server.kill()
        server.wait(timeout=60)
    out = sql(db, "SELECT k FROM d ORDER BY k", *tiers).stdout.splitlines()
    assert out == ["k", "0", "1", "2"], out


class OwnMinio:
    """A MinIO of this test's own (so it can be killed and restarted on the same address and
    data without disturbing other tests)."""

    def __init__(self, tmp_path):
        self.bin = os.environ.get("MINIO_BIN", os.path.expanduser("~/.cache/tierdb/bin/minio"))
        self.data = tmp_path / "minio-data"
        self.port = free_port()
        self.proc = None
        self.env = dict(os.environ, MINIO_ROOT_USER="outage", MINIO_ROOT_PASSWORD="outage-secret")

    def start(self):
        self.proc = subprocess.Popen([self.bin, "server", self.data, "--address", f"127.0.0.1:{self.port}",
                                      "--console-address", f"127.0.0.1:{free_port()}"],
                                     env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while subprocess.run(["curl", "-sf", f"http://127.0.0.1:{self.port}/minio/health/live"],
                             capture_output=True).returncode != 0:
            assert self.proc.poll() is None and time.time() < deadline, "MinIO did not start"
            time.sleep(0.2)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def client_env(self):
        return dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{self.port}", AWS_ACCESS_KEY_ID="outage",
                    AWS_SECRET_ACCESS_KEY="outage-secret", AWS_REGION="us-east-1", TIERDB_PASSWORD="s3cret")


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
def test_serve_recovers_after_the_object_store_restarts(tmp_path):
    """MinIO killed for a while and restarted on the same address and data: `tierdb serve`
    (write-back) must answer again within a bounded time, and every INSERT it acknowledged,
    before, during or after the outage, must be there."""
    minio = OwnMinio(tmp_path)
    if not os.path.exists(minio.bin):
        assert not os.environ.get("TIERDB_REQUIRE_MINIO"), f"{minio.bin} is missing"
        pytest.skip("MinIO is not built (scripts/test.sh builds it)")
    minio.start()
    env = minio.client_env()
    try:
        p = subprocess.run(["curl", "-sf", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                            "outage:outage-secret", f"http://127.0.0.1:{minio.port}/outage"], capture_output=True)
        assert p.returncode == 0, p.stderr
        db = "s3://outage/db"
        tiers = ["--cache-dir", tmp_path / "cache", "--cache-bytes", "64MiB", "--write-mode", "write-back"]
        tierdb("sql", db, "--create", "-c", "CREATE TABLE d (k INT NOT NULL)", *tiers, env=env)
        port = free_port()
        # The outage makes the server log a warning a second: to a file, so a full pipe
        # cannot block it.
        log = open(tmp_path / "serve.log", "w")
        server = subprocess.Popen([BIN, "serve", db, "--listen", f"127.0.0.1:{port}", "--recover-for", "5m",
                                   *map(str, tiers)], env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        acked = []
        try:
            wait_port(server, port)

            def insert(i):
                p = psql(port, f"INSERT INTO d VALUES ({i})")
                if p.returncode == 0 and "INSERT 0 1" in p.stdout:
                    acked.append(i)
                return p

            for i in range(3):
                assert insert(i).returncode == 0
            minio.kill()
            # An outage longer than SlateDB's retries (the 20 s). Statements meanwhile
            # may be acknowledged (from the write-back log) or fail; they must not hang.
            outage_end = time.time() + 20
            i = 3
            while time.time() < outage_end:
                insert(i)
                i += 1
                time.sleep(0.5)
            minio.start()
            deadline = time.time() + 240
            while True:
                p = psql(port, "SELECT count(*) FROM d")
                if p.returncode == 0:
                    break
                assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                assert time.time() < deadline, f"no answer 240 s after MinIO came back: {p.stderr}"
                time.sleep(1)
            for i in range(100, 103):
                assert insert(i).returncode == 0
            got = {int(x) for x in psql(port, "SELECT k FROM d").stdout.split()}
            assert set(acked) <= got, f"acknowledged {sorted(acked)}, present {sorted(got)}"
            assert server.poll() is None, "the server stays up"
            assert "database reopened; serving again" in (tmp_path / "serve.log").read_text(), \
                "the outage outlasted the engine's retries, so the server had to reopen it"
        finally:
            server.terminate()
            server.wait(timeout=120)
            log.close()
        out = tierdb("sql", db, "--format", "csv", "-c", "SELECT k FROM d", *tiers, env=env).stdout
        assert set(acked) <= {int(x) for x in out.split()[1:]}
    finally:
        minio.kill()
