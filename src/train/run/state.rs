//! Where a run stands, besides its tensors: the step, each agent's optimizer steps, the RNG,
//! the buffered rollouts, the open logging window and the epochs' rewards. Checkpoints save it
//! (one file per rank) and a resumed run continues from it exactly.
use crate::train::report::samples::{keep_last, LoggedSample};
use crate::train::report::window::Window;
use crate::train::rollout::joint::joint_actions;
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
    /// What each agent trains, in words (full fine-tuning, or its adapter's shape and scaling
    /// and the dtype of the frozen base under it); a resume must train the same. Empty in
    /// checkpoints written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trained: Vec<String>,
}

/// When an agent's completion was cut off rather than stopped by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// The agent's `max_new_tokens`: sampling stops there.
    pub max_new_tokens: usize,
    /// The agent's EOS ids and pad id (every rank has every agent's, shared when the run
    /// starts; `None`: unknown, and a completion of the full length then counts as cut off).
    pub ends: Option<(Vec<u32>, u32)>,
}

impl Stop {
    /// Whether `completion` reached `max_new_tokens` without stopping by itself (TRL's
    /// `is_truncated`: no EOS at its end). A shorter one always ended with an EOS.
    pub fn cut_off(&self, completion: &[u32]) -> bool {
        match completion.last() {
            None => false,
            Some(last) => {
                completion.len() >= self.max_new_tokens
                    && !self
                        .ends
                        .as_ref()
                        .is_some_and(|(eos, pad)| eos.contains(last) || last == pad)
            }
        }
    }
}

impl TrainState {
    /// Adds a node's rewards, term values, KL, lengths and returns to the logging window, and
    /// its first-turn rewards to epoch `epoch`'s mean. `stops[i]` says when agent `i`'s
    /// completions were cut off.
    pub fn record(&mut self, s: &NodeSample, epoch: usize, stops: &[Stop]) {
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
            if !s.rewards.is_empty() {
                w.groups += 1;
                // TRL's `frac_reward_zero_std`: the group's rewards are all equal.
                if s.rewards.iter().all(|&r| r == s.rewards[0]) {
                    w.zero_std_groups += 1;
                }
            }
        }
        // A window restored from an older checkpoint has no squares; it gets them back with
        // the next window.
        let squares = w.components_sq.len() == w.components.len();
        for comp in &s.components {
            for (t, (slot, v)) in w.components.iter_mut().zip(comp).enumerate() {
                slot.0 += *v as f64;
                slot.1 += 1;
                if squares {
                    w.components_sq[t] += (*v as f64).powi(2);
                }
            }
        }
        for (i, (aw, a)) in w.agents.iter_mut().zip(&s.agents).enumerate() {
            if let Some(stop) = stops.get(i) {
                aw.truncated += a.completions.iter().filter(|c| stop.cut_off(c)).count();
            }
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

    /// Keeps `s`'s joint actions among the window's last `cap` logged samples
    /// (`logging.completions`); `prompt` is the dataset prompt, `step` 1-based, `cross` the
    /// joint mode.
    pub fn keep_samples(
        &mut self,
        s: &NodeSample,
        step: usize,
        prompt: &str,
        cap: usize,
        cross: bool,
    ) {
        if cap == 0 || s.agents.is_empty() {
            return;
        }
        let k = s.agents[0].completions.len();
        let joint = joint_actions(s.agents.len(), k, cross);
        // Only the last `cap` can be kept: build no more than those.
        let skip = joint.len().saturating_sub(cap);
        let new = joint
            .iter()
            .enumerate()
            .skip(skip)
            .filter_map(|(j, combo)| {
                let pick = |f: fn(&crate::train::rollout::AgentRollout, usize) -> Option<f32>| {
                    s.agents
                        .iter()
                        .zip(combo)
                        .map(|(a, &c)| f(a, c).unwrap_or(f32::NAN))
                        .collect::<Vec<_>>()
                };
                Some(LoggedSample {
                    step,
                    turn: s.turn + 1,
                    prompt: prompt.to_string(),
                    completions: s
                        .agents
                        .iter()
                        .zip(combo)
                        .map(|(a, &c)| a.texts.get(c).cloned())
                        .collect::<Option<Vec<_>>>()?,
                    reward: *s.rewards.get(j)?,
                    terms: s.components.get(j).cloned().unwrap_or_default(),
                    returns: pick(|a, c| a.returns.get(c).copied()),
                    advantages: pick(|a, c| a.advantages.get(c).copied()),
                })
            })
            .collect();
        keep_last(&mut self.window.samples, new, cap);
    }
}
