"""`TierStorage`: a ZODB storage keeping every revision in tierdb's versioned object store.

The native module does the work (two-phase commit, loads, history, undo, pack, iteration);
this class speaks ZODB's storage interfaces and maps errors to ZODB's exceptions. Status:
in progress (issue 4); see docs/ARCHITECTURE.md.
"""

import os
import shutil
import stat
import tempfile
import threading
import time

import zope.interface
from ZODB import POSException
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.blob import (
    BlobFile,
    FilesystemHelper,
    copyTransactionsFromTo,
    rename_or_copy_blob,
    set_not_writable,
)
from ZODB.interfaces import (
    IBlobStorage,
    IBlobStorageRestoreable,
    IExternalGC,
    IStorage,
    IStorageIteration,
    IStorageRestoreable,
    IStorageUndoable,
    IStorageCurrentRecordIteration,
)
from ZODB.utils import oid_repr, p64, u64, z64, maxtid
from ZODB.UndoLogCompatible import UndoLogCompatible
from ZODB.TimeStamp import TimeStamp

from . import _native


def _undo_error(oid):
    # As FileStorage raises it: MultipleUndoErrors (an UndoError) is also what ZEO's server
    # can send to its clients as such.
    return POSException.MultipleUndoErrors(
        [("Some data were modified by a later transaction", oid)])


def _conflict(err, data=None):
    oid, committed, old, _msg = err.args
    return POSException.ConflictError(oid=oid, serials=(committed, old), data=data)


