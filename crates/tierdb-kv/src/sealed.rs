//! Sealed objects: a checksum trailer on SlateDB's whole-object metadata.
//!
//! SlateDB checksums every block of its SSTs (and the WAL, which is SSTs) and verifies them on
//! read, but its manifest, compaction state and GC boundary objects carry no checksum of
//! their own: one flipped byte in a manifest made SlateDB 0.18 panic, hang or silently open
//! an older, smaller database. [`SealedStore`] sits between SlateDB and the tiered store and
//! seals exactly those objects (names ending in `.manifest`, `.compactions`, `.boundary`):
//!
//! ```text
//! offset   size  field
//!      0      N  the object's bytes, unchanged
//!      N      4  CRC-32 (IEEE) of bytes 0..N, little-endian
//!    N+4      8  N, little-endian
//!   N+12      4  magic "TSL1" (tierdb seal, version 1)
//! ```
//!
//! A read fetches the whole object, checks magic, length and CRC, and returns bytes 0..N;
//! anything else is [`tierdb_store::Error::ChecksumMismatch`] naming the object, wrapped so
//! that SlateDB does not retry it (the same bytes would come back). Sizes in listings and
//! metadata are reported without the trailer. Every other object passes through untouched.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use tierdb_store::Damage;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

const MAGIC: [u8; 4] = *b"TSL1";
/// Bytes of the trailer.
pub const TRAILER_BYTES: u64 = 16;
const SEALED_SUFFIXES: [&str; 3] = [".manifest", ".compactions", ".boundary"];

/// Whether objects at `path` are sealed.
pub fn is_sealed(path: &Path) -> bool {
    let name = path.as_ref();
    SEALED_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// `data` followed by its trailer.
pub fn seal(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + TRAILER_BYTES as usize);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&MAGIC);
    out.freeze()
}

/// The object's bytes without the trailer, if the trailer is intact and matches them.
pub fn unseal(sealed: &Bytes) -> Result<Bytes, Damage> {
    let len = sealed.len() as u64;
    if len < TRAILER_BYTES {
        return Err(format!("{len} bytes, too short for its checksum trailer").into());
    }
    let n = (len - TRAILER_BYTES) as usize;
    let trailer = &sealed[n..];
    if trailer[12..16] != MAGIC {
        return Err("no checksum trailer (bad magic)".into());
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&trailer[0..4]);
    let mut recorded = [0u8; 8];
    recorded.copy_from_slice(&trailer[4..12]);
    let recorded = u64::from_le_bytes(recorded);
    if recorded != n as u64 {
        return Err(format!("length {n} does not match the recorded {recorded}").into());
    }
    let data = sealed.slice(..n);
    let expected = u32::from_le_bytes(crc);
    let got = crc32fast::hash(&data);
    if got != expected {
        return Err(format!("CRC-32 {got:08x} does not match the recorded {expected:08x}").into());
    }
    Ok(data)
}

fn damaged(path: &Path, reason: String) -> object_store::Error {
    let err = tierdb_store::Error::ChecksumMismatch {
        object: path.to_string(),
        reason,
    };
    object_store::Error::Generic {
        store: tierdb_store::STORE_NAME,
        source: Box::new(slatedb_common::retry::NonRetryable(Box::new(err))),
    }
}

fn unsealed_meta(mut meta: ObjectMeta) -> ObjectMeta {
    if is_sealed(&meta.location) {
        meta.size = meta.size.saturating_sub(TRAILER_BYTES);
    }
    meta
}

/// The store SlateDB is given: seals its metadata objects, passes everything else through.
#[derive(Debug, Clone)]
pub struct SealedStore {
    inner: Arc<dyn ObjectStore>,
}

impl SealedStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        SealedStore { inner }
    }
}

/// The store to hand SlateDB for a database on `store`: every SlateDB entry point (writer,
/// reader, admin, clone) must use it, or sealed objects would be read unverified.
pub fn for_slatedb(store: &tierdb_store::TieredStore) -> Arc<dyn ObjectStore> {
    Arc::new(SealedStore::new(Arc::new(store.clone())))
}

impl fmt::Display for SealedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sealed({})", self.inner)
    }
}

