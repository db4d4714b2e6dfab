"""`runzeo` serving TierStorage (a `<tierdb>` section) to several client processes.

Each client process creates new objects in every transaction (so the server hands out oids
while other clients' transactions are voted: the deadlock of issue 14) and increments one
shared BTrees.Length (so the server resolves conflicts). At the end each client must see
every other client's commits through ZEO's invalidations, the server must stop within
seconds on SIGTERM, and after a SIGKILL of the server a new one serves every committed
object.
"""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

PY = sys.executable
RUNZEO = os.path.join(os.path.dirname(PY), "runzeo")
CLIENTS = 4
TXNS = 60

CLIENT = textwrap.dedent("""
    import sys, time, transaction, ZEO
    from BTrees.Length import Length
    from BTrees.OOBTree import OOBTree
    from persistent.mapping import PersistentMapping
    from ZODB.POSException import ConflictError

    port, me, clients, txns = (int(a) for a in sys.argv[1:5])
    db = ZEO.DB(("127.0.0.1", port), wait_timeout=60)
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    for n in range(txns):
        for attempt in range(100):
            try:
                tm.begin()
                root = conn.root()
                obj = PersistentMapping(who=me, n=n)
                # Enough new objects that the server reserves oids several times.
                obj["child"] = PersistentMapping(payload="x" * 200)
                for k in range(8):
                    obj[k] = PersistentMapping(k=k)
                root["objects"]["%d-%d" % (me, n)] = obj
                root["count"].change(1)
                tm.commit()
                break
            except ConflictError:
                tm.abort()
        else:
            sys.exit("client %d: transaction %d kept conflicting" % (me, n))
    # Everyone else's commits arrive as invalidations: wait for all of them.
    want = clients * txns
    deadline = time.time() + 120
    while True:
        tm.begin()
        root = conn.root()
        seen = (root["count"](), len(root["objects"]))
        if seen == (want, want):
            break
        if time.time() > deadline:
            sys.exit("client %d sees %r, wants %d" % (me, seen, want))
        time.sleep(0.1)
    for key, obj in root["objects"].items():
        assert obj["child"]["payload"] == "x" * 200, key
    tm.abort()
    conn.close()
    db.close()
    print("client %d saw %d objects" % (me, want))
""")

SETUP = textwrap.dedent("""
    import sys, transaction, ZEO
    from BTrees.Length import Length
    from BTrees.OOBTree import OOBTree
    db = ZEO.DB(("127.0.0.1", int(sys.argv[1])), wait_timeout=60)
    with db.transaction() as conn:
        conn.root()["objects"] = OOBTree()
        conn.root()["count"] = Length()
    db.close()
""")

CHECK = textwrap.dedent("""
    import sys, ZEO
    db = ZEO.DB(("127.0.0.1", int(sys.argv[1])), wait_timeout=60)
    with db.transaction() as conn:
        root = conn.root()
        print(root["count"](), len(root["objects"]),
              sum(1 for o in root["objects"].values() if o["child"]["payload"]))
    db.close()
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_conf(tmp_path, port, write_mode):
    extra = ""
    if write_mode == "write-back":
        extra = "cache-dir %s\n  cache-bytes 256MB\n  write-mode write-back" % (
            tmp_path / "device")
    conf = tmp_path / "zeo.conf"
    conf.write_text(textwrap.dedent("""\
        %%import tierdb
        <zeo>
          address 127.0.0.1:%d
        </zeo>
        <tierdb 1>
          url %s
          %s
        </tierdb>
        """) % (port, tmp_path / "db", extra))
    return conf


def start_server(conf, port, log):
    proc = subprocess.Popen([RUNZEO, "-C", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise AssertionError("runzeo did not start; log:\n" + log_text(log))
            time.sleep(0.1)


def log_text(log):
    log.flush()
    with open(log.name) as f:
        return f.read()


def run(script, *args, timeout=300):
    return subprocess.run([PY, "-c", script, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("write_mode", ["write-through", "write-back"])
def test_many_clients_through_runzeo(tmp_path, write_mode):
    port = free_port()
    conf = write_conf(tmp_path, port, write_mode)
    with open(tmp_path / "runzeo.log", "w+") as log:
        server = start_server(conf, port, log)
        try:
            got = run(SETUP, port)
            assert got.returncode == 0, got.stderr
            clients = [
                subprocess.Popen([PY, "-c", CLIENT, str(port), str(i), str(CLIENTS), str(TXNS)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(CLIENTS)
            ]
            for i, c in enumerate(clients):
                try:
                    out, err = c.communicate(timeout=600)
                except subprocess.TimeoutExpired:
                    for c2 in clients:
                        c2.kill()
                    raise AssertionError("client %d hung (server deadlocked?); server log:\n%s"
                                         % (i, log_text(log)))
                assert c.returncode == 0, "client %d: %s\n%s" % (i, out, err)
                assert "saw %d objects" % (CLIENTS * TXNS) in out
            # SIGTERM stops the server, promptly.
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                raise AssertionError("runzeo ignored SIGTERM; log:\n" + log_text(log))
            # A new server serves everything; then a SIGKILLed one loses nothing either.
            server = start_server(conf, port, log)
            got = run(SETUP.replace('conn.root()["objects"] = OOBTree()',
                                    'conn.root()["count"].change(1)')
                      .replace('conn.root()["count"] = Length()', ''), port)
            assert got.returncode == 0, got.stderr
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=30)
            server = start_server(conf, port, log)
            got = run(CHECK, port)
            assert got.returncode == 0, got.stderr
            want = CLIENTS * TXNS
            assert got.stdout.split() == [str(want + 1), str(want), str(want)], got.stdout
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
