"""`tierdb serve` as PostgreSQL clients see it: the drivers of pg_clients.py, psql's `\\dt`
and `\\d`, bad input (wrong parameters, an aborted transaction, malformed COPY rows, TLS
on a plain port) answered with the right SQLSTATE and the server staying up, a SIGKILL
during COMMIT (all of the transaction or none), TLS, and VACUUM.

Needs the `tierdb` binary (TIERDB_BIN, else the debug build in CARGO_TARGET_DIR) and the
drivers (scripts/python-env.sh installs them)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pg_clients  # noqa: E402
from pg_clients import PASSWORD, dsn, serve  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))


def tierdb(*args, ok=True, **kw):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=600, **kw)
    if ok:
        assert p.returncode == 0, "tierdb %s failed:\n%s\n%s" % (args, p.stdout, p.stderr)
    return p


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "db")
    tierdb("sql", path, "--create", "-c", "SELECT 1")
    return path


@pytest.fixture
def server(db, tmp_path):
    with serve(BIN, db, log=str(tmp_path / "serve.log")) as (proc, port):
        yield proc, port


@pytest.mark.parametrize("name,check", pg_clients.CLIENTS, ids=[n.split(" (")[0] for n, _ in pg_clients.CLIENTS])
def test_driver(server, name, check):
    proc, port = server
    check(port, "t")
    assert proc.poll() is None, "the server stays up"


def psql(port, *args, password=PASSWORD):
    env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="10")
    return subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "-d", "tierdb", "-X", *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
def test_psql_describes_tables(server):
    _, port = server
    p = psql(port, "-c", "CREATE TABLE t (id INT NOT NULL, name VARCHAR, price DECIMAL(10,2), day DATE, ok BOOLEAN, x DOUBLE) ORDER BY (id)")
    assert p.returncode == 0, p.stderr
    p = psql(port, "-c", r"\dt")
    assert p.returncode == 0, p.stderr
    assert [l.split("|")[1].strip() for l in p.stdout.splitlines() if "| table" in l] == ["t"], p.stdout
    p = psql(port, "-c", r"\d t")
    assert p.returncode == 0, p.stderr
    assert 'Table "public.t"' in p.stdout, p.stdout
    rows = {l.split("|")[0].strip(): [c.strip() for c in l.split("|")[1:]] for l in p.stdout.splitlines() if l.count("|") >= 4}
    assert rows["id"][0] == "integer" and rows["id"][2] == "not null", p.stdout
    assert rows["name"][0] == "character varying" and rows["name"][2] == "", p.stdout
    # As PostgreSQL shows a declared precision and scale (was "numeric" before pg_attribute
    # carried typmods).
    assert rows["price"][0] == "numeric(10,2)" and rows["day"][0] == "date", p.stdout
    assert rows["ok"][0] == "boolean" and rows["x"][0] == "double precision", p.stdout
    p = psql(port, "-c", r"\l")
    assert p.returncode == 0 and "tierdb" in p.stdout, p.stdout + p.stderr
    p = psql(port, "-c", r"\dn")
    assert p.returncode == 0 and "public" in p.stdout, p.stdout + p.stderr
    # \copy in and out goes through COPY FROM STDIN / TO STDOUT.
    src = Path(os.environ.get("TMPDIR", "/tmp")) / f"copy-{port}.csv"
    src.write_text("1,one,1.50,2024-01-02,t,0.5\n2,,,,,\n")
    p = psql(port, "-c", rf"\copy t from '{src}' csv")
    assert p.returncode == 0 and "COPY 2" in p.stdout, p.stdout + p.stderr
    p = psql(port, "-A", "-t", "-c", "COPY (SELECT id, name, ok FROM t ORDER BY id) TO STDOUT WITH (FORMAT csv)")
    assert p.stdout.splitlines() == ["1,one,t", "2,,"], p.stdout + p.stderr
    src.unlink()


def test_psql_describe_commands_with_plus(server, db):
    """psql's `\\dt+`, `\\dn+`, `\\df`, `\\dv`, `\\l` run (they called pg_size_pretty,
    pg_table_size, array_to_string over ACLs, pg_function_is_visible), name the server's
    user as owner, and `\\dt+` shows a columnar table's size: its segment files' bytes
    as PostgreSQL's pg_size_pretty writes them."""
    _, port = server
    for sql in ["CREATE TABLE big (x INT, s TEXT)",
                "INSERT INTO big SELECT CAST(value AS INT), 'row ' || value FROM generate_series(1, 50000)",
                "CREATE VIEW big_v AS SELECT x FROM big"]:
        p = psql(port, "-c", sql)
        assert p.returncode == 0, p.stderr
    out = {}
    for cmd in [r"\dt+", r"\dn+", r"\df", r"\dv", r"\l"]:
        p = psql(port, "-A", "-t", "-c", cmd)
        assert p.returncode == 0 and "ERROR" not in p.stderr, (cmd, p.stderr)
        out[cmd] = [line.split("|") for line in p.stdout.splitlines()]
    big = next(r for r in out[r"\dt+"] if r[1] == "big")
    assert big[3] == "tierdb", big
    parquet = sum(f.stat().st_size for f in Path(db).rglob("*.parquet"))
    assert parquet > 10240
    # PostgreSQL 15's pg_size_pretty for sizes of this order: half-rounded kB.
    assert big[6] == f"{(parquet // 512 + 1) // 2} kB", (big, parquet)
    assert ["public", "tierdb"] == out[r"\dn+"][0][:2], out[r"\dn+"]
    assert any(r[1] == "big_v" and r[3] == "tierdb" for r in out[r"\dv"]), out[r"\dv"]


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
def test_psql_lists_and_describes_views(server):
    _, port = server
    p = psql(port, "-c", "CREATE TABLE vt (id INT NOT NULL, n BIGINT)", "-c", "CREATE VIEW vv AS SELECT id, n * 2 AS twice FROM vt")
    assert p.returncode == 0, p.stderr
    p = psql(port, "-c", r"\dv")
    assert p.returncode == 0, p.stderr
    assert [l.split("|")[1].strip() for l in p.stdout.splitlines() if "| view" in l] == ["vv"], p.stdout
    p = psql(port, "-c", r"\d vv")
    assert p.returncode == 0 and 'View "public.vv"' in p.stdout, p.stdout + p.stderr
    rows = {l.split("|")[0].strip(): l.split("|")[1].strip() for l in p.stdout.splitlines() if l.count("|") >= 4}
    assert rows == {"Column": "Type", "id": "integer", "twice": "bigint"}, p.stdout
    p = psql(port, "-c", r"\dt")
    assert [l.split("|")[1].strip() for l in p.stdout.splitlines() if "| table" in l] == ["vt"], p.stdout


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/test.sh installs it)")
def test_grafanas_table_list(server):
    """Grafana's recorded query: the tables of the search path (it listed none)."""
    _, port = server
    p = psql(port, "-c", "CREATE TABLE metrics (at TIMESTAMPTZ, v DOUBLE PRECISION)", "-c", "CREATE VIEW recent AS SELECT * FROM metrics")
    assert p.returncode == 0, p.stderr
    recorded = Path(__file__).resolve().parent / "recorded" / "grafana_tables.sql"
    p = psql(port, "-A", "-t", "-f", str(recorded))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["metrics"], p.stdout


