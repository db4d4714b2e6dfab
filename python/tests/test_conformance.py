"""ZODB's own storage test mixins against TierStorage (and FileStorage as the reference).

Run: scripts/python-env.sh, then `$VENV/bin/python -m pytest python/tests`. Status: in
progress (issue 4): the counts of what runs and passes are tracked in the closing notes.
"""

import os
import shutil
import tempfile
import unittest

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
)

from tierdb.zodb import TierStorage


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
):
    # Both storages keep a transaction's extension as the bytes they were given (ZODB's own
    # FileStorage tests set this too).
    use_extension_bytes = True


class TierStorageTests(StorageTestBase.StorageTestBase, Mixins):
    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self._dir = tempfile.mkdtemp(prefix="tierdb-zodb-")
        self.open(create=True)
        self._dests = 0
        self._dst = self.new_dest()

    def new_dest(self):
        self._dests += 1
        return TierStorage(os.path.join(self._dir, "dest%d" % self._dests), create=True)

    def open(self, read_only=False, create=False, **kw):
        self._storage = TierStorage(
            os.path.join(self._dir, "db"), create=create, read_only=read_only)
        return self._storage

    def tearDown(self):
        self._storage.close()
        self._dst.close()
        StorageTestBase.StorageTestBase.tearDown(self)
        shutil.rmtree(self._dir, ignore_errors=True)


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


if __name__ == "__main__":
    unittest.main()
