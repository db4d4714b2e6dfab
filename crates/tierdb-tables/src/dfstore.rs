//! The tiered store (object_store 0.14, SlateDB's version) seen through object_store 0.13's
//! trait, which DataFusion 55 reads Parquet through.
//!
//! Reads (`get_opts`, `get_ranges`, listing) are forwarded one to one, so every segment read
//! goes through the DRAM and device tiers. It also counts what DataFusion asked for (requests
//! and bytes): the "bytes read" figures of a query. Segments are written with the 0.14 API
//! directly (see `segment.rs`), so multipart uploads are not offered here.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store as os14;
use object_store_df as os13;
use os13::path::Path as Path13;
use os14::ObjectStoreExt as _;
use os14::path::Path as Path14;

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

#[derive(Debug, Clone)]
pub struct DfStore {
    inner: Arc<dyn os14::ObjectStore>,
    counters: Arc<ReadCounters>,
}

impl DfStore {
    pub fn new(inner: Arc<dyn os14::ObjectStore>) -> Self {
        DfStore {
            inner,
            counters: Arc::new(ReadCounters::default()),
        }
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

fn range14(r: os13::GetRange) -> os14::GetRange {
    match r {
        os13::GetRange::Bounded(r) => os14::GetRange::Bounded(r),
        os13::GetRange::Offset(o) => os14::GetRange::Offset(o),
        os13::GetRange::Suffix(n) => os14::GetRange::Suffix(n),
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
        let opts = os14::GetOptions {
            if_match: options.if_match,
            if_none_match: options.if_none_match,
            if_modified_since: options.if_modified_since,
            if_unmodified_since: options.if_unmodified_since,
            range: options.range.map(range14),
            version: options.version,
            head: options.head,
            ..Default::default()
        };
        let r = self
            .inner
            .get_opts(&path14(location), opts)
            .await
            .map_err(err13)?;
        let range = r.range.clone();
        let meta = meta13(r.meta.clone());
        let counters = self.counters.clone();
        if !options.head {
            self.count(1, 0);
        }
        let stream = r
            .into_stream()
            .map_err(err13)
            .inspect_ok(move |b| {
                counters.bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
            })
            .boxed();
        Ok(os13::GetResult {
            payload: os13::GetResultPayload::Stream(stream),
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
        let out = self
            .inner
            .get_ranges(&path14(location), ranges)
            .await
            .map_err(err13)?;
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
        let p = Path13::from("t/a");
        assert_eq!(s.get_range(&p, 6..11).await.unwrap().as_ref(), b"world");
        assert_eq!(s.head(&p).await.unwrap().size, 11);
        let parts = s.get_ranges(&p, &[0..1, 2..4]).await.unwrap();
        assert_eq!(parts.len(), 2);
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
}
