//! Queries spread over worker processes, with `datafusion-distributed`.
//!
//! tierdb writes no scheduler and runs no cluster service. A process that plans queries (the
//! coordinator: `tierdb sql` or `tierdb serve` given `--workers`) plans as always and then
//! lets datafusion-distributed cut the plan into stages at its shuffles and broadcasts; the
//! stages that scan segments are split across the workers by segment file and sent to them
//! over gRPC (Arrow Flight). A worker (`tierdb worker DB --listen ADDR`) is a follower of
//! the database with its own DRAM and device tiers: it reads the segments of the stages it
//! is sent from the object store, through its own tiers.
//!
//! A worker did not plan the query, so it has registered no checksums: its segment reads
//! look each segment up in its view of the catalog by path ([`CatalogChecksums`]), waiting
//! a bounded time for a commit it has not seen yet. Every byte a worker reads is verified
//! as in a single process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::DataFusionError;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::FileGroup;
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedLeafExec,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, SessionStateBuilderExt, Worker,
    WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse, WorkerPlanRewriteHandler,
    WorkerQueryContext, WorkerResolver,
};
use url::Url;

use crate::checksum::BlockSums;
use crate::dfstore::ChecksumSource;
use crate::error::{Result, TableError};
use crate::provider::{STORE_URL, store_url};
use crate::sql::{EngineOptions, runtime_env};
use crate::tables::Tables;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;

/// How long a worker waits for its follower to see a segment the coordinator planned with
/// (the follower polls the manifest; see `KvArgs::poll_interval`).
pub const CATALOG_WAIT: Duration = Duration::from_secs(30);

/// Parses `--workers`: `HOST:PORT` or `http://HOST:PORT`, comma-separated.
pub fn parse_workers(list: &str) -> Result<Vec<Url>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|w| {
            let spelled = if w.contains("://") {
                w.to_string()
            } else {
                format!("http://{w}")
            };
            match Url::parse(&spelled) {
                Ok(u) if u.scheme() == "http" && u.host().is_some() && u.port().is_some() => Ok(u),
                _ => Err(TableError::Schema(format!(
                    "worker address {w:?} is not HOST:PORT; give the address a `tierdb worker \
                     --listen` printed, e.g. --workers 127.0.0.1:50051,127.0.0.1:50052"
                ))),
            }
        })
        .collect()
}

/// The fixed list of workers a coordinator was given.
#[derive(Debug, Clone)]
struct WorkerList(Vec<Url>);

impl WorkerResolver for WorkerList {
    fn get_urls(&self) -> std::result::Result<Vec<Url>, DataFusionError> {
        Ok(self.0.clone())
    }
}

/// A scan's segments may go to different workers once it reads this much (smaller scans
/// run where they are planned: sending them costs more than reading them).
pub const DISTRIBUTE_SCAN_BYTES: usize = 1 << 20;

/// Makes a session plan distributed queries over `workers` (nothing changes when empty).
/// A segment scan asks for one task per segment (at most one per worker: the planner's
/// cap) and is split across them by whole segment.
pub(crate) fn coordinate(state: SessionStateBuilder, workers: &[Url]) -> SessionStateBuilder {
    if workers.is_empty() {
        return state;
    }
    state
        .with_distributed_worker_resolver(WorkerList(workers.to_vec()))
        .with_distributed_desired_task_count_handler(segment_tasks)
        .with_distributed_scale_up_leaf_node_handler(split_by_segment)
        .with_distributed_planner()
}

/// The segment scan (a Parquet scan of tierdb's store) in `plan`, if it is one.
fn segment_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    let dse = plan.downcast_ref::<DataSourceExec>()?;
    let scan = dse.data_source().downcast_ref::<FileScanConfig>()?;
    (scan.object_store_url == store_url()).then_some(scan)
}

/// One task per segment of a scan of at least [`DISTRIBUTE_SCAN_BYTES`].
fn segment_tasks(
    ev: DesiredTaskCountEvent,
) -> Option<datafusion::common::Result<DesiredTaskCountEventResponse>> {
    let scan = segment_scan(ev.plan)?;
    let files: Vec<_> = scan.file_groups.iter().flat_map(|g| g.iter()).collect();
    let bytes: u64 = files.iter().map(|f| f.object_meta.size).sum();
    let tasks = if (bytes as usize) < DISTRIBUTE_SCAN_BYTES {
        1
    } else {
        files.len().max(1)
    };
    Some(Ok(DesiredTaskCountEventResponse::desired(tasks)))
}

