//! The tiered store (object_store 0.14, SlateDB's version) seen through object_store 0.13's
//! trait, which DataFusion 55 reads Parquet through.
//!
//! Reads (`get_opts`, `get_ranges`, listing) are forwarded one to one, so every segment read
//! goes through the DRAM and device tiers. It also counts what DataFusion asked for (requests
//! and bytes): the "bytes read" figures of a query. Segments are written with the 0.14 API
//! directly (see `segment.rs`), so multipart uploads are not offered here.
//!
//! Every segment read is verified: the table provider registers each segment's block
//! checksums (from its catalog entry) before DataFusion reads it, and a read is widened to
//! whole blocks, checked, and cut back to what was asked (see `checksum.rs`). A read of an
//! object with no registered checksums is refused, so nothing reaches a query unverified.
//! A worker process (`distributed.rs`) runs plans another process made: it has registered
//! nothing, so its adapter is given a [`ChecksumSource`] that looks a segment up in the
//! catalog by its path the first time it is read.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::collections::HashMap;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store as os14;
use object_store_df as os13;
use os13::path::Path as Path13;
use os14::ObjectStoreExt as _;
use os14::path::Path as Path14;
use parking_lot::RwLock;

use crate::checksum::BlockSums;
use crate::readahead::{ReadAhead, ReadAheadMode};

/// What DataFusion read through the adapter.
#[derive(Debug, Default)]
pub struct ReadCounters {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
}

impl ReadCounters {
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Where a process that did not plan a query finds a segment's checksums: the catalog.
#[async_trait::async_trait]
pub trait ChecksumSource: Send + Sync + fmt::Debug {
    /// The checksums of the committed segment at `path`, or why there are none.
    async fn checksums(&self, path: &str) -> Result<BlockSums, String>;
}

#[derive(Debug, Clone)]
pub struct DfStore {
    inner: Arc<dyn os14::ObjectStore>,
    counters: Arc<ReadCounters>,
    /// Block checksums of the segments a query may read, by path.
    checksums: Arc<RwLock<HashMap<String, Arc<BlockSums>>>>,
    /// Asked for the checksums of a segment nobody registered (worker processes only).
    source: Option<Arc<dyn ChecksumSource>>,
    readahead: Arc<ReadAhead>,
}

impl DfStore {
    pub fn new(inner: Arc<dyn os14::ObjectStore>) -> Self {
        DfStore {
            inner,
            counters: Arc::new(ReadCounters::default()),
            checksums: Arc::default(),
            source: None,
            readahead: Arc::default(),
        }
    }

    /// The same store (same counters, same read-ahead), asking `source` for the checksums
    /// of segments nobody registered instead of refusing to read them.
    pub fn with_checksum_source(&self, source: Arc<dyn ChecksumSource>) -> Self {
        DfStore {
            source: Some(source),
            ..self.clone()
        }
    }

    /// Makes the segment at `path` readable, checked against `sums`.
    pub fn register_checksums(&self, path: &str, sums: &BlockSums) {
        if self.checksums.read().contains_key(path) {
            return;
        }
        self.checksums
            .write()
            .insert(path.to_string(), Arc::new(sums.clone()));
    }

    /// Forgets the checksums of deleted segments.
    pub fn forget_checksums(&self, paths: &[&str]) {
        let mut map = self.checksums.write();
        for p in paths {
            map.remove(*p);
        }
    }

    async fn sums(&self, location: &Path14) -> os14::Result<Arc<BlockSums>> {
        if let Some(s) = self.checksums.read().get(location.as_ref()) {
            return Ok(s.clone());
        }
        let Some(source) = &self.source else {
            return Err(damaged(
                location,
                "no checksums are recorded for it, so it cannot be read verified".into(),
            ));
        };
        let sums = source
            .checksums(location.as_ref())
            .await
            .map_err(|reason| os14::Error::Generic {
                store: tierdb_store::STORE_NAME,
                source: format!("segment {location}: {reason}").into(),
            })?;
        self.register_checksums(location.as_ref(), &sums);
        Ok(Arc::new(sums))
    }

