//! Metrics rows and where they go: the row type, the `metrics.jsonl` / `metrics.csv` sinks
//! (written by the trainer), the `completions.jsonl` sink of sampled texts, and the reader (used
//! by trackers, the plot and `wandb-sync`).
//! Sits between training and tracking: it imports neither.
mod completions;
mod sink;

use crate::error::{Error, Result};
use std::path::Path;

pub use completions::{CompletionsSink, COMPLETIONS_FILE};
pub use sink::MetricsSink;

/// One logged row: ordered (name, value) pairs.
pub type Row = Vec<(String, f64)>;

/// The largest `metrics.jsonl` read back: a row is a few hundred bytes to a few kB, so this is
/// millions of logged steps; anything larger is not a file a run wrote.
pub const JSONL_CAP: u64 = 1 << 30;
const JSONL_TOO_BIG: &str = "it is not a metrics file a run wrote";

/// Reads `metrics.jsonl` back as JSON objects.
pub fn read_jsonl(path: &Path) -> Result<Vec<serde_json::Value>> {
    let text = comlrl_scenario::files::read_text(path, JSONL_CAP, JSONL_TOO_BIG)
        .map_err(|e| Error::io(path, e))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| Error::metrics_by(path, format!("line {}: not JSON", i + 1), e))
        })
        .collect()
}
