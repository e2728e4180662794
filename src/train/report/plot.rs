//! The picture of a run: reward mean and each agent's completion length over steps, as SVG.
use crate::error::{Error, Result};
use plotters::prelude::*;
use std::path::Path;

/// Draws `metrics.jsonl` rows into `out` (SVG).
pub fn plot(rows: &[serde_json::Value], agents: usize, out: &Path) -> Result<()> {
    let series = |key: &str| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((r.get("step")?.as_f64()?, r.get(key)?.as_f64()?)))
            .collect()
    };
    let reward = series("reward_mean");
    let lens: Vec<Vec<(f64, f64)>> = (0..agents)
        .map(|i| series(&format!("agent_{i}/completion_length_mean")))
        .collect();
    let err = |e: String| Error::Plot {
        path: out.to_path_buf(),
        source: e.into(),
    };
    let root = SVGBackend::new(out, (900, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let (top, bottom) = root.split_vertically(320);
    let x_max = reward.iter().map(|p| p.0).fold(1.0, f64::max);
    draw(
        &top,
        "reward mean (after processors)",
        &[("reward_mean".into(), reward)],
        x_max,
    )
    .map_err(err)?;
    let named: Vec<(String, Vec<(f64, f64)>)> = lens
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("agent {i}"), s))
        .collect();
    draw(&bottom, "completion length (tokens)", &named, x_max).map_err(err)?;
    root.present().map_err(|e| err(e.to_string()))
}

fn draw(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
    x_max: f64,
) -> std::result::Result<(), String> {
    let all = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.1));
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
        (a.min(y), b.max(y))
    });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let pad = ((hi - lo) * 0.1).max(1e-3);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..x_max.max(1.0), (lo - pad)..(hi + pad))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("step")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
