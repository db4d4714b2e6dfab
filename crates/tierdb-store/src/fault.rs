//! [`FaultStore`]: wraps any `ObjectStore` and injects errors, latency and stalls, for tests.
//!
//! Errors come in two kinds, because callers must survive both: an error *before* the
//! request (nothing happened) and an error *after* it (the request took effect but the
//! caller is told it failed, as with a lost response). Faults are drawn from a seeded RNG
//! so a failing test can be replayed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What to inject. Probabilities are per request, in 0.0..=1.0.
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Fail before forwarding the request.
    pub error_before: f64,
    /// Forward the request, then fail anyway (only for writes, where it matters).
    pub error_after: f64,
    /// Added to every request.
    pub latency: Duration,
    /// Probability of a stall, and its length.
    pub stall: f64,
    pub stall_duration: Duration,
}

/// A fault-injecting wrapper around an object store.
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    config: Mutex<FaultConfig>,
    rng: Mutex<StdRng>,
}

impl fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore")
            .field("config", &*self.config.lock())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("injected fault ({0})")]
pub struct InjectedFault(&'static str);

fn injected(when: &'static str) -> object_store::Error {
    object_store::Error::Generic {
        store: "fault",
        source: Box::new(InjectedFault(when)),
    }
}

impl FaultStore {
    pub fn new(inner: Arc<dyn ObjectStore>, config: FaultConfig, seed: u64) -> Self {
        Self {
            inner,
            config: Mutex::new(config),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// Replaces the fault configuration (for example to heal the store).
    pub fn set_config(&self, config: FaultConfig) {
        *self.config.lock() = config;
    }

    /// Draws this request's fate: (delay, fail before, fail after).
    fn draw(&self) -> (Duration, bool, bool) {
        let config = self.config.lock().clone();
        let mut rng = self.rng.lock();
        let mut delay = config.latency;
        if config.stall > 0.0 && rng.random_bool(config.stall.clamp(0.0, 1.0)) {
            delay += config.stall_duration;
        }
        let before =
            config.error_before > 0.0 && rng.random_bool(config.error_before.clamp(0.0, 1.0));
        let after = config.error_after > 0.0 && rng.random_bool(config.error_after.clamp(0.0, 1.0));
        (delay, before, after)
    }

    async fn enter(&self) -> object_store::Result<bool> {
        let (delay, before, after) = self.draw();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if before {
            return Err(injected("before the request"));
        }
        Ok(after)
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fail_after = self.enter().await?;
        let result = self.inner.put_opts(location, payload, opts).await?;
        if fail_after {
            return Err(injected("after the put took effect"));
        }
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.enter().await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.enter().await?;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        // Decide each delete's fate as it passes through.
        let fates: Vec<_> = (0..64).map(|_| self.draw()).collect();
        let inner = self.inner.clone();
        locations
            .enumerate()
            .then(move |(n, path)| {
                let (delay, before, after) = fates[n % fates.len()];
                let inner = inner.clone();
                async move {
                    let path = path?;
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if before {
                        return Err(injected("before the delete"));
                    }
                    match inner.delete(&path).await {
                        Ok(()) if after => Err(injected("after the delete took effect")),
                        Ok(()) => Ok(path),
                        Err(e) => Err(e),
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (_, before, _) = self.draw();
        if before {
            return futures::stream::once(async { Err(injected("before the list")) }).boxed();
        }
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.enter().await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let fail_after = self.enter().await?;
        self.inner.copy_opts(from, to, options).await?;
        if fail_after {
            return Err(injected("after the copy took effect"));
        }
        Ok(())
    }
}