    /// Reads `ranges` of `location` widened to whole blocks, verifies every block and
    /// returns exactly the bytes asked for.
    async fn read_verified(
        &self,
        location: &Path14,
        ranges: &[Range<u64>],
    ) -> os14::Result<Vec<Bytes>> {
        let sums = self.sums(location).await?;
        let aligned = ranges
            .iter()
            .map(|r| sums.aligned(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|tierdb_store::Damage(reason)| damaged(location, reason))?;
        let blocks = self.inner.get_ranges(location, &aligned).await?;
        let mut out = Vec::with_capacity(ranges.len());
        for ((want, got), blocks) in ranges.iter().zip(&aligned).zip(blocks) {
            sums.verify(got.start, &blocks)
                .map_err(|tierdb_store::Damage(reason)| damaged(location, reason))?;
            let from = (want.start - got.start) as usize;
            out.push(blocks.slice(from..from + (want.end - want.start) as usize));
        }
        Ok(out)
    }

    /// Fetches ahead of a sequential scan of a segment (see [`crate::readahead`]), in the
    /// background: the read of `ranges` does not wait for it. At a segment's last row group
    /// that includes the start of the next segment of the scan (its footer, then the same
    /// columns of its first row group).
    fn read_ahead(&self, location: &Path14, file_bytes: u64, ranges: &[Range<u64>]) {
        if self.readahead.mode() == ReadAheadMode::Off {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, readahead) = (self.inner.clone(), self.readahead.clone());
        let (location, ranges) = (location.clone(), ranges.to_vec());
        runtime.spawn(async move {
            let Some(layout) = readahead.layout(&inner, &location, file_bytes).await else {
                return;
            };
            let (ahead, across) = readahead.plan_next(location.as_ref(), &layout, &ranges);
            let within = async {
                if !ahead.is_empty()
                    && let Err(e) = inner.get_ranges(&location, &ahead).await
                {
                    tracing::debug!(segment = %location, error = %e, "read-ahead failed");
                }
            };
            let next = async {
                let Some(across) = across else { return };
                let path = Path14::from(across.next.path.as_str());
                let Some(next) = readahead.layout(&inner, &path, across.next.bytes).await else {
                    return;
                };
                let ahead = readahead.plan_across(path.as_ref(), &next, &across.columns);
                if !ahead.is_empty()
                    && let Err(e) = inner.get_ranges(&path, &ahead).await
                {
                    tracing::debug!(segment = %path, error = %e, "read-ahead failed");
                }
            };
            futures::join!(within, next);
        });
    }

    /// Sets how far segment scans read ahead (see [`crate::readahead`]).
    pub fn set_read_ahead(&self, mode: ReadAheadMode) {
        self.readahead.set_mode(mode);
    }

    /// Records the order in which one partition of a scan reads its segments (path,
    /// bytes), for read-ahead across segments.
    pub fn follow(&self, segments: &[(String, u64)]) {
        self.readahead.follow(segments);
    }

    pub fn counters(&self) -> &Arc<ReadCounters> {
        &self.counters
    }

    fn count(&self, requests: u64, bytes: u64) {
        self.counters
            .requests
            .fetch_add(requests, Ordering::Relaxed);
        self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl fmt::Display for DfStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DfStore({})", self.inner)
    }
}

fn path14(p: &Path13) -> Path14 {
    Path14::from(p.as_ref())
}

fn path13(p: &Path14) -> Path13 {
    Path13::from(p.as_ref())
}

fn meta13(m: os14::ObjectMeta) -> os13::ObjectMeta {
    os13::ObjectMeta {
        location: path13(&m.location),
        last_modified: m.last_modified,
        size: m.size,
        e_tag: m.e_tag,
        version: m.version,
    }
}

/// Maps a 0.14 error to the 0.13 variant DataFusion inspects (NotFound above all).
fn err13(e: os14::Error) -> os13::Error {
    match e {
        os14::Error::NotFound { path, source } => os13::Error::NotFound { path, source },
        os14::Error::AlreadyExists { path, source } => os13::Error::AlreadyExists { path, source },
        os14::Error::Precondition { path, source } => os13::Error::Precondition { path, source },
        os14::Error::NotModified { path, source } => os13::Error::NotModified { path, source },
        other => os13::Error::Generic {
            store: "tierdb",
            source: Box::new(other),
        },
    }
}

fn damaged(location: &Path14, reason: String) -> os14::Error {
    os14::Error::Generic {
        store: tierdb_store::STORE_NAME,
        source: Box::new(tierdb_store::Error::ChecksumMismatch {
            object: location.to_string(),
            reason,
        }),
    }
}

fn not_supported(what: &str) -> os13::Error {
    os13::Error::NotSupported {
        source: format!("{what} through the SQL engine's store adapter").into(),
    }
}

#[async_trait::async_trait]
impl os13::ObjectStore for DfStore {
    async fn put_opts(
        &self,
        location: &Path13,
        payload: os13::PutPayload,
        opts: os13::PutOptions,
    ) -> os13::Result<os13::PutResult> {
        let mode = match opts.mode {
            os13::PutMode::Overwrite => os14::PutMode::Overwrite,
            os13::PutMode::Create => os14::PutMode::Create,
            os13::PutMode::Update(_) => return Err(not_supported("conditional updates")),
        };
        let bytes: Vec<Bytes> = payload.into_iter().collect();
        let r = self
            .inner
            .put_opts(
                &path14(location),
                os14::PutPayload::from_iter(bytes),
                os14::PutOptions {
                    mode,
                    ..Default::default()
                },
            )
            .await
            .map_err(err13)?;
        Ok(os13::PutResult {
            e_tag: r.e_tag,
            version: r.version,
        })
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path13,
        _opts: os13::PutMultipartOptions,
    ) -> os13::Result<Box<dyn os13::MultipartUpload>> {
        Err(not_supported("multipart uploads"))
    }

