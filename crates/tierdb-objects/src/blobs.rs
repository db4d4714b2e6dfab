//! ZODB blobs as objects in the object store, one per distinct content (blake3 hash) under
//! `<db>/blobs/`. Revisions name their blob by hash ([`crate::records::Revision::blob`]), so
//! undo and restore copy a hash, never bytes, and pack deletes the blobs no revision names.
//!
//! Writes go through the [`TieredStore`] like every other object: durable in the capacity
//! store (write-through) or in the device log (write-back) when `put` returns. Blobs larger
//! than [`SINGLE_PUT_MAX`] are uploaded in parts straight to the capacity store.

use std::path::Path as FsPath;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tierdb_store::TieredStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::ErrorKind;
use crate::records::{self, Hash};

/// Why a blob operation failed, with what the caller should do about it.
#[derive(Debug)]
pub(crate) struct BlobFailure {
    pub kind: ErrorKind,
    pub reason: String,
}

type BlobResult<T> = Result<T, BlobFailure>;

fn fail(kind: ErrorKind, reason: String) -> BlobFailure {
    BlobFailure { kind, reason }
}

/// A local file the caller named could not be read (or written).
fn local(what: &str, file: &FsPath, e: std::io::Error) -> BlobFailure {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => ErrorKind::Input,
        _ => ErrorKind::Retry,
    };
    fail(kind, format!("cannot {what} {}: {e}", file.display()))
}

/// The object store refused or failed a request about `path`.
fn remote(what: &str, path: &Path, e: object_store::Error) -> BlobFailure {
    let kind = match e {
        // A blob a revision names is gone: the database is damaged.
        object_store::Error::NotFound { .. } => ErrorKind::Data,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => ErrorKind::Input,
        _ => ErrorKind::Retry,
    };
    fail(kind, format!("cannot {what} {path}: {e}"))
}

/// Blobs up to this size are written with one put; larger ones in parts.
pub const SINGLE_PUT_MAX: u64 = 16 << 20;
const PART_BYTES: usize = 8 << 20;

#[derive(Debug, Clone)]
pub(crate) struct Blobs {
    store: TieredStore,
    root: String,
}

fn hash_file(file: &FsPath) -> std::io::Result<(Hash, u64)> {
    let mut hasher = blake3::Hasher::new();
    let f = std::fs::File::open(file)?;
    hasher.update_reader(f)?;
    let len = std::fs::metadata(file)?.len();
    Ok((*hasher.finalize().as_bytes(), len))
}

impl Blobs {
    pub(crate) fn new(store: TieredStore, root: &str) -> Self {
        Blobs {
            store,
            root: root.trim_end_matches('/').to_string(),
        }
    }

    fn path(&self, h: &Hash) -> Path {
        Path::from(records::blob_path(&self.root, h))
    }

    /// Stores the file's content (unless a blob with the same content is stored already)
    /// and returns its hash. The file is left in place.
    pub(crate) async fn upload(&self, file: &FsPath) -> BlobResult<Hash> {
        let owned = file.to_path_buf();
        let (h, len) = tokio::task::spawn_blocking(move || hash_file(&owned))
            .await
            .map_err(|e| fail(ErrorKind::Bug, format!("hashing task failed: {e}")))?
            .map_err(|e| local("read", file, e))?;
        let path = self.path(&h);
        match self.store.head(&path).await {
            Ok(meta) if meta.size == len => return Ok(h),
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(remote("check", &path, e)),
        }
        let mut f = tokio::fs::File::open(file)
            .await
            .map_err(|e| local("read", file, e))?;
        if len <= SINGLE_PUT_MAX {
            let mut buf = Vec::with_capacity(len as usize);
            f.read_to_end(&mut buf)
                .await
                .map_err(|e| local("read", file, e))?;
            if *blake3::hash(&buf).as_bytes() != h {
                return Err(fail(
                    ErrorKind::Input,
                    format!("{} changed while it was stored", file.display()),
                ));
            }
            self.store
                .put(&path, PutPayload::from(Bytes::from(buf)))
                .await
                .map_err(|e| remote("store", &path, e))?;
        } else {
            let upload = self
                .store
                .put_multipart(&path)
                .await
                .map_err(|e| remote("start the upload of", &path, e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = match f.read(&mut buf).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = w.abort().await;
                        return Err(local("read", file, e));
                    }
                };
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                w.wait_for_capacity(4)
                    .await
                    .map_err(|e| remote("upload", &path, e))?;
                w.write(&buf[..n]);
            }
            if *hasher.finalize().as_bytes() != h {
                let _ = w.abort().await;
                return Err(fail(
                    ErrorKind::Input,
                    format!("{} changed while it was stored", file.display()),
                ));
            }
            w.finish().await.map_err(|e| remote("upload", &path, e))?;
        }
        Ok(h)
    }

    /// Writes blob `h` to `dest` (through a temporary file beside it, renamed when the
    /// content has been checked against its hash).
    pub(crate) async fn download(&self, h: &Hash, dest: &FsPath) -> BlobResult<()> {
        let path = self.path(h);
        let got = self
            .store
            .get(&path)
            .await
            .map_err(|e| remote("read", &path, e))?;
        let tmp = dest.with_extension(format!("part-{}", std::process::id()));
        let mut out = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| local("create", &tmp, e))?;
        let mut hasher = blake3::Hasher::new();
        let mut stream = got.into_stream();
        let result: BlobResult<()> = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| remote("read", &path, e))?;
                hasher.update(&chunk);
                out.write_all(&chunk)
                    .await
                    .map_err(|e| local("write", &tmp, e))?;
            }
            out.flush().await.map_err(|e| local("write", &tmp, e))?;
            if *hasher.finalize().as_bytes() != *h {
                return Err(fail(
                    ErrorKind::Data,
                    format!("{path} does not match its hash (damaged)"),
                ));
            }
            tokio::fs::rename(&tmp, dest)
                .await
                .map_err(|e| local("rename to", dest, e))
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// Every stored blob's hash.
    pub(crate) async fn list(&self) -> BlobResult<Vec<Hash>> {
        let prefix = Path::from(format!("{}/blobs", self.root));
        let mut out = Vec::new();
        let mut listing = self.store.list(Some(&prefix));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| remote("list", &prefix, e))?;
            if let Some(h) = meta.location.filename().and_then(records::parse_blob_name) {
                out.push(h);
            }
        }
        Ok(out)
    }

    /// Ok when blob `h` is stored; otherwise why not.
    pub(crate) async fn exists(&self, h: &Hash) -> BlobResult<()> {
        let path = self.path(h);
        match self.store.head(&path).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => {
                Err(fail(ErrorKind::Data, format!("{path} is missing")))
            }
            Err(e) => Err(remote("check", &path, e)),
        }
    }

    /// The size of blob `h`.
    pub(crate) async fn size(&self, h: &Hash) -> BlobResult<u64> {
        let path = self.path(h);
        match self.store.head(&path).await {
            Ok(meta) => Ok(meta.size),
            Err(e) => Err(remote("check", &path, e)),
        }
    }

    pub(crate) async fn delete(&self, h: &Hash) -> BlobResult<()> {
        let path = self.path(h);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(remote("delete", &path, e)),
        }
    }
}
