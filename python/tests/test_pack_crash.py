"""A SIGKILL at any point of `tierdb zodb pack` leaves a database that loads every object an
unpacked copy loads, and the next pack completes (issue 14).

The database has many objects with several revisions each, objects that become garbage,
and deleted keys, so every pass of pack commits several batches. For each pause point (a
debug build stops there when TIERDB_TEST_PAUSE_AT names it; `name#n` is its n-th time),
a copy of the database is packed by a real `tierdb zodb pack` process, SIGKILLed there,
then checked against the unpacked copy object by object (every object reachable from the
root, walked through ZODB), packed again to completion, checked again, and verified.
"""

import os
import shutil
import signal
import subprocess
import sys

import pytest
import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping

from tierdb.zodb import TierStorage

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))

# Every pass of pack, at its first and a later batch where it has several.
POINTS = [
    "pack-sweep-batch#1",
    "pack-sweep-batch#3",
    "pack-swept",
    "pack-transactions",
    "pack-data-batch#1",
    "pack-data-batch#2",
]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("packcrash") / "db")
    db = ZODB.DB(TierStorage(path, create=True))
    with db.transaction() as conn:
        conn.root()["tree"] = OOBTree()
        conn.root()["gone"] = OOBTree()
    for rnd in range(4):
        # Every round rewrites every object: old revisions for the sweep to remove.
        with db.transaction() as conn:
            tree, gone = conn.root()["tree"], conn.root()["gone"]
            for i in range(1500):
                key = "k%05d" % i
                if key in tree:
                    tree[key]["round"] = rnd
                else:
                    tree[key] = PersistentMapping({"round": rnd, "i": i, "pad": "p" * 100})
                gone[key] = PersistentMapping({"garbage": rnd})
    # Garbage: the "gone" tree and every mapping in it become unreachable; some keys go.
    with db.transaction() as conn:
        del conn.root()["gone"]
        for i in range(0, 1500, 10):
            del conn.root()["tree"]["k%05d" % i]
    db.close()
    return path


def snapshot(path):
    """Every object reachable from the root: oid -> (tid, data)."""
    storage = TierStorage(path, create=False)
    try:
        out = {}
        todo = [b"\0" * 8]
        from ZODB.serialize import referencesf
        while todo:
            oid = todo.pop()
            if oid in out:
                continue
            data, tid = storage.load(oid)
            out[oid] = (tid, data)
            todo.extend(r for r in referencesf(data) if r not in out)
        return out
    finally:
        storage.close()


def pack(path, pause=None):
    env = dict(os.environ, TIERDB_PYTHON=sys.executable)
    if pause:
        env["TIERDB_TEST_PAUSE_AT"] = pause
    return subprocess.Popen([BIN, "zodb", "pack", path, "--days", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_paused(proc, point):
    # Reads stderr until the pause line (the process never ends by itself once paused).
    name = point.split("#")[0]
    while True:
        line = proc.stderr.readline()
        if not line:
            out = proc.stdout.read()
            raise AssertionError("pack ended before %s: rc=%s %s" % (point, proc.wait(), out))
        if "paused at %s" % name in line:
            return


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_during_pack_loses_nothing_and_the_next_pack_completes(
        tmp_path, unpacked, point):
    want = snapshot(unpacked)
    assert len(want) > 1000
    db = str(tmp_path / "db")
    shutil.copytree(unpacked, db)
    proc = pack(db, point)
    try:
        wait_paused(proc, point)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    # Every object the unpacked database reaches loads, with the same revision and data.
    assert snapshot(db) == want, "objects differ after a SIGKILL at %s" % point
    # The next pack completes; still the same objects; nothing damaged.
    done = pack(db)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    assert snapshot(db) == want
    verify = subprocess.run([BIN, "zodb", "verify", db], capture_output=True, text=True,
                            timeout=600)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "no damage found" in verify.stdout
    # The garbage is gone: a pack of the unpacked copy removes as much.
    stats = subprocess.run([BIN, "zodb", "stats", db], capture_output=True, text=True,
                           timeout=600)
    objects = int(next(line.split()[1] for line in stats.stdout.splitlines()
                       if line.startswith("objects")))
    assert objects == len(want), stats.stdout