def sqlstate(fn):
    import psycopg
    try:
        fn()
    except psycopg.Error as e:
        return e.sqlstate, str(e)
    return None, None


def test_bad_input_gets_sqlstates_and_the_server_stays_up(server):
    import psycopg
    proc, port = server
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("CREATE TABLE b (k INT NOT NULL, v VARCHAR)")
        c.execute("INSERT INTO b VALUES (1, 'one')")
        # Wrong number of parameters (below psycopg, which would refuse to send them).
        res = c.pgconn.exec_params(b"SELECT * FROM b WHERE k = $1", [b"1", b"2"])
        assert res.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"08P01", res.error_message
        # A parameter that is not of its type.
        res = c.pgconn.exec_params(b"SELECT * FROM b WHERE k = $1", [b"many"])
        assert res.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) in (b"22P02", b"22023"), res.error_message
        # An unknown prepared statement.
        res = c.pgconn.exec_prepared(b"nosuch", [])
        assert res.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"26000", res.error_message
        # COMMIT without BEGIN: a warning, as in PostgreSQL.
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.sqlstate))
        c.execute("COMMIT")
        assert notices == ["25P01"], notices
    with psycopg.connect(dsn(port)) as c:
        c.execute("INSERT INTO b VALUES (2, 'two')")
        code, _ = sqlstate(lambda: c.execute("SELECT * FROM nosuch"))
        assert code == "42P01"
        code, msg = sqlstate(lambda: c.execute("SELECT 1"))
        assert code == "25P02", msg
        c.rollback()
        assert c.execute("SELECT count(*) FROM b").fetchone() == (1,), "the failed transaction left nothing"
        # COPY with a malformed row: an error, nothing of it copied.
        def bad_copy():
            with c.cursor().copy("COPY b FROM STDIN (FORMAT csv)") as cp:
                cp.write("3,three\nfour,4\n")
        code, msg = sqlstate(bad_copy)
        assert code == "22P04" and "line 2" in msg, (code, msg)
        c.rollback()
        assert c.execute("SELECT count(*) FROM b").fetchone() == (1,)
    # TLS asked of a plain port: refused cleanly.
    with pytest.raises(psycopg.OperationalError, match="SSL"):
        psycopg.connect(dsn(port) + " sslmode=require")
    with psycopg.connect(dsn(port)) as c:
        assert c.execute("SELECT count(*) FROM b").fetchone() == (1,)
    assert proc.poll() is None, "the server stays up"


