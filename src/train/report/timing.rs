//! Where a training step's time goes: seconds per phase, summed over a metrics window and
//! reported per step in `metrics.jsonl` (`time/<phase>_s`) and by `comlrl bench train`.
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Seconds spent in each phase. Sampling, reward, KL and update are wall-clock times of
/// sequential sections; forward, backward and optimizer are summed over agents, so when agents
/// train in parallel they add up to more than `update`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Token generation of every agent (prefill + decode, tokenizing and detokenizing).
    pub sampling: f64,
    /// Reward stack (scripts, plugins, processors) over the joint actions.
    pub reward: f64,
    /// External transitions writing the next turn's prompts.
    #[serde(default)]
    pub transition: f64,
    /// Log-probs under the reference policies for the KL penalty.
    #[serde(default)]
    pub kl: f64,
    /// The whole update round (wall clock).
    pub update: f64,
    /// Scoring forward of the loss (log-probs of the completions), summed over agents.
    pub forward: f64,
    /// Backward pass and gradient accumulation, summed over agents.
    pub backward: f64,
    /// Clipping, AdamW and refreshing the sampling weight copies, summed over agents.
    pub optimizer: f64,
    /// Waiting in collectives with the other ranks (exchanging completions, receiving rank 0's
    /// rewards, gathering metrics); 0 in a one-process run. See `docs/distributed.md`.
    #[serde(default)]
    pub comm: f64,
}

impl Phases {
    /// The (name, seconds) pairs in report order.
    pub fn named(&self) -> [(&'static str, f64); 9] {
        [
            ("sampling", self.sampling),
            ("reward", self.reward),
            ("transition", self.transition),
            ("kl", self.kl),
            ("update", self.update),
            ("forward", self.forward),
            ("backward", self.backward),
            ("optimizer", self.optimizer),
            ("comm", self.comm),
        ]
    }

    /// Adds `o`'s seconds phase by phase.
    pub fn add(&mut self, o: &Phases) {
        self.sampling += o.sampling;
        self.reward += o.reward;
        self.transition += o.transition;
        self.kl += o.kl;
        self.update += o.update;
        self.forward += o.forward;
        self.backward += o.backward;
        self.optimizer += o.optimizer;
        self.comm += o.comm;
    }

    /// Every phase divided by `n` (per-step means of a window).
    pub fn scaled(&self, n: f64) -> Phases {
        let d = |x: f64| x / n;
        Phases {
            sampling: d(self.sampling),
            reward: d(self.reward),
            transition: d(self.transition),
            kl: d(self.kl),
            update: d(self.update),
            forward: d(self.forward),
            backward: d(self.backward),
            optimizer: d(self.optimizer),
            comm: d(self.comm),
        }
    }
}

/// Seconds since `t`, for adding to a phase.
pub fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}
