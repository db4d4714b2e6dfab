//! `tierdb._native`: tierdb's versioned object store for Python. `tierdb.zodb.TierStorage`
//! wraps it as a ZODB storage; this module only moves bytes and errors across, releasing
//! the GIL while the store works.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tierdb_engine::{Database, ErrorKind, OpenOptions, Role, Workload, WriteMode};
use tierdb_objects::{ObjError, Oid, Tid, Txn, TxnMeta, VersionedStore, Voted};

create_exception!(_native, TierError, PyException);
create_exception!(_native, ConflictError, TierError);
create_exception!(_native, ReadConflictError, TierError);
create_exception!(_native, NotFoundError, TierError);
create_exception!(_native, UndoError, TierError);
create_exception!(_native, ReadOnlyError, TierError);

fn oid_of(b: &[u8]) -> PyResult<Oid> {
    Oid::from_bytes(b)
        .ok_or_else(|| TierError::new_err(format!("an oid is 8 bytes, got {}", b.len())))
}

fn tid_of(b: &[u8]) -> PyResult<Tid> {
    Tid::from_bytes(b)
        .ok_or_else(|| TierError::new_err(format!("a tid is 8 bytes, got {}", b.len())))
}

fn to_py(e: ObjError) -> PyErr {
    match e {
        ObjError::Conflict {
            oid,
            committed,
            old,
        } => ConflictError::new_err((
            oid.to_bytes().to_vec(),
            committed.to_bytes().to_vec(),
            old.to_bytes().to_vec(),
            format!("conflict on object {oid}: committed {committed}, based on {old}"),
        )),
        ObjError::ReadConflict {
            oid,
            committed,
            read,
        } => ReadConflictError::new_err((
            oid.to_bytes().to_vec(),
            committed.to_bytes().to_vec(),
            read.to_bytes().to_vec(),
            format!("object {oid} changed since read: committed {committed}, read {read}"),
        )),
        ObjError::NotFound { oid, .. } | ObjError::NoRevision { oid, .. } => {
            NotFoundError::new_err((oid.to_bytes().to_vec(), e.to_string()))
        }
        ObjError::Undo { oid, tid } => UndoError::new_err((
            oid.to_bytes().to_vec(),
            tid.to_bytes().to_vec(),
            e.to_string(),
        )),
        ObjError::ReadOnly { .. } => ReadOnlyError::new_err(e.to_string()),
        // Only a blob that is not there is ZODB's POSKeyError; a transient store error or
        // damage stays a storage error, so it never reads as data loss.
        ObjError::Blob {
            oid,
            kind: ErrorKind::NotFound,
            ..
        } => NotFoundError::new_err((oid.to_bytes().to_vec(), e.to_string())),
        other => TierError::new_err(other.to_string()),
    }
}

/// An error from opening or closing: ZODB's exceptions by kind.
fn engine_to_py(e: tierdb_engine::Error) -> PyErr {
    match e {
        tierdb_engine::Error::Objects(e) => to_py(*e),
        e if e.kind() == ErrorKind::NotFound => {
            NotFoundError::new_err((Vec::<u8>::new(), e.to_string()))
        }
        e => TierError::new_err(e.to_string()),
    }
}

/// A progress bar on standard error drawn with `template` (indicatif's syntax).
fn progress_bar(template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// An import's progress on a bar: the check pass, then the import.
struct ImportBar(indicatif::ProgressBar);

impl tierdb_objects::ImportProgress for ImportBar {
    fn checking(&self, position: u64, len: u64) {
        self.0.set_length(len);
        self.0.set_position(position);
        self.0.set_message("checking");
    }

    fn importing(&self, position: u64, len: u64, txns: u64) {
        self.0.set_length(len);
        self.0.set_position(position);
        self.0.set_message(format!("{txns} transactions"));
    }
}

fn b<'p>(py: Python<'p>, data: &[u8]) -> Bound<'p, PyBytes> {
    PyBytes::new(py, data)
}

type Stores = Vec<(Vec<u8>, Vec<u8>, Option<Vec<u8>>)>;
type Restored = Vec<(Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>)>;

