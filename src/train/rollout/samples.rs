//! What a rollout produces and the update consumes: each node of a prompt's rollout tree (one
//! turn of one branch) with every agent's completions, the joint rewards, and — once the
//! algorithm has computed them — each completion's return and advantage. The rollout buffer
//! holds these between updates, and checkpoints keep them.
use serde::{Deserialize, Serialize};

/// One agent's part of a node sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentRollout {
    /// The agent's prompt, tokenized.
    pub prompt_ids: Vec<u32>,
    /// K completions (token ids, ending with EOS when they stopped there).
    pub completions: Vec<Vec<u32>>,
    /// The completions, decoded.
    pub texts: Vec<String>,
    /// Return of each completion.
    pub returns: Vec<f32>,
    /// Advantage of each completion.
    pub advantages: Vec<f32>,
    /// Per completion: Σ_t k3(π_ref ‖ π) over its tokens (0 when the KL penalty is off).
    #[serde(default)]
    pub kl: Vec<f32>,
    /// Per completion, each token's log-prob when it was sampled (at the update's logit
    /// scale), kept when the loss weighs re-used samples by a ratio; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sampling_logprobs: Vec<Vec<f32>>,
    /// Per completion, each token's log-prob under the frozen reference (temperature 1), kept
    /// when the reference KL is on (`kl_coef`, `kl_in_loss`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ref_logprobs: Vec<Vec<f32>>,
}

impl AgentRollout {
    /// Freshly sampled completions, before any return, advantage or KL is known.
    pub fn sampled(prompt_ids: Vec<u32>, completions: Vec<Vec<u32>>, texts: Vec<String>) -> Self {
        AgentRollout {
            prompt_ids,
            completions,
            texts,
            returns: vec![],
            advantages: vec![],
            kl: vec![],
            sampling_logprobs: vec![],
            ref_logprobs: vec![],
        }
    }
}

/// One node of a prompt's rollout tree (one turn of one branch), all agents.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSample {
    /// 0-based turn of this node.
    #[serde(default)]
    pub turn: usize,
    /// Each agent, in order.
    pub agents: Vec<AgentRollout>,
    /// Final reward of every joint action.
    pub rewards: Vec<f32>,
    /// Raw value of every reward term, per joint action (`[joint][term]`).
    pub components: Vec<Vec<f32>>,
}

impl NodeSample {
    /// Appends `other`'s aligned joint candidates (same agents, one completion of each per
    /// joint candidate) after this node's: a comparator's candidates after the agents'. The
    /// prompts stay this node's.
    pub fn append_aligned(&mut self, other: NodeSample) -> crate::error::Result<()> {
        if other.agents.len() != self.agents.len() {
            return Err(crate::error::Error::Internal(format!(
                "appending candidates of {} agents to a node of {}",
                other.agents.len(),
                self.agents.len()
            )));
        }
        for (a, b) in self.agents.iter_mut().zip(other.agents) {
            a.completions.extend(b.completions);
            a.texts.extend(b.texts);
            a.returns.extend(b.returns);
            a.advantages.extend(b.advantages);
            a.kl.extend(b.kl);
            a.sampling_logprobs.extend(b.sampling_logprobs);
        }
        self.rewards.extend(other.rewards);
        self.components.extend(other.components);
        Ok(())
    }
}