    async fn get_opts(
        &self,
        location: &Path13,
        options: os13::GetOptions,
    ) -> os13::Result<os13::GetResult> {
        let location = path14(location);
        if options.head {
            let opts = os14::GetOptions {
                head: true,
                ..Default::default()
            };
            let r = self.inner.get_opts(&location, opts).await.map_err(err13)?;
            let sums = self.sums(&location).await.map_err(err13)?;
            if r.meta.size != sums.object_bytes {
                return Err(err13(damaged(
                    &location,
                    format!(
                        "it has {} bytes, {} were written",
                        r.meta.size, sums.object_bytes
                    ),
                )));
            }
            return Ok(os13::GetResult {
                range: 0..r.meta.size,
                meta: meta13(r.meta),
                payload: os13::GetResultPayload::Stream(futures::stream::empty().boxed()),
                attributes: Default::default(),
            });
        }
        if options.if_match.is_some()
            || options.if_none_match.is_some()
            || options.if_modified_since.is_some()
            || options.if_unmodified_since.is_some()
            || options.version.is_some()
        {
            return Err(not_supported("conditional reads of segments"));
        }
        let sums = self.sums(&location).await.map_err(err13)?;
        let len = sums.object_bytes;
        let range = match options.range {
            None => 0..len,
            Some(os13::GetRange::Bounded(r)) => r.start..r.end.min(len),
            Some(os13::GetRange::Offset(o)) => o..len,
            Some(os13::GetRange::Suffix(n)) => len.saturating_sub(n)..len,
        };
        if range.start > range.end {
            return Err(os13::Error::Generic {
                store: "tierdb",
                source: format!("range {range:?} is outside the {len}-byte segment {location}")
                    .into(),
            });
        }
        let body = self
            .read_verified(&location, std::slice::from_ref(&range))
            .await
            .map_err(err13)?
            .pop()
            .unwrap_or_default();
        self.count(1, body.len() as u64);
        let meta = os13::ObjectMeta {
            location: path13(&location),
            last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            size: len,
            e_tag: None,
            version: None,
        };
        Ok(os13::GetResult {
            payload: os13::GetResultPayload::Stream(
                futures::stream::once(async move { Ok(body) }).boxed(),
            ),
            meta,
            range,
            attributes: Default::default(),
        })
    }

