//! The logging window: sums of everything a training step measures, aggregated between two
//! log lines into one metrics row (written by `crate::metrics`).
use super::samples::LoggedSample;
use super::timing::Phases;
use crate::metrics::Row;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Sums since the last logged row.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Window {
    /// Training steps in the window.
    pub steps: usize,
    /// Joint rewards of the first-turn joint actions.
    pub rewards: Vec<f32>,
    /// Sum and count of each reward term's raw value.
    pub components: Vec<(f64, usize)>,
    /// Sum of squares of each reward term's raw value (its spread, with `components`).
    #[serde(default)]
    pub components_sq: Vec<f64>,
    /// First-turn reward groups (one per prompt and branch) and how many of them had all
    /// their joint rewards equal (a group with no spread gives every completion advantage 0).
    #[serde(default)]
    pub groups: usize,
    /// See `groups`.
    #[serde(default)]
    pub zero_std_groups: usize,
    /// Per agent: (loss sum, grad-norm sum, updates), (completion-length sum, count), return sum.
    pub agents: Vec<AgentWindow>,
    /// Wall seconds of the steps.
    pub seconds: f64,
    /// Tokens sampled.
    pub generated_tokens: usize,
    /// Seconds per phase (sampling, reward, update, …).
    #[serde(default)]
    pub phases: Phases,
    /// Model FLOPs of the loss's forward and backward passes (all agents).
    #[serde(default)]
    pub train_flops: f64,
    /// The learning rate of the window's last optimizer step; `None` (logged as null) when the
    /// window had none.
    #[serde(default)]
    pub lr: Option<f64>,
    /// Whether evaluation is on (its columns are then always present, null when not run).
    pub eval_enabled: bool,
    /// Whether the reference-KL penalty is on (adds `agent_<i>/kl`).
    #[serde(default)]
    pub kl_enabled: bool,
    /// Mean reward and mean completion return of the last evaluation in this window.
    pub eval: Option<(f64, f64)>,
    /// Each reward term's mean raw value in that evaluation (`eval/reward/<term>`).
    #[serde(default)]
    pub eval_terms: Option<Vec<f64>>,
    /// Sum and count of joint rewards of turns 2, 3, ... (multi-turn runs).
    #[serde(default)]
    pub turn_rewards: Vec<(f64, usize)>,
    /// Steps skipped because a reward term with `on_error: skip_step` failed (logged as
    /// `skipped_steps` when not 0).
    #[serde(default)]
    pub skipped_steps: usize,
    /// The window's last sampled joint actions, as `logging.completions` asks (empty when 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<LoggedSample>,
}

/// One agent's sums in a [`Window`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentWindow {
    /// Sum of mini-batch losses.
    pub loss: f64,
    /// Sum of mini-batch gradient norms.
    pub grad_norm: f64,
    /// Mini-batches (summands of `loss` and `grad_norm`).
    pub updates: usize,
    /// Sum of completion lengths, in tokens.
    pub len_sum: f64,
    /// Sum of completion returns.
    pub returns_sum: f64,
    /// Completions (summands of `len_sum` and `returns_sum`).
    pub completions: usize,
    /// Sum of per-completion reference KL.
    pub kl_sum: f64,
    /// Completions whose advantage is exactly 0 (the update skips them).
    #[serde(default)]
    pub zero_advantages: usize,
    /// Completions that did not stop by themselves (no EOS or pad token at their end: cut off
    /// at `max_new_tokens`), counted among `completions`.
    #[serde(default)]
    pub truncated: usize,
    /// Sums of the algorithm's own per-step metrics, by name (logged as `agent_<i>/<name>`,
    /// their mean per optimizer step).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
}