/// Splits a segment scan over `task_count` tasks by whole segment, largest first onto the
/// task with the fewest bytes, each task's segments over the scan's partitions the same
/// way (a segment is never cut: each is read by one process, whose tiers keep it).
fn split_by_segment(
    ev: ScaleUpLeafNodeEvent,
) -> Option<datafusion::common::Result<ScaleUpLeafNodeEventResponse>> {
    let scan = segment_scan(ev.plan)?;
    let partitions = ev.plan.output_partitioning().partition_count().max(1);
    let mut files: Vec<PartitionedFile> = scan
        .file_groups
        .iter()
        .flat_map(|g| g.iter().cloned())
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.object_meta.size));
    let tasks = ev.task_count.max(1);
    let mut groups: Vec<(u64, Vec<PartitionedFile>)> =
        (0..tasks * partitions).map(|_| (0, Vec::new())).collect();
    for f in files {
        // Lightest task first, then its lightest partition.
        let task = (0..tasks)
            .min_by_key(|t| {
                groups[t * partitions..(t + 1) * partitions]
                    .iter()
                    .map(|g| g.0)
                    .sum::<u64>()
            })
            .unwrap_or(0);
        if let Some(g) = groups[task * partitions..(task + 1) * partitions]
            .iter_mut()
            .min_by_key(|g| g.0)
        {
            g.0 += f.object_meta.size;
            g.1.push(f);
        }
    }
    let mut template = scan.clone();
    template.file_groups.clear();
    let mut per_task = vec![template; tasks];
    // Every task keeps all `partitions` groups, empty ones too: the variants of a leaf
    // must have the same partition count.
    for (i, (_, group)) in groups.into_iter().enumerate() {
        per_task[i / partitions]
            .file_groups
            .push(FileGroup::new(group));
    }
    let leaf = DistributedLeafExec::try_new(
        Arc::clone(ev.plan),
        per_task
            .into_iter()
            .map(|s| DataSourceExec::from_data_source(s) as Arc<dyn ExecutionPlan>),
    );
    Some(leaf.map(|l| ScaleUpLeafNodeEventResponse::new(Arc::new(l))))
}

/// Finds a segment's checksums in the catalog by its path, for a worker: the coordinator
/// planned with a catalog at least as new as the worker's, so a path the worker does not
/// know yet is waited for (up to [`CATALOG_WAIT`]), never read unverified.
#[derive(Debug)]
pub struct CatalogChecksums {
    tables: Arc<Tables>,
    wait: Duration,
}

impl CatalogChecksums {
    pub fn new(tables: Arc<Tables>, wait: Duration) -> Self {
        CatalogChecksums { tables, wait }
    }
}

#[async_trait::async_trait]
impl ChecksumSource for CatalogChecksums {
    async fn checksums(&self, path: &str) -> std::result::Result<BlockSums, String> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            match self.tables.segment_by_path(path).await {
                Ok(Some(seg)) => return Ok(seg.checksums),
                Ok(None) if started.elapsed() < self.wait => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Ok(None) => {
                    return Err(format!(
                        "this worker's catalog has no such segment after {:?} (the worker \
                         follows the database more than that behind its coordinator, or the \
                         segment was removed since the query was planned); run the query again",
                        self.wait
                    ));
                }
                Err(e) => return Err(format!("cannot read the catalog: {e}")),
            }
        }
    }
}

/// On a worker, gives every segment scan it is sent the process's Parquet metadata cache
/// (the plan arrives without one: a reader factory is not part of the wire format).
struct CachedFooters {
    runtime: Arc<RuntimeEnv>,
}

