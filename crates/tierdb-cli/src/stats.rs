//! Statistics as people read them (aligned tables) and as machines do (`--format json`).

use bytesize::ByteSize;
use comfy_table::{CellAlignment, Table, presets};
use tierdb_store::TierStats;

/// How a command prints its statistics.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// Aligned tables.
    #[default]
    Table,
    /// One JSON document on standard output.
    Json,
}

/// A two-column table of names and values, both left-aligned (`tierdb info`).
pub fn key_value_table(header: [&str; 2]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(header);
    t
}

/// A table with a header row and right-aligned numbers (every column but the first).
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(header.iter().copied());
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// The tiers and what each served: one row per tier.
pub fn tier_table(stats: &TierStats) -> Table {
    let (dram, device, capacity) = stats.hit_ratios();
    let mut t = table(&["tier", "block hits", "share", "served", "used", "size"]);
    t.add_row(vec![
        "DRAM".to_string(),
        stats.dram.hits.to_string(),
        percent(dram),
        ByteSize(stats.dram.hit_bytes).to_string(),
        ByteSize(stats.dram.usage_bytes).to_string(),
        ByteSize(stats.dram.capacity_bytes).to_string(),
    ]);
    t.add_row(vec![
        "device".to_string(),
        stats.device.hits.to_string(),
        percent(device),
        ByteSize(stats.device.hit_bytes).to_string(),
        ByteSize(stats.device.write_bytes).to_string() + " written",
        ByteSize(stats.device.capacity_bytes).to_string(),
    ]);
    t.add_row(vec![
        "object store".to_string(),
        (stats.capacity.misses + stats.bypassed_blocks).to_string(),
        percent(capacity),
        ByteSize(stats.capacity.get_bytes).to_string(),
        "-".to_string(),
        "-".to_string(),
    ]);
    t
}

/// Requests to the object store, and the write-back log when there is one.
pub fn traffic_table(stats: &TierStats) -> Table {
    let c = &stats.capacity;
    let mut t = table(&["object store", "requests", "bytes"]);
    t.add_row(vec![
        "GET".into(),
        c.gets.to_string(),
        ByteSize(c.get_bytes).to_string(),
    ]);
    t.add_row(vec![
        "PUT".into(),
        c.puts.to_string(),
        ByteSize(c.put_bytes).to_string(),
    ]);
    t.add_row(vec!["HEAD".into(), c.heads.to_string(), "-".into()]);
    t.add_row(vec!["LIST".into(), c.lists.to_string(), "-".into()]);
    t.add_row(vec!["DELETE".into(), c.deletes.to_string(), "-".into()]);
    t
}

/// The write-back log: what a take-over or a lost device would lose right now.
pub fn write_back_table(stats: &TierStats) -> Option<Table> {
    let wb = stats.write_back.as_ref()?;
    let mut t = table(&["write-back log", "value"]);
    let rows = [
        (
            "dirty (not yet uploaded)",
            ByteSize(wb.dirty_bytes).to_string(),
        ),
        ("dirty cap", ByteSize(wb.dirty_bytes_max).to_string()),
        ("pending objects", wb.pending_objects.to_string()),
        ("upload lag", format!("{} ms", wb.upload_lag_ms)),
        (
            "uploaded",
            format!(
                "{} objects, {}",
                wb.uploaded_objects,
                ByteSize(wb.uploaded_bytes)
            ),
        ),
        ("upload errors", wb.upload_errors.to_string()),
        (
            "appends / fsyncs",
            format!("{} / {}", wb.appends, wb.group_commits),
        ),
        (
            "log size",
            format!("{} in {} segments", ByteSize(wb.log_bytes), wb.segments),
        ),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    Some(t)
}

/// All of a store's statistics, tables separated by blank lines.
pub fn print_tier_stats(stats: &TierStats) {
    println!("{}\n", tier_table(stats));
    println!("{}", traffic_table(stats));
    if let Some(t) = write_back_table(stats) {
        println!("\n{t}");
    }
}

/// Prints `value` as pretty JSON.
pub fn print_json(value: &impl serde::Serialize) -> crate::error::CliResult {
    let text = serde_json::to_string_pretty(value).map_err(|e| {
        crate::error::CliError::new(
            tierdb_store::ErrorKind::Bug,
            format!("cannot write JSON: {e}"),
        )
    })?;
    println!("{text}");
    Ok(())
}

/// A progress bar drawn with `template` (indicatif's syntax).
pub fn progress_bar(template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    match indicatif::ProgressStyle::with_template(template) {
        Ok(style) => bar.set_style(style),
        Err(e) => tracing::debug!(template, error = %e, "progress bar template"),
    }
    bar
}
