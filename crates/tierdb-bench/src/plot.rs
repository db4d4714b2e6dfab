//! PNG plots of benchmark results (plotters, with a system TrueType font for labels).

use crate::error::BenchError;
use std::path::Path;

use plotters::prelude::*;

use crate::sim::SimRow;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

fn register_font() -> Result<(), BenchError> {
    // Registered once per process; a failure is remembered as its message.
    static FAILURE: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    let failure = FAILURE.get_or_init(|| {
        let Some(bytes) = FONT_PATHS.iter().find_map(|p| std::fs::read(p).ok()) else {
            return Some("no TrueType font found for plot labels; install fonts-dejavu-core");
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .err()
            .map(|_| "the font file could not be parsed")
    });
    match failure {
        Some(message) => Err((*message).into()),
        None => Ok(()),
    }
}

/// Hit ratio against cache size, one line per policy (OPT dashed on top).
pub fn hit_ratio_curves(
    rows: &[SimRow],
    working_set_blocks: usize,
    title: &str,
    out: &Path,
) -> Result<(), BenchError> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", out.display());
    let root = BitMapBackend::new(out, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max_x = rows.iter().map(|r| r.capacity_blocks).max().unwrap_or(1) as f64
        / working_set_blocks.max(1) as f64
        * 100.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((0.5f64..max_x * 1.1).log_scale(), 0f64..1f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("cache size, % of working set (log scale)")
        .y_desc("hit ratio")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    let mut policies: Vec<String> = rows.iter().map(|r| r.policy.clone()).collect();
    policies.dedup();
    policies.sort();
    policies.dedup();
    for (i, policy) in policies.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| &r.policy == policy)
            .map(|r| {
                (
                    r.capacity_blocks as f64 / working_set_blocks.max(1) as f64 * 100.0,
                    r.hit_ratio,
                )
            })
            .collect();
        let width = if policy == "opt" { 4 } else { 2 };
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(|e| err(&e))?
            .label(policy.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    Ok(root.present().map_err(|e| err(&e))?)
}

/// Transactions finished per second over the race, one line per contestant.
pub fn race(series: &[(String, Vec<u64>)], title: &str, out: &Path) -> Result<(), BenchError> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", out.display());
    let root = BitMapBackend::new(out, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max_x = series
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_y = series
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..max_x + 1.0, 0f64..max_y * 1.1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start of the race")
        .y_desc("transactions per second")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, per_second)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = per_second
            .iter()
            .enumerate()
            .map(|(s, n)| (s as f64 + 1.0, *n as f64))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(format!("{name} ({} s)", per_second.len()))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    Ok(root.present().map_err(|e| err(&e))?)
}
