//! Experiment tracking: the [`Tracker`] trait and [`Tracking`], the fan-out that hands each
//! metrics row to every enabled tracker (W&B, TensorBoard) on its own background thread through a
//! bounded queue, so a slow or unreachable back-end never stops or slows training.
//!
//! `metrics.jsonl` stays the source of truth: a tracker that fails warns once and stops; rows a
//! full queue could not take are counted and reported at the end (`comlrl wandb-sync` uploads
//! them from `metrics.jsonl` later).
pub(crate) mod names;
pub mod tensorboard;
pub mod wandb;
mod wandb_auth;
pub mod wandb_table;
mod worker;

use crate::error::{Error, Result};
use crate::metrics::Row;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Rows each tracker's queue holds before new ones are dropped (and counted).
pub const QUEUE_ROWS: usize = 1024;
/// How long [`Tracking::finish`] waits for a tracker to deliver what it holds. Short: the run
/// is over and its rows are safe in `metrics.jsonl`; a tracker still busy then is told off with
/// what it did not deliver and how to send that later.
pub const FINISH_WAIT: Duration = Duration::from_secs(10);

/// One metrics row as trackers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// 0-based line of the row in `metrics.jsonl` (W&B's history offset).
    pub index: usize,
    /// The training step the row was logged at (the x axis everywhere).
    pub step: u64,
    /// Seconds of training up to this row (from `step_seconds`, summed over the steps).
    pub runtime: f64,
    /// Unix time of the row, in seconds.
    pub timestamp: f64,
    /// Metric values under their comlrl names plus the CoMLRL aliases ([`names`]); no `step`.
    pub values: Vec<(String, f64)>,
    /// Texts logged with the row, `(tag, markdown)`: the sampled completions of
    /// `logging.completions` (TensorBoard shows them in its Text tab).
    pub texts: Vec<(String, String)>,
    /// The sampled joint actions logged with the row, as their `completions.jsonl` lines
    /// (`logging.completions`; W&B shows them as a table).
    pub samples: Vec<serde_json::Value>,
}

/// A tracking back-end. Every method runs on the tracker's own thread; an error makes the
/// fan-out print it once as a warning and stop feeding this tracker.
pub trait Tracker: Send {
    /// Short name for messages ("W&B", "TensorBoard").
    fn name(&self) -> &'static str;
    /// Called once before any row, with the rows already in `metrics.jsonl` (on `--resume`).
    fn open(&mut self, prior: &[Record]) -> Result<()>;
    /// New rows, oldest first.
    fn log(&mut self, records: &[Record]) -> Result<()>;
    /// No row for a while (W&B sends a heartbeat).
    fn idle(&mut self) -> Result<()> {
        Ok(())
    }
    /// The run ended with this exit code (0 = finished, 1 = failed, 130 = interrupted).
    fn finish(&mut self, exit_code: i32) -> Result<()>;
    /// Shortest pause between two `log` calls; rows arriving meanwhile are batched.
    fn min_interval(&self) -> Duration {
        Duration::ZERO
    }
    /// How long to wait for a row before calling `idle`.
    fn idle_interval(&self) -> Duration {
        Duration::from_secs(30)
    }
    /// How to deliver later what this tracker did not (W&B: the `comlrl wandb-sync` command),
    /// for the warnings about rows it did not take or did not finish sending.
    fn catch_up(&self) -> Option<String> {
        None
    }
}

/// Where warnings go (the progress bar's `println`, or stderr).
pub type Warn = Arc<dyn Fn(&str) + Send + Sync>;

/// W&B run settings after the scenario's `logging.wandb` and the `--wandb*` flags are merged.
#[derive(Debug, Clone, PartialEq)]
pub struct WandbSettings {
    /// W&B project.
    pub project: String,
    /// W&B entity (user or team); the account's default when `None`.
    pub entity: Option<String>,
    /// Display name of the run.
    pub name: String,
    /// Tags attached to the run.
    pub tags: Vec<String>,
}

