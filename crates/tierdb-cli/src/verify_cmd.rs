//! `tierdb verify DB`: checks that every row table's rows and index entries agree
//! (`tierdb_tables::rows::verify`): each row decodes under its own key, each has its entry
//! in every index, each entry names a row with the values it was made from, and a UNIQUE
//! index holds one entry per value. Read-only, so it runs beside a live `tierdb serve`.

use clap::Args;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use tierdb_engine::Role;
use tierdb_store::ErrorKind;

use crate::args::KvArgs;
use crate::error::{CliError, CliResult};
use crate::sql_cmd::{EngineArgs, open_engine};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    pub db: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: crate::stats::Format,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

pub async fn run_verify(args: VerifyArgs) -> CliResult {
    let (engine, handle) = open_engine(&args.db, &args.kv, &args.engine, Role::Follower).await?;
    let bar = crate::stats::progress_bar("{spinner} checked {pos} rows and index entries");
    let result = engine.tables().verify_rows(&|n| bar.inc(n)).await;
    bar.finish_and_clear();
    let closed = handle.close().await;
    let checks = result?;
    closed?;
    let problems: u64 = checks.iter().map(|c| c.problems).sum();
    match args.format {
        crate::stats::Format::Json => {
            let tables: Vec<_> = checks
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "table": c.table, "rows": c.rows,
                        "indexes": c.indexes.iter()
                            .map(|(name, entries)| serde_json::json!({"index": name, "entries": entries}))
                            .collect::<Vec<_>>(),
                        "problems": c.problems, "listed": c.listed,
                    })
                })
                .collect();
            crate::stats::print_json(&serde_json::json!({"tables": tables, "problems": problems}))?;
        }
        crate::stats::Format::Table => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED);
            t.set_header(vec!["table", "rows", "index", "entries", "problems"]);
            for c in &checks {
                t.add_row(vec![
                    c.table.clone(),
                    c.rows.to_string(),
                    String::new(),
                    String::new(),
                    c.problems.to_string(),
                ]);
                for (name, entries) in &c.indexes {
                    t.add_row(vec![
                        String::new(),
                        String::new(),
                        name.clone(),
                        entries.to_string(),
                        String::new(),
                    ]);
                }
            }
            if !checks.is_empty() {
                println!("{t}");
            }
            for c in &checks {
                for p in &c.listed {
                    println!("{}: {p}", c.table);
                }
                if c.problems > c.listed.len() as u64 {
                    println!(
                        "{}: and {} more",
                        c.table,
                        c.problems - c.listed.len() as u64
                    );
                }
            }
            println!("{} row tables checked: {problems} problems", checks.len());
        }
    }
    if problems > 0 {
        return Err(CliError::new(
            ErrorKind::Data,
            format!(
                "{problems} problems between rows and index entries (listed above); restore \
                 from a copy, or rebuild an index with DROP INDEX and CREATE INDEX"
            ),
        ));
    }
    Ok(())
}
