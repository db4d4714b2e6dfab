//! `tierdb warm DB [TABLE…]`: loads a database's objects, or the named tables' segments,
//! into the DRAM and device tiers at the capacity store's speed, so that the first queries
//! of a started or restarted process read from the device (which survives restarts).

use std::time::Instant;

use bytesize::ByteSize;
use clap::Args;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;
use tierdb_engine::{Database, Role, Workload};

use crate::args::KvArgs;
use crate::error::{CliError, CliResult, store_failed};
use crate::stats;

#[derive(Args, Debug)]
pub struct WarmArgs {
    /// Database URL (a directory, file:///…, or s3://bucket/path).
    pub db: String,
    /// Only these tables' segments [default: every object of the database].
    pub tables: Vec<String>,
    #[command(flatten)]
    pub kv: KvArgs,
}

pub async fn run_warm(a: WarmArgs) -> CliResult {
    let options = a.kv.open_options(Workload::Tables, Role::Follower);
    let tiers = &options.store.tiers;
    if tiers.cache_dir.is_none() || tiers.cache_bytes == 0 {
        return Err(CliError::input(
            "tierdb warm fills the device tier: give --cache-dir DIR and --cache-bytes SIZE, \
             the ones the database's processes use",
        ));
    }
    let device = tiers.cache_bytes;
    let db = Database::open(&a.db, &options).await?;
    let result = warm(&db, &a.tables, device).await;
    let closed = db.close().await;
    result?;
    Ok(closed?)
}

async fn warm(db: &Database, tables: &[String], device: u64) -> CliResult {
    let objects: Vec<(Path, u64)> = if tables.is_empty() {
        db.store()
            .list(Some(&Path::from(db.path())))
            .map_ok(|m| (m.location, m.size))
            .try_collect()
            .await
            .map_err(|e| store_failed(format!("cannot list {}", db.url()), e))?
    } else {
        let t = db.tables();
        let mut out = Vec::new();
        for name in tables {
            let def = t.require(name).await?;
            for s in t.segments(&def).await? {
                out.push((Path::from(s.path), s.bytes));
            }
        }
        out
    };
    let total: u64 = objects.iter().map(|(_, n)| n).sum();
    if total > device {
        eprintln!(
            "warning: {} to warm, the device tier holds {}: the first objects will be evicted \
             by the last ones (raise --cache-bytes)",
            ByteSize::b(total),
            ByteSize::b(device)
        );
    }
    let bar = stats::progress_bar(
        "warm [{elapsed_precise}] {bar:30.cyan/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}",
    );
    bar.set_length(total);
    let started = Instant::now();
    let before = db.store().stats();
    let read = db
        .store()
        .warm(&objects, &|n| bar.inc(n))
        .await
        .map_err(|e| store_failed(format!("cannot warm {}", db.url()), e));
    bar.finish_and_clear();
    let read = read?;
    let seconds = started.elapsed().as_secs_f64();
    let after = db.store().stats();
    println!(
        "warmed {} object{}, {} in {seconds:.2} s ({}/s): {} from the capacity store, {} \
         already in the tiers",
        objects.len(),
        if objects.len() == 1 { "" } else { "s" },
        ByteSize::b(read),
        ByteSize::b((read as f64 / seconds.max(1e-9)) as u64),
        ByteSize::b(after.capacity.get_bytes - before.capacity.get_bytes),
        ByteSize::b(
            (after.dram.hit_bytes - before.dram.hit_bytes)
                + (after.device.hit_bytes - before.device.hit_bytes)
        ),
    );
    Ok(())
}