/// What to track for one run.
#[derive(Debug, Clone)]
pub struct TrackPlan {
    /// The run directory (metrics files, tracker state).
    pub output_dir: PathBuf,
    /// The resolved scenario (W&B run config).
    pub scenario_yaml: String,
    /// Turns per episode (names the per-turn metric aliases).
    pub num_turns: usize,
    /// W&B settings; `None` = W&B off.
    pub wandb: Option<WandbSettings>,
    /// Write TensorBoard event files.
    pub tensorboard: bool,
    /// Continuing a run (`--resume`): keep the W&B run and the TensorBoard files.
    pub resume: bool,
}

impl TrackPlan {
    /// Whether any tracker is on.
    pub fn any(&self) -> bool {
        self.wandb.is_some() || self.tensorboard
    }
}

/// The training thread's handle on the trackers.
pub struct Tracking {
    workers: Vec<worker::Worker>,
    output_dir: PathBuf,
    num_turns: usize,
    index: usize,
    runtime: f64,
    last_step: u64,
    started: bool,
    warn: Warn,
}

impl Tracking {
    /// Starts a thread per enabled tracker; `None` when the plan enables none.
    pub fn start(plan: &TrackPlan, warn: Warn) -> Result<Option<Self>> {
        let mut trackers: Vec<Box<dyn Tracker>> = vec![];
        if let Some(w) = &plan.wandb {
            trackers.push(Box::new(wandb::WandbTracker::new(
                wandb::Connection::from_env(),
                w.clone(),
                &plan.output_dir,
                &plan.scenario_yaml,
                plan.resume,
                warn.clone(),
            )));
        }
        if plan.tensorboard {
            trackers.push(Box::new(tensorboard::TensorBoardTracker::new(
                &plan.output_dir.join(tensorboard::DIR),
                plan.resume,
            )));
        }
        if trackers.is_empty() {
            return Ok(None);
        }
        let workers = trackers
            .into_iter()
            .map(|t| worker::Worker::spawn(t, warn.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Self {
            workers,
            output_dir: plan.output_dir.clone(),
            num_turns: plan.num_turns,
            index: 0,
            runtime: 0.0,
            last_step: 0,
            started: false,
            warn,
        }))
    }

    /// Training starts (after `metrics.jsonl` was opened or truncated to the checkpoint): hands
    /// the rows already there to the trackers.
    pub fn begin(&mut self) {
        let path = self.output_dir.join("metrics.jsonl");
        let prior = match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => match crate::metrics::read_jsonl(&path) {
                Ok(rows) => records_from_json(&rows, self.num_turns, end_time(&path)),
                Err(e) => {
                    (self.warn)(&format!(
                        "warning: tracking: {}; earlier rows not sent",
                        e.chain()
                    ));
                    vec![]
                }
            },
            _ => vec![],
        };
        if let Some(last) = prior.last() {
            self.index = last.index + 1;
            self.runtime = last.runtime;
            self.last_step = last.step;
        }
        self.started = true;
        for w in &mut self.workers {
            w.send_open(prior.clone());
        }
    }

    /// A row was appended to `metrics.jsonl`, with `texts` (`(tag, markdown)`, usually none)
    /// and the `completions.jsonl` lines written with it (`samples`, usually none): queue it
    /// for every tracker (never blocks).
    pub fn log(&mut self, row: &Row, texts: &[(String, String)], samples: &[serde_json::Value]) {
        if !self.started {
            self.begin();
        }
        let mut rec = self.record(row, now());
        rec.texts = texts.to_vec();
        rec.samples = samples.to_vec();
        for w in &mut self.workers {
            w.send_row(rec.clone());
        }
    }

    fn record(&mut self, row: &Row, timestamp: f64) -> Record {
        let step = row_step(row);
        let secs = row_value(row, "step_seconds").unwrap_or(0.0).max(0.0);
        self.runtime += secs * step.saturating_sub(self.last_step) as f64;
        self.last_step = step;
        let rec = Record {
            index: self.index,
            step,
            runtime: self.runtime,
            timestamp,
            values: names::with_aliases(row, self.num_turns),
            texts: vec![],
            samples: vec![],
        };
        self.index += 1;
        rec
    }

    /// The run ended: each tracker delivers what it holds (waiting at most [`FINISH_WAIT`] for
    /// each) and closes; queue overflows, and what a tracker still busy then did not deliver,
    /// are reported.
    pub fn finish(self, exit_code: i32) {
        for w in self.workers {
            w.finish(exit_code);
        }
    }
}

