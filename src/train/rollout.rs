//! Rollouts: each agent samples K completions for a prompt (batched, prompt prefilled once),
//! the joint actions are scored by the reward stack, and every completion gets its return and
//! advantage. A `NodeSample` is one prompt's rollout of all agents, kept until the next update.
use super::advantage::{advantages, Baseline};
use super::joint::{completion_returns, joint_actions};
use crate::error::Result;
use crate::model::{generate, Policy, SamplingParams};
use comlrl_reward::{JointSample, RewardStack};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One agent's part of a node sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentRollout {
    pub prompt_ids: Vec<u32>,
    /// K completions (token ids, ending with EOS when they stopped there).
    pub completions: Vec<Vec<u32>>,
    pub texts: Vec<String>,
    pub returns: Vec<f32>,
    pub advantages: Vec<f32>,
}

/// One training prompt's rollout, all agents.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSample {
    pub agents: Vec<AgentRollout>,
    /// Final reward of every joint action.
    pub rewards: Vec<f32>,
    /// Raw value of every reward term, per joint action (`[joint][term]`).
    pub components: Vec<Vec<f32>>,
}

/// How rollouts are produced.
pub struct RolloutSpec<'a> {
    pub k: usize,
    pub cross: bool,
    pub baseline: Baseline,
    pub normalize: bool,
    pub sampling: &'a [SamplingParams],
}

/// Samples, scores and computes advantages for one prompt. `prompts[i]` is agent i's rendered
/// prompt; `row` is the dataset row (prompt text and other fields) the reward sees.
pub fn rollout(
    policies: &[Policy],
    prompts: &[String],
    row_prompt: &str,
    row_fields: &serde_json::Map<String, serde_json::Value>,
    stack: &RewardStack,
    spec: &RolloutSpec,
    rng: &mut ChaCha8Rng,
) -> Result<NodeSample> {
    let n = policies.len();
    let mut agents = Vec::with_capacity(n);
    for (i, policy) in policies.iter().enumerate() {
        let ids = policy.tokenizer.encode(&prompts[i])?;
        if ids.is_empty() {
            return Err(crate::Error::Invalid(format!(
                "agent {i}'s prompt encodes to no tokens (prompt: {:?}); check the dataset and template",
                prompts[i]
            )));
        }
        let out = generate(
            &policy.model,
            &[&ids],
            spec.k,
            &spec.sampling[i],
            &policy.eos_ids,
            policy.pad_id,
            rng,
        )?;
        let completions = out.into_iter().next().unwrap_or_default();
        let texts = completions
            .iter()
            .map(|c| policy.tokenizer.decode(c, true))
            .collect::<Result<Vec<_>>>()?;
        agents.push(AgentRollout {
            prompt_ids: ids,
            completions,
            texts,
            returns: vec![],
            advantages: vec![],
        });
    }
    let joint = joint_actions(n, spec.k, spec.cross);
    let batch: Vec<JointSample> = joint
        .iter()
        .map(|combo| JointSample {
            prompt: row_prompt.to_string(),
            completions: combo
                .iter()
                .enumerate()
                .map(|(a, &c)| agents[a].texts[c].clone())
                .collect(),
            fields: row_fields.clone(),
        })
        .collect();
    let scored = stack.score(&batch)?;
    let rewards: Vec<f32> = scored.iter().map(|s| s.reward).collect();
    let components = scored.into_iter().map(|s| s.components).collect();
    let returns = completion_returns(&joint, &rewards, n, spec.k);
    for (a, r) in agents.iter_mut().zip(returns) {
        a.advantages = advantages(&r, spec.baseline, spec.normalize);
        a.returns = r;
    }
    Ok(NodeSample {
        agents,
        rewards,
        components,
    })
}