def kill_when_paused(proc, log, pause, statement):
    """Runs `statement` on a thread, waits until the server (started with
    TIERDB_TEST_PAUSE_AT=pause) reports it stopped at that pause point, then SIGKILLs it.
    The 120 s bound is a liveness guard, not a timing assumption."""
    import threading
    import time
    threading.Thread(target=lambda: sqlstate(statement), daemon=True).start()
    deadline = time.time() + 120
    while f"paused at {pause}" not in log.read_text():
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-2000:]
        time.sleep(0.1)
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("pause,expect", [("txn-commit", 0), ("txn-committed", 2)])
def test_sigkill_during_commit_keeps_all_or_nothing(db, tmp_path, pause, expect):
    """Killed at a known point of COMMIT (a debug build's pause point, never a sleep):
    before the catalog commit nothing of the transaction is there, after it all of it."""
    import psycopg
    tierdb("sql", db, "-c", "CREATE TABLE k (n INT NOT NULL)")
    env = dict(os.environ, TIERDB_TEST_PAUSE_AT=pause)
    log = tmp_path / "serve.log"
    with serve(BIN, db, env=env, log=str(log)) as (proc, port):
        c = psycopg.connect(dsn(port))
        c.execute("INSERT INTO k VALUES (1)")
        c.execute("INSERT INTO k VALUES (2)")
        kill_when_paused(proc, log, pause, c.commit)
    out = tierdb("sql", db, "--format", "csv", "-c", "SELECT count(*) AS n FROM k").stdout.split()
    assert out[-1] == str(expect), out


@pytest.mark.parametrize("pause,committed", [(None, False), ("txn-commit", False), ("txn-committed", True)])
def test_sigkill_with_ddl_in_a_transaction_keeps_all_or_nothing(db, tmp_path, pause, committed):
    """DDL inside BEGIN, the server SIGKILLed with the transaction still open (None) or at
    a pause point of its COMMIT: after a restart the catalog is as before the transaction
    (its undo records are followed when the database opens), or as after the commit."""
    import psycopg
    tierdb("sql", db, "-c", "CREATE TABLE k (n INT NOT NULL); INSERT INTO k VALUES (1), (2)")
    env = dict(os.environ, TIERDB_TEST_PAUSE_AT=pause) if pause else None
    log = tmp_path / "serve.log"
    with serve(BIN, db, env=env, log=str(log)) as (proc, port):
        c = psycopg.connect(dsn(port))
        c.execute("DROP TABLE k")
        c.execute("CREATE TABLE n (x INT)")
        c.execute("ALTER TABLE n ADD COLUMN y TEXT")
        c.execute("INSERT INTO n VALUES (1, 'a')")
        if pause:
            kill_when_paused(proc, log, pause, c.commit)
        else:
            proc.kill()
            proc.wait()
    out = tierdb("sql", db, "--format", "csv", "-c",
                 "SELECT table_name FROM information_schema.tables "
                 "WHERE table_schema = 'public' ORDER BY 1").stdout.split()
    assert out[1:] == (["n"] if committed else ["k"]), out
    table, rows = ("n", "1") if committed else ("k", "2")
    out = tierdb("sql", db, "--format", "csv", "-c", f"SELECT count(*) FROM {table}").stdout.split()
    assert out[-1] == rows, out


