"""ZEO's own client-server tests (from the installed ZEO package) with a ZEO server whose
storage is TierStorage, beside the same tests over FileStorage as the reference.

ZEO's `FullGenericTests` start a real ZEO server process from a ZConfig storage section
and talk to it through `ClientStorage`: basic storage, pack, synchronization, threads and
multiple clients, read-only, commit-lock voting, conflict resolution, undo, revisions,
iteration, the client cache. Each storage gets its own zope.testrunner layer, so the
runner prints what ran, failed, errored and was skipped per storage. scripts/test.sh runs:

  zope-testrunner --test-path python/tests --tests-pattern '^zeo_suites$'
"""

import os
import unittest

import ZODB.tests.util
from ZEO.tests import testZEO

TIER_SECTION = """\
%%import tierdb
<tierdb 1>
  url %(url)s
  %(extra)s
</tierdb>
"""


def _tier_config(extra=""):
    # The server runs in its own process, in the test's working directory.
    return TIER_SECTION % {"url": os.path.abspath("Data.tierdb"), "extra": extra}


class TierStorageZEOTests(testZEO.FullGenericTests):
    """ZEO over TierStorage (local directory, write-through)."""

    def getConfig(self):
        return _tier_config()

    def checkInterfaceFromRemoteStorage(self):
        # As ZEO's FileStorageTests check: the client reflects the server storage's
        # interfaces (TierStorage also stores blobs, which ZEO reports separately).
        import ZODB.interfaces
        got = set(self._storage._info["interfaces"])
        for name in ("IStorageRestoreable", "IStorageIteration", "IStorageUndoable",
                     "IStorageCurrentRecordIteration", "IExternalGC", "IStorage"):
            self.assertIn(("ZODB.interfaces", name), got)
        self.assertTrue(ZODB.interfaces.IStorageIteration.providedBy(self._storage))


class TierStorageWriteBackZEOTests(testZEO.FullGenericTests):
    """ZEO over TierStorage with a device tier in write-back mode (commits durable on the
    device, uploaded in the background)."""

    def getConfig(self):
        return _tier_config(
            "cache-dir %s\n  cache-bytes 256MB\n  write-mode write-back"
            % os.path.abspath("tier-cache"))


class TierStorageBlobZEOTests(testZEO.FullGenericTests, testZEO.CommonBlobTests):
    """ZEO over TierStorage with blobs (the server's blob directory is TierStorage's
    local blob cache; the blobs themselves live in the object store)."""

    def getConfig(self):
        return _tier_config("blob-dir blobs")


# The reference: the same ZEO test classes over FileStorage, as ZEO's own suite runs them.
class FileStorageZEOReference(testZEO.FileStorageTests):
    pass


class FileStorageBlobZEOReference(testZEO.BlobAdaptedFileStorageTests):
    pass


CLASSES = [
    TierStorageZEOTests,
    TierStorageWriteBackZEOTests,
    TierStorageBlobZEOTests,
    FileStorageZEOReference,
    FileStorageBlobZEOReference,
]


def test_suite():
    suite = unittest.TestSuite()
    for klass in CLASSES:
        sub = unittest.TestSuite()
        # ZEO's tests are named check* (ZODB < 6) and test* (ZODB >= 6).
        for prefix in ("check", "test"):
            loader = unittest.TestLoader()
            loader.testMethodPrefix = prefix
            sub.addTest(loader.loadTestsFromTestCase(klass))
        sub.layer = ZODB.tests.util.MininalTestLayer(klass.__name__)
        suite.addTest(sub)
    return suite