/// One opened object store.
#[pyclass(module = "tierdb._native")]
struct Store {
    rt: tokio::runtime::Runtime,
    store: Arc<VersionedStore>,
    database: Database,
    voted: parking_lot::Mutex<HashMap<u64, Voted>>,
    handles: AtomicU64,
}

#[pymethods]
impl Store {
    /// Opens (or with `create`, creates) the database at `url`.
    #[new]
    #[pyo3(signature = (url, create=false, cache_dir=None, cache_bytes=0, memory_bytes=None, write_mode="write-through", read_only=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &str,
        create: bool,
        cache_dir: Option<String>,
        cache_bytes: u64,
        memory_bytes: Option<u64>,
        write_mode: &str,
        read_only: bool,
    ) -> PyResult<Self> {
        let write_mode: WriteMode = write_mode
            .parse()
            .map_err(|e: String| TierError::new_err(e))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| TierError::new_err(format!("cannot start the async runtime: {e}")))?;
        let role = if read_only {
            Role::Follower
        } else {
            Role::Writer
        };
        let mut options = OpenOptions::new(Workload::Objects, role);
        options.kv.create = create;
        // A follower here lives as long as the storage: it pins what it reads.
        options.pin_checkpoint = true;
        let tiers = &mut options.store.tiers;
        tiers.cache_dir = cache_dir.map(Into::into);
        tiers.cache_bytes = cache_bytes;
        if let Some(m) = memory_bytes {
            tiers.memory_bytes = m;
        }
        tiers.write_mode = write_mode;
        let opened: Result<_, Box<tierdb_engine::Error>> = py.detach(|| {
            rt.block_on(async {
                let database = Database::open(url, &options).await.map_err(Box::new)?;
                match database.objects().await {
                    Ok(store) => Ok((Arc::new(store), database)),
                    Err(e) => {
                        let _ = database.close().await;
                        Err(Box::new(e))
                    }
                }
            })
        });
        let (store, database) = opened.map_err(|e| engine_to_py(*e))?;
        Ok(Store {
            rt,
            store,
            database,
            voted: parking_lot::Mutex::new(HashMap::new()),
            handles: AtomicU64::new(1),
        })
    }

    fn load<'p>(
        &self,
        py: Python<'p>,
        oid: &[u8],
    ) -> PyResult<(Bound<'p, PyBytes>, Bound<'p, PyBytes>)> {
        let oid = oid_of(oid)?;
        // A warm load is an in-process lookup: no runtime, no GIL release.
        let (data, tid) = match self.store.load_cached(oid) {
            Some(hit) => hit,
            None => py
                .detach(|| self.rt.block_on(self.store.load(oid)))
                .map_err(to_py)?,
        };
        Ok((b(py, &data), b(py, &tid.to_bytes())))
    }

    #[allow(clippy::type_complexity)]
    fn load_before<'p>(
        &self,
        py: Python<'p>,
        oid: &[u8],
        tid: &[u8],
    ) -> PyResult<
        Option<(
            Bound<'p, PyBytes>,
            Bound<'p, PyBytes>,
            Option<Bound<'p, PyBytes>>,
        )>,
    > {
        let (oid, tid) = (oid_of(oid)?, tid_of(tid)?);
        // ZODB's connections load through loadBefore: a cached current revision older than
        // the snapshot is the answer, without the runtime or releasing the GIL (as `load`).
        if let Some((data, start)) = self.store.load_cached(oid)
            && start < tid
        {
            return Ok(Some((b(py, &data), b(py, &start.to_bytes()), None)));
        }
        let got = py
            .detach(|| self.rt.block_on(self.store.load_before(oid, tid)))
            .map_err(to_py)?;
        Ok(got.map(|(data, start, end)| {
            (
                b(py, &data),
                b(py, &start.to_bytes()),
                end.map(|e| b(py, &e.to_bytes())),
            )
        }))
    }

    fn load_serial<'p>(
        &self,
        py: Python<'p>,
        oid: &[u8],
        serial: &[u8],
    ) -> PyResult<Bound<'p, PyBytes>> {
        let (oid, serial) = (oid_of(oid)?, tid_of(serial)?);
        let data = py
            .detach(|| self.rt.block_on(self.store.load_serial(oid, serial)))
            .map_err(to_py)?;
        Ok(b(py, &data))
    }

    /// [(tid, size, user, description, extension)], newest first.
    #[allow(clippy::type_complexity)]
    fn history<'p>(
        &self,
        py: Python<'p>,
        oid: &[u8],
        size: usize,
    ) -> PyResult<
        Vec<(
            Bound<'p, PyBytes>,
            u64,
            Bound<'p, PyBytes>,
            Bound<'p, PyBytes>,
            Bound<'p, PyBytes>,
        )>,
    > {
        let oid = oid_of(oid)?;
        let h = py
            .detach(|| self.rt.block_on(self.store.history(oid, size)))
            .map_err(to_py)?;
        Ok(h.into_iter()
            .map(|e| {
                (
                    b(py, &e.tid.to_bytes()),
                    e.size,
                    b(py, &e.txn.meta.user),
                    b(py, &e.txn.meta.description),
                    b(py, &e.txn.meta.extension),
                )
            })
            .collect())
    }

    fn new_oid<'p>(&self, py: Python<'p>) -> PyResult<Bound<'p, PyBytes>> {
        let oid = py
            .detach(|| self.rt.block_on(self.store.new_oid()))
            .map_err(to_py)?;
        Ok(b(py, &oid.to_bytes()))
    }

    fn last_tid<'p>(&self, py: Python<'p>) -> Bound<'p, PyBytes> {
        b(py, &self.store.last_tid().to_bytes())
    }

    /// Read-only opens: catches up with the writer's commits; returns the last tid.
    fn refresh<'p>(&self, py: Python<'p>) -> PyResult<Bound<'p, PyBytes>> {
        let tid = py
            .detach(|| self.rt.block_on(self.store.refresh()))
            .map_err(to_py)?;
        Ok(b(py, &tid.to_bytes()))
    }

    fn is_read_only(&self) -> bool {
        self.store.is_read_only()
    }

    /// (oid, tid, data) of the first object at or after `oid` with current data, or None.
    #[allow(clippy::type_complexity)]
    fn next_object<'p>(
        &self,
        py: Python<'p>,
        oid: &[u8],
    ) -> PyResult<Option<(Bound<'p, PyBytes>, Bound<'p, PyBytes>, Bound<'p, PyBytes>)>> {
        let oid = oid_of(oid)?;
        let got = py
            .detach(|| self.rt.block_on(self.store.next_object(oid)))
            .map_err(to_py)?;
        Ok(got.map(|(o, t, d)| (b(py, &o.to_bytes()), b(py, &t.to_bytes()), b(py, &d))))
    }

    /// Warms the caches with the revisions of `oids` current before `tid` (concurrently);
    /// returns how many were found.
    fn prefetch(&self, py: Python<'_>, oids: Vec<Vec<u8>>, tid: &[u8]) -> PyResult<usize> {
        let oids: Vec<Oid> = oids.iter().map(|o| oid_of(o)).collect::<PyResult<_>>()?;
        let tid = tid_of(tid)?;
        Ok(py.detach(|| self.rt.block_on(self.store.prefetch(&oids, tid))))
    }

    /// Writes the blob of `oid`'s revision `serial` to the file `dest`.
    fn load_blob(&self, py: Python<'_>, oid: &[u8], serial: &[u8], dest: &str) -> PyResult<()> {
        let (oid, serial) = (oid_of(oid)?, tid_of(serial)?);
        let dest = std::path::PathBuf::from(dest);
        py.detach(|| self.rt.block_on(self.store.load_blob(oid, serial, &dest)))
            .map_err(to_py)
    }

    /// The vote: returns (handle, tid, [oids written]). The commit lock is held until
    /// `finish(handle)` or `abort(handle)`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (user, description, extension, stores, read_current, undos, restore_tid=None, restored=Vec::new(), now=None, blobs=Vec::new()))]
    fn vote<'p>(
        &self,
        py: Python<'p>,
        user: Vec<u8>,
        description: Vec<u8>,
        extension: Vec<u8>,
        stores: Stores,
        read_current: Vec<(Vec<u8>, Vec<u8>)>,
        undos: Vec<Vec<u8>>,
        restore_tid: Option<Vec<u8>>,
        restored: Restored,
        now: Option<f64>,
        blobs: Vec<(Vec<u8>, String)>,
    ) -> PyResult<(u64, Bound<'p, PyBytes>, Vec<Bound<'p, PyBytes>>)> {
        let mut blobs: HashMap<Oid, std::path::PathBuf> = blobs
            .into_iter()
            .map(|(oid, f)| Ok((oid_of(&oid)?, std::path::PathBuf::from(f))))
            .collect::<PyResult<_>>()?;
        let meta = TxnMeta {
            user: Bytes::from(user),
            description: Bytes::from(description),
            extension: Bytes::from(extension),
        };
        let mut txn = match restore_tid {
            Some(t) => Txn::restoring(meta, tid_of(&t)?),
            None => Txn::new(meta),
        };
        if let Some(now) = now {
            txn.at_time(now);
        }
        for (oid, serial, data) in stores {
            let (oid, serial) = (oid_of(&oid)?, tid_of(&serial)?);
            match (data, blobs.remove(&oid)) {
                (Some(data), Some(file)) => txn.store_blob(oid, serial, Bytes::from(data), file),
                (data, _) => txn.store(oid, serial, data.map(Bytes::from)),
            }
        }
        for (oid, serial) in read_current {
            txn.check_current(oid_of(&oid)?, tid_of(&serial)?);
        }
        for t in undos {
            txn.undo(tid_of(&t)?);
        }
        for (oid, data, data_txn) in restored {
            let data_txn = data_txn.map(|t| tid_of(&t)).transpose()?;
            let oid = oid_of(&oid)?;
            match (data, blobs.remove(&oid)) {
                (Some(data), Some(file)) => txn.restore_blob(oid, Bytes::from(data), file),
                (data, _) => txn.restore(oid, data.map(Bytes::from), data_txn),
            }
        }
        let voted = py
            .detach(|| self.rt.block_on(self.store.vote(txn)))
            .map_err(to_py)?;
        let tid = voted.tid;
        let oids: Vec<_> = voted
            .revisions
            .keys()
            .map(|o| b(py, &o.to_bytes()))
            .collect();
        let handle = self.handles.fetch_add(1, Ordering::Relaxed);
        self.voted.lock().insert(handle, voted);
        Ok((handle, b(py, &tid.to_bytes()), oids))
    }

    fn finish<'p>(&self, py: Python<'p>, handle: u64) -> PyResult<Bound<'p, PyBytes>> {
        let voted = self
            .voted
            .lock()
            .remove(&handle)
            .ok_or_else(|| TierError::new_err(format!("no voted transaction {handle}")))?;
        let tid = py
            .detach(|| self.rt.block_on(self.store.finish(voted)))
            .map_err(to_py)?;
        Ok(b(py, &tid.to_bytes()))
    }

    fn abort(&self, handle: u64) {
        if let Some(voted) = self.voted.lock().remove(&handle) {
            self.store.abort(voted);
        }
    }

    /// Up to `limit` transactions from `start` to `stop`, oldest first:
    /// [(tid, status, user, description, extension, [(oid, tid, data|None, data_txn|None)])].
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (start, stop, limit=64))]
    fn transactions<'p>(
        &self,
        py: Python<'p>,
        start: &[u8],
        stop: &[u8],
        limit: usize,
    ) -> PyResult<Vec<Bound<'p, PyAny>>> {
        let (start, stop) = (tid_of(start)?, tid_of(stop)?);
        let txns = py
            .detach(|| {
                self.rt
                    .block_on(self.store.transactions_page(start, stop, limit))
            })
            .map_err(to_py)?;
        let mut out = Vec::with_capacity(txns.len());
        for t in txns {
            let records: Vec<_> = t
                .records
                .iter()
                .map(|r| {
                    (
                        b(py, &r.oid.to_bytes()),
                        b(py, &r.tid.to_bytes()),
                        r.data.as_ref().map(|d| b(py, d)),
                        r.data_txn.map(|d| b(py, &d.to_bytes())),
                    )
                })
                .collect();
            let tuple = (
                b(py, &t.tid.to_bytes()),
                b(py, &[t.record.status]),
                b(py, &t.record.meta.user),
                b(py, &t.record.meta.description),
                b(py, &t.record.meta.extension),
                records,
            )
                .into_pyobject(py)?
                .into_any();
            out.push(tuple);
        }
        Ok(out)
    }

    /// Up to `limit` transactions before `before`, newest first, without their records:
    /// [(tid, status, user, description, extension)].
    #[allow(clippy::type_complexity)]
    fn transactions_desc<'p>(
        &self,
        py: Python<'p>,
        before: &[u8],
        limit: usize,
    ) -> PyResult<Vec<Bound<'p, PyAny>>> {
        let before = tid_of(before)?;
        let txns = py
            .detach(|| {
                self.rt
                    .block_on(self.store.transactions_desc(before, limit))
            })
            .map_err(to_py)?;
        let mut out = Vec::with_capacity(txns.len());
        for (tid, rec) in txns {
            out.push(
                (
                    b(py, &tid.to_bytes()),
                    b(py, &[rec.status]),
                    b(py, &rec.meta.user),
                    b(py, &rec.meta.description),
                    b(py, &rec.meta.extension),
                )
                    .into_pyobject(py)?
                    .into_any(),
            );
        }
        Ok(out)
    }

    /// The oids transaction `tid` wrote.
    fn written_by<'p>(&self, py: Python<'p>, tid: &[u8]) -> PyResult<Vec<Bound<'p, PyBytes>>> {
        let tid = tid_of(tid)?;
        let oids = py
            .detach(|| self.rt.block_on(self.store.written_by(tid)))
            .map_err(to_py)?;
        Ok(oids.iter().map(|o| b(py, &o.to_bytes())).collect())
    }

    /// Packs to `tid`; `refs(data) -> [oid bytes]` enables garbage collection.
    #[pyo3(signature = (tid, refs=None))]
    fn pack<'p>(
        &self,
        py: Python<'p>,
        tid: &[u8],
        refs: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'p, PyDict>> {
        let tid = tid_of(tid)?;
        let result = py.detach(|| {
            self.rt.block_on(async {
                match refs {
                    Some(f) => {
                        let refs = move |data: &[u8]| -> Result<Vec<Oid>, tierdb_objects::Damage> {
                            Python::attach(|py| {
                                let got = f.call1(py, (PyBytes::new(py, data),));
                                let oids = got
                                    .and_then(|list| list.extract::<Vec<Vec<u8>>>(py))
                                    .map_err(|e| tierdb_objects::Damage(e.to_string()))?;
                                oids.iter()
                                    .map(|o| {
                                        Oid::from_bytes(o).ok_or_else(|| {
                                            tierdb_objects::Damage::from(format!(
                                                "a reference of {} bytes is not an oid",
                                                o.len()
                                            ))
                                        })
                                    })
                                    .collect()
                            })
                        };
                        self.store.pack(tid, Some(&refs)).await
                    }
                    None => self.store.pack(tid, None).await,
                }
            })
        });
        let stats = result.map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("revisions_removed", stats.revisions_removed)?;
        d.set_item("objects_removed", stats.objects_removed)?;
        d.set_item("data_removed", stats.data_removed)?;
        d.set_item("transactions_removed", stats.transactions_removed)?;
        d.set_item("blobs_removed", stats.blobs_removed)?;
        let gone: Vec<_> = stats
            .blob_revisions_removed
            .iter()
            .map(|(o, t)| (b(py, &o.to_bytes()), b(py, &t.to_bytes())))
            .collect();
        d.set_item("blob_revisions_removed", gone)?;
        Ok(d)
    }

    /// The number of objects (kept by commits and packs; no scan).
    fn object_count(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.rt.block_on(self.store.object_count()))
            .map_err(to_py)
    }

    /// The key-value database's size on the store (the writer's estimate; 0 on a follower).
    fn approx_size(&self) -> u64 {
        self.store
            .kv()
            .writer()
            .map_or(0, |w| w.info().total_bytes())
    }

    fn stats<'p>(&self, py: Python<'p>) -> PyResult<Bound<'p, PyDict>> {
        let s = py
            .detach(|| self.rt.block_on(self.store.stats()))
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("objects", s.objects)?;
        d.set_item("revisions", s.revisions)?;
        d.set_item("transactions", s.transactions)?;
        d.set_item("data_records", s.data_records)?;
        d.set_item("logical_bytes", s.logical_bytes)?;
        d.set_item("unique_bytes", s.unique_bytes)?;
        d.set_item("stored_bytes", s.stored_bytes)?;
        d.set_item("blob_revisions", s.blob_revisions)?;
        d.set_item("blobs", s.blobs)?;
        Ok(d)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.rt.block_on(self.database.close()).map_err(Box::new))
            .map_err(|e| engine_to_py(*e))
    }

    /// Imports the FileStorage file `src` (and its blob directory) natively: the import
    /// `tierdb zodb import` runs (see `tierdb_objects::import`). Returns the number of
    /// transactions imported, skipped (already there) and the bytes read.
    #[pyo3(signature = (src, blob_dir=None, group_bytes=8<<20))]
    fn import_filestorage(
        &self,
        py: Python<'_>,
        src: std::path::PathBuf,
        blob_dir: Option<std::path::PathBuf>,
        group_bytes: u64,
    ) -> PyResult<(u64, u64, u64)> {
        let options = tierdb_objects::ImportOptions {
            blob_dir,
            group_bytes,
        };
        let bar = ImportBar(progress_bar(
            "import {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ));
        let report = py
            .detach(|| {
                self.rt.block_on(tierdb_objects::import_filestorage(
                    &self.store,
                    &src,
                    &options,
                    &bar,
                ))
            })
            .map_err(to_py)?;
        bar.0.finish_and_clear();
        Ok((report.transactions, report.skipped, report.bytes_read))
    }
}

/// Reads and checks the whole FileStorage file `src` (call it before opening the
/// destination of an import, so that a damaged source creates nothing); returns its number
/// of transactions and raises TierError naming the damage.
#[pyfunction]
fn check_filestorage(py: Python<'_>, src: std::path::PathBuf) -> PyResult<u64> {
    let bar = ImportBar(progress_bar(
        "check {bar:40} {bytes}/{total_bytes} {bytes_per_sec}",
    ));
    let checked = py.detach(|| tierdb_objects::check_filestorage(&src, &bar));
    bar.0.finish_and_clear();
    checked.map_err(to_py)
}

/// The oids a ZODB data record refers to, read by tierdb's own pickle walker (what the
/// CLI's pack uses); raises TierError when the record cannot be read.
#[pyfunction]
fn references<'p>(py: Python<'p>, data: &[u8]) -> PyResult<Vec<Bound<'p, PyBytes>>> {
    let oids =
        tierdb_objects::pickle::references(data).map_err(|e| TierError::new_err(e.to_string()))?;
    Ok(oids.iter().map(|o| b(py, &o.to_bytes())).collect())
}

/// A progress bar on standard error (indicatif), for long Python-side work.
#[pyclass(module = "tierdb._native")]
struct Progress {
    bar: indicatif::ProgressBar,
}

#[pymethods]
impl Progress {
    #[new]
    #[pyo3(signature = (total, what))]
    fn new(total: u64, what: &str) -> PyResult<Self> {
        let bar = indicatif::ProgressBar::new(total);
        let style = indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{bar:40}} {{pos}}/{{len}} {{per_sec}} eta {{eta}} {{msg}}"
        ))
        .map_err(|e| TierError::new_err(e.to_string()))?;
        bar.set_style(style);
        Ok(Progress { bar })
    }

    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    fn message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Store>()?;
    m.add_class::<Progress>()?;
    m.add_function(wrap_pyfunction!(references, m)?)?;
    m.add_function(wrap_pyfunction!(check_filestorage, m)?)?;
    m.add("TierError", py.get_type::<TierError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("ReadConflictError", py.get_type::<ReadConflictError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("UndoError", py.get_type::<UndoError>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    Ok(())
}
