"""`tierdb zodb import|verify|pack|stats` against real FileStorage files, and tierdb's
pickle reference reader against ZODB's referencesf. Needs the `tierdb` binary: TIERDB_BIN
(scripts/test.sh sets it), else the debug build in CARGO_TARGET_DIR."""

import os
import subprocess
import sys

import pytest
import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.FileStorage import FileStorage
from ZODB.serialize import referencesf
from ZODB.utils import z64

from tierdb import _native
from tierdb.zodb import TierStorage

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))


def tierdb(*args, ok=True):
    env = dict(os.environ, TIERDB_PYTHON=sys.executable)
    p = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=600)
    if ok:
        assert p.returncode == 0, "tierdb %s failed:\n%s\n%s" % (args, p.stdout, p.stderr)
    return p


@pytest.fixture
def source(tmp_path):
    """A Data.fs with blobs, BTrees, an undo, a deletion and a pack."""
    fs_path = str(tmp_path / "Data.fs")
    blobs = str(tmp_path / "blobs")
    db = ZODB.DB(FileStorage(fs_path, blob_dir=blobs))
    conn = db.open()
    root = conn.root()
    root["tree"] = OOBTree()
    root["blob"] = Blob(b"first blob content")
    transaction.get().note("setup")
    transaction.get().setUser("importer")
    transaction.commit()
    for i in range(60):
        root["tree"]["k%03d" % i] = PersistentMapping({"i": i, "text": "x" * (i * 10)})
        if i % 7 == 0:
            with root["blob"].open("w") as f:
                f.write(b"blob version %d" % i)
        transaction.get().note("txn %d" % i)
        transaction.commit()
    # Undo the last transaction, delete something, and commit the same state twice.
    undo_id = db.undoLog(0, 1)[0]["id"]
    db.undo(undo_id)
    transaction.commit()
    del root["tree"]["k010"]
    transaction.commit()
    root["same"] = PersistentMapping({"a": 1})
    transaction.commit()
    root["same2"] = PersistentMapping({"a": 1})
    transaction.commit()
    db.close()
    return fs_path, blobs


def test_import_keeps_every_transaction_record_and_blob(tmp_path, source):
    fs_path, blobs = source
    dst = str(tmp_path / "imported")
    out = tierdb("zodb", "import", fs_path, dst, "--blob-dir", blobs).stdout
    assert "imported" in out and "MB/s" in out and "dedup ratio" in out, out
    src = FileStorage(fs_path, blob_dir=blobs, read_only=True)
    dest = TierStorage(dst, create=False)
    try:
        def txns(storage):
            return [(t.tid, t.user, t.description, t.extension_bytes,
                     sorted((r.oid, r.data) for r in t)) for t in storage.iterator()]
        a, b = txns(src), txns(dest)
        assert len(a) == len(b) > 60
        assert a == b
        from ZODB.POSException import POSKeyError

        def current(storage, oid):
            try:
                return storage.load(oid)
            except POSKeyError:
                return None
        oids = {oid for t in a for oid, _ in t[4]}
        assert all(current(src, oid) == current(dest, oid) for oid in oids)
        db = ZODB.DB(dest)
        conn = db.open()
        with conn.root()["blob"].open() as f:
            assert f.read() == b"blob version 56"
        assert sorted(conn.root()["tree"].keys()) == \
            sorted("k%03d" % i for i in range(59) if i != 10)
        db.close()
    finally:
        src.close()
        dest.close()
    # Importing again continues after the last transaction: nothing new.
    again = tierdb("zodb", "import", fs_path, dst, "--blob-dir", blobs)
    assert "imported 0 transactions" in again.stdout, again.stdout
    assert "continuing after" in again.stderr
    verify = tierdb("zodb", "verify", dst)
    assert "no damage found" in verify.stdout
    stats = tierdb("zodb", "stats", dst).stdout
    assert "dedup ratio" in stats and "compression" in stats and "blobs" in stats


def test_blob_records_without_blob_dir_are_refused_with_nothing_imported(tmp_path, source):
    fs_path, _ = source
    dst = str(tmp_path / "noblobs")
    p = tierdb("zodb", "import", fs_path, dst, ok=False)
    assert p.returncode == 2  # fix the input
    assert "is a blob: give the FileStorage's blob directory (--blob-dir)" in p.stderr, p.stderr
    assert p.stderr.strip().count("\n") == 0, p.stderr  # one clear message
    s = TierStorage(dst, create=True)
    try:
        assert s.lastTransaction() == z64
    finally:
        s.close()


