"""What PostgreSQL clients do against `tierdb serve`, one check per client: connect, a
parameterized SELECT, a parameterized INSERT, BEGIN…COMMIT of two INSERTs, a ROLLBACK,
UPDATE, DELETE, and reflection of tables and columns.

Used by test_pg.py (every check must pass) and, as a script, to print these checks and
the table of the issue that asked for them (each cell tried as it was then):

    python python/tests/pg_clients.py [--bin tierdb]   # starts a server on a fresh database
"""

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback

PASSWORD = "s3cret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(bin_path, db, *extra, env=None, log=None):
    """`tierdb serve` on a free loopback port; yields (process, port)."""
    port = free_port()
    env = dict(os.environ if env is None else env, TIERDB_PASSWORD=PASSWORD)
    out = open(log, "w") if log else subprocess.DEVNULL
    p = subprocess.Popen([bin_path, "serve", db, "--listen", f"127.0.0.1:{port}", *extra],
                         env=env, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if p.poll() is not None:
                    raise RuntimeError("tierdb serve exited: %s" % (open(log).read() if log else p.stderr.read()))
                if time.time() > deadline:
                    raise RuntimeError("tierdb serve did not start")
                time.sleep(0.2)
        # The port is bound before the database is opened: with a log, also wait for the
        # last start-up line ("tierdb serving …", after the memory budget's, which tests
        # read), so nothing races the server's own output.
        while log and "tierdb serving" not in open(log).read():
            if p.poll() is not None:
                raise RuntimeError("tierdb serve exited: %s" % open(log).read())
            if time.time() > deadline:
                raise RuntimeError("tierdb serve did not print that it is serving")
            time.sleep(0.1)
        yield p, port
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if log:
            out.close()


def dsn(port):
    return f"host=127.0.0.1 port={port} user=tierdb password={PASSWORD} dbname=tierdb"


def url(port, driver):
    return f"postgresql+{driver}://tierdb:{PASSWORD}@127.0.0.1:{port}/tierdb"


def expect(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, expected {want!r}")


def check_psycopg3(port, table):
    import psycopg
    with psycopg.connect(dsn(port)) as c:
        c.execute(f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, price DECIMAL(10,2), day DATE, ok BOOLEAN) ORDER BY (id)")
        c.commit()
        c.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)", (1, "one", 1.5, None, True))
        c.commit()
        expect(c.execute(f"SELECT id, name, price, ok FROM {table} WHERE id = %s", (1,)).fetchall(),
               [(1, "one", __import__("decimal").Decimal("1.50"), True)], "parameterized SELECT")
        c.commit()  # the SELECT opened a transaction; transaction() inside it is a savepoint
        with c.transaction():
            c.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (2, "two"))
            c.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (3, "three"))
        c.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (4, "rolled back"))
        c.rollback()
        expect(c.execute(f"SELECT id FROM {table} ORDER BY id").fetchall(), [(1,), (2,), (3,)], "COMMIT and ROLLBACK")
        # A failed statement inside a nested transaction (a savepoint) leaves the outer one usable.
        with c.transaction():
            c.execute(f"INSERT INTO {table} (id) VALUES (%s)", (5,))
            with contextlib.suppress(psycopg.Error):
                with c.transaction():
                    c.execute("SELECT * FROM nosuch")
        expect(c.execute(f"SELECT count(*) FROM {table} WHERE id = 5").fetchone(), (1,), "savepoint")
        cur = c.execute(f"UPDATE {table} SET name = %s WHERE id = %s", ("TWO", 2))
        expect(cur.rowcount, 1, "UPDATE row count")
        cur = c.execute(f"DELETE FROM {table} WHERE id = %s", (3,))
        expect(cur.rowcount, 1, "DELETE row count")
        c.commit()
        expect(c.execute(f"SELECT id, name FROM {table} ORDER BY id").fetchall(),
               [(1, "one"), (2, "TWO"), (5, None)], "after UPDATE and DELETE")
        with c.cursor(binary=True) as cur:
            cur.execute(f"SELECT id, name, price, ok FROM {table} WHERE id = %s", (1,))
            expect(cur.fetchall(), [(1, "one", __import__("decimal").Decimal("1.50"), True)], "binary results")
        with c.cursor() as cur:
            with cur.copy(f"COPY {table} FROM STDIN") as cp:
                cp.write_row((10, "copied", None, None, False))
                cp.write_row((11, "tab\there", 2.25, None, None))
        c.commit()
        expect(c.execute(f"SELECT name FROM {table} WHERE id = 11").fetchone(), ("tab\there",), "COPY FROM STDIN")
        with c.cursor() as cur:
            with cur.copy(f"COPY (SELECT id, name FROM {table} WHERE id >= 10 ORDER BY id) TO STDOUT") as cp:
                rows = [r for r in cp.rows()]
        expect(rows, [("10", "copied"), ("11", "tab\there")], "COPY TO STDOUT")
        tables = [r[0] for r in c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").fetchall()]
        if table not in tables:
            raise AssertionError(f"information_schema.tables lacks {table}: {tables}")


def check_psycopg2(port, table):
    import psycopg2
    c = psycopg2.connect(dsn(port))
    try:
        cur = c.cursor()
        cur.execute(f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR)")
        c.commit()
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (1, "one"))
        c.commit()
        cur.execute(f"SELECT name FROM {table} WHERE id = %s", (1,))
        expect(cur.fetchall(), [("one",)], "parameterized SELECT")
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (2, "two"))
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (3, "three"))
        c.commit()
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (4, "gone"))
        c.rollback()
        cur.execute(f"UPDATE {table} SET name = %s WHERE id = %s", ("TWO", 2))
        expect(cur.rowcount, 1, "UPDATE row count")
        cur.execute(f"DELETE FROM {table} WHERE id = %s", (3,))
        expect(cur.rowcount, 1, "DELETE row count")
        c.commit()
        cur.execute(f"SELECT id, name FROM {table} ORDER BY id")
        expect(cur.fetchall(), [(1, "one"), (2, "TWO")], "after the writes")
        cur.execute("SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relkind = 'r' AND c.relname = %s", (table,))
        expect(cur.fetchall(), [(table,)], "pg_class")
    finally:
        c.close()


