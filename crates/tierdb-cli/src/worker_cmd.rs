//! `tierdb worker DB --listen ADDR`: runs the plan stages a coordinator (`tierdb sql` or
//! `tierdb serve` with `--workers`) sends it, over the database opened as a follower with
//! this process's own DRAM and device tiers (see `tierdb_tables::distributed`).
//!
//! It prints `tierdb worker listening on ADDR` once it accepts connections and, when stopped
//! (SIGINT or SIGTERM), one JSON line of what it did: bytes its queries read, what its tiers
//! fetched from the object store, and its CPU seconds.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;
use tierdb_engine::{Database, Role, Workload};
use tierdb_tables::distributed::{WorkerService, bind};

use crate::args::KvArgs;
use crate::error::{CliError, CliResult};
use crate::sql_cmd::EngineArgs;

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Database URL (a directory, file:///…, or s3://bucket/path): the coordinator's.
    pub db: String,
    /// Address to serve plan stages on; port 0 takes any free port (the address is
    /// printed). Another address than loopback needs --insecure.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Listen on a non-loopback address: the worker protocol has no authentication and no
    /// TLS, so anyone who can connect can run plans reading this database. Only on a
    /// private network.
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

/// CPU seconds (user + system, every thread) this process has used, from /proc/self/stat
/// (Linux; 0 elsewhere). Its fields 14 and 15 count clock ticks of USER_HZ, which is 100 on
/// every Linux architecture tierdb builds for.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the name, field 3 (state) is index 0: utime (14) is index 11, stime (15) 12.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

pub async fn run_worker(args: WorkerArgs) -> CliResult {
    if !args.listen.ip().is_loopback() && !args.insecure {
        return Err(CliError::input(format!(
            "{} is not a loopback address and workers have no authentication or TLS; listen \
             on 127.0.0.1, or add --insecure on a private network",
            args.listen
        )));
    }
    let mut options = args.kv.open_options(Workload::Tables, Role::Follower);
    // A worker lives long: it pins what it reads against the writer's garbage collector.
    options.pin_checkpoint = true;
    let plan = args.engine.memory_plan(args.kv.tiers.memory_bytes)?;
    options.store.tiers.memory_bytes = plan.tier;
    let database = Database::open(&args.db, &options).await?;
    let tables = Arc::new(database.tables());
    let served = async {
        let service = WorkerService::new(tables.clone(), &args.engine.options_within(&plan))?;
        let listener = bind(args.listen).await?;
        let addr = listener.local_addr()?;
        println!("tierdb worker listening on {addr}");
        let _ = std::io::stdout().flush();
        service
            .serve(listener, crate::serve::shutdown_signal())
            .await?;
        Ok::<_, tierdb_tables::TableError>(addr)
    }
    .await;
    let (requests, bytes) = tables.df_store().counters().snapshot();
    let tiers = tables.store_stats();
    let closed = database.close().await;
    let addr = served?;
    let summary = serde_json::json!({
        "worker": addr.to_string(),
        "query_requests": requests,
        "query_bytes": bytes,
        "object_store_gets": tiers.capacity.gets,
        "object_store_bytes": tiers.capacity.get_bytes,
        "cpu_seconds": cpu_seconds(),
    });
    println!("{summary}");
    closed.map_err(CliError::from)
}
