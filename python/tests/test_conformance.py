"""ZODB's own storage tests against TierStorage, with FileStorage beside it as the reference.

What runs here (pytest): the storage test mixins (ZODB.tests.*Storage), the MVCC tests
(ZODB.tests.testMVCCMappingStorage.MVCCTests) and ZODB's testZODB tests, each on a local
directory, on MinIO (when TIERDB_TEST_S3_URL names a bucket, as scripts/test.sh arranges)
and on FileStorage. The blob suites are doctest layers run by zope.testrunner:
python/tests/blob_suites.py.

Run: scripts/python-env.sh, then `$VENV/bin/python -m pytest python/tests`.
"""

import os
import shutil
import tempfile
import unittest
import uuid

import ZODB
from ZODB.FileStorage import FileStorage
from ZODB.tests import (
    BasicStorage,
    ConflictResolution,
    HistoryStorage,
    IteratorStorage,
    MTStorage,
    PackableStorage,
    PersistentStorage,
    ReadOnlyStorage,
    RecoveryStorage,
    RevisionStorage,
    StorageTestBase,
    Synchronization,
    TransactionalUndoStorage,
    testZODB,
)
from ZODB.tests.testMVCCMappingStorage import MVCCTests

from tierdb.zodb import TierStorage

S3 = os.environ.get("TIERDB_TEST_S3_URL")
if os.environ.get("TIERDB_REQUIRE_MINIO") and not S3:
    raise RuntimeError("TIERDB_REQUIRE_MINIO is set but TIERDB_TEST_S3_URL is not: "
                       "source scripts/minio.sh and call minio_start first")


class Mixins(
    BasicStorage.BasicStorage,
    HistoryStorage.HistoryStorage,
    RevisionStorage.RevisionStorage,
    IteratorStorage.IteratorStorage,
    IteratorStorage.ExtendedIteratorStorage,
    Synchronization.SynchronizedStorage,
    MTStorage.MTStorage,
    PackableStorage.PackableStorageWithOptionalGC,
    PackableStorage.PackableUndoStorage,
    RecoveryStorage.RecoveryStorage,
    PersistentStorage.PersistentStorage,
    ReadOnlyStorage.ReadOnlyStorage,
    TransactionalUndoStorage.TransactionalUndoStorage,
    ConflictResolution.ConflictResolvingStorage,
    ConflictResolution.ConflictResolvingTransUndoStorage,
    MVCCTests,
):
    # Both storages keep a transaction's extension as the bytes they were given (ZODB's own
    # FileStorage tests set this too).
    use_extension_bytes = True


class TierBase:
    """Where a test's databases live: a local directory, or a fresh prefix on MinIO."""

    def make_root(self):
        self._dir = tempfile.mkdtemp(prefix="tierdb-zodb-")
        self._root = self._dir

    def url(self, name):
        return os.path.join(self._root, name)

    def drop_root(self):
        shutil.rmtree(self._dir, ignore_errors=True)


class MinioBase(TierBase):
    def make_root(self):
        if not S3:
            raise unittest.SkipTest("no MinIO: set TIERDB_TEST_S3_URL (scripts/test.sh does)")
        self._dir = tempfile.mkdtemp(prefix="tierdb-zodb-")
        self._root = "%s/zodb-%s" % (S3.rstrip("/"), uuid.uuid4().hex)

    def url(self, name):
        return "%s/%s" % (self._root, name)


class TierStorageTests(TierBase, StorageTestBase.StorageTestBase, Mixins):
    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self.make_root()
        self.open(create=True)
        self._dests = 0
        self._dst = self.new_dest()

    def new_dest(self):
        self._dests += 1
        return TierStorage(self.url("dest%d" % self._dests), create=True)

    def open(self, read_only=False, create=False, **kw):
        self._storage = TierStorage(self.url("db"), create=create, read_only=read_only)
        return self._storage

    def tearDown(self):
        self._storage.close()
        self._dst.close()
        StorageTestBase.StorageTestBase.tearDown(self)
        self.drop_root()


class TierStorageMinioTests(MinioBase, TierStorageTests):
    pass


class FileStorageReference(StorageTestBase.StorageTestBase, Mixins):
    """The same mixins on FileStorage, to compare what runs and passes."""

    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self.open(create=True)
        self._dests = 0
        self._dst = self.new_dest()

    def new_dest(self):
        self._dests += 1
        return FileStorage("Dest%d.fs" % self._dests, create=True)

    def tearDown(self):
        self._dst.close()
        StorageTestBase.StorageTestBase.tearDown(self)

    def open(self, read_only=False, create=False, **kw):
        self._storage = FileStorage("Data.fs", create=create, read_only=read_only)
        return self._storage


class TierZODBTests(TierBase, testZODB.ZODBTests):
    """ZODB's testZODB tests (export/import, savepoints, undo, failing commits, ...)."""

    def setUp(self):
        testZODB.ZODBTests.setUp(self)  # opens a FileStorage: replaced here
        self._db.close()
        self.make_root()
        self._storage = TierStorage(self.url("zodbtests"), create=True)
        self._db = ZODB.DB(self._storage)

    def tearDown(self):
        testZODB.ZODBTests.tearDown(self)
        self.drop_root()


class TierZODBMinioTests(MinioBase, TierZODBTests):
    pass


class FileStorageZODBTests(testZODB.ZODBTests):
    """testZODB on FileStorage, its own setting: the reference."""


if __name__ == "__main__":
    unittest.main()
