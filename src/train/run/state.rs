//! Where a run stands, besides its tensors: the step, each agent's optimizer steps, the RNG,
//! the buffered rollouts, the open logging window and the epochs' rewards. Checkpoints save it
//! (one file per rank) and a resumed run continues from it exactly.
use crate::train::report::window::Window;
use crate::train::rollout::NodeSample;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Everything besides tensors that a resumed run needs to continue exactly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainState {
    /// The run that wrote this state (see `rundir`); a resume must match it.
    #[serde(default)]
    pub run_id: String,
    /// Training prompts processed so far (the next step's index).
    pub step: usize,
    /// Optimizer steps taken by each agent.
    pub opt_steps: Vec<u64>,
    /// The trainer's random number generator.
    pub rng: ChaCha8Rng,
    /// Rollouts waiting for the next update.
    pub buffer: Vec<NodeSample>,
    /// The logging window not yet written.
    pub window: Window,
    /// Rows in metrics.jsonl when the checkpoint was written.
    pub metrics_rows: usize,
    /// Per epoch: (sum of joint rewards, count).
    pub epoch_rewards: Vec<(f64, usize)>,
    /// The rank of each agent when written by a distributed run (empty: one process); a
    /// resume must place the agents the same way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<usize>,
}

impl TrainState {
    /// Adds a node's rewards, term values, KL, lengths and returns to the logging window, and
    /// its first-turn rewards to epoch `epoch`'s mean.
    pub fn record(&mut self, s: &NodeSample, epoch: usize) {
        let w = &mut self.window;
        if s.turn > 0 {
            // Later turns: their own reward means; agent statistics below cover every node.
            if w.turn_rewards.len() < s.turn {
                w.turn_rewards.resize(s.turn, (0.0, 0));
            }
            let slot = &mut w.turn_rewards[s.turn - 1];
            slot.0 += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
            slot.1 += s.rewards.len();
        } else {
            w.rewards.extend_from_slice(&s.rewards);
        }
        for comp in &s.components {
            for (slot, v) in w.components.iter_mut().zip(comp) {
                slot.0 += *v as f64;
                slot.1 += 1;
            }
        }
        for (aw, a) in w.agents.iter_mut().zip(&s.agents) {
            aw.kl_sum += a.kl.iter().map(|&k| k as f64).sum::<f64>();
            aw.zero_advantages += a.advantages.iter().filter(|&&x| x == 0.0).count();
            for (c, r) in a.completions.iter().zip(&a.returns) {
                aw.len_sum += c.len() as f64;
                aw.returns_sum += *r as f64;
                aw.completions += 1;
                w.generated_tokens += c.len();
            }
        }
        if s.turn > 0 {
            return;
        }
        if self.epoch_rewards.len() <= epoch {
            self.epoch_rewards.resize(epoch + 1, (0.0, 0));
        }
        let e = &mut self.epoch_rewards[epoch];
        e.0 += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
        e.1 += s.rewards.len();
    }
}