impl WorkerPlanRewriteHandler for CachedFooters {
    fn rewrite_worker_plan(
        &self,
        ev: WorkerPlanRewriteEvent,
    ) -> datafusion::common::Result<WorkerPlanRewriteEventResponse> {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        let store = self.runtime.object_store(store_url())?;
        let cache = self.runtime.cache_manager.get_file_metadata_cache();
        let plan = ev
            .plan
            .transform_up(|node| {
                let Some(dse) = node.downcast_ref::<DataSourceExec>() else {
                    return Ok(Transformed::no(node));
                };
                let Some(scan) = dse.data_source().downcast_ref::<FileScanConfig>() else {
                    return Ok(Transformed::no(node));
                };
                let Some(parquet) = scan.file_source().downcast_ref::<ParquetSource>() else {
                    return Ok(Transformed::no(node));
                };
                if scan.object_store_url != store_url() {
                    return Ok(Transformed::no(node));
                }
                let factory = CachedParquetFileReaderFactory::new(store.clone(), cache.clone());
                let source = parquet
                    .clone()
                    .with_parquet_file_reader_factory(Arc::new(factory));
                let config = FileScanConfigBuilder::from(scan.clone())
                    .with_source(Arc::new(source))
                    .build();
                let exec: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
                Ok(Transformed::yes(exec))
            })?
            .data;
        Ok(WorkerPlanRewriteEventResponse::new(plan))
    }
}

/// A worker's process-wide state: its DataFusion runtime, reading the tables it follows.
#[derive(Debug)]
pub struct WorkerService {
    runtime: Arc<RuntimeEnv>,
}

impl WorkerService {
    /// A worker over `tables` (opened as a follower), with the memory, spill and metadata
    /// cache settings of `options`.
    pub fn new(tables: Arc<Tables>, options: &EngineOptions) -> Result<Self> {
        let runtime = runtime_env(options)?;
        let store = tables
            .df_store()
            .with_checksum_source(Arc::new(CatalogChecksums::new(
                tables.clone(),
                CATALOG_WAIT,
            )));
        let url = Url::parse(STORE_URL).map_err(|e| TableError::Schema(e.to_string()))?;
        runtime.register_object_store(&url, Arc::new(store));
        Ok(WorkerService { runtime })
    }

    /// Serves plan stages on `listener` until `shutdown` completes.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<()> {
        let runtime = self.runtime.clone();
        let builder = move |ctx: WorkerQueryContext| {
            let runtime = runtime.clone();
            async move {
                let mut state = ctx
                    .builder
                    .with_runtime_env(runtime.clone())
                    .with_distributed_worker_plan_rewrite_handler(CachedFooters { runtime })
                    .build();
                // Plans name tierdb's checked and interval arithmetic and rounding
                // (`checked.rs`, `intervalmul.rs`, `pgarith.rs`).
                for f in crate::checked::functions()
                    .into_iter()
                    .chain(crate::intervalmul::functions())
                    .chain(crate::pgarith::functions())
                {
                    datafusion::execution::FunctionRegistry::register_udf(&mut state, f)?;
                }
                // And text read as PostgreSQL reads it (`textin`).
                for f in crate::textin::functions() {
                    datafusion::execution::FunctionRegistry::register_udf(&mut state, Arc::new(f))?;
                }
                // And PostgreSQL's `sum`, whose narrow-integer input is cast inside its
                // accumulator (DataFusion's own `sum` has no INT accumulator).
                datafusion::execution::FunctionRegistry::register_udaf(
                    &mut state,
                    Arc::new(crate::checked::SumAsNumeric::udaf()),
                )?;
                Ok(state)
            }
        };
        let worker = Worker::from_session_builder(builder).with_runtime_env(self.runtime.clone());
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(worker.into_worker_server())
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .map_err(|e| TableError::Io(std::io::Error::other(format!("worker server: {e}"))))
    }
}

/// Binds `addr` for a worker; a clear message when it cannot.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        TableError::Io(std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr}: {e}; pick a free port (or port 0 for any)"),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_addresses_parse_or_say_what_is_wrong() {
        let w = parse_workers("127.0.0.1:1, http://h:2").unwrap();
        assert_eq!(w[0].as_str(), "http://127.0.0.1:1/");
        assert_eq!(w[1].as_str(), "http://h:2/");
        assert!(parse_workers("").unwrap().is_empty());
        let e = parse_workers("h").unwrap_err().to_string();
        assert!(e.contains("HOST:PORT"), "{e}");
        assert!(parse_workers("ftp://h:1").is_err());
    }
}
