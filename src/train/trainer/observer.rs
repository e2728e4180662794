//! What a run tells its caller while it goes (the CLI draws a progress bar, the benchmarks
//! collect rows) and what it reports at its end.
use std::path::PathBuf;

/// Callbacks for progress display (the CLI draws a progress bar; tests pass `()`).
pub trait Observer {
    /// Training starts: `total_steps` in all, `done` of them already (resumed runs).
    fn start(&mut self, _total_steps: usize, _done: usize) {}
    /// Step `step` finished with this mean joint reward of its logging window so far (NaN when
    /// the window sampled nothing: an offline algorithm's later epochs), in this many seconds.
    fn step(&mut self, _step: usize, _reward_mean: f64, _step_seconds: f64) {}
    /// Epoch `epoch` (from 1) is complete, with this mean joint reward (after processors). A
    /// resumed run reports the epochs it completed before, at its start.
    fn epoch(&mut self, _epoch: usize, _reward_mean: f64) {}
    /// A note or warning for the user.
    fn message(&mut self, _msg: &str) {}
    /// A metrics row was written to metrics.jsonl, with texts logged beside it (`(tag,
    /// markdown)`: the sampled completions of `logging.completions`, else none) and the same
    /// samples as their `completions.jsonl` lines; trackers forward them.
    fn metrics(
        &mut self,
        _row: &crate::metrics::Row,
        _texts: &[(String, String)],
        _samples: &[serde_json::Value],
    ) {
    }
    /// The run ended: `ok` is false when it failed.
    fn finished(&mut self, _ok: bool) {}
}

impl Observer for () {}

/// What a finished (or interrupted) run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Training steps completed, resumed ones included.
    pub steps_done: usize,
    /// Training steps of the whole run.
    pub total_steps: usize,
    /// Stopped by a signal before the end (a checkpoint was written).
    pub interrupted: bool,
    /// Mean joint reward (after processors) of each completed epoch.
    pub epoch_reward_means: Vec<f64>,
    /// The run directory.
    pub output_dir: PathBuf,
}
