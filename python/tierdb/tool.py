"""`python -m tierdb.tool import SRC DST`: copies every transaction of any ZODB storage a
zodburi names (zeo://, zconfig://, file://, ...) into a tierdb object store, keeping tids,
with its blobs. `tierdb zodb import` runs this for URIs; Data.fs files it reads natively.
A DST that already holds transactions continues after its last one."""

import sys
import time

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


def import_(src, dst):
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
