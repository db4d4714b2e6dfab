//! `tierdb debug …`: load generators for the crash tests and the torture run. Built only
//! with the `debug-commands` feature (the tests and `scripts/torture.sh` enable it); not
//! part of a release binary.

use std::io::Write;

use clap::Subcommand;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tierdb_engine::{Database, Role, Workload};
use tierdb_kv::KvWrite;

use crate::args::{KvArgs, TierArgs};
use crate::error::{CliError, CliResult, output_failed, store_failed};
use crate::store_cmd::{close, open};

#[derive(Subcommand, Debug)]
pub enum DebugCommand {
    /// Commit batches 0, 1, ... (batch i sets b{i}/r0 .. b{i}/r{rows-1} to "v{i}") from
    /// concurrent writers and print "acked i" after each commit returns.
    KvCommitStream {
        db: String,
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 4)]
        writers: u64,
        #[arg(long, default_value_t = 20)]
        rows: u64,
        #[command(flatten)]
        kv: KvArgs,
    },
    /// Read KEYS through the tiers, wait until the device tier has written what they
    /// inserted, print "cached", then wait to be killed (the device-tier restart test).
    ReadAndHold {
        url: String,
        keys: Vec<String>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Put objects k0, k1, ... and print "acked kN" after each acknowledgement.
    WriteStream {
        url: String,
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 4)]
        writers: u64,
        #[command(flatten)]
        tiers: TierArgs,
    },
}

/// Content of object `i` in the crash test: self-describing, so a reader can check it.
pub fn stream_object(i: u64) -> Vec<u8> {
    let line = format!("object {i} of the write stream\n");
    line.repeat(1 + (i % 50) as usize * 20).into_bytes()
}

pub async fn run_debug(cmd: DebugCommand) -> CliResult {
    match cmd {
        DebugCommand::KvCommitStream {
            db,
            count,
            writers,
            rows,
            kv,
        } => commit_stream(&db, count, writers, rows, &kv).await,
        DebugCommand::ReadAndHold { url, keys, tiers } => {
            let store = open(&url, &tiers, false).await?;
            for key in &keys {
                store
                    .get(&Path::from(key.as_str()))
                    .await
                    .map_err(|e| store_failed(format!("cannot read {key}"), e))?
                    .bytes()
                    .await
                    .map_err(|e| store_failed(format!("cannot read {key}"), e))?;
            }
            store.wait_device_writes().await;
            println!("cached");
            std::future::pending::<()>().await;
            Ok(())
        }
        DebugCommand::WriteStream {
            url,
            count,
            writers,
            tiers,
        } => {
            let store = open(&url, &tiers, true).await?;
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            for w in 0..writers.max(1) {
                let (store, tx) = (store.clone(), tx.clone());
                tokio::spawn(async move {
                    let mut i = w;
                    while i < count {
                        let path = Path::from(format!("k{i}"));
                        if store
                            .put(&path, PutPayload::from(stream_object(i)))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        if tx.send(i).is_err() {
                            return;
                        }
                        i += writers.max(1);
                    }
                });
            }
            drop(tx);
            let mut out = std::io::stdout().lock();
            while let Some(i) = rx.recv().await {
                writeln!(out, "acked k{i}")
                    .and_then(|()| out.flush())
                    .map_err(output_failed)?;
            }
            close(&store).await
        }
    }
}

/// `tierdb debug kv-commit-stream`, for the crash tests: prints "acked i" per commit; the
/// first failed commit ends the run with its error.
pub async fn commit_stream(
    url: &str,
    count: u64,
    writers: u64,
    rows: u64,
    kv: &KvArgs,
) -> CliResult {
    let db = Database::open(url, &kv.open_options(Workload::Kv, Role::Writer)).await?;
    let writer = db.writer("a commit stream")?.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<u64, CliError>>();
    let writers = writers.max(1);
    for w in 0..writers {
        let (writer, tx) = (writer.clone(), tx.clone());
        tokio::spawn(async move {
            let mut i = w;
            while i < count {
                let mut batch = tierdb_kv::Batch::new();
                for r in 0..rows {
                    batch.put(format!("b{i:08}/r{r:03}"), format!("v{i}"));
                }
                let result = writer
                    .commit(batch)
                    .await
                    .map(|_| i)
                    .map_err(CliError::from);
                let failed = result.is_err();
                if tx.send(result).is_err() || failed {
                    return;
                }
                i += writers;
            }
        });
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    while let Some(acked) = rx.recv().await {
        writeln!(out, "acked {}", acked?)
            .and_then(|()| out.flush())
            .map_err(output_failed)?;
    }
    drop(out);
    Ok(db.close().await?)
}