    async fn get_ranges(
        &self,
        location: &Path13,
        ranges: &[Range<u64>],
    ) -> os13::Result<Vec<Bytes>> {
        let location = path14(location);
        if let Ok(sums) = self.sums(&location).await {
            self.read_ahead(&location, sums.object_bytes, ranges);
        }
        let out = self.read_verified(&location, ranges).await.map_err(err13)?;
        self.count(
            ranges.len() as u64,
            out.iter().map(|b| b.len() as u64).sum(),
        );
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, os13::Result<Path13>>,
    ) -> BoxStream<'static, os13::Result<Path13>> {
        let inner = self.inner.clone();
        locations
            .and_then(move |p| {
                let inner = inner.clone();
                async move {
                    inner.delete(&path14(&p)).await.map_err(err13)?;
                    Ok(p)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path13>) -> BoxStream<'static, os13::Result<os13::ObjectMeta>> {
        let prefix = prefix.map(path14);
        self.inner
            .list(prefix.as_ref())
            .map_ok(meta13)
            .map_err(err13)
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path13>) -> os13::Result<os13::ListResult> {
        let prefix = prefix.map(path14);
        let r = self
            .inner
            .list_with_delimiter(prefix.as_ref())
            .await
            .map_err(err13)?;
        Ok(os13::ListResult {
            common_prefixes: r.common_prefixes.iter().map(path13).collect(),
            objects: r.objects.into_iter().map(meta13).collect(),
        })
    }

    async fn copy_opts(
        &self,
        from: &Path13,
        to: &Path13,
        options: os13::CopyOptions,
    ) -> os13::Result<()> {
        let (from, to) = (path14(from), path14(to));
        match options.mode {
            os13::CopyMode::Overwrite => self.inner.copy(&from, &to).await,
            os13::CopyMode::Create => self.inner.copy_if_not_exists(&from, &to).await,
        }
        .map_err(err13)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use os13::{ObjectStore as _, ObjectStoreExt as _};

    #[tokio::test]
    async fn reads_and_counts_through_the_adapter() {
        let inner = Arc::new(os14::memory::InMemory::new());
        inner
            .put(
                &Path14::from("t/a"),
                Bytes::from_static(b"hello world").into(),
            )
            .await
            .unwrap();
        let s = DfStore::new(inner);
        s.register_checksums("t/a", &BlockSums::of(b"hello world"));
        let p = Path13::from("t/a");
        assert_eq!(s.get_range(&p, 6..11).await.unwrap().as_ref(), b"world");
        assert_eq!(s.head(&p).await.unwrap().size, 11);
        let parts = s.get_ranges(&p, &[0..1, 2..4]).await.unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].as_ref(), b"ll");
        let listed: Vec<_> = s
            .list(Some(&Path13::from("t")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        let e = s.head(&Path13::from("t/missing")).await.unwrap_err();
        assert!(matches!(e, os13::Error::NotFound { .. }), "{e}");
        let (requests, bytes) = s.counters().snapshot();
        assert_eq!((requests, bytes), (3, 5 + 1 + 2));
    }

    /// A byte that changed after the checksums were taken fails every read that touches its
    /// block, naming the object; an unregistered object is not read at all.
    #[tokio::test]
    async fn a_changed_byte_is_an_error_never_data() {
        let inner = Arc::new(os14::memory::InMemory::new());
        let data: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
        let s = DfStore::new(inner.clone());
        s.register_checksums("t/seg", &BlockSums::of(&data));
        let mut bad = data.clone();
        bad[100_000] ^= 0x04;
        inner
            .put(&Path14::from("t/seg"), Bytes::from(bad).into())
            .await
            .unwrap();
        let p = Path13::from("t/seg");
        assert_eq!(
            s.get_range(&p, 0..1000).await.unwrap().as_ref(),
            &data[..1000],
            "an untouched block still reads"
        );
        for range in [99_999..100_001, 70_000..70_001, 0..150_000] {
            let err = s
                .get_range(&p, range.clone())
                .await
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("t/seg") && err.contains("is damaged"),
                "{range:?}: {err}"
            );
        }
        let err = s
            .get_ranges(&p, &[0..10, 120_000..120_010])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("65536..131072"), "{err}");
        inner
            .put(&Path14::from("t/other"), Bytes::from_static(b"x").into())
            .await
            .unwrap();
        let err = s
            .get_range(&Path13::from("t/other"), 0..1)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no checksums"), "{err}");
    }
}
