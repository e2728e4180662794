//! The rollout of one prompt: each agent samples K completions (batched, prompt prefilled once)
//! and the joint actions are scored by the reward stack. With several turns each joint action
//! branches: an external transition writes the agents' next prompts and a child node is
//! sampled, as CoMLRL's tree rollout does. With the KL penalty on, each completion's KL to its
//! agent's reference policy is computed once the tree is complete. What the completions train
//! (their returns and advantages) is the algorithm's to compute (`train::algorithms`).
//!
//! Where only some agents are sampled here (the ranks of an MPI run), `spec.exchange` brings
//! the other agents' completions, rank 0's rewards and next-turn prompts, and the other agents'
//! KL, so every rank ends with the same tree.
use super::generate::{sample_agents, Presampled};
use super::joint::joint_actions;
use super::kl::kl_k3;
use super::samples::{AgentRollout, NodeSample};
use super::spec::RolloutSpec;
use crate::error::{Error, Result};
use crate::model::Policy;
use crate::train::report::timing::{since, Phases};
use comlrl_reward::{JointSample, TransitionInput};
use rand::RngCore;
use rand_chacha::ChaCha8Rng;

/// Agent `i`'s policy, which this rank must hold.
pub(super) fn held(policies: &[Option<Policy>], i: usize) -> Result<&Policy> {
    policies
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::Internal(format!("agent {i} is not held by this rank")))
}

/// The dataset row a rollout answers.
pub struct RowInput<'a> {
    /// The row's prompt.
    pub prompt: &'a str,
    /// The row's fields.
    pub fields: &'a serde_json::Map<String, serde_json::Value>,
}

/// One node of a prompt's rollout tree (one turn of one branch), scored, with its children.
#[derive(Debug, Clone)]
pub struct Node {
    /// 0-based turn of this node.
    pub turn: usize,
    /// Each agent's completions (and reference KL), in agent order; returns and advantages
    /// are still empty.
    pub agents: Vec<AgentRollout>,
    /// Each joint action: one completion index per agent (see `joint`).
    pub joint: Vec<Vec<usize>>,
    /// Final reward of every joint action.
    pub rewards: Vec<f32>,
    /// Raw value of every reward term, per joint action (`[joint][term]`).
    pub components: Vec<Vec<f32>>,
    /// One child per joint action, or none (last turn or terminated early).
    pub children: Vec<Node>,
}

impl Node {
    /// The tree's nodes in creation order (the root first), each completion's return its
    /// aligned joint candidate's reward (candidate i: every agent's i-th answer) and no
    /// advantage: the samples of an algorithm that learns from candidates' rewards rather than
    /// from advantages (MADPO's and MARLHF's preference sets).
    pub fn into_reward_samples(self) -> Vec<NodeSample> {
        let mut out = Vec::new();
        self.reward_samples(&mut out);
        out
    }

    fn reward_samples(self, out: &mut Vec<NodeSample>) {
        let Node {
            turn,
            mut agents,
            rewards,
            components,
            children,
            ..
        } = self;
        for a in agents.iter_mut() {
            a.returns = rewards.iter().take(a.completions.len()).copied().collect();
        }
        out.push(NodeSample {
            turn,
            agents,
            rewards,
            components,
        });
        for child in children {
            child.reward_samples(out);
        }
    }
}

/// Samples and scores one prompt's rollout tree. `prompts[i]` is agent i's first-turn prompt
/// (only those of the agents sampled here are used). With `pre`, the first turn's completions
/// were already sampled by [`super::generate::sample_group`] (its seeds must be the ones drawn
/// from `rng` here).
pub fn rollout(
    spec: &RolloutSpec,
    row: &RowInput,
    prompts: &[String],
    rng: &mut ChaCha8Rng,
    phases: &mut Phases,
    pre: Option<Presampled>,
) -> Result<Node> {
    let empty = vec![Vec::new(); spec.policies.len()];
    let mut root = build(spec, row, prompts, rng, phases, 0, (&empty, &empty), pre)?;
    if let Some(references) = spec.references {
        reference_kl(spec, references, &mut root, phases)?;
    }
    Ok(root)
}

