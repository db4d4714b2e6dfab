//! The local-directory capacity store: object_store's `LocalFileSystem`, plus the one
//! operation it lacks, a conditional overwrite (`PutMode::Update`, S3's `If-Match`).
//!
//! SlateDB's garbage collector advances a *boundary* object with a conditional overwrite
//! before it deletes manifests and compaction-state files: a writer that was suspended
//! across a collection then cannot recreate a deleted file and believe its stale update
//! succeeded. `LocalFileSystem` answers `NotImplemented` to that put, so on the embedded
//! default nothing in those directories was ever deleted (issue 26, item 7). No crate offers
//! the missing piece for a plain directory shared by processes, so it is written here; it is
//! small:
//!
//! 1. An update holds an exclusive `flock` on the object's parent directory from the moment
//!    it reads the object's current ETag until its new version is in place. Two updaters of
//!    one directory, in this process or another on the machine, are therefore serialized,
//!    and the second sees the first's ETag, which no longer matches: `Precondition`.
//! 2. The new version is written as `LocalFileSystem` writes every put (a temporary file
//!    renamed over the object), so a reader sees the old or the new bytes, never a mix.
//! 3. An update of a missing object fails with `Precondition`, as S3 and object_store's
//!    `InMemory` answer it.
//! 4. ETags are `LocalFileSystem`'s (inode, modification time in microseconds, size): the
//!    new version is a new file created while the old one still exists, so its inode differs.
//!
//! Every other operation is `LocalFileSystem`'s own. Unconditional puts and creates do not
//! take the lock: neither compares versions, so there is nothing for them to race.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, UpdateVersion,
};

use crate::STORE_NAME;

/// A local directory as an object store with conditional overwrites.
#[derive(Debug)]
pub struct LocalDirStore {
    root: PathBuf,
    fs: Arc<LocalFileSystem>,
}

impl LocalDirStore {
    /// `fs` must be rooted at `root`.
    pub fn new(root: PathBuf, fs: LocalFileSystem) -> Self {
        LocalDirStore {
            root,
            fs: Arc::new(fs),
        }
    }

    /// The directory holding `location` (which exists whenever the object does).
    fn parent_dir(&self, location: &Path) -> PathBuf {
        let mut dir = self.root.clone();
        let parts: Vec<_> = location.parts().collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            dir.push(part.as_ref());
        }
        dir
    }

    async fn update(
        &self,
        location: &Path,
        payload: PutPayload,
        expected: UpdateVersion,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let Some(expected_tag) = expected.e_tag else {
            return Err(object_store::Error::Generic {
                store: STORE_NAME,
                source: format!("conditional update of {location} without an ETag").into(),
            });
        };
        let precondition = |reason: String| object_store::Error::Precondition {
            path: location.to_string(),
            source: reason.into(),
        };
        let dir = self.parent_dir(location);
        let lock = match tokio::task::spawn_blocking(move || lock_dir(&dir)).await {
            Ok(Ok(lock)) => lock,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(precondition(format!("{location} does not exist")));
            }
            Ok(Err(e)) => {
                return Err(object_store::Error::Generic {
                    store: STORE_NAME,
                    source: format!("cannot lock the directory of {location}: {e}").into(),
                });
            }
            Err(join) => {
                return Err(object_store::Error::JoinError { source: join });
            }
        };
        let current = match self.fs.head(location).await {
            Ok(meta) => meta.e_tag,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(precondition(format!("{location} does not exist")));
            }
            Err(e) => return Err(e),
        };
        if current.as_deref() != Some(expected_tag.as_str()) {
            return Err(precondition(format!(
                "{location} is at version {} rather than {expected_tag}",
                current.as_deref().unwrap_or("(none)")
            )));
        }
        let overwrite = PutOptions {
            mode: PutMode::Overwrite,
            ..opts
        };
        let result = self.fs.put_opts(location, payload, overwrite).await;
        drop(lock); // invariant 1: held until the new version is in place
        result
    }
}

/// Takes an exclusive lock on a directory (blocking until it is free). Dropping the
/// returned handle releases it.
fn lock_dir(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    let handle = std::fs::File::open(dir)?;
    handle.lock()?;
    Ok(handle)
}

impl fmt::Display for LocalDirStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalDir({})", self.root.display())
    }
}

#[async_trait]
impl ObjectStore for LocalDirStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match &opts.mode {
            PutMode::Update(expected) => {
                let expected = expected.clone();
                self.update(location, payload, expected, opts).await
            }
            _ => self.fs.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.fs.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.fs.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.fs.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.fs.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.fs.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.fs.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.fs.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use object_store::ObjectStoreExt;

    fn store(dir: &std::path::Path) -> LocalDirStore {
        LocalDirStore::new(
            dir.to_path_buf(),
            LocalFileSystem::new_with_prefix(dir).unwrap(),
        )
    }

    fn update(tag: Option<String>) -> PutOptions {
        PutOptions::from(PutMode::Update(UpdateVersion {
            e_tag: tag,
            version: None,
        }))
    }

    #[tokio::test]
    async fn an_update_replaces_the_version_it_names_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let p = Path::from("manifest/boundary");
        let first = s
            .put_opts(&p, "1".into(), PutMode::Create.into())
            .await
            .unwrap();
        let second = s
            .put_opts(&p, "2".into(), update(first.e_tag.clone()))
            .await
            .unwrap();
        assert_ne!(first.e_tag, second.e_tag);
        // The first version is gone: updating it again is a precondition failure, and the
        // object keeps the second version.
        let stale = s.put_opts(&p, "3".into(), update(first.e_tag)).await;
        assert!(
            matches!(stale, Err(object_store::Error::Precondition { .. })),
            "{stale:?}"
        );
        let got = s.get(&p).await.unwrap();
        assert_eq!(got.meta.e_tag, second.e_tag);
        assert_eq!(got.bytes().await.unwrap().as_ref(), b"2");
    }

    #[tokio::test]
    async fn an_update_of_a_missing_object_is_a_precondition_failure() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        for p in ["absent", "no/such/dir/absent"] {
            let r = s
                .put_opts(&Path::from(p), "x".into(), update(Some("\"1-2-3\"".into())))
                .await;
            assert!(
                matches!(r, Err(object_store::Error::Precondition { .. })),
                "{p}: {r:?}"
            );
        }
        let r = s.put_opts(&Path::from("x"), "x".into(), update(None)).await;
        assert!(r.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_updates_from_one_version_let_exactly_one_through() {
        let dir = tempfile::tempdir().unwrap();
        // Separate store handles, as separate processes would have: only the directory
        // lock orders them.
        let p = Path::from("compactions/boundary");
        let base = store(dir.path())
            .put_opts(&p, "0".into(), PutMode::Create.into())
            .await
            .unwrap()
            .e_tag;
        let mut tasks = Vec::new();
        for i in 0..16 {
            let s = store(dir.path());
            let (p, tag) = (p.clone(), base.clone());
            tasks.push(tokio::spawn(async move {
                s.put_opts(&p, format!("{i}").into(), update(tag)).await
            }));
        }
        let mut won = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => won += 1,
                Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(won, 1);
    }
}
