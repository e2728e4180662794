//! Sampling the agents' completions of a node: one prompt per agent from its own RNG stream,
//! or the first turn of several consecutive prompts in one batch per agent (each prompt still
//! from its own stream), to be scored one prompt at a time by the rollout (`tree`). Agents on
//! one shared base decode together (`trainer.batch_agent_sampling`): one forward per token step
//! for all their rows, each agent's samples unchanged.
use super::prompt::check_prompt_bytes;
use super::samples::AgentRollout;
use super::spec::RolloutSpec;
use crate::error::Result;
use crate::model::{generate_groups, generate_streams, generate_streams_scored, DecodeJob, Policy};
use crate::train::report::timing::{since, Phases};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Agents `agents` (index, policy) sample `k` completions of each of their prompts
/// (`prompts[a]` for `agents[a]`), its prompt p from the RNG stream seeded by `seeds[a][p]`.
/// With `spec.batch_agents`, agents on one shared base decode together (one forward per token
/// step for all their rows: the base read once, not once per agent), the others each alone; the
/// groups at the same time with `spec.parallel`. The same completions either way.
pub(super) fn sample_agents(
    spec: &RolloutSpec,
    agents: &[(usize, &Policy)],
    prompts: &[Vec<&str>],
    turn: usize,
    seeds: &[Vec<u64>],
) -> Result<Vec<Vec<AgentRollout>>> {
    // Groups of positions in `agents`, each group's agents on the first one's base.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (a, (_, policy)) in agents.iter().enumerate() {
        let joins = groups
            .iter_mut()
            .find(|g| spec.batch_agents && agents[g[0]].1.sampler().shares_base(&policy.sampler()));
        match joins {
            Some(g) => g.push(a),
            None => groups.push(vec![a]),
        }
    }
    let run = |group: &Vec<usize>| -> Result<Vec<(usize, Vec<AgentRollout>)>> {
        let members: Vec<(usize, &Policy)> = group.iter().map(|&a| agents[a]).collect();
        let texts: Vec<&[&str]> = group.iter().map(|&a| prompts[a].as_slice()).collect();
        let group_seeds: Vec<&[u64]> = group.iter().map(|&a| seeds[a].as_slice()).collect();
        let out = match members.len() {
            1 => vec![sample_prompts(
                members[0].1,
                members[0].0,
                texts[0],
                turn,
                spec,
                group_seeds[0],
            )?],
            _ => sample_together(spec, &members, &texts, turn, &group_seeds)?,
        };
        Ok(group.iter().copied().zip(out).collect())
    };
    let done: Vec<Vec<(usize, Vec<AgentRollout>)>> = if spec.parallel && groups.len() > 1 {
        groups.par_iter().map(run).collect::<Result<_>>()?
    } else {
        groups.iter().map(run).collect::<Result<_>>()?
    };
    let mut out: Vec<Option<Vec<AgentRollout>>> = (0..agents.len()).map(|_| None).collect();
    for (a, rollouts) in done.into_iter().flatten() {
        out[a] = Some(rollouts);
    }
    out.into_iter()
        .map(|o| o.ok_or_else(|| crate::Error::Internal("an agent was not sampled".into())))
        .collect()
}

/// Agent `i`'s prompts, checked and tokenized.
fn encode(
    policy: &Policy,
    i: usize,
    prompts: &[&str],
    turn: usize,
    spec: &RolloutSpec,
) -> Result<Vec<Vec<u32>>> {
    prompts
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
        .collect()
}

/// The RNG streams seeded by `seeds`, one per prompt.
fn streams(seeds: &[u64]) -> Vec<ChaCha8Rng> {
    seeds
        .iter()
        .map(|&s| ChaCha8Rng::seed_from_u64(s))
        .collect()
}

/// Agent `i`'s logit scale for the sampling-time log-probs, when the loss needs them.
fn logprob_scale(spec: &RolloutSpec, i: usize) -> Option<f64> {
    spec.sampling_logprobs.and_then(|s| s.get(i).copied())
}