@pytest.mark.parametrize("pause,expect", [("dml-commit", [1, 2, 3, 4]), ("dml-committed", [1, 3])])
def test_sigkill_during_delete_with_subquery_keeps_all_or_nothing(db, tmp_path, pause, expect):
    """A DELETE whose WHERE is a subquery (issue 26: it used to delete every row), killed at
    a pause point before or after its catalog commit: after a restart the table holds all
    of its rows or exactly the ones PostgreSQL keeps, never anything else."""
    import psycopg
    tierdb("sql", db, "-c", "CREATE TABLE a (id INT NOT NULL) ORDER BY (id); CREATE TABLE b (id INT)")
    tierdb("sql", db, "-c", "INSERT INTO a VALUES (1), (2), (3), (4); INSERT INTO b VALUES (2), (4), (NULL)")
    env = dict(os.environ, TIERDB_TEST_PAUSE_AT=pause)
    log = tmp_path / "serve.log"
    with serve(BIN, db, env=env, log=str(log)) as (proc, port):
        c = psycopg.connect(dsn(port), autocommit=True)
        kill_when_paused(proc, log, pause,
                         lambda: c.execute("DELETE FROM a WHERE id IN (SELECT id FROM b)"))
    out = tierdb("sql", db, "--format", "csv", "-c", "SELECT id FROM a ORDER BY id").stdout.split()
    assert [int(x) for x in out[1:]] == expect, out


@pytest.mark.parametrize("pause,committed", [
    ("rows-commit", False), ("rows-committed", True),  # a transaction of row tables only
    ("txn-commit", False), ("txn-committed", True),    # rows and a columnar table together
])
def test_sigkill_during_a_row_commit_keeps_rows_index_and_sequence_whole(db, tmp_path, pause, committed):
    """A transaction that inserts (drawing from a SERIAL's sequence), updates an indexed
    column and deletes rows of a row table, killed at a pause point before or after its one
    KV commit: after a restart the rows are all before or all after, every index lookup
    agrees with a scan, `tierdb verify` finds rows and index entries agreeing, and the
    sequence never hands out the value drawn before the kill."""
    import psycopg
    tierdb("sql", db, "-c", "CREATE TABLE r (id SERIAL, k INT NOT NULL, PRIMARY KEY (id)); "
                            "CREATE INDEX r_k ON r (k); CREATE TABLE side (n INT)")
    tierdb("sql", db, "-c", "INSERT INTO r (k) VALUES (10), (20)")
    env = dict(os.environ, TIERDB_TEST_PAUSE_AT=pause)
    log = tmp_path / "serve.log"
    with serve(BIN, db, env=env, log=str(log)) as (proc, port):
        c = psycopg.connect(dsn(port))
        c.execute("INSERT INTO r (k) VALUES (30)")
        drawn = c.execute("SELECT currval('r_id_seq')").fetchone()[0]
        c.execute("UPDATE r SET k = 11 WHERE id = 1")
        c.execute("DELETE FROM r WHERE id = 2")
        if pause.startswith("txn"):
            c.execute("INSERT INTO side VALUES (1)")
        kill_when_paused(proc, log, pause, c.commit)

    def rows(sql):
        out = tierdb("sql", db, "--format", "csv", "-c", sql).stdout.split()
        return [tuple(int(v) for v in line.split(",")) for line in out[1:]]

    expect = [(1, 11), (drawn, 30)] if committed else [(1, 10), (2, 20)]
    assert rows("SELECT id, k FROM r ORDER BY id") == expect
    for k in (10, 11, 20, 30):
        assert rows(f"SELECT id FROM r WHERE k = {k} ORDER BY id") == \
            rows(f"SELECT id FROM r WHERE k + 0 = {k} ORDER BY id"), k
    assert rows("SELECT nextval('r_id_seq') AS n")[0][0] > drawn
    # Every row has its index entries and every entry names its row (`tierdb verify`).
    report = json.loads(tierdb("verify", db, "--format", "json").stdout)
    assert report["problems"] == 0, report
    assert [(t["table"], t["rows"], [i["entries"] for i in t["indexes"]]) for t in report["tables"]] == \
        [("r", len(expect), [len(expect)])]
    if pause.startswith("txn"):
        assert rows("SELECT count(*) AS n FROM side") == [(1 if committed else 0,)]


def test_sigterm_during_a_long_statement_stops_the_server(db, tmp_path):
    """SIGTERM while a statement runs: the server stops (cleanly, or after its 10 s grace
    the watchdog exits it) and the database opens again with its rows. The 120 s bound is a
    liveness guard (it hung before), not a speed check."""
    import psycopg
    import threading
    import time
    tierdb("sql", db, "-c", "CREATE TABLE s (n INT NOT NULL); INSERT INTO s VALUES (1), (2)")
    with serve(BIN, db, log=str(tmp_path / "serve.log")) as (proc, port):
        c = psycopg.connect(dsn(port), autocommit=True)
        t = threading.Thread(target=lambda: sqlstate(lambda: c.execute(
            "SELECT count(*) FROM generate_series(1, 100000000000) a")), daemon=True)
        t.start()
        time.sleep(0.5)  # not a timing assumption: the test holds whether or not it started
        proc.terminate()
        proc.wait(timeout=120)
    out = tierdb("sql", db, "--format", "csv", "-c", "SELECT count(*) AS n FROM s").stdout.split()
    assert out[-1] == "2", out


