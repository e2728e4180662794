//! `comlrl bench train`: the scenario's real training loop for N steps, reported as seconds
//! per step split by phase (sampling, reward, scoring forward, backward, optimizer), sampling
//! tokens/s, the loss's GFLOP/s and the process's peak memory.
use crate::error::{Error, Result};
use crate::metrics::Row;
use crate::train::{Observer, Trainer};
use comlrl_scenario::Scenario;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// The JSON report of one benchmarked scenario.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    /// The scenario file.
    pub scenario: PathBuf,
    /// Each agent's model, as written.
    pub models: Vec<String>,
    /// Number of agents.
    pub agents: usize,
    /// Steps timed (one step = one training prompt: sampling, rewards, and every
    /// `rollout_buffer_size` prompts an update of every agent).
    pub steps: usize,
    /// Wall seconds from the trainer's construction (model loading) to the end.
    pub total_seconds: f64,
    /// Seconds spent building the trainer (model loading).
    pub load_seconds: f64,
    /// Wall seconds per step.
    pub seconds_per_step: Stats,
    /// Mean seconds per step of each phase (`forward`/`backward`/`optimizer` are summed over
    /// agents, so with parallel agents they exceed `update`, which is wall clock).
    pub phases_per_step: serde_json::Map<String, serde_json::Value>,
    /// Tokens sampled over all steps.
    pub generated_tokens: f64,
    /// Sampled tokens per second of sampling time.
    pub sampling_tokens_per_s: f64,
    /// Model FLOPs of the loss (3 × forward matmuls) per second of forward + backward time
    /// summed over agents (per worker), and per second of update wall time (whole machine).
    pub train_gflops_per_s_per_worker: f64,
    /// See `train_gflops_per_s_per_worker`.
    pub update_gflops_per_s: f64,
    /// Peak resident memory of the process, where the platform reports it.
    pub peak_rss_bytes: Option<u64>,
    /// Mean joint reward of each step, for checking that a change did not alter learning.
    pub reward_per_step: Vec<f64>,
    /// Share of the steps' completions (all agents) whose advantage is exactly 0: the update
    /// skips them, so a run's update time depends on it.
    pub zero_advantage_frac: f64,
}

/// Summary statistics of a series.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (the upper middle for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Stats {
    fn of(v: &[f64]) -> Self {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len().max(1);
        Self {
            mean: s.iter().sum::<f64>() / n as f64,
            median: s.get(s.len() / 2).copied().unwrap_or(0.0),
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
        }
    }
}

/// Collects every metrics row (one per step: logging is set to every step).
#[derive(Default)]
struct Rows(Vec<Row>);

impl Observer for Rows {
    fn metrics(&mut self, row: &Row, _texts: &[(String, String)], _samples: &[serde_json::Value]) {
        // The step-0 row of `trainer.eval_at_start` holds an evaluation, not a step.
        if get(row, "step") > 0.0 {
            self.0.push(row.clone());
        }
    }
}

fn get(row: &Row, key: &str) -> f64 {
    row.iter().find(|(k, _)| k == key).map_or(0.0, |(_, v)| *v)
}

/// Runs `scenario` (its output directory replaced by a scratch one, removed afterwards) for
/// `steps` steps, or all of them when `None`.
pub fn run(mut scenario: Scenario, steps: Option<usize>) -> Result<TrainReport> {
    let scratch = std::env::temp_dir().join(format!(
        "comlrl-bench-train-{}-{}",
        std::process::id(),
        scenario.name
    ));
    scenario.output_dir = scratch.clone();
    scenario.logging.steps = 1;
    scenario.checkpoint_every = 0;
    let source = scenario.source.clone();
    let models = scenario
        .agents
        .iter()
        .map(|a| a.model.spec.clone())
        .collect();
    let agents = scenario.agents.len();
    let start = Instant::now();
    let result = (|| {
        let mut trainer = Trainer::new(scenario)?;
        let load_seconds = start.elapsed().as_secs_f64();
        if let Some(n) = steps {
            trainer.stop_after(n);
        }
        let mut rows = Rows::default();
        trainer.run(false, &mut rows)?;
        Ok::<_, Error>((load_seconds, rows.0))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    let (load_seconds, rows) = result?;
    if rows.is_empty() {
        return Err(Error::Invalid("the benchmark ran no step".into()));
    }
    let n = rows.len() as f64;
    let mean = |key: &str| rows.iter().map(|r| get(r, key)).sum::<f64>() / n;
    let step_s: Vec<f64> = rows.iter().map(|r| get(r, "step_seconds")).collect();
    let mut phases = serde_json::Map::new();
    for (k, _) in rows[0].iter().filter(|(k, _)| k.starts_with("time/")) {
        let name = k.trim_start_matches("time/").trim_end_matches("_s");
        phases.insert(name.into(), serde_json::json!(mean(k)));
    }
    let sum = |f: &dyn Fn(&Row) -> f64| rows.iter().map(f).sum::<f64>();
    let sampling = sum(&|r| get(r, "time/sampling_s"));
    let tokens = sum(&|r| get(r, "tokens_per_s") * get(r, "time/sampling_s"));
    let fb = sum(&|r| get(r, "time/forward_s") + get(r, "time/backward_s"));
    let update = sum(&|r| get(r, "time/update_s"));
    let flops = sum(&|r| {
        get(r, "train_gflops_per_s") * (get(r, "time/forward_s") + get(r, "time/backward_s"))
    });
    Ok(TrainReport {
        scenario: source,
        models,
        agents,
        steps: rows.len(),
        total_seconds: start.elapsed().as_secs_f64(),
        load_seconds,
        seconds_per_step: Stats::of(&step_s),
        phases_per_step: phases,
        generated_tokens: tokens,
        sampling_tokens_per_s: if sampling > 0.0 {
            tokens / sampling
        } else {
            0.0
        },
        train_gflops_per_s_per_worker: if fb > 0.0 { flops / fb } else { 0.0 },
        update_gflops_per_s: if update > 0.0 { flops / update } else { 0.0 },
        peak_rss_bytes: crate::runtime::peak_rss_bytes(),
        reward_per_step: rows.iter().map(|r| get(r, "reward_mean")).collect(),
        zero_advantage_frac: (0..agents)
            .map(|i| mean(&format!("agent_{i}/zero_advantage_frac")))
            .sum::<f64>()
            / agents.max(1) as f64,
    })
}