@pytest.mark.parametrize("damage", ["truncate", "flip-length", "bad-magic"])
def test_damaged_data_fs_is_refused_naming_the_place_and_nothing_is_imported(
        tmp_path, source, damage):
    fs_path, blobs = source
    data = bytearray(open(fs_path, "rb").read())
    if damage == "truncate":
        data = data[: len(data) * 2 // 3]
    elif damage == "flip-length":
        data[4 + 8] ^= 0x40  # the first transaction's length
    else:
        data[0:4] = b"XXXX"
    bad = str(tmp_path / "bad.fs")
    open(bad, "wb").write(bytes(data))
    dst = str(tmp_path / "dst")
    p = tierdb("zodb", "import", bad, dst, "--blob-dir", blobs, ok=False)
    assert p.returncode == (2 if damage == "bad-magic" else 6)  # not a FileStorage; damaged
    assert not os.path.exists(dst), "a damaged source creates nothing"
    assert "bad.fs" in p.stderr and ("damaged at byte" in p.stderr
                                     or "not a FileStorage file" in p.stderr), p.stderr
    if damage != "bad-magic":
        assert "nothing was imported" in p.stderr, p.stderr
        s = TierStorage(dst, create=True)
        try:
            assert s.lastTransaction() == z64
        finally:
            s.close()


def test_unknown_sources_are_refused(tmp_path):
    p = tierdb("zodb", "import", str(tmp_path / "missing.fs"), str(tmp_path / "d"), ok=False)
    assert p.returncode != 0 and "no such file" in p.stderr, p.stderr
    p = tierdb("zodb", "import", "nosuch://x", str(tmp_path / "d"), ok=False)
    assert p.returncode != 0 and "nosuch://x" in p.stderr, p.stderr


def test_import_from_a_zodburi(tmp_path, source):
    fs_path, blobs = source
    dst = str(tmp_path / "viauri")
    uri = "file://%s?blobstorage_dir=%s" % (fs_path, blobs)
    out = tierdb("zodb", "import", uri, dst).stdout
    assert "imported" in out, out
    src = FileStorage(fs_path, read_only=True)
    dest = TierStorage(dst, create=False)
    try:
        assert [t.tid for t in src.iterator()] == [t.tid for t in dest.iterator()]
    finally:
        src.close()
        dest.close()


def test_native_references_agree_with_zodb(source):
    fs_path, _ = source
    src = FileStorage(fs_path, read_only=True)
    n = 0
    try:
        for t in src.iterator():
            for r in t:
                if r.data:
                    assert _native.references(r.data) == referencesf(r.data), (r.oid, t.tid)
                    n += 1
    finally:
        src.close()
    assert n > 100
    with pytest.raises(_native.TierError):
        _native.references(b"not a pickle")


def test_cli_pack_collects_garbage_and_stops_on_unreadable_references(tmp_path, source):
    fs_path, blobs = source
    dst = str(tmp_path / "packme")
    tierdb("zodb", "import", fs_path, dst, "--blob-dir", blobs)
    before = tierdb("zodb", "stats", dst).stdout
    out = tierdb("zodb", "pack", dst, "--days", "0").stdout
    assert "removed" in out, out
    after = tierdb("zodb", "stats", dst).stdout
    assert before != after
    tierdb("zodb", "verify", dst)
    s = TierStorage(dst, create=False)
    try:
        db = ZODB.DB(s)
        conn = db.open()
        assert conn.root()["same"]["a"] == 1
        with conn.root()["blob"].open() as f:
            assert f.read() == b"blob version 56"
        # A root that is not a pickle: pack cannot know what it references and stops.
        from ZODB.Connection import TransactionMetaData
        t = TransactionMetaData()
        _, serial = s.load(z64)
        s.tpc_begin(t)
        s.store(z64, serial, b"garbage", "", t)
        s.tpc_vote(t)
        s.tpc_finish(t)
        db.close()
    finally:
        s.close()
    p = tierdb("zodb", "pack", dst, "--days", "0", ok=False)
    assert p.returncode == 6  # damaged data
    assert "object 0x0000000000000000" in p.stderr and "nothing was packed" in p.stderr, p.stderr
    assert "--days -1" in tierdb("zodb", "pack", dst, "--days=-1", ok=False).stderr


def test_zconfig_section_and_zodburi_name_a_tierstorage(tmp_path):
    import ZODB.config
    import zodburi
    url = str(tmp_path / "zc")
    conf = """
    %%import tierdb
    <zodb>
      <tierdb>
        url %s
        memory-bytes 16MB
        pack-gc false
      </tierdb>
    </zodb>
    """ % url
    db = ZODB.config.databaseFromString(conf)
    try:
        assert isinstance(db.storage, TierStorage) and not db.storage._pack_gc
        conn = db.open()
        conn.root()["x"] = 1
        transaction.commit()
    finally:
        db.close()
    factory, _ = zodburi.resolve_uri("tierdb://%s?memory_bytes=16777216" % url)
    s = factory()
    try:
        db = ZODB.DB(s)
        assert db.open().root()["x"] == 1
        db.close()
    finally:
        s.close()
    # A read-only open asked to write refuses, and nothing is written.
    from ZODB.POSException import ReadOnlyError
    db = ZODB.DB(TierStorage(url, read_only=True))
    try:
        conn = db.open()
        conn.root()["x"] = 2
        with pytest.raises(ReadOnlyError):
            transaction.commit()
        transaction.abort()
    finally:
        db.close()
    db = ZODB.DB(TierStorage(url, read_only=True))
    try:
        conn = db.open()
        assert conn.root()["x"] == 1
        conn.close()
    finally:
        db.close()


def test_prefetch_warms_the_caches_for_the_loads_that_follow(tmp_path):
    from ZODB.utils import maxtid, p64
    s = TierStorage(str(tmp_path / "pf"), create=True)
    db = ZODB.DB(s)
    try:
        conn = db.open()
        for i in range(50):
            conn.root()[i] = PersistentMapping({"i": i})
        transaction.commit()
        oids = [conn.root()[i]._p_oid for i in range(50)]
        # Connection.prefetch reaches the storage (through ZODB's MVCC adapter).
        conn2 = db.open()
        conn2.prefetch(oids)
        assert s._native.prefetch(oids + [p64(10 ** 6)], maxtid) == 50
        assert [conn2.get(o)["i"] for o in oids] == list(range(50))
    finally:
        db.close()


def test_an_interrupted_import_resumes_to_the_same_database(tmp_path):
    """An import that stopped part way (here: of a Data.fs copied half way through its
    history) continues after the store's last transaction, deduplicating against what the
    first run stored, and ends with the database a single import makes."""
    fs_path = str(tmp_path / "Data.fs")
    db = ZODB.DB(FileStorage(fs_path))
    with db.transaction() as conn:
        conn.root()["tree"] = OOBTree()
    for i in range(40):
        with db.transaction() as conn:
            # Half the states repeat earlier ones (dedup across the resume point).
            conn.root()["tree"]["k%d" % (i % 10)] = PersistentMapping({"v": i % 20})
        if i == 19:
            db.close()
            import shutil
            shutil.copy(fs_path, str(tmp_path / "half.fs"))
            db = ZODB.DB(FileStorage(fs_path))
    db.close()
    resumed, whole = str(tmp_path / "resumed"), str(tmp_path / "whole")
    tierdb("zodb", "import", str(tmp_path / "half.fs"), resumed)
    out = tierdb("zodb", "import", fs_path, resumed).stdout
    assert "already there skipped" in out, out
    tierdb("zodb", "import", fs_path, whole)

    def stats(path):
        lines = tierdb("zodb", "stats", path).stdout.splitlines()
        return [line for line in lines if not line.startswith("object store")]
    assert stats(resumed) == stats(whole)
    a, b = TierStorage(resumed, create=False), TierStorage(whole, create=False)
    try:
        for t1, t2 in zip(a.iterator(), b.iterator()):
            assert t1.tid == t2.tid
            assert [(r.oid, r.data) for r in t1] == [(r.oid, r.data) for r in t2]
    finally:
        a.close()
        b.close()
