"""`python -m tierdb.tool import SRC DST`: copies every transaction of any ZODB storage a
zodburi names (zeo://, zconfig://, file://, ...) into a tierdb object store, keeping tids,
with its blobs. A DST that already holds transactions continues after its last one.

A FileStorage (a Data.fs path, or file:///path/Data.fs?blobstorage_dir=...) is imported by
the same native import `tierdb zodb import` runs (tierdb_objects::import: checked first,
committed in groups). Any other storage is copied through ZODB's iterator, one commit per
transaction."""

import os
import sys
import time
import urllib.parse

from ZODB.blob import is_blob_record
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
import zodburi

from . import _native
from .zodb import TierStorage


def _open_source(uri):
    try:
        factory, _dbkw = zodburi.resolve_uri(uri)
    except Exception as err:
        raise SystemExit("error: %s: %s (zodburi knows file://, zeo://, zconfig://, "
                         "memory:// and, with this package, tierdb://)" % (uri, err))
    try:
        return factory()
    except Exception as err:
        raise SystemExit("error: cannot open %s: %s" % (uri, err))


def _filestorage(uri):
    """(path, blob_dir) when `uri` names a FileStorage file, else None."""
    if os.path.isfile(uri):
        return uri, None
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file" and os.path.isfile(parts.path):
        query = urllib.parse.parse_qs(parts.query)
        blob_dir = query.get("blobstorage_dir", [None])[0]
        return parts.path, blob_dir
    return None


def _import_filestorage(path, blob_dir, src, dst):
    try:
        _native.check_filestorage(path)
    except _native.TierError as err:
        raise SystemExit("error: %s; nothing was imported" % err)
    dest = TierStorage(dst, create=True)
    try:
        started = time.time()
        try:
            copied, skipped, nbytes = dest._native.import_filestorage(path, blob_dir)
        except _native.TierError as err:
            raise SystemExit("error: importing %s into %s: %s" % (src, dst, err))
        secs = max(time.time() - started, 1e-9)
        print("imported %d transactions from %s into %s in %.1f s: %.1f MB/s of Data.fs%s" % (
            copied, src, dst, secs, nbytes / 1e6 / secs,
            ", %d already there skipped" % skipped if skipped else ""))
    finally:
        dest.close()


def import_(src, dst):
    fs = _filestorage(src)
    if fs is not None:
        return _import_filestorage(fs[0], fs[1], src, dst)
    source = _open_source(src)
    dest = TierStorage(dst, create=True)
    try:
        after = dest.lastTransaction()
        total = sum(1 for _ in source.iterator())
        bar = _native.Progress(total, "import")
        started = time.time()
        copied = skipped = records = nbytes = 0
        for txn in source.iterator():
            bar.inc(1)
            if txn.tid <= after:
                skipped += 1
                continue
            meta = TransactionMetaData(txn.user, txn.description, txn.extension)
            dest.tpc_begin(meta, txn.tid, txn.status)
            try:
                for r in txn:
                    records += 1
                    nbytes += len(r.data or b"")
                    blob = None
                    if is_blob_record(r.data):
                        try:
                            blob = source.loadBlob(r.oid, r.tid)
                        except POSKeyError:
                            blob = None
                    if blob is not None:
                        import shutil
                        import tempfile
                        fd, tmp = tempfile.mkstemp(dir=dest.temporaryDirectory())
                        with open(fd, "wb") as out, open(blob, "rb") as inp:
                            shutil.copyfileobj(inp, out)
                        dest.restoreBlob(r.oid, r.tid, r.data, tmp, r.data_txn, meta)
                    else:
                        dest.restore(r.oid, r.tid, r.data, "", r.data_txn, meta)
                dest.tpc_vote(meta)
                dest.tpc_finish(meta)
            except BaseException:
                dest.tpc_abort(meta)
                raise
            copied += 1
        bar.finish()
        secs = max(time.time() - started, 1e-9)
        print("imported %d transactions (%d records, %.1f MB of records) from %s into %s in "
              "%.1f s: %.1f MB/s%s" % (
                  copied, records, nbytes / 1e6, src, dst, secs, nbytes / 1e6 / secs,
                  ", %d already there skipped" % skipped if skipped else ""))
    finally:
        dest.close()
        source.close()


def main(argv):
    if len(argv) != 3 or argv[0] != "import":
        sys.stderr.write("usage: python -m tierdb.tool import SRC-URI DST\n")
        return 2
    import_(argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
