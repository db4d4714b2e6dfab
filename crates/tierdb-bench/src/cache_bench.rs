//! `tierdb bench cache`: the read tiers and write modes against one capacity store, in one run.
//!
//! 1. Hot reads: Zipfian block reads over a working set several times the DRAM tier, run
//!    against the capacity store alone, DRAM only, and DRAM + device. Each run warms up on
//!    the first part of the trace and is measured on the rest.
//! 2. A 70/30 read/write mix (writes overwrite whole objects) with DRAM + device, in
//!    write-through and in write-back; the write-back drain is timed separately.
//! 3. The same read trace replayed by the simulator against every eviction policy and OPT
//!    at sizes from 1/64 of the working set to all of it.
//!
//! Results are printed and written as CSV, with a PNG of hit ratio against cache size.

use crate::error::BenchError;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use futures::TryStreamExt;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tierdb_store::{
    CapacityOptions, Eviction, StoreUrl, TierOptions, TierStats, TieredStore, WriteMode,
    open_capacity,
};

use crate::sim::{SimRow, simulate};
use crate::zipf::ZipfKeys;

/// Settings of the cache benchmark.
#[derive(Debug, Clone)]
pub struct CacheBenchConfig {
    pub url: StoreUrl,
    pub capacity: CapacityOptions,
    pub objects: u64,
    pub object_bytes: u64,
    pub block_bytes: u64,
    pub memory_bytes: u64,
    pub device_bytes: u64,
    /// Where the device tier and the write-back log live (a fresh subdirectory per run).
    pub cache_dir: PathBuf,
    pub eviction: Eviction,
    pub theta: f64,
    pub warmup_ops: u64,
    pub ops: u64,
    pub mix_ops: u64,
    pub clients: usize,
    pub seed: u64,
    pub out_dir: PathBuf,
}

/// One measured run.
#[derive(Debug, Clone, Default)]
pub struct PhaseResult {
    pub name: String,
    pub ops: u64,
    pub seconds: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub read_p50_us: u64,
    pub read_p99_us: u64,
    pub write_p50_us: u64,
    pub write_p99_us: u64,
    pub dram_hit_ratio: f64,
    pub device_hit_ratio: f64,
    pub capacity_ratio: f64,
    /// Time to drain the write-back log after the run (write-back only).
    pub drain_seconds: f64,
}

impl PhaseResult {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }
}

#[derive(Debug, Clone)]
pub struct CacheBenchReport {
    pub reads: Vec<PhaseResult>,
    pub mix: Vec<PhaseResult>,
    pub sim: Vec<SimRow>,
    pub working_set_blocks: usize,
    pub dram_blocks: usize,
    pub eviction: Eviction,
    pub csv: PathBuf,
    pub sim_csv: PathBuf,
    pub png: PathBuf,
}

struct Layout {
    prefix: String,
    blocks_per_object: u64,
    block_bytes: u64,
}

impl Layout {
    fn object(&self, i: u64) -> Path {
        Path::from(format!("{}/obj-{i:06}", self.prefix))
    }

    fn block(&self, key: u64) -> (Path, std::ops::Range<u64>) {
        let (object, block) = (key / self.blocks_per_object, key % self.blocks_per_object);
        (
            self.object(object),
            block * self.block_bytes..(block + 1) * self.block_bytes,
        )
    }
}

pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>24} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Read(u64),
    Write(u64),
}

struct Measured {
    all: Histogram<u64>,
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    seconds: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static bounds are valid")
}

/// Runs `ops` with `clients` concurrent workers and records latencies in microseconds.
async fn drive(
    store: Arc<dyn ObjectStore>,
    layout: Arc<Layout>,
    ops: Arc<Vec<Op>>,
    payload: Bytes,
    clients: usize,
    bar: &ProgressBar,
) -> Result<Measured, BenchError> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..clients.max(1) {
        let (store, layout, ops, next, payload, bar) = (
            store.clone(),
            layout.clone(),
            ops.clone(),
            next.clone(),
            payload.clone(),
            bar.clone(),
        );
        workers.push(tokio::spawn(async move {
            let (mut reads, mut writes) = (histogram(), histogram());
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(op) = ops.get(i).copied() else { break };
                let t = Instant::now();
                match op {
                    Op::Read(key) => {
                        let (path, range) = layout.block(key);
                        store
                            .get_range(&path, range)
                            .await
                            .map_err(|e| format!("read {path}: {e}"))?;
                        reads.record(t.elapsed().as_micros().max(1) as u64).ok();
                    }
                    Op::Write(object) => {
                        let path = layout.object(object);
                        store
                            .put(&path, PutPayload::from(payload.clone()))
                            .await
                            .map_err(|e| format!("write {path}: {e}"))?;
                        writes.record(t.elapsed().as_micros().max(1) as u64).ok();
                    }
                }
                bar.inc(1);
            }
            Ok::<_, BenchError>((reads, writes))
        }));
    }
    let (mut reads, mut writes) = (histogram(), histogram());
    for w in workers {
        let (r, wr) = w.await.map_err(|e| format!("worker failed: {e}"))??;
        reads.add(r).ok();
        writes.add(wr).ok();
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut all = reads.clone();
    all.add(&writes).ok();
    Ok(Measured {
        all,
        reads,
        writes,
        seconds,
    })
}

