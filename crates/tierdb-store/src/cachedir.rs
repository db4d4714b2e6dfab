//! The cache directory on the fast device.
//!
//! ```text
//! <cache_dir>/
//!   LOCK        locked (flock) while a process uses the directory
//!   IDENTITY    which capacity store the directory caches: "tierdb-cache v1\ncapacity=<url>\n"
//!   wblog/      write-back log segments (dirty data: never deleted unless uploaded)
//!   blocks/     foyer's device cache files (clean data: may be dropped at any time)
//! ```
//!
//! A directory that caches another capacity store is taken over only if its write-back log
//! holds no unflushed data; its clean blocks are then dropped, since their keys (path and
//! e_tag) could collide with objects of the new store.

use std::fs::File;
use std::path::{Path as FsPath, PathBuf};

use crate::error::{Error, Result};
use crate::wblog;

const IDENTITY_HEADER: &str = "tierdb-cache v1";

/// A locked cache directory.
#[derive(Debug)]
pub(crate) struct CacheDir {
    pub root: PathBuf,
    /// Held (locked) from open until [`CacheDir::release`] or drop.
    lock: parking_lot::Mutex<Option<File>>,
}

impl CacheDir {
    pub fn wblog_dir(&self) -> PathBuf {
        self.root.join("wblog")
    }

    pub fn blocks_dir(&self) -> PathBuf {
        self.root.join("blocks")
    }

    /// Creates or opens `root` for the capacity store named `capacity_url`.
    pub fn open(root: &FsPath, capacity_url: &str) -> Result<Self> {
        let dir = Self::lock(root)?;
        dir.claim(capacity_url)?;
        Ok(dir)
    }

    /// Creates or opens `root` and takes its lock, without claiming it for a store (for
    /// maintenance such as [`crate::salvage_write_back_log`]).
    pub fn lock(root: &FsPath) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| {
            Error::io(
                "cannot create cache directory (check permissions or choose another --cache-dir)",
                root,
                e,
            )
        })?;
        let lock_path = root.join("LOCK");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io("cannot write in cache directory (check permissions or choose another --cache-dir)", &lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::CacheDirLocked {
                    dir: root.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io("cannot lock", &lock_path, e));
            }
        }
        Ok(Self {
            root: root.to_path_buf(),
            lock: parking_lot::Mutex::new(Some(lock)),
        })
    }

    /// Unlocks the directory (at close), so another store in this or another process may
    /// open it.
    pub fn release(&self) {
        self.lock.lock().take();
    }

    fn claim(&self, capacity_url: &str) -> Result<()> {
        let identity_path = self.root.join("IDENTITY");
        let wanted = format!("{IDENTITY_HEADER}\ncapacity={capacity_url}\n");
        match std::fs::read_to_string(&identity_path) {
            Ok(text) if text == wanted => return Ok(()),
            Ok(text) => {
                let owner = text
                    .lines()
                    .find_map(|l| l.strip_prefix("capacity="))
                    .unwrap_or("an unknown store")
                    .to_string();
                let dirty_bytes = wblog::recovery::dirty_bytes(&self.wblog_dir())?;
                if dirty_bytes > 0 {
                    return Err(Error::CacheDirOwnedByOther {
                        dir: self.root.clone(),
                        owner,
                        requested: capacity_url.to_string(),
                        dirty_bytes,
                    });
                }
                tracing::info!(dir = %self.root.display(), %owner, "cache directory changes owner; dropping its clean blocks");
                let blocks = self.blocks_dir();
                if blocks.exists() {
                    std::fs::remove_dir_all(&blocks)
                        .map_err(|e| Error::io("cannot clear", &blocks, e))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A directory without identity may still hold a log from a crash between
                // creating the log and writing IDENTITY (impossible in this order) or files a
                // person put there; either way refuse to adopt unflushed data blindly.
                let dirty_bytes = wblog::recovery::dirty_bytes(&self.wblog_dir())?;
                if dirty_bytes > 0 {
                    return Err(Error::CacheDirOwnedByOther {
                        dir: self.root.clone(),
                        owner: "an unknown store (IDENTITY is missing)".into(),
                        requested: capacity_url.to_string(),
                        dirty_bytes,
                    });
                }
            }
            Err(e) => return Err(Error::io("cannot read", &identity_path, e)),
        }
        let tmp = self.root.join("IDENTITY.tmp");
        std::fs::write(&tmp, wanted).map_err(|e| Error::io("cannot write", &tmp, e))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io("cannot fsync", &tmp, e))?;
        std::fs::rename(&tmp, &identity_path)
            .map_err(|e| Error::io("cannot write", &identity_path, e))?;
        File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("cannot fsync", &self.root, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_cache_dir_is_exclusive_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let a = CacheDir::open(dir.path(), "memory://a").unwrap();
        assert!(matches!(
            CacheDir::open(dir.path(), "memory://a"),
            Err(Error::CacheDirLocked { .. })
        ));
        a.release();
        let _b = CacheDir::open(dir.path(), "memory://a").unwrap();
    }
}