def check_sqlalchemy(port, table, driver):
    import sqlalchemy as sa
    e = sa.create_engine(url(port, driver))
    with e.begin() as c:
        c.execute(sa.text(f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, amount DOUBLE)"))
    with e.begin() as c:
        c.execute(sa.text(f"INSERT INTO {table} VALUES (:i, :n, :a)"), [{"i": 1, "n": "one", "a": 1.5}, {"i": 2, "n": "two", "a": 2.5}])
    with e.connect() as c:
        expect(c.execute(sa.text(f"SELECT name FROM {table} WHERE id = :i"), {"i": 2}).fetchall(), [("two",)], "parameterized SELECT")
        c.execute(sa.text(f"INSERT INTO {table} (id) VALUES (:i)"), {"i": 3})
        c.rollback()
        r = c.execute(sa.text(f"UPDATE {table} SET amount = amount * 2 WHERE id = :i"), {"i": 1})
        expect(r.rowcount, 1, "UPDATE row count")
        r = c.execute(sa.text(f"DELETE FROM {table} WHERE id = :i"), {"i": 2})
        expect(r.rowcount, 1, "DELETE row count")
        c.commit()
        expect(c.execute(sa.text(f"SELECT id, amount FROM {table}")).fetchall(), [(1, 3.0)], "after the writes")
    insp = sa.inspect(e)
    if table not in insp.get_table_names():
        raise AssertionError(f"get_table_names lacks {table}")
    cols = [(col["name"], str(col["type"]), col["nullable"]) for col in insp.get_columns(table)]
    expect(cols, [("id", "INTEGER", False), ("name", "VARCHAR", True), ("amount", "DOUBLE PRECISION", True)], "get_columns")


def check_pandas(port, table):
    import pandas as pd
    import sqlalchemy as sa
    e = sa.create_engine(url(port, "psycopg"))
    frame = pd.DataFrame({"k": [1, 2, 3], "v": ["a", "b", None], "x": [0.5, 1.5, 2.5]})
    frame.to_sql(table, e, index=False)
    frame.iloc[:1].to_sql(table, e, index=False, if_exists="append")
    back = pd.read_sql(f"SELECT k, v, x FROM {table} ORDER BY k, x", e)
    expect(back["k"].tolist(), [1, 1, 2, 3], "read_sql after to_sql")
    back = pd.read_sql(sa.text(f"SELECT v FROM {table} WHERE k = :k"), e, params={"k": 2})
    expect(back["v"].tolist(), ["b"], "parameterized read_sql")


def check_asyncpg(port, table):
    import asyncpg

    async def run():
        c = await asyncpg.connect(host="127.0.0.1", port=port, user="tierdb", password=PASSWORD, database="tierdb")
        try:
            await c.execute(f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, d DATE, amount DECIMAL(12,2))")
            await c.execute(f"INSERT INTO {table} VALUES ($1, $2, $3, $4)", 1, "one", __import__("datetime").date(2024, 5, 6),
                            __import__("decimal").Decimal("3.25"))
            rows = await c.fetch(f"SELECT id, name, d, amount FROM {table} WHERE id = $1", 1)
            expect([tuple(r) for r in rows], [(1, "one", __import__("datetime").date(2024, 5, 6), __import__("decimal").Decimal("3.25"))],
                   "parameterized SELECT (binary)")
            async with c.transaction():
                await c.execute(f"INSERT INTO {table} (id, name) VALUES ($1, $2)", 2, "two")
                await c.execute(f"INSERT INTO {table} (id, name) VALUES ($1, $2)", 3, "three")
            tr = c.transaction()
            await tr.start()
            await c.execute(f"INSERT INTO {table} (id) VALUES ($1)", 4)
            await tr.rollback()
            expect(await c.execute(f"UPDATE {table} SET name = $1 WHERE id = $2", "TWO", 2), "UPDATE 1", "UPDATE tag")
            expect(await c.execute(f"DELETE FROM {table} WHERE id = $1", 3), "DELETE 1", "DELETE tag")
            expect([tuple(r) for r in await c.fetch(f"SELECT id, name FROM {table} ORDER BY id")],
                   [(1, "one"), (2, "TWO")], "after the writes")
            # A prepared statement executed again reads the table as it is then.
            st = await c.prepare(f"SELECT count(*) FROM {table}")
            before = await st.fetchval()
            await c.execute(f"INSERT INTO {table} (id) VALUES (9)")
            expect(await st.fetchval(), before + 1, "prepared statement sees later commits")
            cols = await c.fetch("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position", table)
            expect([r[0] for r in cols], ["id", "name", "d", "amount"], "information_schema.columns")
        finally:
            await c.close()

    asyncio.run(run())


CLIENTS = [
    ("psycopg 3 (connect, params, transactions, UPDATE/DELETE, binary, COPY)", check_psycopg3),
    ("psycopg2", check_psycopg2),
    ("SQLAlchemy 2 + psycopg 3 (text(), inspect(), reflection)", lambda p, t: check_sqlalchemy(p, t, "psycopg")),
    ("SQLAlchemy 2 + psycopg2", lambda p, t: check_sqlalchemy(p, t, "psycopg2")),
    ("pandas read_sql / to_sql", check_pandas),
    ("asyncpg (binary protocol, prepared statements)", check_asyncpg),
]


def run_all(port):
    """[(client, None | error)] for every client, each on its own table."""
    out = []
    for i, (name, check) in enumerate(CLIENTS):
        try:
            check(port, f"c{i}")
            out.append((name, None))
        except Exception as e:  # noqa: BLE001 - the table reports every failure
            out.append((name, f"{type(e).__name__}: {e}".splitlines()[0][:200]))
            if os.environ.get("PG_CLIENTS_TRACE"):
                traceback.print_exc()
    return out


def issue_table(port):
    """The cells of the table the SQL-clients issue opened with, each tried as it was then,
    on a table `t`: [(client, what, None | error)]."""
    import shutil
    env = dict(os.environ, PGPASSWORD=PASSWORD)

    def psql(cmd):
        if shutil.which("psql") is None:
            raise RuntimeError("psql is not installed")
        p = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "-d", "tierdb", "-X", "-c", cmd],
                           capture_output=True, text=True, env=env, timeout=60)
        if p.returncode != 0 or "t" not in p.stdout:
            raise RuntimeError(p.stderr.strip() or p.stdout)

    def p3_params():
        import psycopg
        with psycopg.connect(dsn(port)) as c:
            expect(c.execute("SELECT name FROM t WHERE id = %s", (1,)).fetchall(), [("one",)], "rows")

    def p3_plain():
        import psycopg
        with psycopg.connect(dsn(port)) as c:
            expect(c.execute("SELECT count(*) FROM t").fetchone(), (2,), "rows")

    def p2_params():
        import psycopg2
        c = psycopg2.connect(dsn(port))
        cur = c.cursor()
        cur.execute("SELECT name FROM t WHERE id = %s", (1,))
        expect(cur.fetchall(), [("one",)], "rows")
        c.close()

    def sa_text():
        import sqlalchemy as sa
        with sa.create_engine(url(port, "psycopg")).connect() as c:
            expect(c.execute(sa.text("SELECT name FROM t WHERE id = :i"), {"i": 2}).fetchall(), [("two",)], "rows")

    def sa_inspect():
        import sqlalchemy as sa
        expect("t" in sa.inspect(sa.create_engine(url(port, "psycopg"))).get_table_names(), True, "t listed")

    def pd_read():
        import pandas as pd
        import sqlalchemy as sa
        expect(len(pd.read_sql("SELECT * FROM t", sa.create_engine(url(port, "psycopg")))), 2, "rows")

    def asyncpg_fetch():
        import asyncpg

        async def go():
            c = await asyncpg.connect(host="127.0.0.1", port=port, user="tierdb", password=PASSWORD, database="tierdb")
            try:
                return [tuple(r) for r in await c.fetch("SELECT name FROM t WHERE id = $1", 1)]
            finally:
                await c.close()
        expect(asyncio.run(go()), [("one",)], "rows")

    def update_delete():
        import psycopg
        with psycopg.connect(dsn(port), autocommit=True) as c:
            expect(c.execute("UPDATE t SET name = 'ONE' WHERE id = 1").rowcount, 1, "UPDATE")
            expect(c.execute("DELETE FROM t WHERE id = 2").rowcount, 1, "DELETE")
            expect(c.execute("SELECT id, name FROM t").fetchall(), [(1, "ONE")], "rows")

    import psycopg
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("CREATE TABLE t (id INT NOT NULL, name VARCHAR)")
        c.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    cells = [
        ("psycopg 3", "parameterized SELECT", p3_params),
        ("psycopg 3", "plain SELECT", p3_plain),
        ("psycopg2", "parameterized SELECT", p2_params),
        ("SQLAlchemy", "connect() + text(\"SELECT …\")", sa_text),
        ("SQLAlchemy", "inspect(engine).get_table_names()", sa_inspect),
        ("pandas", "read_sql", pd_read),
        ("asyncpg", "fetch(\"… WHERE id = $1\", 1)", asyncpg_fetch),
        ("psql", "\\dt, \\d t", lambda: (psql("\\dt"), psql("\\d t"))),
        ("any client", "UPDATE, DELETE", update_delete),
    ]
    out = []
    for client, what, fn in cells:
        try:
            fn()
            out.append((client, what, None))
        except Exception as e:  # noqa: BLE001 - the table reports every failure
            out.append((client, what, f"{type(e).__name__}: {e}".splitlines()[0][:160]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
    ap.add_argument("--bin", default=os.environ.get("TIERDB_BIN", os.path.join(target, "debug", "tierdb")))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "db")
        subprocess.run([args.bin, "sql", db, "--create", "-c", "SELECT 1"], check=True, capture_output=True)
        with serve(args.bin, db) as (_, port):
            cells = issue_table(port)
            results = run_all(port)
    print("| client | what | result |")
    print("|---|---|---|")
    for client, what, err in cells:
        print(f"| {client} | {what} | {'pass' if err is None else 'FAIL: ' + err} |")
    print()
    width = max(len(n) for n, _ in results)
    print(f"| {'client'.ljust(width)} | result |")
    print(f"|{'-' * (width + 2)}|--------|")
    for name, err in results:
        print(f"| {name.ljust(width)} | {'pass' if err is None else 'FAIL: ' + err} |")
    ok = all(e is None for _, e in results) and all(e is None for _, _, e in cells)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