fn pct(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

fn phase_result(name: &str, m: &Measured, stats: Option<TierStats>) -> PhaseResult {
    let (dram, device, capacity) = stats.map_or((0.0, 0.0, 1.0), |s| s.hit_ratios());
    PhaseResult {
        name: name.to_string(),
        ops: m.all.len(),
        seconds: m.seconds,
        p50_us: pct(&m.all, 0.5),
        p99_us: pct(&m.all, 0.99),
        read_p50_us: pct(&m.reads, 0.5),
        read_p99_us: pct(&m.reads, 0.99),
        write_p50_us: pct(&m.writes, 0.5),
        write_p99_us: pct(&m.writes, 0.99),
        dram_hit_ratio: dram,
        device_hit_ratio: device,
        capacity_ratio: capacity,
        drain_seconds: 0.0,
    }
}

/// Runs the whole benchmark.
pub async fn run(config: &CacheBenchConfig) -> Result<CacheBenchReport, BenchError> {
    let capacity = open_capacity(&config.url, &config.capacity).map_err(|e| e.to_string())?;
    tierdb_store::check_reachable(&config.url, capacity.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&config.out_dir)
        .map_err(|e| format!("cannot create {}: {e}", config.out_dir.display()))?;
    let run_id = format!(
        "bench-cache/{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ u128::from(config.seed)
    );
    let blocks_per_object = config.object_bytes.div_ceil(config.block_bytes).max(1);
    let layout = Arc::new(Layout {
        prefix: run_id.clone(),
        blocks_per_object,
        block_bytes: config.block_bytes,
    });
    let working_set_blocks = (config.objects * blocks_per_object) as usize;

    // Populate.
    let payload = Bytes::from(
        (0..config.object_bytes)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let populate = bar(config.objects, "populate");
    let puts: Vec<Op> = (0..config.objects).map(Op::Write).collect();
    drive(
        capacity.clone(),
        layout.clone(),
        Arc::new(puts),
        payload.clone(),
        config.clients,
        &populate,
    )
    .await?;
    populate.finish_and_clear();

    // One read trace for every configuration and the simulator.
    let total = (config.warmup_ops + config.ops) as usize;
    let trace: Vec<u64> = ZipfKeys::new(working_set_blocks as u64, config.theta, config.seed)
        .take(total)
        .collect();
    let warm: Arc<Vec<Op>> = Arc::new(
        trace[..config.warmup_ops as usize]
            .iter()
            .map(|k| Op::Read(*k))
            .collect(),
    );
    let measured: Arc<Vec<Op>> = Arc::new(
        trace[config.warmup_ops as usize..]
            .iter()
            .map(|k| Op::Read(*k))
            .collect(),
    );

    let mut reads = Vec::new();
    let p = bar(config.ops, "capacity store only");
    let m = drive(
        capacity.clone(),
        layout.clone(),
        measured.clone(),
        payload.clone(),
        config.clients,
        &p,
    )
    .await?;
    p.finish_and_clear();
    reads.push(phase_result("capacity store only", &m, None));

    let configs = [
        ("DRAM only", config.memory_bytes, 0),
        ("DRAM + device", config.memory_bytes, config.device_bytes),
    ];
    for (i, (name, memory, device)) in configs.into_iter().enumerate() {
        let options = TierOptions {
            memory_bytes: memory,
            cache_dir: (device > 0).then(|| config.cache_dir.join(format!("reads-{i}"))),
            cache_bytes: device,
            block_bytes: config.block_bytes,
            eviction: config.eviction,
            ..TierOptions::default()
        };
        let store = TieredStore::with_capacity(capacity.clone(), config.url.to_string(), options)
            .await
            .map_err(|e| e.to_string())?;
        let shared: Arc<dyn ObjectStore> = Arc::new(store.clone());
        let w = bar(config.warmup_ops, &format!("{name} warm-up"));
        drive(
            shared.clone(),
            layout.clone(),
            warm.clone(),
            payload.clone(),
            config.clients,
            &w,
        )
        .await?;
        w.finish_and_clear();
        let before = store.stats();
        let p = bar(config.ops, name);
        let m = drive(
            shared,
            layout.clone(),
            measured.clone(),
            payload.clone(),
            config.clients,
            &p,
        )
        .await?;
        p.finish_and_clear();
        reads.push(phase_result(name, &m, Some(store.stats().since(&before))));
        store.close().await.map_err(|e| e.to_string())?;
    }

    // 70/30 mix.
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x7030);
    let mut keys = ZipfKeys::new(working_set_blocks as u64, config.theta, config.seed ^ 1);
    let mix_ops: Vec<Op> = (0..config.mix_ops)
        .map(|_| {
            let key = keys.next().unwrap_or(0);
            if rng.random_bool(0.7) {
                Op::Read(key)
            } else {
                Op::Write(key / blocks_per_object)
            }
        })
        .collect();
    let mix_ops = Arc::new(mix_ops);
    let mut mix = Vec::new();
    for (i, mode) in [WriteMode::WriteThrough, WriteMode::WriteBack]
        .into_iter()
        .enumerate()
    {
        let options = TierOptions {
            memory_bytes: config.memory_bytes,
            cache_dir: Some(config.cache_dir.join(format!("mix-{i}"))),
            cache_bytes: config.device_bytes,
            block_bytes: config.block_bytes,
            eviction: config.eviction,
            write_mode: mode,
            ..TierOptions::default()
        };
        let store = TieredStore::with_capacity(capacity.clone(), config.url.to_string(), options)
            .await
            .map_err(|e| e.to_string())?;
        let shared: Arc<dyn ObjectStore> = Arc::new(store.clone());
        let w = bar(config.warmup_ops, &format!("{mode} warm-up"));
        drive(
            shared.clone(),
            layout.clone(),
            warm.clone(),
            payload.clone(),
            config.clients,
            &w,
        )
        .await?;
        w.finish_and_clear();
        let before = store.stats();
        let p = bar(config.mix_ops, &format!("70/30 {mode}"));
        let m = drive(
            shared,
            layout.clone(),
            mix_ops.clone(),
            payload.clone(),
            config.clients,
            &p,
        )
        .await?;
        p.finish_and_clear();
        let mut result = phase_result(
            &format!("70/30 {mode}"),
            &m,
            Some(store.stats().since(&before)),
        );
        let drain = Instant::now();
        store.close().await.map_err(|e| e.to_string())?;
        result.drain_seconds = drain.elapsed().as_secs_f64();
        mix.push(result);
    }

    // Simulator over the read trace.
    let dram_blocks = (config.memory_bytes / (config.block_bytes + 64 + 40)) as usize;
    let mut capacities: Vec<usize> = [64, 32, 16, 8, 4, 2, 1]
        .iter()
        .map(|d| (working_set_blocks / d).max(1))
        .collect();
    capacities.push(dram_blocks.max(1));
    capacities.sort_unstable();
    capacities.dedup();
    let sim = simulate(&trace, config.warmup_ops as usize, &capacities);

    let csv = config.out_dir.join("cache.csv");
    let sim_csv = config.out_dir.join("cache-sim.csv");
    let png = config.out_dir.join("cache-hit-ratio.png");
    write_csv(&csv, &reads, &mix)?;
    write_sim_csv(&sim_csv, &sim, working_set_blocks)?;
    let title = format!(
        "Zipf θ={} over {} blocks of {} KiB",
        config.theta,
        working_set_blocks,
        config.block_bytes >> 10
    );
    crate::plot::hit_ratio_curves(&sim, working_set_blocks, &title, &png)?;

    // Leave the capacity store as we found it.
    let objects: Vec<Path> = capacity
        .list(Some(&Path::from(run_id)))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    for path in objects {
        let _ = capacity.delete(&path).await;
    }
    let _ = std::fs::remove_dir_all(&config.cache_dir);
    Ok(CacheBenchReport {
        reads,
        mix,
        sim,
        working_set_blocks,
        dram_blocks,
        eviction: config.eviction,
        csv,
        sim_csv,
        png,
    })
}

fn write_csv(
    path: &std::path::Path,
    reads: &[PhaseResult],
    mix: &[PhaseResult],
) -> Result<(), BenchError> {
    let err = |e: csv::Error| format!("cannot write {}: {e}", path.display());
    let mut w = csv::Writer::from_path(path).map_err(err)?;
    w.write_record([
        "run",
        "ops",
        "seconds",
        "ops_per_s",
        "p50_us",
        "p99_us",
        "read_p50_us",
        "read_p99_us",
        "write_p50_us",
        "write_p99_us",
        "dram_hit_ratio",
        "device_hit_ratio",
        "capacity_ratio",
        "drain_seconds",
    ])
    .map_err(err)?;
    for r in reads.iter().chain(mix) {
        w.write_record([
            r.name.clone(),
            r.ops.to_string(),
            format!("{:.3}", r.seconds),
            format!("{:.1}", r.ops_per_s()),
            r.p50_us.to_string(),
            r.p99_us.to_string(),
            r.read_p50_us.to_string(),
            r.read_p99_us.to_string(),
            r.write_p50_us.to_string(),
            r.write_p99_us.to_string(),
            format!("{:.4}", r.dram_hit_ratio),
            format!("{:.4}", r.device_hit_ratio),
            format!("{:.4}", r.capacity_ratio),
            format!("{:.3}", r.drain_seconds),
        ])
        .map_err(err)?;
    }
    w.flush()
        .map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

fn write_sim_csv(
    path: &std::path::Path,
    rows: &[SimRow],
    working_set_blocks: usize,
) -> Result<(), BenchError> {
    let err = |e: csv::Error| format!("cannot write {}: {e}", path.display());
    let mut w = csv::Writer::from_path(path).map_err(err)?;
    w.write_record([
        "policy",
        "capacity_blocks",
        "capacity_pct_of_working_set",
        "hit_ratio",
    ])
    .map_err(err)?;
    for r in rows {
        w.write_record([
            r.policy.clone(),
            r.capacity_blocks.to_string(),
            format!(
                "{:.2}",
                r.capacity_blocks as f64 / working_set_blocks.max(1) as f64 * 100.0
            ),
            format!("{:.4}", r.hit_ratio),
        ])
        .map_err(err)?;
    }
    w.flush()
        .map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

/// The report as the tables `tierdb bench cache` prints.
pub fn render(report: &CacheBenchReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let base = report.reads.first().map_or(1.0, PhaseResult::ops_per_s);
    let _ = writeln!(s, "Hot reads (Zipf), measured after warm-up");
    let _ = writeln!(
        s,
        "{:<22} {:>10} {:>9} {:>9} {:>7} {:>7} {:>9} {:>8}",
        "run", "ops/s", "p50 us", "p99 us", "DRAM", "device", "capacity", "speedup"
    );
    for r in &report.reads {
        let _ = writeln!(
            s,
            "{:<22} {:>10.0} {:>9} {:>9} {:>6.1}% {:>6.1}% {:>8.1}% {:>7.2}x",
            r.name,
            r.ops_per_s(),
            r.p50_us,
            r.p99_us,
            r.dram_hit_ratio * 100.0,
            r.device_hit_ratio * 100.0,
            r.capacity_ratio * 100.0,
            r.ops_per_s() / base
        );
    }
    let _ = writeln!(s, "\n70/30 read/write mix, DRAM + device");
    let _ = writeln!(
        s,
        "{:<24} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}",
        "run", "ops/s", "read p50", "read p99", "write p50", "write p99", "drain s", "speedup"
    );
    let wt = report.mix.first().map_or(1.0, PhaseResult::ops_per_s);
    for r in &report.mix {
        let _ = writeln!(
            s,
            "{:<24} {:>9.0} {:>10} {:>10} {:>10} {:>10} {:>9.2} {:>7.2}x",
            r.name,
            r.ops_per_s(),
            r.read_p50_us,
            r.read_p99_us,
            r.write_p50_us,
            r.write_p99_us,
            r.drain_seconds,
            r.ops_per_s() / wt
        );
    }
    let _ = writeln!(
        s,
        "\nTrace simulator at the DRAM tier's size ({} of {} blocks)",
        report.dram_blocks, report.working_set_blocks
    );
    let at_dram: Vec<&SimRow> = report
        .sim
        .iter()
        .filter(|r| r.capacity_blocks == report.dram_blocks.max(1))
        .collect();
    let opt = at_dram
        .iter()
        .find(|r| r.policy == "opt")
        .map_or(0.0, |r| r.hit_ratio);
    for r in &at_dram {
        let chosen = if r.policy == report.eviction.to_string() {
            "  <- DRAM tier policy"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  {:<8} hit ratio {:>6.2}%  ({:>5.1}% of OPT){chosen}",
            r.policy,
            r.hit_ratio * 100.0,
            r.hit_ratio / opt.max(1e-9) * 100.0
        );
    }
    let _ = writeln!(
        s,
        "\nwrote {}, {}, {}",
        report.csv.display(),
        report.sim_csv.display(),
        report.png.display()
    );
    s
}