def test_a_statement_past_the_memory_budget_fails_and_the_next_one_runs(db, tmp_path):
    """`--memory-limit 384MiB` (query memory: what the DRAM tier, metadata cache and reserve
    leave, 168 MiB): a hash join whose build side (300,000 rows of 800 bytes) cannot spill
    fails with 53200 instead of growing the server; its peak resident memory stays within
    the budget and a margin for the binary; the memory is freed, and the next statements
    run (the same join under a budget that holds it, too)."""
    import psycopg
    tierdb("sql", db, "-c", "CREATE TABLE big (k BIGINT NOT NULL, pad VARCHAR NOT NULL); "
           "INSERT INTO big SELECT value, repeat('x', 790) || value FROM generate_series(1, 300000)")
    join = "SELECT count(*) FROM big a JOIN big b ON a.pad = b.pad"
    log = tmp_path / "serve.log"
    with serve(BIN, db, "--memory-limit", "384MiB", log=str(log)) as (proc, port):
        assert "memory budget 384.0 MiB" in open(log).read()
        c = psycopg.connect(dsn(port), autocommit=True)
        state, message = sqlstate(lambda: c.execute(join))
        assert (state, message.split(":")[0]) == ("53200", "out of memory"), message
        assert c.execute("SELECT count(*) FROM big").fetchone() == (300000,)
        assert c.execute("SELECT count(*) FROM big WHERE k <= 10").fetchone() == (10,)
        status = open(f"/proc/{proc.pid}/status").read()
        hwm_mib = int(status.split("VmHWM:")[1].split()[0]) // 1024
        # The budget, plus what the binary itself maps (a debug build's code and symbols).
        assert hwm_mib < 384 + 384, status
        # Freed: the same statement again fails the same way, it does not find less room.
        assert sqlstate(lambda: c.execute(join))[0] == "53200"
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_an_error_while_rows_stream_aborts_the_transaction(server):
    """A query that fails after its rows began to stream (here: division by zero on the
    second row) fails the statement; inside a transaction that aborts it, so COMMIT rolls
    back the INSERT before it (found by the differential tester: it used to commit)."""
    import psycopg
    _, port = server
    with psycopg.connect(dsn(port)) as c:
        c.execute("CREATE TABLE z (n INT NOT NULL)")
        c.execute("INSERT INTO z VALUES (2), (1)")
        c.commit()
        c.execute("INSERT INTO z VALUES (3)")
        code, _ = sqlstate(lambda: c.execute("SELECT 10 / (n - 1) FROM z ORDER BY n DESC").fetchall())
        assert code == "22012", code
        code, _ = sqlstate(lambda: c.execute("SELECT 1"))
        assert code == "25P02", code
        c.rollback()
        c.execute("INSERT INTO z VALUES (4)")
        sqlstate(lambda: c.execute("SELECT 10 / (n - 1) FROM z").fetchall())
        c.commit()  # PostgreSQL: COMMIT of an aborted transaction rolls it back
        assert c.execute("SELECT n FROM z ORDER BY n").fetchall() == [(1,), (2,)]


def test_copy_to_with_header_counts_rows_only(server):
    """COPY … TO STDOUT (FORMAT csv, HEADER): the header line is sent, and the command
    tag counts the rows alone (it counted the header as a row)."""
    import psycopg
    _, port = server
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("CREATE TABLE h (k INT NOT NULL, v VARCHAR)")
        c.execute("INSERT INTO h VALUES (1, 'a'), (2, NULL)")
        cur = c.cursor()
        with cur.copy("COPY h TO STDOUT (FORMAT csv, HEADER)") as cp:
            data = b"".join(bytes(chunk) for chunk in cp)
        assert data.decode().splitlines() == ["k,v", "1,a", "2,"], data
        assert cur.rowcount == 2, cur.rowcount


