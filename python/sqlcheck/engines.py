"""The two engines the differential tester drives: PostgreSQL 15 (the oracle: `initdb` in a
temporary directory, listening on 127.0.0.1 only, C collation, C.UTF-8 character classes) and `tierdb serve` on a
fresh local database. Both are reached with psycopg 3, in autocommit mode, so BEGIN,
COMMIT and ROLLBACK are the statements the tester sends."""

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

PASSWORD = "sqlcheck"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, log):
    deadline = time.time() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what} exited: {open(log).read()[-2000:]}")
            if time.time() > deadline:
                raise RuntimeError(f"{what} did not start on port {port}")
            time.sleep(0.2)


def pg_bindir():
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "postgres")):
            return d
    found = shutil.which("postgres")
    if found:
        return os.path.dirname(found)
    raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql-15 "
                       "(scripts/test.sh and scripts/sqlcheck.sh install it)")


@contextlib.contextmanager
def postgres(fsync=False, extra=""):
    """A throwaway PostgreSQL on a free loopback port; yields its port. `fsync`: durable
    commits (the benchmark's peer); off for the oracle, where only answers count. `extra`:
    more `-c name=value` server settings."""
    bindir = pg_bindir()
    root = tempfile.mkdtemp(prefix="sqlcheck-pg-")
    data, log = os.path.join(root, "data"), os.path.join(root, "log")
    run_as = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        import pwd
        user = "postgres" if _user_exists("postgres") else "nobody"
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
        run_as = ["runuser", "-u", user, "--"]
    port = free_port()
    subprocess.run(run_as + [f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                             "--lc-collate=C", "--lc-ctype=C.UTF-8", "--lc-messages=C", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run(run_as + [f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-o",
                             f"-p {port} -k {root} -c listen_addresses=127.0.0.1 "
                             f"-c fsync={'on' if fsync else 'off'} {extra}", "start"],
                   check=True, capture_output=True)
    try:
        wait_port(port, None, "postgres", log)
        yield port
    finally:
        subprocess.run(run_as + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _user_exists(name):
    import pwd
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@contextlib.contextmanager
def tierdb(bin_path):
    """`tierdb serve` over a fresh local database; yields its port."""
    root = tempfile.mkdtemp(prefix="sqlcheck-tierdb-")
    db, log = os.path.join(root, "db"), os.path.join(root, "serve.log")
    subprocess.run([bin_path, "sql", db, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
    port = free_port()
    env = dict(os.environ, TIERDB_PASSWORD=PASSWORD)
    with open(log, "w") as out:
        p = subprocess.Popen([bin_path, "serve", db, "--listen", f"127.0.0.1:{port}", "--memory-bytes", "256MiB"],
                             env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_port(port, p, "tierdb serve", log)
        yield port
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(root, ignore_errors=True)


class Conn:
    """One autocommit connection; `run` answers ('ok', rows or None, rowcount) or
    ('error', sqlstate, message). A lost connection is opened again."""

    def __init__(self, dsn):
        self.dsn = dsn
        self.c = None

    def _connect(self):
        import psycopg
        # prepare_threshold=None: every statement is parsed afresh (the tester drops and
        # creates tables of the same names with other columns between rounds).
        self.c = psycopg.connect(self.dsn, autocommit=True, connect_timeout=30, prepare_threshold=None)

    def run(self, sql):
        import psycopg
        if self.c is None or self.c.closed:
            self._connect()
        try:
            cur = self.c.execute(sql)
            rows = cur.fetchall() if cur.description is not None else None
            return ("ok", rows, cur.rowcount)
        except psycopg.Error as e:
            state = getattr(e, "sqlstate", None) or "?????"
            if self.c.closed or self.c.broken:
                self.c = None
            return ("error", state, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        except (ValueError, UnicodeDecodeError) as e:  # rows the driver cannot decode
            self.close()
            return ("error", "client", f"{type(e).__name__}: {e}")

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None


def pg_dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


def tierdb_dsn(port):
    return f"host=127.0.0.1 port={port} user=tierdb password={PASSWORD} dbname=tierdb"