fn slice_range(data: &Bytes, range: &GetRange) -> Result<Range<u64>, Damage> {
    let len = data.len() as u64;
    let r = match range {
        GetRange::Bounded(r) => r.start..r.end.min(len),
        GetRange::Offset(o) => *o..len,
        GetRange::Suffix(s) => len.saturating_sub(*s)..len,
    };
    if r.start > r.end || r.start > len {
        return Err(format!("range {range} is outside an object of {len} bytes").into());
    }
    Ok(r)
}

#[async_trait]
impl ObjectStore for SealedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if !is_sealed(location) {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let data: Bytes = payload.into();
        let sealed = seal(&data);
        self.inner
            .put_opts(location, PutPayload::from(sealed), opts)
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        if is_sealed(location) {
            return Err(object_store::Error::NotSupported {
                source: format!("{location} is sealed and must be written with one put").into(),
            });
        }
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if !is_sealed(location) {
            return self.inner.get_opts(location, options).await;
        }
        if options.head {
            let mut got = self.inner.get_opts(location, options).await?;
            got.meta = unsealed_meta(got.meta);
            got.range = 0..got.meta.size;
            return Ok(got);
        }
        let range = options.range.clone();
        let whole = GetOptions {
            range: None,
            ..options
        };
        let got = self.inner.get_opts(location, whole).await?;
        let meta = unsealed_meta(got.meta.clone());
        let attributes = got.attributes.clone();
        let extensions = got.extensions.clone();
        let sealed = got.bytes().await?;
        let data = unseal(&sealed).map_err(|Damage(reason)| damaged(location, reason))?;
        let r = match &range {
            Some(range) => {
                slice_range(&data, range).map_err(|reason| object_store::Error::Generic {
                    store: tierdb_store::STORE_NAME,
                    source: reason.into(),
                })?
            }
            None => 0..data.len() as u64,
        };
        let body = data.slice(r.start as usize..r.end as usize);
        Ok(GetResult {
            payload: GetResultPayload::Stream(
                futures::stream::once(async move { Ok(body) }).boxed(),
            ),
            meta,
            range: r,
            attributes,
            extensions,
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner
            .list(prefix)
            .map(|m| m.map(unsealed_meta))
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner
            .list_with_offset(prefix, offset)
            .map(|m| m.map(unsealed_meta))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let mut result = self.inner.list_with_delimiter(prefix).await?;
        result.objects = result.objects.into_iter().map(unsealed_meta).collect();
        Ok(result)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        if is_sealed(from) != is_sealed(to) {
            return Err(object_store::Error::NotSupported {
                source: format!("cannot copy between sealed and plain objects ({from} -> {to})")
                    .into(),
            });
        }
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn sealed_objects_round_trip_and_every_flipped_byte_is_an_error() {
        let inner = Arc::new(InMemory::new());
        let store = SealedStore::new(inner.clone());
        let path = Path::from("db/manifest/00000000000000000001.manifest");
        let data = Bytes::from_static(b"a manifest's flatbuffer bytes");
        store.put(&path, data.clone().into()).await.unwrap();
        assert_eq!(store.get(&path).await.unwrap().bytes().await.unwrap(), data);
        assert_eq!(store.head(&path).await.unwrap().size, data.len() as u64);
        assert_eq!(
            store.get_range(&path, 2..10).await.unwrap(),
            data.slice(2..10)
        );
        let raw = inner.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(raw.len() as u64, data.len() as u64 + TRAILER_BYTES);
        for i in 0..raw.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = raw.to_vec();
                bad[i] ^= bit;
                inner.put(&path, Bytes::from(bad).into()).await.unwrap();
                let err = store.get(&path).await.unwrap_err().to_string();
                assert!(
                    err.contains("is damaged") && err.contains(path.as_ref()),
                    "{err}"
                );
            }
        }
        // A truncated object and one without a trailer are damaged too.
        inner
            .put(&path, raw.slice(..raw.len() - 1).into())
            .await
            .unwrap();
        assert!(store.get(&path).await.is_err());
        inner.put(&path, data.clone().into()).await.unwrap();
        assert!(store.get(&path).await.is_err());
    }

    #[tokio::test]
    async fn other_objects_pass_through_unchanged() {
        let inner = Arc::new(InMemory::new());
        let store = SealedStore::new(inner.clone());
        let path = Path::from("db/wal/00000000000000000001.sst");
        store
            .put(&path, Bytes::from_static(b"sst").into())
            .await
            .unwrap();
        assert_eq!(
            inner.get(&path).await.unwrap().bytes().await.unwrap(),
            Bytes::from_static(b"sst")
        );
    }
}