def test_invalid_utf8_in_a_query_is_refused(server):
    """A query string with bytes that are not UTF-8 is refused with 22021 (it was run with
    the bytes replaced by U+FFFD, storing other text than the client sent); the
    connection stays usable."""
    import psycopg
    _, port = server
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("CREATE TABLE u (v VARCHAR)")
        res = c.pgconn.exec_(b"INSERT INTO u VALUES ('a\xff\xfeb')")
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"22021", res.error_message
        assert c.execute("SELECT count(*) FROM u").fetchone() == (0,)


def test_failed_parse_aborts_the_transaction(server):
    """Extended protocol, as JDBC sends it: a statement that fails when parsed inside a
    transaction aborts it, and every following statement gets 25P02 until ROLLBACK."""
    import psycopg
    _, port = server
    with psycopg.connect(dsn(port)) as c:
        c.execute("CREATE TABLE p (k INT NOT NULL)")
        c.commit()
        c.execute("INSERT INTO p VALUES (1)")
        res = c.pgconn.prepare(b"s1", b"SELECT * FROM nosuch")
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"42P01", res.error_message
        res = c.pgconn.prepare(b"s2", b"INSERT INTO p VALUES (2)")
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"25P02", res.error_message
        code, _ = sqlstate(lambda: c.execute("SELECT 1"))
        assert code == "25P02"
        c.rollback()
        assert c.execute("SELECT count(*) FROM p").fetchone() == (0,)


def test_tls(db, tmp_path):
    import psycopg
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=localhost"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("openssl cannot make a certificate here: " + r.stderr[-200:])
    with serve(BIN, db, "--tls-cert", cert, "--tls-key", key, log=str(tmp_path / "serve.log")) as (_, port):
        with psycopg.connect(dsn(port) + " sslmode=require") as c:
            assert c.execute("SELECT 1").fetchone() == (1,)
            assert c.pgconn.ssl_in_use
    # Not on loopback without TLS: refused unless --insecure.
    p = tierdb("serve", db, "--listen", "0.0.0.0:0", ok=False, env=dict(os.environ, TIERDB_PASSWORD="x"))
    assert p.returncode != 0 and "--insecure" in p.stderr, p.stderr
    p = tierdb("serve", db, "--listen", "127.0.0.1:0", "--tls-cert", tmp_path / "nosuch.pem", "--tls-key", key,
               ok=False, env=dict(os.environ, TIERDB_PASSWORD="x"))
    assert p.returncode != 0 and "nosuch.pem" in p.stderr, p.stderr


