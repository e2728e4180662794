//! How a run is driven, beside its parts: the scenario and its resolved YAML, the interrupt
//! flag, the claim on the output directory and the benchmarks' early stop; and what follows
//! from the scenario alone (steps, the shape of a rollout, a fresh logging window, what a
//! checkpoint must fit).
use crate::train::report::window::Window;
use crate::train::rollout::joint::joint_count;
use crate::train::run::dir::RunLock;
use crate::train::run::verify::Expect;
use comlrl_scenario::{JointMode, Scenario};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A run's scenario and the switches that drive it.
pub struct Settings {
    /// The resolved scenario.
    pub scenario: Scenario,
    /// The scenario as YAML (saved with each checkpoint; a resume compares it).
    pub yaml: String,
    /// Set (by Ctrl-C, say) to checkpoint and stop after the current step.
    pub interrupt: Arc<AtomicBool>,
    /// Stop after this many steps without writing checkpoints or final models (benchmarks).
    pub stop_after: Option<usize>,
    /// The claim on the output directory (taken by `run` when the caller has not given one).
    pub lock: Option<RunLock>,
}

impl Settings {
    /// Settings for `scenario`, not interrupted, not yet claimed.
    pub fn new(scenario: Scenario) -> Self {
        let yaml = scenario.to_yaml();
        Self::with_yaml(scenario, yaml)
    }

    /// [`Settings::new`] recording `yaml` as the scenario (a centralized actor's run keeps the
    /// scenario as written, not its single-agent form).
    pub fn with_yaml(scenario: Scenario, yaml: String) -> Self {
        Settings {
            scenario,
            yaml,
            interrupt: Arc::new(AtomicBool::new(false)),
            stop_after: None,
            lock: None,
        }
    }

    /// Training steps of the whole run (one per training prompt and epoch).
    pub fn total_steps(&self) -> usize {
        self.scenario.run_epochs() * self.scenario.dataset.train.rows.len()
    }

    /// The step the run stops at: the last one, or earlier for a benchmark.
    pub fn limit(&self) -> usize {
        let total = self.total_steps();
        self.stop_after.map_or(total, |n| n.min(total))
    }

    /// Update rounds over the whole run, for the LR schedule: nodes per prompt (every branch
    /// expanded; early termination makes the real count smaller), rounds of
    /// `rollout_buffer_size` nodes with a flush at each epoch's end.
    pub fn rounds(&self) -> usize {
        let t = &self.scenario.trainer;
        // Saturating: the scenario bounds the joint actions per node, but a deep multi-turn
        // tree may still count more nodes than fit (the schedule is then flat at the start).
        let joint = self.joint_per_node();
        let nodes_per_prompt = (0..t.num_turns).fold(0usize, |acc, turn| {
            acc.saturating_add(joint.saturating_pow(turn as u32))
        });
        let rows = self.scenario.dataset.train.rows.len();
        let size = t.rollout_buffer_size.max(1);
        // A multi-turn actor-critic's round takes whole episodes (`Algorithm::whole_episodes`):
        // ⌈size / turns⌉ of them, without early termination.
        let per_epoch = match t.algorithm.has_critic() && t.num_turns > 1 {
            true => rows.div_ceil(size.div_ceil(nodes_per_prompt.max(1))),
            false => rows.saturating_mul(nodes_per_prompt).div_ceil(size),
        };
        t.num_train_epochs.saturating_mul(per_epoch)
    }

    /// Joint actions scored per rollout node (bounded by the scenario's `max_joint_actions`).
    pub fn joint_per_node(&self) -> usize {
        let t = &self.scenario.trainer;
        joint_count(
            self.scenario.agents.len(),
            t.num_generations,
            t.joint_mode == JointMode::Cross,
        )
        .unwrap_or(usize::MAX)
    }

    /// Whether the run evaluates (an eval set, a nonzero interval and sample count).
    pub fn eval_enabled(&self) -> bool {
        self.scenario.dataset.eval.is_some()
            && self.scenario.trainer.eval_interval > 0
            && self.scenario.trainer.eval_num_samples > 0
    }

    /// An empty logging window for `terms` reward terms.
    pub fn new_window(&self, terms: usize) -> Window {
        Window::new(
            self.scenario.agents.len(),
            terms,
            self.eval_enabled(),
            self.scenario.trainer.kl_coef != 0.0 || self.scenario.trainer.kl_in_loss != 0.0,
        )
    }

    /// What a checkpoint's state must fit to be resumed with this scenario: `terms` reward
    /// terms, each agent's vocabulary (`usize::MAX` where another rank holds it), the agents'
    /// ranks as recorded.
    pub fn expect(&self, terms: usize, vocab: Vec<usize>, ranks: Vec<usize>) -> Expect {
        let t = &self.scenario.trainer;
        Expect {
            agents: self.scenario.agents.len(),
            k: t.num_generations,
            joint: self.joint_per_node(),
            terms,
            turns: t.num_turns,
            total_steps: self.total_steps(),
            epochs: self.scenario.run_epochs(),
            vocab,
            ranks,
            trained: self.trained(),
        }
    }

    /// What each agent trains, in words: full fine-tuning, or its adapter (rank, α, scaling,
    /// targets) on a base of `agents.base_dtype`; with critics that have adapters
    /// (`trainer.critic.adapter`), theirs after it. Recorded in each checkpoint's state.
    pub fn trained(&self) -> Vec<String> {
        let s = &self.scenario;
        // Critic adapters of the same shape would load under another scaling too.
        let critics = (s.trainer.critic.as_ref())
            .filter(|c| c.separate)
            .and_then(|c| {
                Some(format!(
                    "; critics: {}",
                    adapter_words(c.adapter.as_ref()?, c.base_dtype)
                ))
            })
            .unwrap_or_default();
        s.agents
            .iter()
            .map(|a| match &a.adapter {
                None => format!("full fine-tuning{critics}"),
                Some(p) => format!("{}{critics}", adapter_words(p, a.base_dtype)),
            })
            .collect()
    }
}

/// An adapter in words: rank, α, scaling, targets and the dtype of the base under it.
fn adapter_words(p: &comlrl_scenario::AdapterPlan, base: comlrl_scenario::BaseDtype) -> String {
    format!(
        "a LoRA adapter (r {}, alpha {}{}, targets {}) on a {} base",
        p.rank,
        p.alpha,
        if p.rslora { ", rsLoRA scaling" } else { "" },
        p.targets.join(" "),
        serde_json::to_value(base)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{base:?}")),
    )
}
