//! `tierdb bench oltp`: seed 001's race, a sysbench-like 70/30 OLTP workload run to N
//! transactions, on the key-value engine, in one run:
//!
//! - (a) DRAM tier only, no device tier (write-through);
//! - (b) DRAM + device tier, write-through;
//! - (c) DRAM + device tier, write-back (commits durable in the device log);
//! - raw: `slatedb` used directly on the capacity store, with SlateDB's own block cache of
//!   the same DRAM size and no tierdb layer, to show tierdb's overhead.
//!
//! The table is loaded once; each configuration runs on its own zero-copy clone of it with
//! cold caches, so all four start from the same bytes. A transaction is sysbench's
//! oltp_read_write scaled to 70/30: five point selects, a 10-row range select, a 10-row
//! range sum (7 reads), then one atomic, durable commit of an update, a delete and an insert
//! (3 writes). Keys are Gaussian over the table (sysbench's `--rand-type=gaussian`).

use crate::error::BenchError;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use hdrhistogram::Histogram;
use object_store::ObjectStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use tierdb_kv::{Batch, KvDb, KvOptions, KvRead, KvResult, KvWrite, Op};
use tierdb_store::{
    CapacityOptions, StoreUrl, TierOptions, TierStats, TieredStore, WriteMode, open_capacity,
};

use crate::cache_bench::bar;

/// One contestant of the race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    NoDevice,
    DeviceWriteThrough,
    DeviceWriteBack,
    RawSlatedb,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::NoDevice,
        Variant::DeviceWriteThrough,
        Variant::DeviceWriteBack,
        Variant::RawSlatedb,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::NoDevice => "a: no device tier",
            Variant::DeviceWriteThrough => "b: device write-through",
            Variant::DeviceWriteBack => "c: device write-back",
            Variant::RawSlatedb => "raw slatedb",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Variant::NoDevice => "a-no-device",
            Variant::DeviceWriteThrough => "b-device-wt",
            Variant::DeviceWriteBack => "c-device-wb",
            Variant::RawSlatedb => "raw-slatedb",
        }
    }
}

#[derive(Debug, Clone)]
pub struct OltpConfig {
    /// The capacity store (a bucket or directory); the run uses a fresh prefix in it.
    pub url: StoreUrl,
    pub capacity: CapacityOptions,
    pub rows: u64,
    pub value_bytes: usize,
    pub transactions: u64,
    pub clients: usize,
    pub memory_bytes: u64,
    pub device_bytes: u64,
    pub cache_dir: PathBuf,
    pub memtable_bytes: usize,
    pub seed: u64,
    pub out_dir: PathBuf,
    pub variants: Vec<Variant>,
}

#[derive(Debug, Clone)]
pub struct RaceResult {
    pub variant: Variant,
    pub transactions: u64,
    pub seconds: f64,
    /// Transactions finished in each whole second of the race.
    pub per_second: Vec<u64>,
    pub commit_p50_us: u64,
    pub commit_p99_us: u64,
    pub txn_p50_us: u64,
    pub txn_p99_us: u64,
    pub tiers: Option<TierStats>,
    /// (commits, WAL flushes) for tierdb variants: the group-commit factor.
    pub group: Option<(u64, u64)>,
}

impl RaceResult {
    pub fn tps(&self) -> f64 {
        self.transactions as f64 / self.seconds.max(1e-9)
    }
}

#[derive(Debug)]
pub struct OltpReport {
    pub config: OltpConfig,
    pub load_seconds: f64,
    pub table_bytes: u64,
    pub results: Vec<RaceResult>,
}

fn key(id: u64) -> Bytes {
    let mut k = Vec::with_capacity(9);
    k.push(b'r');
    k.extend_from_slice(&id.to_be_bytes());
    Bytes::from(k)
}

/// A row: an 8-byte counter (summed by range sums) and random digits, like sysbench's `c`.
fn value(rng: &mut impl Rng, counter: u64, len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len.max(8));
    v.extend_from_slice(&counter.to_le_bytes());
    while v.len() < len {
        v.push(b'0' + rng.random_range(0..10u8));
    }
    Bytes::from(v)
}

/// `slatedb` used directly: its own caches, durability by flushing after each write.
struct RawSlate {
    db: slatedb::Db,
}

fn raw_err(e: slatedb::Error) -> tierdb_kv::KvError {
    tierdb_kv::KvError::Invalid {
        db: "raw slatedb".into(),
        what: e.to_string(),
    }
}

