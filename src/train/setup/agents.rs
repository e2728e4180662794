//! The agents of a run as this process holds them: each one's policy, optimizer, sampling
//! settings and prompt formatting, plus the frozen reference copies the KL penalty compares
//! against; loaded after the memory they will take is checked.
use super::memory::{self, Lookup};
use super::models::{load_placed, load_references, sampling};
use crate::dist::Placement;
use crate::error::Result;
use crate::model::{Policy, SamplingParams};
use crate::train::optim::adamw::{AdamW, AdamWConfig};
use crate::train::optim::moments::StateDtype;
use crate::train::rollout::prompt::{check_agent_prompt_lengths, Prompts};
use comlrl_scenario::{Dtype, ImportanceLevel, LogprobTemperature, Scenario};

/// The agents this process holds; `None` in a slot where another rank holds the agent.
pub struct Agents {
    /// Each agent's policy.
    pub policies: Vec<Option<Policy>>,
    /// The initial policies of the agents sampled here, frozen, kept only when `kl_coef` ≠ 0
    /// (an adapted agent's shares its base: [`load_references`]).
    pub references: Option<Vec<Option<Policy>>>,
    /// Each agent's AdamW.
    pub optims: Vec<Option<AdamW>>,
    /// Each agent's sampling settings (of every agent, held here or not).
    pub sampling: Vec<SamplingParams>,
    /// Each agent's template + chat template.
    pub prompts: Prompts,
    /// `samples[i]`: this process samples agent `i` and writes its files (its first replica).
    pub samples: Vec<bool>,
    /// Each agent's EOS ids and pad id (what makes a completion end by itself): `None` for an
    /// agent held by another rank until the trainer shares them (`world::run::share_ends`).
    pub ends: Vec<Option<(Vec<u32>, u32)>>,
    /// When the loss weighs re-used samples by a ratio (`trainer.importance_level`), each
    /// agent's logit scale for the sampling-time log-probs kept with its completions (1, or
    /// 1 / its temperature with `logprob_temperature: sampling`: the update's); else `None`.
    pub sampling_logprobs: Option<Vec<f64>>,
}

impl Agents {
    /// Checks that the agents `placement` puts here fit in memory, then loads them: policies,
    /// references (only the sampling replica computes the KL), optimizers, prompt formatters.
    pub fn load(s: &Scenario, placement: &Placement) -> Result<Self> {
        let estimate = memory::check(
            s,
            |i| placement.holds(i),
            |i| placement.is_local(i),
            Lookup::Download,
        )?;
        log::debug!(
            "memory estimate: {} at the peak for {} agent(s) ({} available)",
            memory::human(estimate.peak),
            estimate.agents.len(),
            estimate
                .available
                .as_ref()
                .map_or("unknown".into(), |(b, _)| memory::human(*b))
        );
        let policies = load_placed(s, |i| placement.holds(i), true)?;
        for (a, p) in s.agents.iter().zip(&policies) {
            if let Some(p) = p {
                check_agent_prompt_lengths(s, a, p)?;
            }
        }
        let references = match s.trainer.kl_coef != 0.0 || s.trainer.kl_in_loss != 0.0 {
            true => Some(load_references(s, &policies, |i| placement.is_local(i))?),
            false => None,
        };
        let optims = policies
            .iter()
            .enumerate()
            .map(|(i, p)| p.as_ref().map(|p| optimizer(s, i, p)))
            .collect();
        let sampling = s.agents.iter().map(sampling).collect();
        let prompts = Prompts::for_placed(s, &policies)?;
        let samples = (0..s.agents.len()).map(|i| placement.is_local(i)).collect();
        let ends = policies
            .iter()
            .map(|p| p.as_ref().map(|p| (p.eos_ids.clone(), p.pad_id)))
            .collect();
        let t = &s.trainer;
        let sampling_logprobs = (t.importance_level != ImportanceLevel::None).then(|| {
            s.agents
                .iter()
                .map(|a| match t.logprob_temperature {
                    LogprobTemperature::One => 1.0,
                    LogprobTemperature::Sampling => 1.0 / a.sampling.temperature,
                })
                .collect()
        });
        Ok(Agents {
            policies,
            references,
            optims,
            sampling,
            prompts,
            samples,
            ends,
            sampling_logprobs,
        })
    }
}

/// Agent `i`'s AdamW as the trainer settings and its learning rate say, over `p`'s variables.
fn optimizer(s: &Scenario, i: usize, p: &Policy) -> AdamW {
    let t = &s.trainer;
    let cfg = AdamWConfig {
        lr: s.agents[i].learning_rate,
        beta1: t.adam_beta1,
        beta2: t.adam_beta2,
        eps: t.adam_epsilon,
        weight_decay: t.weight_decay,
    };
    let state = match t.optimizer_state_dtype {
        Dtype::Bf16 => StateDtype::Bf16,
        _ => StateDtype::F32,
    };
    // The same seed on every replica of an agent: they round identically.
    let seed = s.seed ^ (i as u64).wrapping_mul(0xa076_1d64_78bd_642f);
    AdamW::with_state(p.vars(), cfg, state, seed)
}
