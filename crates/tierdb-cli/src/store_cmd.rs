//! `tierdb store …`: a tiered object store by hand (put, get, ls, stat, rm) and the
//! salvage of a damaged write-back log.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Subcommand;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tierdb_engine::Workload;
use tierdb_store::TieredStore;

use crate::args::TierArgs;
use crate::error::{CliError, CliResult, output_failed, store_failed};
use crate::stats;

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Write FILE (or standard input) as object KEY.
    Put {
        url: String,
        key: String,
        file: Option<PathBuf>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Write object KEY to standard output or --output.
    Get {
        url: String,
        key: String,
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// List objects under PREFIX.
    Ls {
        url: String,
        prefix: Option<String>,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Show an object's metadata, or with no KEY the store's tiers and statistics.
    Stat {
        url: String,
        key: Option<String>,
        #[arg(long, value_enum, default_value_t)]
        format: stats::Format,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Delete object KEY.
    Rm {
        url: String,
        key: String,
        #[command(flatten)]
        tiers: TierArgs,
    },
    /// Rewrite a damaged write-back log so the store opens again: keeps every readable
    /// record, prints the byte ranges it dropped (those writes are lost unless already
    /// uploaded) and moves the damaged segment files aside unchanged. Run it only after an
    /// open failed with "write-back log ... is damaged" and the device cannot be restored.
    SalvageLog {
        /// The cache directory whose write-back log is damaged.
        #[arg(long)]
        cache_dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Opens the store at `url` (with `create`, a missing local directory is created).
pub async fn open(url: &str, tiers: &TierArgs, create: bool) -> CliResult<TieredStore> {
    Ok(tierdb_engine::open_store(url, &tiers.store_options(Workload::Kv), create).await?)
}

fn object_path(key: &str) -> CliResult<Path> {
    Path::parse(key).map_err(|e| {
        CliError::input(format!(
            "invalid object key {key:?}: {e}; use names like dir/name.bin"
        ))
    })
}

/// Closes the store; a failed drain leaves acknowledged data in the write-back log.
pub async fn close(store: &TieredStore) -> CliResult {
    store
        .close()
        .await
        .map_err(|e| CliError::from(tierdb_engine::Error::drain(e)))
}

pub async fn run_store(cmd: StoreCommand) -> CliResult {
    match cmd {
        StoreCommand::Put {
            url,
            key,
            file,
            tiers,
        } => {
            let path = object_path(&key)?;
            let data = match &file {
                Some(f) => {
                    std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
                }
                None => {
                    let mut buf = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut buf)
                        .map_err(|e| format!("cannot read standard input: {e}"))?;
                    buf
                }
            };
            let store = open(&url, &tiers, true).await?;
            store
                .put(&path, PutPayload::from(data))
                .await
                .map_err(|e| store_failed(format!("cannot put {key}"), e))?;
            close(&store).await
        }
        StoreCommand::Get {
            url,
            key,
            output,
            tiers,
        } => {
            let path = object_path(&key)?;
            let store = open(&url, &tiers, false).await?;
            let bytes = store
                .get(&path)
                .await
                .map_err(|e| store_failed(format!("cannot get {key}"), e))?
                .bytes()
                .await
                .map_err(|e| store_failed(format!("cannot get {key}"), e))?;
            match output {
                Some(out) => write_atomically(&out, &bytes)?,
                None => std::io::stdout().write_all(&bytes).map_err(output_failed)?,
            }
            close(&store).await
        }
        StoreCommand::Ls { url, prefix, tiers } => {
            let store = open(&url, &tiers, false).await?;
            let prefix = prefix.as_deref().map(object_path).transpose()?;
            let mut objects: Vec<_> = store
                .list(prefix.as_ref())
                .try_collect()
                .await
                .map_err(|e| store_failed("cannot list", e))?;
            objects.sort_by(|a, b| a.location.cmp(&b.location));
            let mut out = std::io::stdout().lock();
            for m in objects {
                writeln!(
                    out,
                    "{:>12}  {}  {}",
                    m.size,
                    m.last_modified.format("%Y-%m-%d %H:%M:%S"),
                    m.location
                )
                .map_err(output_failed)?;
            }
            close(&store).await
        }
        StoreCommand::Stat {
            url,
            key,
            format,
            tiers,
        } => {
            let store = open(&url, &tiers, false).await?;
            match key {
                Some(key) => {
                    let m = store
                        .head(&object_path(&key)?)
                        .await
                        .map_err(|e| store_failed(format!("cannot stat {key}"), e))?;
                    let meta = serde_json::json!({
                        "path": m.location.to_string(),
                        "size": m.size,
                        "last_modified": m.last_modified.to_rfc3339(),
                        "e_tag": m.e_tag,
                    });
                    match format {
                        stats::Format::Json => stats::print_json(&meta)?,
                        stats::Format::Table => {
                            println!("path           {}", m.location);
                            println!(
                                "size           {} ({} bytes)",
                                bytesize::ByteSize(m.size),
                                m.size
                            );
                            println!("last modified  {}", m.last_modified);
                            println!("e-tag          {}", m.e_tag.as_deref().unwrap_or("-"));
                        }
                    }
                }
                None => match format {
                    stats::Format::Json => stats::print_json(&serde_json::json!({
                        "store": store.to_string(),
                        "tiers": store.stats(),
                    }))?,
                    stats::Format::Table => {
                        println!("{store}\n");
                        stats::print_tier_stats(&store.stats());
                    }
                },
            }
            close(&store).await
        }
        StoreCommand::Rm { url, key, tiers } => {
            let store = open(&url, &tiers, false).await?;
            store
                .delete(&object_path(&key)?)
                .await
                .map_err(|e| store_failed(format!("cannot delete {key}"), e))?;
            close(&store).await
        }
        StoreCommand::SalvageLog { cache_dir, json } => {
            let report = tierdb_store::salvage_write_back_log(&cache_dir).map_err(|e| {
                CliError::from(e).context(format_args!(
                    "cannot salvage the write-back log in {}",
                    cache_dir.display()
                ))
            })?;
            if json {
                return stats::print_json(&report);
            }
            println!(
                "segments: {}  records kept: {}  segments rewritten: {}  ranges dropped: {}",
                report.segments,
                report.records_kept,
                report.segments_rewritten,
                report.dropped.len()
            );
            for d in &report.dropped {
                println!(
                    "dropped {} bytes at byte {} of {}: {}",
                    d.bytes,
                    d.offset,
                    d.segment.display(),
                    d.reason
                );
            }
            if let Some(dir) = &report.damaged_dir {
                println!("damaged originals kept in {}", dir.display());
            } else {
                println!("the log is undamaged; nothing was changed");
            }
            Ok(())
        }
    }
}

/// Writes `bytes` to `out` through a temporary file, so a failure leaves nothing half-written.
fn write_atomically(out: &std::path::Path, bytes: &[u8]) -> CliResult {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    tmp.persist(out)
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(())
}
