"""`TierStorage`: a ZODB storage keeping every revision in tierdb's versioned object store.

The native module does the work (two-phase commit, loads, history, undo, pack, iteration);
this class speaks ZODB's storage interfaces and maps errors to ZODB's exceptions. Status:
in progress (issue 4); see docs/ARCHITECTURE.md.
"""

import threading
import time

import zope.interface
from ZODB import POSException
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.interfaces import (
    IStorage,
    IStorageIteration,
    IStorageRestoreable,
    IStorageUndoable,
    IStorageCurrentRecordIteration,
    IMVCCStorage,
)
from ZODB.utils import p64, u64, z64, maxtid
from ZODB.UndoLogCompatible import UndoLogCompatible
from ZODB.TimeStamp import TimeStamp

from . import _native


def _conflict(err, data=None):
    oid, committed, old, _msg = err.args
    return POSException.ConflictError(oid=oid, serials=(committed, old), data=data)


@zope.interface.implementer(
    IStorage,
    IStorageIteration,
    IStorageRestoreable,
    IStorageUndoable,
    IStorageCurrentRecordIteration,
)
class TierStorage(UndoLogCompatible, ConflictResolvingStorage):
    """A ZODB storage on a tierdb database named by `url` (a path or s3://bucket/prefix)."""

    def __init__(self, url, create=True, read_only=False, cache_dir=None,
                 cache_bytes=0, memory_bytes=64 << 20, write_mode="write-through", name=None):
        self._url = url
        self._name = name or "TierStorage(%s)" % url
        self._read_only = read_only
        self._native = _native.Store(
            url, create=create and not read_only, cache_dir=cache_dir,
            cache_bytes=cache_bytes, memory_bytes=memory_bytes, write_mode=write_mode)
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
        return self._native.stats()["objects"]

    def getSize(self):
        return self._native.stats()["stored_bytes"]

    def isReadOnly(self):
        return self._read_only

    def lastTransaction(self):
        with self._lock:
            return self._native.last_tid()

    def registerDB(self, db):
        self._db = db

    def close(self):
        if not self._closed:
            self._closed = True
            self._native.close()

    def cleanup(self):
        pass

    def sync(self, force=True):
        pass

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

    def getTid(self, oid):
        return self.load(oid)[1]

    def loadBefore(self, oid, tid):
        with self._lock:
            try:
                got = self._native.load_before(oid, tid)
            except _native.NotFoundError:
                raise POSException.POSKeyError(oid)
            if got is None:
                # ZODB: None if the object was created at or after tid; POSKeyError if it
                # never existed, or if its revision before tid has no data (creation undone).
                try:
                    history = self._native.history(oid, 1 << 30)
                except _native.NotFoundError:
                    raise POSException.POSKeyError(oid)
                if any(t < tid for t, *_ in history):
                    raise POSException.POSKeyError(oid)
            return got

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

    def _check_txn(self, transaction):
        if transaction is not self._transaction:
            raise POSException.StorageTransactionError(self, transaction)

    def store(self, oid, serial, data, version, transaction):
        if self._read_only:
            raise POSException.ReadOnlyError()
        self._check_txn(transaction)
        if version:
            raise POSException.Unsupported("Versions aren't supported")
        self._stores[oid] = (oid, serial or z64, data)

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
        self._undos.append(transaction_id)
        # The oids undone are known at vote; ZODB accepts them from tpc_vote.
        return None

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
                    self._restore_tid, list(self._restored.values()), time.time())
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
                    raise POSException.UndoError(
                        "Some data were modified by a later transaction", oid)
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
        undo_error = POSException.UndoError(
            "Some data were modified by a later transaction", oid)
        try:
            data, ctid = self._native.load(oid)
        except _native.NotFoundError:
            raise undo_error
        for undone in self._undos:
            wrote = any(r[0] == oid for t in self._native.transactions(undone, undone)
                        for r in t[5])
            if not wrote:
                continue
            before = self._native.load_before(oid, undone)
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
            return tid
        finally:
            self._end()

    def tpc_abort(self, transaction):
        if transaction is not self._transaction:
            return
        try:
            if self._voted is not None:
                self._native.abort(self._voted[0])
        finally:
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
        out = []
        for t in reversed(self._native.transactions(z64, maxtid)):
            tid, status, user, desc, ext, records = t
            if status == b"p":
                break  # packed: this transaction and all older ones are not undoable
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
        return out[first:last]

    def iterator(self, start=None, stop=None):
        return TierIterator(self._native.transactions(start or z64, stop or maxtid))

    def record_iternext(self, next=None):
        raise NotImplementedError

    def copyTransactionsFrom(self, other, verbose=0):
        """Copies every transaction of `other`, keeping tids (ZODB's restore protocol)."""
        import ZODB.BaseStorage
        return ZODB.BaseStorage.copy(other, self, verbose)

    def pack(self, t, referencesf, gc=True):
        if self._read_only:
            raise POSException.ReadOnlyError()
        pack_tid = TimeStamp(*time.gmtime(t)[:5] + (t % 60,)).raw()
        refs = None
        if gc and referencesf is not None:
            def refs(data):
                return referencesf(data)
        self._native.pack(pack_tid, refs)


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
    def __init__(self, txns):
        self._txns = iter([TierTransaction(*t) for t in txns])

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._txns)

    def close(self):
        pass


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
