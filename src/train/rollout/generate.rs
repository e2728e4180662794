//! Sampling the agents' completions of a node: one prompt per agent from its own RNG stream,
//! or the first turn of several consecutive prompts in one batch per agent (each prompt still
//! from its own stream), to be scored one prompt at a time by the rollout (`tree`).
use super::prompt::check_prompt_bytes;
use super::samples::AgentRollout;
use super::spec::RolloutSpec;
use crate::error::Result;
use crate::model::{generate_streams, generate_streams_scored, Policy};
use crate::train::report::timing::{since, Phases};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Agent `i` samples `k` completions of `prompt` with its own RNG stream.
pub fn sample_agent(
    policy: &Policy,
    i: usize,
    prompt: &str,
    turn: usize,
    spec: &RolloutSpec,
    seed: u64,
) -> Result<AgentRollout> {
    let mut out = sample_prompts(policy, i, &[prompt], turn, spec, &[seed])?;
    out.pop()
        .ok_or_else(|| crate::Error::Internal("no rollout sampled".into()))
}

/// Agent `i` samples `k` completions of each prompt in one batch, prompt p's rows from the
/// RNG stream seeded by `seeds[p]` (the same completions as one [`sample_agent`] per prompt).
fn sample_prompts(
    policy: &Policy,
    i: usize,
    prompts: &[&str],
    turn: usize,
    spec: &RolloutSpec,
    seeds: &[u64],
) -> Result<Vec<AgentRollout>> {
    let ids = prompts
        .iter()
        .map(|prompt| {
            // A transition's prompt is as untrusted as a dataset row: bounded before encoding.
            let room = policy
                .model
                .max_positions()
                .saturating_sub(spec.sampling[i].max_new_tokens);
            if let Err(found) = check_prompt_bytes(prompt, policy, room) {
                return Err(crate::Error::Invalid(format!(
                    "agent {i}'s prompt at turn {} {found}; check the dataset, template or transition",
                    turn + 1,
                )));
            }
            let ids = policy.tokenizer.encode(prompt)?;
            if ids.is_empty() {
                return Err(crate::Error::Invalid(format!(
                    "agent {i}'s prompt at turn {} encodes to no tokens (prompt: {prompt:?}); check the dataset, template or transition",
                    turn + 1,
                )));
            }
            Ok(ids)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rngs: Vec<ChaCha8Rng> = seeds
        .iter()
        .map(|&s| ChaCha8Rng::seed_from_u64(s))
        .collect();
    let refs: Vec<&[u32]> = ids.iter().map(|v| v.as_slice()).collect();
    let scale = spec.sampling_logprobs.and_then(|s| s.get(i).copied());
    let (out, mut logprobs) = match scale {
        // The sampling-time log-probs a clipped ratio needs, from the logits each token was
        // drawn from.
        Some(scale) => generate_streams_scored(
            policy.sampler(),
            &refs,
            spec.k,
            &spec.sampling[i],
            &policy.eos_ids,
            policy.pad_id,
            &mut rngs,
            scale,
        ),
        None => generate_streams(
            policy.sampler(),
            &refs,
            spec.k,
            &spec.sampling[i],
            &policy.eos_ids,
            policy.pad_id,
            &mut rngs,
        )
        .map(|out| (out, Vec::new())),
    }
    .map_err(|e| crate::Error::from(e).for_agent(i, None))?;
    logprobs.resize(out.len(), Vec::new());
    ids.into_iter()
        .zip(out)
        .zip(logprobs)
        .map(|((prompt_ids, completions), logprobs)| {
            let texts = completions
                .iter()
                .map(|c| policy.tokenizer.decode(c, true))
                .collect::<crate::model::Result<Vec<_>>>()?;
            let mut a = AgentRollout::sampled(prompt_ids, completions, texts);
            a.sampling_logprobs = logprobs;
            Ok(a)
        })
        .collect()
}

/// One prompt's first-turn completions, sampled ahead in a batch with other prompts by
/// [`sample_group`]: every agent's RNG seed and the rollouts of the agents sampled here (in
/// agent order; under MPI only this rank's share).
pub struct Presampled {
    pub(super) seeds: Vec<u64>,
    pub(super) agents: Vec<AgentRollout>,
}

impl Presampled {
    /// Completions that come from elsewhere (an endpoint's texts, tokenized), to be scored by
    /// the rollout that draws its `agents` seeds from `rng` next.
    pub fn given(rng: &ChaCha8Rng, agents: Vec<AgentRollout>) -> Self {
        let mut r = rng.clone();
        let seeds = (0..agents.len()).map(|_| r.next_u64()).collect();
        Presampled { seeds, agents }
    }
}

/// Samples the first turn of several consecutive prompts (`prompts[row][agent]`) in one batch
/// per agent — every decode step reads the weights once for all their rows. Valid while the
/// policies do not change between those prompts (CoMLRL's per-prompt loop samples all of a
/// rollout buffer's prompts before its update). The seeds are the ones the rollout
/// ([`super::tree::rollout`]) would draw for those prompts in turn from `rng` (a copy is used:
/// `rng` itself does not move), so it then scores each prompt exactly as if it had sampled it
/// itself.
pub fn sample_group(
    spec: &RolloutSpec,
    prompts: &[Vec<String>],
    rng: &ChaCha8Rng,
    phases: &mut Phases,
) -> Result<Vec<Presampled>> {
    let n = spec.policies.len();
    if spec.turns != 1 {
        return Err(crate::Error::Internal(
            "presampling is for single-turn rollouts".into(),
        ));
    }
    let mut ahead = rng.clone();
    let seeds: Vec<Vec<u64>> = prompts
        .iter()
        .map(|_| (0..n).map(|_| ahead.next_u64()).collect())
        .collect();
    let t = std::time::Instant::now();
    // The agents sampled here (an agent's first replica samples it).
    let held: Vec<(usize, &Policy)> = spec
        .policies
        .iter()
        .enumerate()
        .filter(|&(i, _)| spec.samples[i])
        .filter_map(|(i, p)| Some((i, p.as_ref()?)))
        .collect();
    let sample = |&(i, policy): &(usize, &Policy)| {
        let texts: Vec<&str> = prompts.iter().map(|p| p[i].as_str()).collect();
        let agent_seeds: Vec<u64> = seeds.iter().map(|s| s[i]).collect();
        sample_prompts(policy, i, &texts, 0, spec, &agent_seeds)
    };
    let per_agent: Vec<Vec<AgentRollout>> = if spec.parallel && held.len() > 1 {
        held.par_iter().map(sample).collect::<Result<_>>()?
    } else {
        held.iter().map(sample).collect::<Result<_>>()?
    };
    phases.sampling += since(t);
    let mut rows: Vec<Presampled> = seeds
        .into_iter()
        .map(|seeds| Presampled {
            seeds,
            agents: Vec::with_capacity(n),
        })
        .collect();
    for agent in per_agent {
        for (row, a) in rows.iter_mut().zip(agent) {
            row.agents.push(a);
        }
    }
    Ok(rows)
}