@zope.interface.implementer(
    IStorage,
    IStorageIteration,
    IStorageRestoreable,
    IStorageUndoable,
    IStorageCurrentRecordIteration,
    IExternalGC,
    IBlobStorage,
    IBlobStorageRestoreable,
)
class TierStorage(UndoLogCompatible, ConflictResolvingStorage):
    """A ZODB storage on a tierdb database named by `url` (a path or s3://bucket/prefix).

    Blobs are kept as objects in the object store (one per distinct content); `blob_dir`
    is a local cache of blob files in ZODB's layout (a private temporary directory when not
    given). `read_only` opens a follower that writes nothing and fences no writer.
    """

    def __init__(self, url, create=True, read_only=False, cache_dir=None,
                 cache_bytes=0, memory_bytes=None, write_mode="write-through", name=None,
                 blob_dir=None, pack_gc=True):
        self._url = url
        self._name = name or "TierStorage(%s)" % url
        self._read_only = read_only
        try:
            self._native = _native.Store(
                url, create=create and not read_only, cache_dir=cache_dir,
                cache_bytes=cache_bytes, memory_bytes=memory_bytes, write_mode=write_mode,
                read_only=read_only)
        except _native.TierError as err:
            raise POSException.StorageError("cannot open %s: %s" % (url, err)) from None
        self._pack_gc = pack_gc
        self._own_blob_dir = blob_dir is None
        if blob_dir is None:
            blob_dir = tempfile.mkdtemp(prefix="tierdb-blobs-")
        self.fshelper = FilesystemHelper(os.path.abspath(blob_dir), "automatic")
        self.fshelper.create()
        self._blob_lock = threading.Lock()      # one download into the cache at a time
        self._blobs = {}
        self._lock = threading.RLock()          # guards the fields below
        self._commit_lock = threading.Lock()    # one transaction between begin and finish
        self._transaction = None
        self._stores = {}
        self._read_current = {}
        self._undos = []
        self._restore_tid = None
        self._restored = {}
        self._voted = None
        self._resolved = []
        self._closed = False

    # -- IStorage: identity and state ------------------------------------------------
    def getName(self):
        return self._name

    def sortKey(self):
        return self._url

    def __len__(self):
        # Kept by every commit and pack: no scan (stats() reads the whole store).
        return self._native.object_count()

    def getSize(self):
        # The key-value database's bytes on the store, as the writer estimates them.
        return self._native.approx_size()

    def isReadOnly(self):
        return self._read_only

    def lastTransaction(self):
        with self._lock:
            if self._read_only:
                return self._native.refresh()
            return self._native.last_tid()

    def registerDB(self, db):
        self._db = db

    def close(self):
        if not self._closed:
            self._closed = True
            self._native.close()
            if self._own_blob_dir:
                shutil.rmtree(self.fshelper.base_dir, ignore_errors=True)

    def cleanup(self):
        pass

    def sync(self, force=True):
        if self._read_only:
            with self._lock:
                self._native.refresh()

    def supportsUndo(self):
        return True

    def supportsVersions(self):
        return False

    # -- reads -----------------------------------------------------------------------
    def load(self, oid, version=""):
        # Loads wait for a finishing transaction's invalidations (see tpc_finish).
        with self._lock:
            try:
                return self._native.load(oid)
            except _native.NotFoundError:
                raise POSException.POSKeyError(oid)

    def prefetch(self, oids, tid):
        """Reads the revisions of `oids` current before `tid` into the storage's caches,
        concurrently, so the loads that follow are cache hits (ZODB's Connection.prefetch)."""
        self._native.prefetch([oid for oid in oids], tid)

    def getTid(self, oid):
        return self.load(oid)[1]

    def loadBefore(self, oid, tid):
        # None if the object was created at or after tid; POSKeyError if it never existed,
        # or if its revision before tid has no data (creation undone). One seek or three.
        with self._lock:
            try:
                return self._native.load_before(oid, tid)
            except _native.NotFoundError:
                raise POSException.POSKeyError(oid)

    def loadSerial(self, oid, serial):
        try:
            return self._native.load_serial(oid, serial)
        except _native.NotFoundError:
            raise POSException.POSKeyError(oid)

    def history(self, oid, size=1):
        try:
            entries = self._native.history(oid, size)
        except _native.NotFoundError:
            raise POSException.POSKeyError(oid)
        out = []
        for tid, length, user, desc, ext in entries:
            out.append({
                "time": TimeStamp(tid).timeTime(),
                "tid": tid,
                "serial": tid,
                "user_name": user,
                "description": desc,
                "size": length,
                "version": "",
            })
        return out

    def new_oid(self):
        if self._read_only:
            raise POSException.ReadOnlyError()
        return self._native.new_oid()

    # -- two-phase commit ------------------------------------------------------------
    def tpc_begin(self, transaction, tid=None, status=" "):
        if self._read_only:
            raise POSException.ReadOnlyError()
        with self._lock:
            if self._transaction is transaction:
                raise POSException.StorageTransactionError(
                    "Duplicate tpc_begin calls for same transaction")
        self._commit_lock.acquire()
        with self._lock:
            self._transaction = transaction
            self._stores = {}
            self._read_current = {}
            self._undos = []
            self._restore_tid = tid
            self._restored = {}
            self._voted = None
            self._resolved = []
            self._blobs = {}

    def _check_txn(self, transaction):
        if transaction is not self._transaction:
            raise POSException.StorageTransactionError(self, transaction)

    def store(self, oid, serial, data, version, transaction):
        if self._read_only:
            raise POSException.ReadOnlyError()
        self._check_txn(transaction)
        if version:
            raise POSException.Unsupported("Versions aren't supported")
        if isinstance(serial, str):  # some callers pass '\0' * 8
            serial = serial.encode("latin-1")
        self._stores[oid] = (oid, serial or z64, data)

    # -- IExternalGC ------------------------------------------------------------------
    def deleteObject(self, oid, oldserial, transaction):
        """Marks `oid` as having no data from this transaction on (a later pack removes it).
        Conflicts like a store when `oldserial` is not the current revision."""
        if self._read_only:
            raise POSException.ReadOnlyError()
        self._check_txn(transaction)
        self._stores[oid] = (oid, oldserial, None)

    # -- IBlobStorage ------------------------------------------------------------------
    def temporaryDirectory(self):
        return self.fshelper.temp_dir

    def _stage_blob(self, oid, blobfilename):
        """Takes ownership of `blobfilename` until the transaction ends."""
        fd, staged = tempfile.mkstemp(
            prefix=".stage-%016x-" % u64(oid), dir=self.fshelper.temp_dir)
        os.close(fd)
        rename_or_copy_blob(blobfilename, staged, chmod=False)
        old = self._blobs.pop(oid, None)
        if old is not None:
            _remove(old)
        self._blobs[oid] = staged

    def storeBlob(self, oid, oldserial, data, blobfilename, version, transaction):
        assert not version, "Versions aren't supported."
        self.store(oid, oldserial, data, "", transaction)
        self._stage_blob(oid, blobfilename)

    def restoreBlob(self, oid, serial, data, blobfilename, prev_txn, transaction):
        self.restore(oid, serial, data, "", prev_txn, transaction)
        self._stage_blob(oid, blobfilename)

    def loadBlob(self, oid, serial):
        """The name of a local file holding the blob of `oid`'s revision `serial`, fetched
        from the object store into the blob cache when not there yet."""
        path = self.fshelper.getBlobFilename(oid, serial)
        if os.path.exists(path):
            return path
        with self._blob_lock:
            if os.path.exists(path):
                return path
            self.fshelper.getPathForOID(oid, create=True)
            try:
                self._native.load_blob(oid, serial, path)
            except _native.NotFoundError as err:
                raise POSException.POSKeyError(
                    "No blob for object %s revision %s: %s"
                    % (oid_repr(oid), oid_repr(serial), err.args[-1]), oid, serial)
            set_not_writable(path)
        return path

    def openCommittedBlobFile(self, oid, serial, blob=None):
        path = self.loadBlob(oid, serial)
        if blob is None:
            return open(path, "rb")
        return BlobFile(path, "r", blob)

    def _blobs_committed(self, tid):
        """Moves the transaction's staged blob files into the cache as (oid, tid)."""
        for oid, staged in self._blobs.items():
            try:
                self.fshelper.getPathForOID(oid, create=True)
                rename_or_copy_blob(staged, self.fshelper.getBlobFilename(oid, tid))
            except OSError:
                _remove(staged)  # only a cache: the blob is in the object store
        self._blobs = {}

    def _blobs_dropped(self):
        for staged in self._blobs.values():
            _remove(staged)
        self._blobs = {}

    def checkCurrentSerialInTransaction(self, oid, serial, transaction):
        self._check_txn(transaction)
        self._read_current[oid] = serial

    def restore(self, oid, serial, data, version, prev_txn, transaction):
        if self._read_only:
            raise POSException.ReadOnlyError()
        self._check_txn(transaction)
        if version:
            raise POSException.Unsupported("Versions aren't supported")
        self._restored[oid] = (oid, data, prev_txn if data is None else None)

    def undo(self, transaction_id, transaction):
        if self._read_only:
            raise POSException.ReadOnlyError()
        self._check_txn(transaction)
        # The objects the undone transaction wrote (ZEO's server invalidates them from this
        # answer; conflicts are found at vote). The tid is assigned at vote.
        try:
            oids = self._native.written_by(transaction_id)
        except _native.TierError as err:
            raise POSException.UndoError(str(err)) from None
        self._undos.append(transaction_id)
        return None, oids

    def _meta(self, transaction):
        import pickle
        ext_bytes = getattr(transaction, "extension_bytes", None)
        if ext_bytes is not None:
            ext = None
        else:
            ext = getattr(transaction, "extension", None) or {}
        user = transaction.user
        desc = transaction.description
        if isinstance(user, str):
            user = user.encode("utf-8")
        if isinstance(desc, str):
            desc = desc.encode("utf-8")
        if ext_bytes is not None:
            return user, desc, ext_bytes
        return user, desc, pickle.dumps(ext, 3) if ext else b""

    def tpc_vote(self, transaction):
        self._check_txn(transaction)
        user, desc, ext = self._meta(transaction)
        stores = dict(self._stores)
        resolved = []
        while True:
            try:
                handle, tid, oids = self._native.vote(
                    user, desc, ext, list(stores.values()),
                    list(self._read_current.items()), list(self._undos),
                    self._restore_tid, list(self._restored.values()), time.time(),
                    list(self._blobs.items()))
                break
            except _native.ConflictError as err:
                oid, committed, old, _ = err.args
                entry = stores.get(oid)
                if entry is None or entry[2] is None:
                    raise _conflict(err)
                newdata = self.tryToResolveConflict(oid, committed, old, entry[2])
                stores[oid] = (oid, committed, newdata)
                resolved.append(oid)
            except _native.ReadConflictError as err:
                oid, committed, read, _ = err.args
                raise POSException.ReadConflictError(oid=oid, serials=(committed, read))
            except _native.UndoError as err:
                oid, _undone, _ = err.args
                if oid in stores:
                    raise _undo_error(oid)
                stores[oid] = (oid, *self._resolve_undo(oid))
                resolved.append(oid)
            except _native.TierError as err:
                raise POSException.StorageError(str(err))
        self._voted = (handle, tid, oids)
        if self._undos:
            return list(oids)
        return resolved or None

    def _resolve_undo(self, oid):
        """Undo, in this transaction, of every undone transaction that wrote `oid`, on an
        object changed since: conflict resolution merges each state before an undone
        transaction into the current one in turn, as FileStorage does for one."""
        undo_error = _undo_error(oid)
        try:
            data, ctid = self._native.load(oid)
        except _native.NotFoundError:
            raise undo_error
        for undone in self._undos:
            if oid not in self._native.written_by(undone):
                continue
            try:
                before = self._native.load_before(oid, undone)
            except _native.NotFoundError:
                before = None
            if before is None:
                raise undo_error
            try:
                data = self.tryToResolveConflict(oid, ctid, undone, before[0],
                                                 committedData=data)
            except POSException.ConflictError:
                raise undo_error
        return ctid, data

    def tpc_finish(self, transaction, func=lambda tid: None):
        self._check_txn(transaction)
        try:
            if self._voted is None:
                self.tpc_vote(transaction)
            handle, tid, _oids = self._voted
            # The new revisions become readable and the DB's invalidations run as one step
            # for readers of this storage (as FileStorage does under its lock).
            with self._lock:
                tid = self._native.finish(handle)
                func(tid)
            self._blobs_committed(tid)
            return tid
        finally:
            self._blobs_dropped()
            self._end()

    def tpc_abort(self, transaction):
        if transaction is not self._transaction:
            return
        try:
            if self._voted is not None:
                self._native.abort(self._voted[0])
        finally:
            self._blobs_dropped()
            self._end()

    def _end(self):
        with self._lock:
            self._transaction = None
            self._voted = None
            self._stores = {}
        self._commit_lock.release()

    def tpc_transaction(self):
        return self._transaction

    # -- undo, iteration, pack -------------------------------------------------------
    def undoLog(self, first=0, last=-20, filter=None):
        if last < 0:
            last = first - last
        # Newest first, a page at a time, reading no further than the entries asked for.
        out = []
        before = maxtid
        page = 64
        while len(out) < last:
            txns = self._native.transactions_desc(before, page)
            for tid, status, user, desc, ext in txns:
                if status == b"p":
                    return out[first:last]  # packed: it and all older are not undoable
                d = {"id": tid, "time": TimeStamp(tid).timeTime(), "user_name": user,
                     "description": desc}
                if ext:
                    import pickle
                    try:
                        d.update(pickle.loads(ext))
                    except Exception:
                        pass
                if filter is None or filter(d):
                    out.append(d)
                    if len(out) >= last:
                        break
            if len(txns) < page:
                break
            before = txns[-1][0]
            page = min(page * 2, 1024)
        return out[first:last]

    def iterator(self, start=None, stop=None):
        return TierIterator(self._native, start or z64, stop or maxtid)

    def record_iternext(self, next=None):
        """IStorageCurrentRecordIteration: (oid, tid, data, next) of the object at or after
        `next` (None: the first); `next` is None after the last object."""
        got = self._native.next_object(next or z64)
        if got is None:
            # An empty storage: ZODB expects the root position.
            raise POSException.POSKeyError(next or z64)
        oid, tid, data = got
        after = self._native.next_object(p64(u64(oid) + 1))
        return oid, tid, data, (after[0] if after is not None else None)

    def copyTransactionsFrom(self, other, verbose=0):
        """Copies every transaction of `other`, keeping tids (ZODB's restore protocol),
        with its blobs when it has any."""
        if IBlobStorage.providedBy(other):
            return copyTransactionsFromTo(other, self)
        import ZODB.BaseStorage
        return ZODB.BaseStorage.copy(other, self, verbose)

    def pack(self, t, referencesf, gc=True):
        if self._read_only:
            raise POSException.ReadOnlyError()
        pack_tid = TimeStamp(*time.gmtime(t)[:5] + (t % 60,)).raw()
        refs = None
        if gc and self._pack_gc and referencesf is not None:
            def refs(data):
                return referencesf(data)
        try:
            result = self._native.pack(pack_tid, refs)
        except _native.TierError as err:
            raise POSException.StorageError(str(err)) from None
        # Drop cached files of the blob revisions pack removed (and emptied directories).
        for oid, tid in result["blob_revisions_removed"]:
            path = self.fshelper.getBlobFilename(oid, tid)
            _remove(path)
            try:
                os.rmdir(os.path.dirname(path))
            except OSError:
                pass
        self._last_pack = result