#[allow(clippy::too_many_arguments)]
fn build(
    spec: &RolloutSpec,
    row: &RowInput,
    prompts: &[String],
    rng: &mut ChaCha8Rng,
    phases: &mut Phases,
    turn: usize,
    (prompt_hist, resp_hist): (&[Vec<String>], &[Vec<String>]),
    pre: Option<Presampled>,
) -> Result<Node> {
    let policies = spec.policies;
    let n = policies.len();
    // One RNG stream per agent, drawn from the run's stream: the same completions whether the
    // agents sample one after the other or at the same time.
    let seeds: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    // The agents sampled here: all of them in one process, this rank's share under MPI (an
    // agent's first replica samples it).
    let local = spec.local();
    let mine: Vec<AgentRollout> = match pre {
        Some(pre) => {
            if pre.seeds != seeds || pre.agents.len() != local.len() {
                return Err(Error::Internal(
                    "presampled completions were drawn from another RNG state".into(),
                ));
            }
            pre.agents
        }
        None => {
            let t = std::time::Instant::now();
            let here = local
                .iter()
                .map(|&i| Ok((i, held(policies, i)?)))
                .collect::<Result<Vec<_>>>()?;
            let texts: Vec<Vec<&str>> = local.iter().map(|&i| vec![prompts[i].as_str()]).collect();
            let agent_seeds: Vec<Vec<u64>> = local.iter().map(|&i| vec![seeds[i]]).collect();
            let mine: Vec<AgentRollout> = sample_agents(spec, &here, &texts, turn, &agent_seeds)?
                .into_iter()
                .map(|mut one| {
                    one.pop()
                        .ok_or_else(|| Error::Internal("no rollout sampled".into()))
                })
                .collect::<Result<_>>()?;
            phases.sampling += since(t);
            mine
        }
    };
    let mut prompts = prompts.to_vec();
    let agents = spec
        .exchange
        .rollouts(&local, mine, &mut prompts, &mut phases.comm)?;
    let prompts = &prompts[..];
    let joint = joint_actions(n, spec.k, spec.cross);
    // A centralized actor's answer is split into its roles' outputs for the reward alone
    // (CoMLRL's `CentralizedCollaboration.__call__`); what trains is the answer whole.
    let outputs = |combo: &Vec<usize>| -> Vec<String> {
        match spec.roles {
            Some(roles) => super::centralized::split(&agents[0].texts[combo[0]], roles),
            None => combo
                .iter()
                .enumerate()
                .map(|(a, &c)| agents[a].texts[c].clone())
                .collect(),
        }
    };
    let batch: Vec<JointSample> = joint
        .iter()
        .map(|combo| JointSample {
            prompt: row.prompt.to_string(),
            completions: outputs(combo),
            fields: row.fields.clone(),
        })
        .collect();
    let scored = spec.exchange.scores(
        &mut || spec.stack.score(&batch),
        &mut phases.reward,
        &mut phases.comm,
    )?;
    let rewards: Vec<f32> = scored.iter().map(|s| s.reward).collect();
    let components = scored.into_iter().map(|s| s.components).collect();
    let mean = rewards.iter().map(|&r| r as f64).sum::<f64>() / rewards.len().max(1) as f64;
    let terminate = spec.early_termination.is_some_and(|t| mean > t);
    let mut children = Vec::new();
    if turn + 1 < spec.turns && !terminate {
        let transition = spec.transition.ok_or_else(|| {
            crate::Error::Config("num_turns > 1 needs trainer.external_transition".into())
        })?;
        let ph: Vec<Vec<String>> = (0..n)
            .map(|i| {
                prompt_hist[i]
                    .iter()
                    .cloned()
                    .chain([prompts[i].clone()])
                    .collect()
            })
            .collect();
        for combo in &joint {
            let parent: Vec<String> = combo
                .iter()
                .enumerate()
                .map(|(a, &c)| agents[a].texts[c].clone())
                .collect();
            let rh: Vec<Vec<String>> = (0..n)
                .map(|i| {
                    resp_hist[i]
                        .iter()
                        .cloned()
                        .chain([parent[i].clone()])
                        .collect()
                })
                .collect();
            let input = TransitionInput {
                prompt: row.prompt,
                fields: row.fields,
                turn: turn + 1,
                completions: &parent,
                prompt_history: &ph,
                response_history: &rh,
            };
            let next = spec.exchange.next_prompts(
                &mut || transition.next_prompts(&input).map_err(Error::from),
                &mut phases.transition,
                &mut phases.comm,
            )?;
            // Each rank formats the prompts of the agents it holds; the others' arrive with
            // their completions.
            let next: Vec<String> = next
                .into_iter()
                .zip(spec.prompts)
                .map(|(p, f)| match (f, spec.passthrough) {
                    (None, _) => Ok(String::new()),
                    (Some(f), true) => f.wrap(&p),
                    (Some(f), false) => f.render(&comlrl_scenario::Row {
                        prompt: p,
                        fields: row.fields.clone(),
                    }),
                })
                .collect::<Result<_>>()?;
            let hist = (&ph[..], &rh[..]);
            children.push(build(spec, row, &next, rng, phases, turn + 1, hist, None)?);
        }
    }
    Ok(Node {
        turn,
        agents,
        joint,
        rewards,
        components,
        children,
    })
}

/// Each completion's KL to its agent's reference policy, node by node in creation order (the
/// root first): computed for the agents sampled here, exchanged for the others.
fn reference_kl(
    spec: &RolloutSpec,
    references: &[Option<Policy>],
    node: &mut Node,
    phases: &mut Phases,
) -> Result<()> {
    let local = spec.local();
    for &i in &local {
        let t = std::time::Instant::now();
        let (kl, refs) = kl_k3(
            held(spec.policies, i)?,
            held(references, i)?,
            &node.agents[i],
        )?;
        node.agents[i].kl = kl;
        node.agents[i].ref_logprobs = refs;
        phases.kl += since(t);
    }
    spec.exchange
        .kl(&mut node.agents, &local, &mut phases.comm)?;
    for child in &mut node.children {
        reference_kl(spec, references, child, phases)?;
    }
    Ok(())
}