#[async_trait]
impl KvRead for RawSlate {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Bytes>> {
        self.db.get(key).await.map_err(raw_err)
    }

    async fn scan(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> KvResult<Vec<(Bytes, Bytes)>> {
        self.scan_with(range, limit, slatedb::IterationOrder::Ascending)
            .await
    }

    async fn scan_desc(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
    ) -> KvResult<Vec<(Bytes, Bytes)>> {
        self.scan_with(range, limit, slatedb::IterationOrder::Descending)
            .await
    }
}

impl RawSlate {
    async fn scan_with(
        &self,
        range: (Bound<Bytes>, Bound<Bytes>),
        limit: Option<usize>,
        order: slatedb::IterationOrder,
    ) -> KvResult<Vec<(Bytes, Bytes)>> {
        let options = slatedb::config::ScanOptions::new().with_order(order);
        let mut it = self
            .db
            .scan_with_options(range, &options)
            .await
            .map_err(raw_err)?;
        let mut out = Vec::new();
        while limit.is_none_or(|l| out.len() < l) {
            match it.next().await.map_err(raw_err)? {
                Some(kv) => out.push((kv.key, kv.value)),
                None => break,
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl KvWrite for RawSlate {
    async fn commit(&self, batch: Batch) -> KvResult<u64> {
        let mut wb = slatedb::WriteBatch::new();
        for op in batch.ops() {
            match op {
                Op::Put(k, v) => wb.put(k, v),
                Op::Delete(k) => wb.delete(k),
            }
        }
        let handle = self.db.write(wb).await.map_err(raw_err)?;
        self.db.flush().await.map_err(raw_err)?;
        Ok(handle.seqnum())
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static bounds are valid")
}

fn pct(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

/// One transaction; returns the commit latency in microseconds.
async fn transaction(
    db: &dyn KvWrite,
    rng: &mut StdRng,
    gauss: &Normal<f64>,
    rows: u64,
    value_bytes: usize,
    counter: u64,
) -> Result<u64, BenchError> {
    let pick = |rng: &mut StdRng| (gauss.sample(rng).round().max(0.0) as u64).min(rows - 1);
    for _ in 0..5 {
        let id = pick(rng);
        db.get(&key(id))
            .await
            .map_err(|e| format!("point select: {e}"))?;
    }
    let lo = pick(rng);
    let range = (Bound::Included(key(lo)), Bound::Excluded(key(lo + 10)));
    db.scan(range, Some(10))
        .await
        .map_err(|e| format!("range select: {e}"))?;
    let lo = pick(rng);
    let range = (Bound::Included(key(lo)), Bound::Excluded(key(lo + 10)));
    let rows_in = db
        .scan(range, Some(10))
        .await
        .map_err(|e| format!("range sum: {e}"))?;
    let _sum: u64 = rows_in
        .iter()
        .filter_map(|(_, v)| {
            v.get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        })
        .fold(0u64, u64::wrapping_add);
    let mut batch = Batch::new();
    batch.put(key(pick(rng)), value(rng, counter, value_bytes));
    let moved = pick(rng);
    batch.delete(key(moved));
    batch.put(key(moved), value(rng, counter, value_bytes));
    let t = Instant::now();
    db.commit(batch).await.map_err(|e| format!("commit: {e}"))?;
    Ok(t.elapsed().as_micros().max(1) as u64)
}

fn tier_options(config: &OltpConfig, variant: Variant, dir: PathBuf) -> TierOptions {
    let device = matches!(
        variant,
        Variant::DeviceWriteThrough | Variant::DeviceWriteBack
    );
    TierOptions {
        memory_bytes: config.memory_bytes,
        cache_dir: device.then_some(dir),
        cache_bytes: if device { config.device_bytes } else { 0 },
        write_mode: if variant == Variant::DeviceWriteBack {
            WriteMode::WriteBack
        } else {
            WriteMode::WriteThrough
        },
        ..TierOptions::default()
    }
}

fn kv_options(config: &OltpConfig, create: bool) -> KvOptions {
    KvOptions {
        create,
        memtable_bytes: config.memtable_bytes,
        max_unflushed_bytes: (config.memtable_bytes * 8).max(64 << 20),
        ..KvOptions::default()
    }
}

async fn race(
    config: &OltpConfig,
    variant: Variant,
    db: Arc<dyn KvWrite>,
) -> Result<(u64, f64, Vec<u64>, Histogram<u64>, Histogram<u64>), BenchError> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = bar(config.transactions, variant.name());
    let started = Instant::now();
    let sampler = {
        let (done, stop) = (done.clone(), stop.clone());
        tokio::spawn(async move {
            let mut per_second = Vec::new();
            let mut last = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let now = done.load(Ordering::Relaxed);
                per_second.push(now - last);
                last = now;
            }
            per_second
        })
    };
    let mut workers = Vec::new();
    for c in 0..config.clients.max(1) {
        let (db, done, progress) = (db.clone(), done.clone(), progress.clone());
        let (rows, value_bytes, target) = (config.rows, config.value_bytes, config.transactions);
        let seed = config.seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        workers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let gauss = Normal::new(rows as f64 / 2.0, rows as f64 / 6.0)
                .map_err(|e| format!("gaussian: {e}"))?;
            let (mut commits, mut txns) = (histogram(), histogram());
            loop {
                let n = done.fetch_add(1, Ordering::Relaxed);
                if n >= target {
                    done.fetch_sub(1, Ordering::Relaxed);
                    break;
                }
                let t = Instant::now();
                let commit =
                    transaction(db.as_ref(), &mut rng, &gauss, rows, value_bytes, n).await?;
                commits.record(commit).ok();
                txns.record(t.elapsed().as_micros().max(1) as u64).ok();
                progress.inc(1);
            }
            Ok::<_, BenchError>((commits, txns))
        }));
    }
    let (mut commits, mut txns) = (histogram(), histogram());
    let mut failure = None;
    for w in workers {
        match w
            .await
            .map_err(|e| BenchError::from(format!("client failed: {e}")))
            .and_then(|r| r)
        {
            Ok((c, t)) => {
                commits.add(c).ok();
                txns.add(t).ok();
            }
            Err(e) => failure = Some(e),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut per_second = sampler.await.map_err(|e| format!("sampler failed: {e}"))?;
    let total = done.load(Ordering::Relaxed);
    let counted: u64 = per_second.iter().sum();
    if total > counted {
        per_second.push(total - counted); // the last, partial second
    }
    progress.finish_and_clear();
    if let Some(e) = failure {
        return Err(format!("{}: {e}", variant.name()).into());
    }
    Ok((total, seconds, per_second, commits, txns))
}

/// The capacity store with no cache tier: for loading and cloning, which should leave no
/// warm cache behind for the race.
async fn uncached(
    capacity: &Arc<dyn ObjectStore>,
    config: &OltpConfig,
) -> Result<TieredStore, BenchError> {
    let options = TierOptions {
        memory_bytes: 0,
        ..TierOptions::default()
    };
    Ok(TieredStore::with_capacity(capacity.clone(), config.url.to_string(), options).await?)
}

/// Runs the whole benchmark.
pub async fn run(config: &OltpConfig) -> Result<OltpReport, BenchError> {
    if config.rows < 100 {
        return Err("--rows must be at least 100".into());
    }
    let capacity = open_capacity(&config.url, &config.capacity).map_err(|e| e.to_string())?;
    tierdb_store::check_reachable(&config.url, capacity.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&config.out_dir)
        .map_err(|e| format!("cannot create {}: {e}", config.out_dir.display()))?;
    let run = format!(
        "oltp-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let base = format!("{run}/base");

    // Load once, through a store with no cache, then close (the memtable goes to L0).
    let loader = uncached(&capacity, config).await?;
    let t = Instant::now();
    let db = KvDb::open(loader.clone(), &base, &base, &kv_options(config, true))
        .await
        .map_err(|e| e.to_string())?;
    let progress = bar(config.rows, "load");
    let mut rng = StdRng::seed_from_u64(config.seed);
    let batch_rows = 2000u64;
    let mut id = 0;
    while id < config.rows {
        let mut batch = Batch::new();
        for i in id..(id + batch_rows).min(config.rows) {
            batch.put(key(i), value(&mut rng, i, config.value_bytes));
        }
        db.commit(batch).await.map_err(|e| format!("load: {e}"))?;
        id = (id + batch_rows).min(config.rows);
        progress.set_position(id);
    }
    db.close().await.map_err(|e| e.to_string())?;
    progress.finish_and_clear();
    let load_seconds = t.elapsed().as_secs_f64();
    let (_, shape) = tierdb_kv::DbShape::read(&loader, &base, &base)
        .await
        .map_err(|e| e.to_string())?;
    loader.close().await.map_err(|e| e.to_string())?;

    let mut results = Vec::new();
    for &variant in &config.variants {
        let path = format!("{run}/{}", variant.slug());
        let cloner = uncached(&capacity, config).await?;
        tierdb_kv::clone_db(&cloner, &base, &path, &base, &path)
            .await
            .map_err(|e| e.to_string())?;
        cloner.close().await.map_err(|e| e.to_string())?;
        let result = match variant {
            Variant::RawSlatedb => run_raw(config, capacity.clone(), &path).await?,
            _ => run_tierdb(config, variant, capacity.clone(), &path).await?,
        };
        results.push(result);
    }
    let report = OltpReport {
        config: config.clone(),
        load_seconds,
        table_bytes: shape.total_bytes(),
        results,
    };
    write_csv(&report)?;
    crate::plot::race(
        &report
            .results
            .iter()
            .map(|r| (r.variant.name().to_string(), r.per_second.clone()))
            .collect::<Vec<_>>(),
        &format!(
            "race to {} transactions, {} clients, {} rows",
            config.transactions, config.clients, config.rows
        ),
        &config.out_dir.join("oltp-race.png"),
    )?;
    Ok(report)
}

async fn run_tierdb(
    config: &OltpConfig,
    variant: Variant,
    capacity: Arc<dyn ObjectStore>,
    path: &str,
) -> Result<RaceResult, BenchError> {
    let dir = config.cache_dir.join(variant.slug());
    let _ = std::fs::remove_dir_all(&dir);
    let store = TieredStore::with_capacity(
        capacity,
        config.url.to_string(),
        tier_options(config, variant, dir),
    )
    .await
    .map_err(|e| e.to_string())?;
    let db = Arc::new(
        KvDb::open(store.clone(), path, path, &kv_options(config, false))
            .await
            .map_err(|e| e.to_string())?,
    );
    let before = store.stats();
    let (transactions, seconds, per_second, commits, txns) =
        race(config, variant, db.clone()).await?;
    let tiers = store.stats().since(&before);
    let group = Some(db.commit_stats());
    db.close().await.map_err(|e| e.to_string())?;
    store.close().await.map_err(|e| e.to_string())?;
    Ok(RaceResult {
        variant,
        transactions,
        seconds,
        per_second,
        commit_p50_us: pct(&commits, 0.5),
        commit_p99_us: pct(&commits, 0.99),
        txn_p50_us: pct(&txns, 0.5),
        txn_p99_us: pct(&txns, 0.99),
        tiers: Some(tiers),
        group,
    })
}

async fn run_raw(
    config: &OltpConfig,
    capacity: Arc<dyn ObjectStore>,
    path: &str,
) -> Result<RaceResult, BenchError> {
    let options = KvOptions {
        block_cache_bytes: config.memory_bytes,
        ..kv_options(config, false)
    };
    let db = slatedb::Db::builder(path.to_string(), capacity)
        .with_settings(options.settings())
        .with_db_cache(options.db_cache(), 0)
        .build()
        .await
        .map_err(|e| format!("raw slatedb open: {e}"))?;
    let raw = Arc::new(RawSlate { db });
    let (transactions, seconds, per_second, commits, txns) =
        race(config, Variant::RawSlatedb, raw.clone()).await?;
    raw.db
        .close()
        .await
        .map_err(|e| format!("raw slatedb close: {e}"))?;
    Ok(RaceResult {
        variant: Variant::RawSlatedb,
        transactions,
        seconds,
        per_second,
        commit_p50_us: pct(&commits, 0.5),
        commit_p99_us: pct(&commits, 0.99),
        txn_p50_us: pct(&txns, 0.5),
        txn_p99_us: pct(&txns, 0.99),
        tiers: None,
        group: None,
    })
}

fn write_csv(report: &OltpReport) -> Result<(), BenchError> {
    let path = report.config.out_dir.join("oltp.csv");
    let err = |e: csv::Error| format!("cannot write {}: {e}", path.display());
    let mut w = csv::Writer::from_path(&path).map_err(err)?;
    w.write_record([
        "variant",
        "transactions",
        "seconds",
        "tps",
        "commit_p50_us",
        "commit_p99_us",
        "txn_p50_us",
        "txn_p99_us",
        "dram_hit_ratio",
        "device_hit_ratio",
        "capacity_ratio",
        "commits",
        "wal_flushes",
    ])
    .map_err(err)?;
    for r in &report.results {
        let (dram, device, cap) = r
            .tiers
            .as_ref()
            .map_or((f64::NAN, f64::NAN, f64::NAN), |t| t.hit_ratios());
        let (commits, flushes) = r.group.unwrap_or((0, 0));
        w.write_record([
            r.variant.name().to_string(),
            r.transactions.to_string(),
            format!("{:.3}", r.seconds),
            format!("{:.1}", r.tps()),
            r.commit_p50_us.to_string(),
            r.commit_p99_us.to_string(),
            r.txn_p50_us.to_string(),
            r.txn_p99_us.to_string(),
            format!("{dram:.4}"),
            format!("{device:.4}"),
            format!("{cap:.4}"),
            commits.to_string(),
            flushes.to_string(),
        ])
        .map_err(err)?;
    }
    w.flush()
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let path = report.config.out_dir.join("oltp-race.csv");
    let err = |e: csv::Error| format!("cannot write {}: {e}", path.display());
    let mut w = csv::Writer::from_path(&path).map_err(err)?;
    w.write_record(["variant", "second", "transactions"])
        .map_err(err)?;
    for r in &report.results {
        for (s, n) in r.per_second.iter().enumerate() {
            w.write_record([
                r.variant.name().to_string(),
                (s + 1).to_string(),
                n.to_string(),
            ])
            .map_err(err)?;
        }
    }
    w.flush()
        .map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// The race table, with ratios against (a) and against raw slatedb.
pub fn render(report: &OltpReport) -> String {
    use std::fmt::Write;
    let c = &report.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "loaded {} rows ({} B values, {:.1} MiB in SSTs) in {:.1} s; DRAM tier {:.0} MiB ({:.1}x smaller than the table), device {:.0} MiB",
        c.rows,
        c.value_bytes,
        report.table_bytes as f64 / 1048576.0,
        report.load_seconds,
        c.memory_bytes as f64 / 1048576.0,
        report.table_bytes as f64 / c.memory_bytes.max(1) as f64,
        c.device_bytes as f64 / 1048576.0
    );
    let _ = writeln!(
        s,
        "{:<26} {:>8} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11}  tiers (block hits: DRAM/device/capacity), commits per WAL flush",
        "race", "txns", "seconds", "txn/s", "commit p50", "commit p99", "txn p50", "txn p99",
    );
    for r in &report.results {
        let tiers = r
            .tiers
            .as_ref()
            .map_or("slatedb's own block cache".to_string(), |t| {
                let (a, b, c) = t.hit_ratios();
                format!("{:.1}% / {:.1}% / {:.1}%", a * 100.0, b * 100.0, c * 100.0)
            });
        let group = r.group.map_or(String::new(), |(c, f)| {
            format!(", {:.1}", c as f64 / f.max(1) as f64)
        });
        let _ = writeln!(
            s,
            "{:<26} {:>8} {:>9.2} {:>9.1} {:>11} {:>11} {:>11} {:>11}  {tiers}{group}",
            r.variant.name(),
            r.transactions,
            r.seconds,
            r.tps(),
            ms(r.commit_p50_us),
            ms(r.commit_p99_us),
            ms(r.txn_p50_us),
            ms(r.txn_p99_us),
        );
    }
    let find = |v: Variant| report.results.iter().find(|r| r.variant == v);
    if let Some(a) = find(Variant::NoDevice) {
        for v in [Variant::DeviceWriteThrough, Variant::DeviceWriteBack] {
            if let Some(r) = find(v) {
                let _ = writeln!(
                    s,
                    "speedup of {} over {}: {:.2}x (time to {} transactions)",
                    v.name(),
                    a.variant.name(),
                    a.seconds / r.seconds.max(1e-9),
                    c.transactions
                );
            }
        }
    }
    if let Some(raw) = find(Variant::RawSlatedb) {
        for v in [
            Variant::NoDevice,
            Variant::DeviceWriteThrough,
            Variant::DeviceWriteBack,
        ] {
            if let Some(r) = find(v) {
                let _ = writeln!(
                    s,
                    "{} vs raw slatedb: {:.2}x the throughput (overhead {:+.1}%)",
                    v.name(),
                    r.tps() / raw.tps().max(1e-9),
                    (raw.tps() / r.tps().max(1e-9) - 1.0) * 100.0
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "results: {}/oltp.csv, oltp-race.csv, oltp-race.png",
        c.out_dir.display()
    );
    s
}