class TierRecord:
    def __init__(self, oid, tid, data, data_txn):
        self.oid = oid
        self.tid = tid
        self.data = data
        self.data_txn = data_txn
        self.version = ""


class TierTransaction:
    def __init__(self, tid, status, user, desc, ext, records):
        import pickle
        self.tid = tid
        self.status = status.decode("ascii")
        self.user = user
        self.description = desc
        self.extension_bytes = ext
        try:
            self.extension = pickle.loads(ext) if ext else {}
        except Exception:
            self.extension = {}
        self._records = [TierRecord(*r) for r in records]

    @property
    def _extension(self):
        return self.extension

    def __iter__(self):
        return iter(self._records)


class TierIterator:
    """Transactions from `start` to `stop`, read a page at a time as they are consumed."""

    PAGE = 32

    def __init__(self, native, start, stop):
        self._native = native
        self._next = start
        self._stop = stop
        self._page = []
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if not self._page:
            if self._done:
                raise StopIteration
            txns = self._native.transactions(self._next, self._stop, self.PAGE)
            if len(txns) < self.PAGE:
                self._done = True
            if not txns:
                raise StopIteration
            last = u64(txns[-1][0])
            if last >= u64(self._stop) or last == (1 << 64) - 1:
                self._done = True
            else:
                self._next = p64(last + 1)
            self._page = [TierTransaction(*t) for t in reversed(txns)]
        return self._page.pop()

    def close(self):
        self._page = []
        self._done = True


def resolve_uri(uri):
    """zodburi: tierdb:///abs/path or tierdb://bucket/prefix?s3=1 (see docs)."""
    from urllib.parse import urlsplit, parse_qsl
    parts = urlsplit(uri)
    query = dict(parse_qsl(parts.query))
    if query.pop("s3", None):
        url = "s3://%s%s" % (parts.netloc, parts.path)
    else:
        url = parts.path
    kw = {}
    for key in ("cache_dir", "write_mode"):
        if key in query:
            kw[key] = query.pop(key)
    for key in ("cache_bytes", "memory_bytes"):
        if key in query:
            kw[key] = int(query.pop(key))
    dbkw = {}
    return (lambda: TierStorage(url, **kw)), dbkw


def _remove(path):
    try:
        os.chmod(path, stat.S_IWRITE | stat.S_IREAD)
        os.remove(path)
    except OSError:
        pass
