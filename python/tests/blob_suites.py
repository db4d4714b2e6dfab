"""ZODB's blob suites (doctests and test classes, run in zope.testrunner layers) and its
IExternalGC doctest, against TierStorage on a local directory, on MinIO (when
TIERDB_TEST_S3_URL is set) and on FileStorage as the reference.

Run as an unprivileged user: the doctests check that a committed blob file cannot be opened
for writing, which root can always do. scripts/test.sh runs:
  setpriv --reuid=nobody ... zope-testrunner --test-path python/tests --tests-pattern '^blob_suites$'
"""

import os
import unittest
import uuid

import ZODB.FileStorage
import ZODB.tests.testblob
from ZODB.tests import PackableStorage

from tierdb.zodb import TierStorage

S3 = os.environ.get("TIERDB_TEST_S3_URL")


def local_tier(name, blob_dir, **kw):
    # The doctests run in a fresh temporary working directory each.
    return TierStorage(os.path.abspath("%s.tierdb" % name), create=True, blob_dir=blob_dir, **kw)


def minio_tier(name, blob_dir, **kw):
    # One prefix per working directory (a doctest's storages share it, like its files).
    cwd = os.getcwd()
    prefix = _prefixes.setdefault(cwd, uuid.uuid4().hex)
    url = "%s/blobs-%s/%s" % (S3.rstrip("/"), prefix, name)
    return TierStorage(url, create=True, blob_dir=blob_dir, **kw)


_prefixes = {}


def test_suite():
    suite = unittest.TestSuite()
    backends = [("BlobTierStorage", local_tier)]
    if S3:
        backends.append(("BlobTierStorageMinio", minio_tier))
    elif os.environ.get("TIERDB_REQUIRE_MINIO"):
        raise RuntimeError("TIERDB_REQUIRE_MINIO is set but TIERDB_TEST_S3_URL is not")
    for prefix, factory in backends:
        suite.addTest(ZODB.tests.testblob.storage_reusable_suite(
            prefix, factory, test_blob_storage_recovery=True, test_packing=True))
        suite.addTest(PackableStorage.IExternalGC_suite(
            lambda factory=factory: factory("data", "blobs", pack_gc=False)))
    # The reference: FileStorage under the same suites, as ZODB's own tests set it up.
    suite.addTest(ZODB.tests.testblob.storage_reusable_suite(
        "BlobFileStorageReference",
        lambda name, blob_dir: ZODB.FileStorage.FileStorage(
            "%s.fs" % name, blob_dir=blob_dir),
        test_blob_storage_recovery=True, test_packing=True))
    suite.addTest(PackableStorage.IExternalGC_suite(
        lambda: ZODB.FileStorage.FileStorage("data.fs", blob_dir="blobs", pack_gc=False)))
    return suite
