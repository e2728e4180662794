//! Training metrics: a window that aggregates steps between log lines, and the sinks
//! `metrics.jsonl` (the source of truth) and its `metrics.csv` twin, both append-only and
//! truncated back to a checkpoint's row count on resume.
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Sums since the last logged row.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Window {
    pub steps: usize,
    pub rewards: Vec<f32>,
    /// Sum and count of each reward term's raw value.
    pub components: Vec<(f64, usize)>,
    /// Per agent: (loss sum, grad-norm sum, updates), (completion-length sum, count), return sum.
    pub agents: Vec<AgentWindow>,
    pub seconds: f64,
    pub generated_tokens: usize,
    /// Seconds per phase (sampling, reward, update, …).
    #[serde(default)]
    pub phases: super::timing::Phases,
    /// Model FLOPs of the loss's forward and backward passes (all agents).
    #[serde(default)]
    pub train_flops: f64,
    pub lr: f64,
    /// Whether evaluation is on (its columns are then always present, null when not run).
    pub eval_enabled: bool,
    /// Whether the reference-KL penalty is on (adds `agent_<i>/kl`).
    #[serde(default)]
    pub kl_enabled: bool,
    /// Mean reward and mean completion return of the last evaluation in this window.
    pub eval: Option<(f64, f64)>,
    /// Sum and count of joint rewards of turns 2, 3, ... (multi-turn runs).
    #[serde(default)]
    pub turn_rewards: Vec<(f64, usize)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentWindow {
    pub loss: f64,
    pub grad_norm: f64,
    pub updates: usize,
    pub len_sum: f64,
    pub returns_sum: f64,
    pub completions: usize,
    pub kl_sum: f64,
}

/// One logged row: ordered (name, value) pairs.
pub type Row = Vec<(String, f64)>;

impl Window {
    pub fn new(agents: usize, components: usize, eval_enabled: bool, kl_enabled: bool) -> Self {
        Self {
            agents: vec![AgentWindow::default(); agents],
            components: vec![(0.0, 0); components],
            eval_enabled,
            kl_enabled,
            ..Default::default()
        }
    }

    /// The row for this window; `None` when it holds no step.
    pub fn row(&self, step: usize, epoch: usize, names: &[String]) -> Option<Row> {
        if self.steps == 0 {
            return None;
        }
        let n = self.rewards.len().max(1) as f64;
        let mean = self.rewards.iter().map(|&r| r as f64).sum::<f64>() / n;
        let var = self
            .rewards
            .iter()
            .map(|&r| (r as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        let mut row: Row = vec![
            ("step".into(), step as f64),
            ("epoch".into(), epoch as f64),
            ("reward_mean".into(), mean),
            ("reward_std".into(), var.sqrt()),
        ];
        for (t, (sum, count)) in self.turn_rewards.iter().enumerate() {
            row.push((
                format!("turn_{}/reward_mean", t + 2),
                sum / (*count).max(1) as f64,
            ));
        }
        for (name, (sum, count)) in names.iter().zip(&self.components) {
            row.push((format!("reward/{name}"), sum / (*count).max(1) as f64));
        }
        for (i, a) in self.agents.iter().enumerate() {
            let u = a.updates.max(1) as f64;
            let c = a.completions.max(1) as f64;
            if a.updates > 0 {
                row.push((format!("agent_{i}/loss"), a.loss / u));
                row.push((format!("agent_{i}/grad_norm"), a.grad_norm / u));
            }
            row.push((format!("agent_{i}/completion_length_mean"), a.len_sum / c));
            row.push((format!("agent_{i}/return_mean"), a.returns_sum / c));
            if self.kl_enabled {
                row.push((format!("agent_{i}/kl"), a.kl_sum / c));
            }
        }
        row.push(("lr".into(), self.lr));
        row.push(("step_seconds".into(), self.seconds / self.steps as f64));
        let tps = if self.phases.sampling > 0.0 {
            self.generated_tokens as f64 / self.phases.sampling
        } else {
            0.0
        };
        row.push(("tokens_per_s".into(), tps));
        for (name, secs) in self.phases.scaled(self.steps as f64).named() {
            row.push((format!("time/{name}_s"), secs));
        }
        // Achieved GFLOP/s of the loss's matmuls (forward + backward time, summed over agents).
        let fb = self.phases.forward + self.phases.backward;
        let gflops = if fb > 0.0 {
            self.train_flops / fb / 1e9
        } else {
            0.0
        };
        row.push(("train_gflops_per_s".into(), gflops));
        if self.eval_enabled {
            let (r, ret) = self.eval.unwrap_or((f64::NAN, f64::NAN));
            row.push(("eval/reward_mean".into(), r));
            row.push(("eval/return_mean".into(), ret));
        }
        Some(row)
    }
}

/// Appends rows to `metrics.jsonl` and `metrics.csv`.
pub struct MetricsSink {
    jsonl: PathBuf,
    csv: PathBuf,
    columns: Option<Vec<String>>,
    pub rows: usize,
}

impl MetricsSink {
    /// Opens the sinks in `dir`, keeping the first `keep_rows` rows (0 for a fresh run).
    pub fn open(dir: &Path, keep_rows: usize) -> Result<Self> {
        let jsonl = dir.join("metrics.jsonl");
        let csv = dir.join("metrics.csv");
        truncate_lines(&jsonl, keep_rows)?;
        let columns = if keep_rows > 0 && csv.is_file() {
            truncate_lines(&csv, keep_rows + 1)?;
            let text = std::fs::read_to_string(&csv).map_err(|e| Error::io(&csv, e))?;
            text.lines()
                .next()
                .map(|h| h.split(',').map(String::from).collect())
        } else {
            truncate_lines(&csv, 0)?;
            None
        };
        Ok(Self {
            jsonl,
            csv,
            columns,
            rows: keep_rows,
        })
    }

    pub fn write(&mut self, row: &Row) -> Result<()> {
        let mut obj = String::from("{");
        for (i, (k, v)) in row.iter().enumerate() {
            if i > 0 {
                obj.push_str(", ");
            }
            let val = if !v.is_finite() {
                serde_json::Value::Null
            } else if v.fract() == 0.0 && v.abs() < 1e15 {
                serde_json::json!(*v as i64)
            } else {
                serde_json::json!(v)
            };
            obj.push_str(&format!("{}: {}", serde_json::json!(k), val));
        }
        obj.push('}');
        append(&self.jsonl, &(obj + "\n"))?;
        let cols = self
            .columns
            .get_or_insert_with(|| row.iter().map(|(k, _)| k.clone()).collect())
            .clone();
        if self.rows == 0
            || !self.csv.is_file()
            || std::fs::metadata(&self.csv)
                .map(|m| m.len() == 0)
                .unwrap_or(true)
        {
            append(&self.csv, &(cols.join(",") + "\n"))?;
        }
        let line: Vec<String> = cols
            .iter()
            .map(|c| {
                row.iter()
                    .find(|(k, _)| k == c)
                    .map(|(_, v)| format!("{v}"))
                    .unwrap_or_default()
            })
            .collect();
        append(&self.csv, &(line.join(",") + "\n"))?;
        self.rows += 1;
        Ok(())
    }
}

fn append(path: &Path, text: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| Error::io(path, e))
}

/// Keeps the first `n` lines of `path` (creating or emptying it when `n` is 0).
fn truncate_lines(path: &Path, n: usize) -> Result<()> {
    if n == 0 {
        return std::fs::write(path, "").map_err(|e| Error::io(path, e));
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let kept: String = text.lines().take(n).map(|l| format!("{l}\n")).collect();
    std::fs::write(path, kept).map_err(|e| Error::io(path, e))
}

/// Reads `metrics.jsonl` back as JSON objects.
pub fn read_jsonl(path: &Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| Error::model(path, format!("line {}: not JSON: {e}", i + 1)))
        })
        .collect()
}