impl Window {
    /// An empty window for `agents` agents and `components` reward terms.
    pub fn new(agents: usize, components: usize, eval_enabled: bool, kl_enabled: bool) -> Self {
        Self {
            agents: vec![AgentWindow::default(); agents],
            components: vec![(0.0, 0); components],
            components_sq: vec![0.0; components],
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
        // No rewards (every step skipped): null, not a made-up 0.
        let n = self.rewards.len() as f64;
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
        if self.skipped_steps > 0 {
            row.push(("skipped_steps".into(), self.skipped_steps as f64));
        }
        for (t, (sum, count)) in self.turn_rewards.iter().enumerate() {
            row.push((
                format!("turn_{}/reward_mean", t + 2),
                sum / (*count).max(1) as f64,
            ));
        }
        if self.groups > 0 {
            row.push((
                "frac_reward_zero_std".into(),
                self.zero_std_groups as f64 / self.groups as f64,
            ));
        }
        for (t, (name, (sum, count))) in names.iter().zip(&self.components).enumerate() {
            let n = (*count).max(1) as f64;
            let mean = sum / n;
            row.push((format!("reward/{name}"), mean));
            // A window restored from an older checkpoint has no squares: no spread, not 0.
            if let Some(sq) = self.components_sq.get(t) {
                row.push((format!("reward/{name}/std"), spread(*sq, mean, n)));
            }
        }
        let (mut len_sum, mut truncated, mut completions) = (0.0, 0, 0);
        for a in &self.agents {
            len_sum += a.len_sum;
            truncated += a.truncated;
            completions += a.completions;
        }
        if completions > 0 {
            row.push((
                "completion_length_mean".into(),
                len_sum / completions as f64,
            ));
            row.push((
                "clipped_ratio".into(),
                truncated as f64 / completions as f64,
            ));
        }
        for (i, a) in self.agents.iter().enumerate() {
            let u = a.updates.max(1) as f64;
            let c = a.completions.max(1) as f64;
            if a.updates > 0 {
                row.push((format!("agent_{i}/loss"), a.loss / u));
                row.push((format!("agent_{i}/grad_norm"), a.grad_norm / u));
            }
            // Means over the agent's steps; a round that steps no agent (MARLHF's reward
            // model) records each value once, in a window of its own.
            for (name, sum) in &a.extra {
                row.push((
                    format!("agent_{i}/{name}"),
                    extra_mean(&a.extra, name, *sum, u),
                ));
            }
            row.push((format!("agent_{i}/completion_length_mean"), a.len_sum / c));
            row.push((format!("agent_{i}/return_mean"), a.returns_sum / c));
            row.push((
                format!("agent_{i}/zero_advantage_frac"),
                a.zero_advantages as f64 / c,
            ));
            row.push((format!("agent_{i}/clipped_ratio"), a.truncated as f64 / c));
            if self.kl_enabled {
                row.push((format!("agent_{i}/kl"), a.kl_sum / c));
            }
        }
        row.push(("lr".into(), self.lr.unwrap_or(f64::NAN)));
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
            row.extend(eval_columns(r, ret, self.eval_terms.as_deref(), names));
        }
        Some(row)
    }
}

/// The evaluation's columns: `eval/reward_mean`, `eval/return_mean` and each term's mean raw
/// value as `eval/reward/<term>` (null where not measured).
pub fn eval_columns(
    reward_mean: f64,
    return_mean: f64,
    terms: Option<&[f64]>,
    names: &[String],
) -> Row {
    let mut row: Row = vec![
        ("eval/reward_mean".into(), reward_mean),
        ("eval/return_mean".into(), return_mean),
    ];
    for (t, name) in names.iter().enumerate() {
        let v = terms.and_then(|x| x.get(t)).copied().unwrap_or(f64::NAN);
        row.push((format!("eval/reward/{name}"), v));
    }
    row
}

/// Population standard deviation from a sum of squares and the mean of `n` values (TRL's
/// `nanstd` is the sample one; over a window of many values the two differ by √(n/(n−1))).
/// The name (after `turn_<t>/`) of the count of a multi-turn episode's turn's optimizer steps,
/// which that turn's metrics (`turn_<t>/<name>`) are averaged over.
pub const TURN_STEPS: &str = "steps";

/// The logged value of the algorithm's metric `name` (of sum `sum`) among `extra`: its mean per
/// optimizer step (`steps` of them), a turn's metric its mean over that turn's steps, the count
/// of a turn's steps itself as it is.
fn extra_mean(extra: &BTreeMap<String, f64>, name: &str, sum: f64, steps: f64) -> f64 {
    let Some((turn, metric)) = name.split_once('/').filter(|(t, _)| t.starts_with("turn_")) else {
        return sum / steps;
    };
    if metric == TURN_STEPS {
        return sum;
    }
    match extra.get(&format!("{turn}/{TURN_STEPS}")) {
        Some(&n) if n > 0.0 => sum / n,
        _ => sum / steps,
    }
}

fn spread(sum_sq: f64, mean: f64, n: f64) -> f64 {
    (sum_sq / n - mean * mean).max(0.0).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_metrics_are_averaged_over_that_turns_steps() {
        let mut e = BTreeMap::new();
        e.insert("turn_2/value_loss".to_string(), 3.0);
        e.insert("turn_2/steps".to_string(), 2.0);
        // Four steps in all, two of them turn 2's.
        assert_eq!(extra_mean(&e, "turn_2/value_loss", 3.0, 4.0), 1.5);
        assert_eq!(extra_mean(&e, "turn_2/steps", 2.0, 4.0), 2.0);
        assert_eq!(extra_mean(&e, "value_loss", 8.0, 4.0), 2.0);
    }

    #[test]
    fn an_algorithms_own_sums_are_logged_per_optimizer_step() {
        let mut w = Window::new(2, 0, false, false);
        w.steps = 1;
        w.rewards = vec![1.0];
        let a = &mut w.agents[1];
        a.updates = 2;
        a.loss = 1.0;
        a.extra.insert("value_loss".into(), 3.0);
        let row = w.row(1, 1, &[]).expect("a row");
        let get = |k: &str| row.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("agent_1/value_loss"), Some(1.5));
        assert_eq!(get("agent_1/loss"), Some(0.5));
        assert_eq!(get("agent_0/value_loss"), None);
        // A window without such sums serializes as before.
        let json = serde_json::to_string(&Window::new(1, 0, false, false)).expect("json");
        assert!(!json.contains("extra"), "{json}");
    }
}