def test_vacuum_deletes_only_unreferenced_files(db, tmp_path):
    """UPDATE, DELETE and DROP TABLE retire segment files; an import killed before its commit
    leaves one nobody retired. VACUUM deletes exactly those (after --retain), never one a
    table references, and the answers stay the same; a scan that planned before an UPDATE
    still reads its files while VACUUM (default retention) runs beside it."""
    import psycopg
    tierdb("sql", db, "-c", "CREATE TABLE v (p INT NOT NULL, k INT NOT NULL) PARTITION BY p ORDER BY (k); "
                            "INSERT INTO v VALUES (1, 1), (1, 2), (2, 3), (2, 4), (3, 5); "
                            "CREATE TABLE gone (k INT NOT NULL); INSERT INTO gone VALUES (1)")
    root = Path(db) / "tables"
    before = sorted(str(p) for p in root.rglob("*.parquet"))
    assert len(before) == 4, before
    tierdb("sql", db, "-c", "UPDATE v SET k = k * 10 WHERE p = 1; DELETE FROM v WHERE p = 3; DROP TABLE gone")
    # An import killed before its commit (at its pause point) leaves a file.
    csv = tmp_path / "rows.csv"
    csv.write_text("p,k\n9,9\n")
    env = dict(os.environ, TIERDB_TEST_PAUSE_AT="import-commit")
    proc = subprocess.Popen([BIN, "import", db, "v", str(csv)], env=env, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "paused at import-commit" in line:
            break
    proc.kill()
    proc.wait()
    answer = tierdb("sql", db, "--format", "csv", "-c", "SELECT p, k FROM v ORDER BY p, k").stdout
    dry = tierdb("vacuum", db, "--dry-run", "--retain", "0s", "--format", "json").stdout
    import json
    plan = json.loads(dry)
    # Retired: the old p=1 and p=3 segments and gone's; never committed: the import's.
    segments = [f for f in plan["files"] if f["path"].endswith(".parquet")]
    assert len(segments) == 4, plan
    assert sum(1 for f in segments if not f["retired"]) == 1, plan
    # The dropped table's Delta log goes with its files; v's is kept.
    logs = {f["path"].split("/_delta_log/")[0] for f in plan["files"] if f not in segments}
    assert len(logs) == 1 and all("/_delta_log/" in f["path"] for f in plan["files"] if f not in segments), plan
    kept = tierdb("vacuum", db, "--retain", "1h", "--format", "json").stdout
    assert json.loads(kept)["files"] == [], kept
    tierdb("vacuum", db, "--retain", "0s")
    after = sorted(str(p) for p in root.rglob("*.parquet"))
    assert len(after) == 2, after  # v's p=1 (rewritten) and p=2 segments
    assert tierdb("sql", db, "--format", "csv", "-c", "SELECT p, k FROM v ORDER BY p, k").stdout == answer
    assert tierdb("vacuum", db, "--dry-run", "--retain", "0s", "--format", "json").stdout.count('"path"') == 0
    # Beside a running scan: a portal suspended after its first rows (asyncpg's cursor
    # fetches with a row limit) holds its plan and files while another connection rewrites
    # the table and VACUUMs (default retention); the scan still reads every row it planned.
    tierdb("sql", db, "-c", "INSERT INTO v SELECT 5, CAST(value AS INT) FROM generate_series(1, 20000)")
    import asyncio
    import asyncpg

    async def scan_beside_vacuum(port):
        args = dict(host="127.0.0.1", port=port, user="tierdb", password=PASSWORD, database="tierdb")
        reader, writer = await asyncpg.connect(**args), await asyncpg.connect(**args)
        try:
            async with reader.transaction():
                cur = await reader.cursor("SELECT k FROM v WHERE p = 5")
                first = await cur.fetch(10)
                assert await writer.execute("DELETE FROM v WHERE p = 5") == "DELETE 20000"
                await writer.execute("VACUUM")
                rest = await cur.fetch(100000)
            return len(first) + len(rest)
        finally:
            await reader.close()
            await writer.close()

    with serve(BIN, db, log=str(tmp_path / "serve.log")) as (_, port):
        assert asyncio.run(scan_beside_vacuum(port)) == 20000
    assert tierdb("sql", db, "--format", "csv", "-c", "SELECT count(*) AS n FROM v WHERE p = 5").stdout.split()[-1] == "0"


def test_a_slow_query_stalls_no_one_and_cancel_stops_it(server):
    """Connection A runs a query that would take hours; B's queries and writes complete
    meanwhile (their answers are checked while A is still running); a CancelRequest
    stops A with 57014, and A's connection goes on."""
    import threading
    import psycopg
    _, port = server
    a = psycopg.connect(dsn(port), autocommit=True)
    result = {}

    def slow():
        try:
            a.execute("SELECT count(*) FROM generate_series(1, 100000000000) AS s(v) WHERE v % 7 = 3").fetchall()
            result["a"] = "finished"
        except psycopg.Error as e:
            result["a"] = e.sqlstate

    t = threading.Thread(target=slow, daemon=True)
    t.start()
    with psycopg.connect(dsn(port), autocommit=True) as b:
        b.execute("CREATE TABLE q (k INT NOT NULL)")
        b.execute("INSERT INTO q VALUES (1), (2)")
        assert b.execute("SELECT sum(k) FROM q").fetchone() == (3,)
    assert t.is_alive() and "a" not in result, "A was still running while B worked"
    a.cancel_safe()
    t.join(timeout=120)
    assert result.get("a") == "57014", result
    assert a.execute("SELECT count(*) FROM q").fetchone() == (2,)
    a.close()


def test_cancel_stops_a_write_and_a_timeout_stops_copy_out(server):
    """A CancelRequest stops an INSERT … SELECT that would run for hours (before, a cancel
    reached only a query's rows as they streamed), nothing of it is written, and the
    connection goes on; statement_timeout ends a COPY TO STDOUT of such a query."""
    import threading
    import psycopg
    _, port = server
    a = psycopg.connect(dsn(port), autocommit=True)
    a.execute("CREATE TABLE w (v BIGINT NOT NULL)")
    result = {}

    def slow_write():
        try:
            a.execute(
                "INSERT INTO w SELECT v FROM generate_series(1, 100000000000) AS s(v) "
                "WHERE v % 1000000007 = 0"
            )
            result["a"] = "finished"
        except psycopg.Error as e:
            result["a"] = e.sqlstate

    t = threading.Thread(target=slow_write, daemon=True)
    t.start()
    with psycopg.connect(dsn(port), autocommit=True) as b:
        assert b.execute("SELECT count(*) FROM w").fetchone() == (0,)
    assert t.is_alive() and "a" not in result, "the INSERT was still running"
    a.cancel_safe()
    t.join(timeout=120)
    assert result.get("a") == "57014", result
    assert a.execute("SELECT count(*) FROM w").fetchone() == (0,)
    a.execute("SET statement_timeout = '2s'")
    with pytest.raises(psycopg.Error) as e:
        with a.cursor().copy(
            "COPY (SELECT count(*) FROM generate_series(1, 100000000000) AS s(v) "
            "WHERE v % 7 = 3) TO STDOUT"
        ) as copy:
            for _ in copy:
                pass
    assert e.value.sqlstate == "57014", e.value
    a.execute("SET statement_timeout = 0")
    assert a.execute("SELECT count(*) FROM w").fetchone() == (0,)
    a.close()


PG_DUMP = "/usr/lib/postgresql/15/bin/pg_dump"


@pytest.mark.skipif(not os.path.exists(PG_DUMP), reason="postgresql-15's pg_dump is not installed")
def test_pg_dump_round_trip(db, tmp_path):
    """pg_dump 15 dumps a tierdb database (schema and data, its catalog queries answered
    by pg_catalog), and psql restores the dump into a fresh tierdb database with every
    statement succeeding (ON_ERROR_STOP); the rows read back are the rows dumped."""
    import subprocess
    tierdb("sql", db, "-c", "CREATE TABLE t (id INT NOT NULL, v VARCHAR(20), d NUMERIC(10,2), "
           "ts TIMESTAMP, b BOOLEAN, f DOUBLE, n NUMERIC, w NUMERIC(65,30), u UUID)")
    tierdb("sql", db, "-c", "INSERT INTO t VALUES (1, 'tab\there', 1.5, '2024-01-02 03:04:05', true, 0.1, "
           "123456789012345678901234567890.5, -0.000000000000000000000000000001, "
           "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'), "
           "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
           "(3, 'quote''s \\ back', -7.25, '1999-12-31 23:59:59', false, -2.5e10, 0.125, 1, NULL)")
    tierdb("sql", db, "-c", "CREATE TABLE empty (k BIGINT NOT NULL)")
    tierdb("sql", db, "-c", "CREATE VIEW big AS SELECT id, d FROM t WHERE d > 0")
    env = dict(os.environ, PGPASSWORD=pg_clients.PASSWORD)
    query = "SELECT * FROM t ORDER BY id"
    view = "SELECT * FROM big ORDER BY id"
    with serve(BIN, db, log=str(tmp_path / "src.log")) as (_, port):
        dump = subprocess.run([PG_DUMP, "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "tierdb"],
                              capture_output=True, text=True, env=env, timeout=300)
        assert dump.returncode == 0, dump.stderr
        before = psql_at(port, query, env)
        before_view = psql_at(port, view, env)
    assert "CREATE TABLE public.t (" in dump.stdout and "COPY public.t " in dump.stdout, dump.stdout
    assert "CREATE TABLE public.empty (" in dump.stdout, dump.stdout
    # Declared types as PostgreSQL's pg_dump writes them (pg_attribute's typmods).
    assert "v character varying(20)," in dump.stdout and "d numeric(10,2)," in dump.stdout, dump.stdout
    assert "n numeric," in dump.stdout and "w numeric(65,30)," in dump.stdout, dump.stdout
    # pg_attribute's attstorage is the type's, or pg_dump writes ALTER COLUMN … SET STORAGE.
    assert "SET STORAGE" not in dump.stdout, dump.stdout
    assert "CREATE VIEW public.big AS" in dump.stdout, dump.stdout
    fresh = str(tmp_path / "restored")
    tierdb("sql", fresh, "--create", "-c", "SELECT 1")
    with serve(BIN, fresh, log=str(tmp_path / "dst.log")) as (_, port):
        restore = subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                                  "-U", "tierdb", "tierdb"], input=dump.stdout, capture_output=True,
                                 text=True, env=env, timeout=300)
        assert restore.returncode == 0, restore.stderr
        after = psql_at(port, query, env)
        assert psql_at(port, "SELECT count(*) FROM empty", env).split() == ["0"]
        assert psql_at(port, view, env) == before_view == "1|1.50\n", before_view
    assert after == before and len(before.splitlines()) == 3, (before, after)


def psql_at(port, sql, env):
    import subprocess
    p = subprocess.run(["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "tierdb",
                        "-c", sql], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout
