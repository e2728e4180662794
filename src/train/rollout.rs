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
    /// Per completion: Σ_t k3(π_ref ‖ π) over its tokens (0 when the KL penalty is off).
    #[serde(default)]
    pub kl: Vec<f32>,
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
    /// Frozen reference policies and the penalty coefficient, when the KL penalty is on.
    pub reference: Option<(&'a [Policy], f64)>,
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
            kl: vec![],
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
    for (i, (a, mut r)) in agents.iter_mut().zip(returns).enumerate() {
        if let Some((refs, coef)) = spec.reference {
            a.kl = kl_k3(&policies[i], &refs[i], a)?;
            for (ret, kl) in r.iter_mut().zip(&a.kl) {
                *ret -= (coef * *kl as f64) as f32;
            }
        }
        a.advantages = advantages(&r, spec.baseline, spec.normalize);
        a.returns = r;
    }
    Ok(NodeSample {
        agents,
        rewards,
        components,
    })
}

/// Per completion, Σ_t k3 = Σ_t [exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1] with ℓ the token log-probs
/// under the current policy and ℓ_ref under the frozen reference (no gradients).
fn kl_k3(policy: &Policy, reference: &Policy, a: &AgentRollout) -> Result<Vec<f32>> {
    use crate::model::{completion_logprobs, Mode, ScoreLayout};
    let k = a.completions.len();
    if k == 0 || a.completions.iter().all(|c| c.is_empty()) {
        return Ok(vec![0.0; k]);
    }
    let prompts: Vec<&[u32]> = vec![a.prompt_ids.as_slice(); k];
    let comps: Vec<&[u32]> = a.completions.iter().map(|c| c.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id)?;
    let cur = completion_logprobs(&policy.model, &layout, Mode::Infer)?.to_vec2::<f32>()?;
    let refl = completion_logprobs(&reference.model, &layout, Mode::Infer)?.to_vec2::<f32>()?;
    Ok(a.completions
        .iter()
        .enumerate()
        .map(|(row, c)| {
            (0..c.len())
                .map(|t| {
                    let d = (refl[row][t] - cur[row][t]) as f64;
                    d.exp() - d - 1.0
                })
                .sum::<f64>() as f32
        })
        .collect())
}