/// Records for rows read back from `metrics.jsonl` (resume and `wandb-sync`). `_runtime` is the
/// sum of `step_seconds` over the steps; timestamps count back from `end` (the file's mtime).
pub fn records_from_json(rows: &[serde_json::Value], num_turns: usize, end: f64) -> Vec<Record> {
    let mut runtime = 0.0;
    let mut last = 0u64;
    let mut out = Vec::with_capacity(rows.len());
    for (index, obj) in rows.iter().enumerate() {
        let Some(map) = obj.as_object() else { continue };
        let row: Row = map
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
            .collect();
        let step = row_step(&row);
        let secs = row_value(&row, "step_seconds").unwrap_or(0.0).max(0.0);
        runtime += secs * step.saturating_sub(last) as f64;
        last = step;
        out.push(Record {
            index,
            step,
            runtime,
            timestamp: 0.0,
            values: names::with_aliases(&row, num_turns),
            texts: vec![],
            samples: vec![],
        });
    }
    let total = out.last().map(|r| r.runtime).unwrap_or(0.0);
    for r in &mut out {
        r.timestamp = end - (total - r.runtime);
    }
    out
}

/// Hands each `completions.jsonl` line to the first record at or after the step that sampled
/// it (the row its window was logged with), for `comlrl wandb-sync`. Lines without a `step`, or
/// after the last record, are left out.
pub fn attach_samples(records: &mut [Record], samples: Vec<serde_json::Value>) {
    for s in samples {
        let Some(at) = s.get("step").and_then(serde_json::Value::as_u64) else {
            continue;
        };
        if let Some(r) = records.iter_mut().find(|r| r.step >= at) {
            r.samples.push(s);
        }
    }
}

fn row_value(row: &[(String, f64)], key: &str) -> Option<f64> {
    row.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

fn row_step(row: &[(String, f64)]) -> u64 {
    row_value(row, "step")
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| s as u64)
        .unwrap_or(0)
}

/// Unix time now, in seconds.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The modification time of `path` (unix seconds), or now.
pub fn end_time(path: &Path) -> f64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64())
        .unwrap_or_else(now)
}

/// A tracking failure (the message says what failed and what happens next).
pub(crate) fn track_error(msg: impl Into<String>) -> Error {
    Error::tracker(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_sums_step_seconds_over_steps() {
        let rows: Vec<serde_json::Value> = vec![
            serde_json::json!({"step": 2, "reward_mean": 1.0, "step_seconds": 0.5}),
            serde_json::json!({"step": 4, "reward_mean": 2.0, "step_seconds": 1.5}),
            serde_json::json!({"step": 5, "reward_mean": null, "step_seconds": 1.0}),
        ];
        let recs = records_from_json(&rows, 1, 100.0);
        let rt: Vec<f64> = recs.iter().map(|r| r.runtime).collect();
        assert_eq!(rt, vec![1.0, 4.0, 5.0]);
        assert_eq!(recs[2].timestamp, 100.0);
        assert_eq!(recs[0].timestamp, 96.0);
        assert_eq!(recs.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 2]);
        // A null (non-finite) value is left out; `step` is the axis, not a value.
        assert!(!recs[2].values.iter().any(|(k, _)| k == "reward_mean"));
        assert!(!recs[0].values.iter().any(|(k, _)| k == "step"));
    }
}
