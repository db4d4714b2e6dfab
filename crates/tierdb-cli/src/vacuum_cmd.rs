//! `tierdb vacuum DB`: delete the segment files no table references any more (replaced by
//! UPDATE, DELETE or INSERT OVERWRITE, a dropped table's, or left by an import or a
//! transaction killed before its commit), once no reader can still be using them.

use clap::Args;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use tierdb_engine::Role;

use crate::args::KvArgs;
use crate::error::CliResult;
use crate::sql_cmd::{EngineArgs, open_engine};

#[derive(Args, Debug)]
pub struct VacuumArgs {
    pub db: String,
    /// List what would be deleted and delete nothing. Opens the database read-only, so it
    /// can run beside a running writer (`tierdb serve`); files that writer is still
    /// writing may then be listed (VACUUM through the writer never deletes those).
    #[arg(long)]
    pub dry_run: bool,
    /// Keep files for this long after they left the catalog (or, never committed, after
    /// they were written): queries and followers that planned before may still read them.
    #[arg(long, default_value = "10m")]
    pub retain: humantime::Duration,
    #[arg(long, value_enum, default_value_t)]
    pub format: crate::stats::Format,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

pub async fn run_vacuum(args: VacuumArgs) -> CliResult {
    let role = if args.dry_run {
        Role::Follower
    } else {
        Role::Writer
    };
    let (engine, handle) = open_engine(&args.db, &args.kv, &args.engine, role).await?;
    let tables = engine.tables();
    let result = if args.dry_run {
        tables.vacuum_plan(args.retain.into()).await
    } else {
        tables.vacuum(args.retain.into()).await
    };
    let closed = handle.close().await;
    let plan = result?;
    closed?;
    match args.format {
        crate::stats::Format::Json => {
            let files: Vec<_> = plan
                .delete
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "path": f.path, "bytes": f.bytes, "retired": f.retired,
                        "age_ms": f.age_ms,
                    })
                })
                .collect();
            let out = serde_json::json!({
                "dry_run": args.dry_run,
                "deleted": if args.dry_run { serde_json::Value::Null } else { files.len().into() },
                "files": files,
                "bytes": plan.bytes(),
                "kept_unreferenced": plan.kept.len(),
                "referenced": plan.referenced,
            });
            println!("{out:#}");
        }
        crate::stats::Format::Table => {
            if !plan.delete.is_empty() {
                let mut t = Table::new();
                t.load_preset(UTF8_FULL_CONDENSED);
                t.set_header(vec!["file", "bytes", "why", "age"]);
                for f in &plan.delete {
                    t.add_row(vec![
                        f.path.clone(),
                        bytesize::ByteSize(f.bytes).to_string(),
                        if f.retired {
                            "replaced or dropped".to_string()
                        } else {
                            "never committed".to_string()
                        },
                        humantime::format_duration(std::time::Duration::from_secs(f.age_ms / 1000))
                            .to_string(),
                    ]);
                }
                println!("{t}");
            }
            println!(
                "{} {} files ({}); kept {} unreferenced files younger than --retain {} or \
                 being written; {} files in use",
                if args.dry_run {
                    "would delete"
                } else {
                    "deleted"
                },
                plan.delete.len(),
                bytesize::ByteSize(plan.bytes()),
                plan.kept.len(),
                args.retain,
                plan.referenced
            );
        }
    }
    Ok(())
}
