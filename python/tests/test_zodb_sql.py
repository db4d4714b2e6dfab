"""SQL over a ZODB database (issue 30): `tierdb sql` on a database ZODB itself wrote
through TierStorage shows its objects, references, revisions, transactions and blobs, and
what it shows equals what ZODB's own tools say: classes from `get_pickle_metadata`, sizes
from the pickles, references from `referencesf`, revisions from `history`, transactions
from `iterator`. Queries run as a follower beside the live writer.

Needs the `tierdb` binary: TIERDB_BIN (scripts/test.sh sets it), else the debug build in
CARGO_TARGET_DIR."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import transaction
import ZODB
from BTrees.IOBTree import IOBTree
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.serialize import referencesf
from ZODB.utils import get_pickle_metadata, u64, z64

from tierdb.zodb import TierStorage

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))


def sql(db, query):
    """Rows of `query`, run by `tierdb sql --read-only` (a follower of the writer)."""
    env = dict(os.environ, TIERDB_PYTHON=sys.executable)
    p = subprocess.run(
        [BIN, "sql", "--read-only", db, "--format", "json", "-c", query],
        capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, "tierdb sql failed:\n%s\n%s" % (p.stdout, p.stderr)
    return json.loads(p.stdout)


@pytest.fixture
def database(tmp_path):
    """A live writer: PersistentMapping, BTrees large enough for several buckets, blobs,
    several transactions with users and notes, an undo, a deletion and a pack."""
    url = str(tmp_path / "db")
    storage = TierStorage(url, create=True, blob_dir=str(tmp_path / "blobs"))
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root["tree"] = OOBTree()
    root["numbers"] = IOBTree()
    root["blob"] = Blob(b"first blob content")
    transaction.get().note("setup")
    transaction.get().setUser("importer")
    transaction.commit()
    for i in range(40):
        root["tree"]["k%03d" % i] = PersistentMapping({"i": i, "text": "x" * (i * 10)})
        for j in range(20):
            root["numbers"][i * 20 + j] = "n%d" % j
        if i % 9 == 0:
            with root["blob"].open("w") as f:
                f.write(b"blob version %d" % i)
        transaction.get().note("txn %d" % i)
        transaction.commit()
    undo_id = db.undoLog(0, 1)[0]["id"]
    db.undo(undo_id)
    transaction.commit()
    del root["tree"]["k010"]
    transaction.commit()
    db.pack()
    yield url, storage, db, conn
    transaction.abort()
    db.close()


def current_objects(storage):
    """oid -> (tid, data) of every object with data, as ZODB loads it."""
    out = {}
    next_oid = None
    while True:
        oid, tid, data, next_oid = storage.record_iternext(next_oid)
        out[u64(oid)] = (u64(tid), data)
        if next_oid is None:
            return out


def test_objects_classes_sizes_and_refs_equal_zodbs(database):
    url, storage, _, _ = database
    expected = current_objects(storage)
    rows = sql(url, "SELECT oid, tid, class_name, size, stored_size, state, state_error "
                    "FROM zodb.objects ORDER BY oid")
    assert [r["oid"] for r in rows] == sorted(expected)
    for r in rows:
        tid, data = expected[r["oid"]]
        module, name = get_pickle_metadata(data)
        assert r["tid"] == tid
        assert r["class_name"] == "%s.%s" % (module, name)
        assert r["size"] == len(data)
        assert 0 < r["stored_size"]
        assert r.get("state_error") is None, r
        assert r.get("state") is not None
    by_class = {r["class_name"]: r["n"] for r in sql(
        url, "SELECT class_name, count(*) AS n FROM zodb.objects GROUP BY class_name")}
    assert by_class == dict(Counter(
        "%s.%s" % get_pickle_metadata(d) for _, d in expected.values()))
    refs = sql(url, "SELECT oid, ref_oid FROM zodb.refs ORDER BY oid, ref_oid")
    want = sorted((oid, u64(r)) for oid, (_, d) in expected.items() for r in referencesf(d))
    assert [(r["oid"], r["ref_oid"]) for r in refs] == want


def test_state_json_shows_the_objects(database):
    url, storage, _, conn = database
    root = conn.root()
    k5 = root["tree"]["k005"]
    state = json.loads(sql(url, "SELECT state FROM zodb.objects WHERE oid = %d"
                                % u64(k5._p_oid))[0]["state"])
    assert state == {"data": {"i": 5, "text": "x" * 50}}
    root_state = json.loads(sql(url, "SELECT state FROM zodb.objects WHERE oid = 0")[0]["state"])
    assert root_state["data"]["tree"] == {
        "$ref": u64(root["tree"]._p_oid), "$class": "BTrees.OOBTree.OOBTree"}
    # The IOBTree has several buckets: its state names them and its separating keys.
    numbers = json.loads(sql(url, "SELECT state FROM zodb.objects WHERE oid = %d"
                                  % u64(root["numbers"]._p_oid))[0]["state"])
    assert len(numbers["$children"]) == len(numbers["$keys"]) + 1 > 1
    first = numbers["$firstbucket"]["$ref"]
    bucket = json.loads(sql(url, "SELECT state FROM zodb.objects WHERE oid = %d"
                                 % first)[0]["state"])
    assert bucket["$items"][0] == [0, "n0"]
    # The JSON operators reach inside.
    got = sql(url, "SELECT count(*) AS n FROM zodb.objects "
                   "WHERE class_name = 'persistent.mapping.PersistentMapping' "
                   "AND ((state -> 'data') ->> 'i') = '7'")
    assert got == [{"n": 1}]


def test_revisions_and_transactions_equal_zodbs(database):
    url, storage, _, conn = database
    txns = list(storage.iterator())
    rows = sql(url, "SELECT tid, user_name, description, packed FROM zodb.transactions "
                    "ORDER BY tid")
    assert [r["tid"] for r in rows] == [u64(t.tid) for t in txns]
    assert [r["description"] for r in rows] == [t.description.decode() for t in txns]
    assert [r["user_name"] for r in rows] == [t.user.decode() for t in txns]
    tree = conn.root()["tree"]
    history = storage.history(tree._p_oid, size=1000)
    revs = sql(url, "SELECT tid, size FROM zodb.revisions WHERE oid = %d ORDER BY tid DESC"
                    % u64(tree._p_oid))
    assert [(r["tid"], r["size"]) for r in revs] == [
        (u64(h["tid"]), h["size"]) for h in history]
    blobs = sql(url, "SELECT oid, tid, size FROM zodb.blobs ORDER BY tid")
    blob = conn.root()["blob"]
    assert {b["oid"] for b in blobs} == {u64(blob._p_oid)}
    with blob.open() as f:
        assert blobs[-1]["size"] == len(f.read())
    assert blobs[-1]["tid"] == u64(blob._p_serial)


def test_a_follower_sees_new_commits_and_the_writer_goes_on(database):
    url, storage, _, conn = database
    before = sql(url, "SELECT count(*) AS n FROM zodb.transactions")[0]["n"]
    conn.root()["late"] = PersistentMapping({"x": 1})
    transaction.commit()
    after = sql(url, "SELECT count(*) AS n, max(tid) AS last FROM zodb.transactions")[0]
    assert after["n"] == before + 1
    assert after["last"] == u64(storage.lastTransaction())
    assert sql(url, "SELECT count(*) AS n FROM zodb.objects WHERE oid = %d"
                    % u64(conn.root()["late"]._p_oid)) == [{"n": 1}]


def test_a_database_without_objects_has_no_zodb_schema(tmp_path):
    url = str(tmp_path / "plain")
    env = dict(os.environ, TIERDB_PYTHON=sys.executable)
    subprocess.run([BIN, "sql", "--create", url, "-c", "CREATE TABLE t(a INT)"],
                   check=True, capture_output=True, env=env, timeout=600)
    p = subprocess.run([BIN, "sql", "--read-only", url, "-c", "SELECT * FROM zodb.objects"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode != 0
    assert "zodb.objects" in p.stderr


def test_pack_dry_run_says_what_a_pack_removes(database):
    import re
    url, storage, db, conn = database
    tree = conn.root()["tree"]
    for i in range(20, 26):
        del tree["k%03d" % i]
    transaction.commit()
    before = sql(url, "SELECT count(*) AS n FROM zodb.objects")[0]["n"]
    # The reachable set, by a recursive query over the references.
    reach = sql(url, "WITH RECURSIVE reach(oid) AS (SELECT CAST(0 AS BIGINT) UNION "
                     "SELECT r.ref_oid FROM zodb.refs r JOIN reach ON r.oid = reach.oid) "
                     "SELECT count(*) AS n FROM reach")[0]["n"]
    env = dict(os.environ, TIERDB_PYTHON=sys.executable)
    p = subprocess.run([BIN, "zodb", "pack", "--dry-run", "--days", "0", url],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    m = re.search(r"would remove (\d+) revisions and (\d+) objects; (\d+) objects are "
                  r"reachable", p.stdout)
    assert m, p.stdout
    revisions, objects, reachable = map(int, m.groups())
    assert objects == 6 and reachable == reach == before - 6
    assert re.search(r"persistent\.mapping\.PersistentMapping\s+6\s", p.stdout), p.stdout
    # Nothing was written; the pack itself removes what the dry run said.
    assert sql(url, "SELECT count(*) AS n FROM zodb.objects")[0]["n"] == before
    revs_before = sql(url, "SELECT count(*) AS n FROM zodb.revisions")[0]["n"]
    db.pack()
    assert sql(url, "SELECT count(*) AS n FROM zodb.objects")[0]["n"] == before - 6
    assert sql(url, "SELECT count(*) AS n FROM zodb.revisions")[0]["n"] == revs_before - revisions
