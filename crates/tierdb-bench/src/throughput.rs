//! `tierdb bench throughput`: how fast the capacity store itself serves large parallel
//! ranged GETs of a database's objects, with no tiers in between: the physical limit a cold
//! read through the tiers is compared with.

use std::sync::Arc;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::error::{BenchError, Result};

/// What to read.
#[derive(Debug, Clone)]
pub struct ThroughputConfig {
    /// Objects under this path are read, each whole, in ranged GETs of `piece_bytes`.
    pub prefix: Path,
    pub piece_bytes: u64,
    /// GETs in flight at once.
    pub concurrency: usize,
    /// Stop after this many bytes (all objects once if they hold less).
    pub bytes_max: u64,
}

/// What a run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThroughputReport {
    pub objects: usize,
    pub requests: u64,
    pub bytes: u64,
    pub seconds: f64,
}

impl ThroughputReport {
    pub fn mib_per_second(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.seconds.max(1e-9)
    }
}

/// Reads the objects under `config.prefix` from `store` as fast as it serves them.
pub async fn run(
    store: Arc<dyn ObjectStore>,
    config: &ThroughputConfig,
) -> Result<ThroughputReport> {
    let objects: Vec<_> = store
        .list(Some(&config.prefix))
        .try_collect()
        .await
        .map_err(|e| BenchError::from(format!("cannot list {}: {e}", config.prefix)))?;
    if objects.is_empty() {
        return Err(BenchError::input(format!(
            "no objects under {}: name a loaded database",
            config.prefix
        )));
    }
    let piece = config.piece_bytes.max(1);
    let mut pieces = Vec::new();
    let mut planned = 0u64;
    'plan: for o in &objects {
        let mut at = 0;
        while at < o.size {
            let end = (at + piece).min(o.size);
            pieces.push((o.location.clone(), at..end));
            planned += end - at;
            at = end;
            if planned >= config.bytes_max {
                break 'plan;
            }
        }
    }
    let requests = pieces.len() as u64;
    let started = Instant::now();
    let bytes: u64 = futures::stream::iter(pieces)
        .map(|(path, range)| {
            let store = store.clone();
            async move {
                store
                    .get_range(&path, range)
                    .await
                    .map(|b| b.len() as u64)
                    .map_err(|e| BenchError::from(format!("cannot read {path}: {e}")))
            }
        })
        .buffer_unordered(config.concurrency.max(1))
        .try_fold(0u64, |sum, n| async move { Ok(sum + n) })
        .await?;
    Ok(ThroughputReport {
        objects: objects.len(),
        requests,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}