/// Each prompt's rollout of agent `policy`: its tokens, completions, their texts and (when
/// kept) their sampling-time log-probs.
fn rollouts(
    policy: &Policy,
    ids: Vec<Vec<u32>>,
    out: Vec<Vec<Vec<u32>>>,
    mut logprobs: Vec<Vec<Vec<f32>>>,
) -> Result<Vec<AgentRollout>> {
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

/// Agent `i` samples `k` completions of `prompt` alone, from the RNG stream seeded by `seed`
/// (a centralized comparator's one policy answering for every agent).
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
/// RNG stream seeded by `seeds[p]` (the same completions as one decode per prompt).
fn sample_prompts(
    policy: &Policy,
    i: usize,
    prompts: &[&str],
    turn: usize,
    spec: &RolloutSpec,
    seeds: &[u64],
) -> Result<Vec<AgentRollout>> {
    let ids = encode(policy, i, prompts, turn, spec)?;
    let mut rngs = streams(seeds);
    let refs: Vec<&[u32]> = ids.iter().map(|v| v.as_slice()).collect();
    let (out, logprobs) = match logprob_scale(spec, i) {
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
    rollouts(policy, ids, out, logprobs)
}

/// Agents `members` (on one base) sample their prompts in one decode (`generate_groups`),
/// each as [`sample_prompts`] would alone: its own settings, EOS ids and RNG streams.
fn sample_together(
    spec: &RolloutSpec,
    members: &[(usize, &Policy)],
    prompts: &[&[&str]],
    turn: usize,
    seeds: &[&[u64]],
) -> Result<Vec<Vec<AgentRollout>>> {
    let ids: Vec<Vec<Vec<u32>>> = members
        .iter()
        .zip(prompts)
        .map(|(&(i, policy), texts)| encode(policy, i, texts, turn, spec))
        .collect::<Result<_>>()?;
    let refs: Vec<Vec<&[u32]>> = ids
        .iter()
        .map(|a| a.iter().map(|v| v.as_slice()).collect())
        .collect();
    let jobs: Vec<DecodeJob> = members
        .iter()
        .zip(&refs)
        .map(|(&(i, policy), prompts)| DecodeJob {
            sampler: policy.sampler(),
            prompts,
            k: spec.k,
            params: &spec.sampling[i],
            eos_ids: &policy.eos_ids,
            pad_id: policy.pad_id,
            logprob_scale: logprob_scale(spec, i),
        })
        .collect();
    let mut rngs: Vec<Vec<ChaCha8Rng>> = seeds.iter().map(|s| streams(s)).collect();
    let mut rng_sets: Vec<&mut [ChaCha8Rng]> = rngs.iter_mut().map(Vec::as_mut_slice).collect();
    let sampled = generate_groups(&jobs, &mut rng_sets).map_err(|e| {
        let err = crate::Error::from(e.error);
        match e.group {
            Some(g) => err.for_agent(members[g].0, None),
            None => {
                let agents: Vec<String> = members.iter().map(|m| m.0.to_string()).collect();
                err.within(format!(
                    "the decode that agents {} on one base share",
                    agents.join(", ")
                ))
            }
        }
    })?;
    members
        .iter()
        .zip(ids)
        .zip(sampled)
        .map(|((&(_, policy), ids), (out, logprobs))| rollouts(policy, ids, out, logprobs))
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
    let texts: Vec<Vec<&str>> = held
        .iter()
        .map(|&(i, _)| prompts.iter().map(|p| p[i].as_str()).collect())
        .collect();
    let agent_seeds: Vec<Vec<u64>> = held
        .iter()
        .map(|&(i, _)| seeds.iter().map(|s| s[i]).collect())
        .collect();
    let per_agent = sample_agents(spec, &held, &texts, 0, &agent_seeds)?;
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
