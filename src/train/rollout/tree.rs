//! Rollouts: each agent samples K completions for a prompt (batched, prompt prefilled once),
//! the joint actions are scored by the reward stack, and every completion gets its return and
//! advantage. With several turns each joint action branches: an external transition writes the
//! agents' next prompts and a child node is sampled, as CoMLRL's tree rollout does. A
//! `NodeSample` is one node (one turn of one branch), kept until the next update.
//!
//! In a distributed run (`spec.world` has several ranks) each rank samples only the agents it
//! holds (`Some` in `policies`); the completions are then all-gathered, rank 0 scores them and
//! runs the transition, and every rank computes every agent's returns and advantages from the
//! same numbers (see `exchange`).
use crate::dist::World;
use crate::error::{Error, Result};
use crate::model::{Policy, SamplingParams};
use crate::train::algorithms::magrpo::advantage::{advantages, Baseline};
use crate::train::report::timing::{since, Phases};
use crate::train::rollout::generate::{sample_agent, Presampled};
use crate::train::rollout::joint::{completion_returns, joint_actions};
use crate::train::world::rollouts;
use comlrl_reward::{JointSample, RewardStack, TransitionFn, TransitionInput};
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
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

/// How rollouts are produced.
pub struct RolloutSpec<'a> {
    /// Generations per agent per node.
    pub k: usize,
    /// Joint actions are the Cartesian product (else aligned).
    pub cross: bool,
    /// Group baseline of the advantages.
    pub baseline: Baseline,
    /// Divide the group's advantages by their standard deviation.
    pub normalize: bool,
    /// Each agent's sampling settings.
    pub sampling: &'a [SamplingParams],
    /// Frozen reference policies (of the agents held here) and the penalty coefficient, when
    /// the KL penalty is on.
    pub reference: Option<(&'a [Option<Policy>], f64)>,
    /// Turns per episode; > 1 needs `transition`.
    pub turns: usize,
    /// γ for returns across turns.
    pub discount: f64,
    /// Stop expanding a node whose mean reward exceeds this.
    pub early_termination: Option<f64>,
    /// Writes the agents' next-turn prompts (multi-turn).
    pub transition: Option<&'a dyn TransitionFn>,
    /// Each agent's prompt formatting (template, then chat template), applied to the
    /// transition's prompts.
    pub prompts: &'a [Option<crate::train::rollout::prompt::PromptFormatter>],
    /// `external_prompt_passthrough`: the transition's prompts skip the agents' `template`
    /// (a chat template still wraps them).
    pub passthrough: bool,
    /// Sample the agents at the same time (one task each on the thread pool).
    pub parallel: bool,
    /// The run's processes (a world of one outside `mpirun`).
    pub world: &'a dyn World,
    /// `samples[i]`: this rank samples agent `i` (holds its first replica); other replicas of
    /// an agent hold its policy but only train it.
    pub samples: &'a [bool],
}

impl RolloutSpec<'_> {
    fn distributed(&self) -> bool {
        self.world.size() > 1
    }
}

/// Agent `i`'s policy, which this rank must hold.
fn held(policies: &[Option<Policy>], i: usize) -> Result<&Policy> {
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

/// A node before returns are known.
struct Node {
    turn: usize,
    agents: Vec<AgentRollout>,
    joint: Vec<Vec<usize>>,
    rewards: Vec<f32>,
    components: Vec<Vec<f32>>,
    /// One child per joint action, or none (last turn or terminated early).
    children: Vec<Node>,
}

/// Samples, scores and computes advantages for one prompt: one node per turn per branch, in
/// creation order (the root first). `prompts[i]` is agent i's first-turn prompt (only those of
/// the agents held here are used).
pub fn rollout(
    policies: &[Option<Policy>],
    prompts: &[String],
    row: &RowInput,
    stack: &RewardStack,
    spec: &RolloutSpec,
    rng: &mut ChaCha8Rng,
    phases: &mut Phases,
) -> Result<Vec<NodeSample>> {
    rollout_presampled(policies, prompts, row, stack, spec, rng, phases, None)
}

/// [`rollout`], with the first turn's completions already sampled by [`sample_group`] when
/// `pre` is given (its seeds must be the ones drawn from `rng` here).
#[allow(clippy::too_many_arguments)]
pub fn rollout_presampled(
    policies: &[Option<Policy>],
    prompts: &[String],
    row: &RowInput,
    stack: &RewardStack,
    spec: &RolloutSpec,
    rng: &mut ChaCha8Rng,
    phases: &mut Phases,
    pre: Option<Presampled>,
) -> Result<Vec<NodeSample>> {
    let n = policies.len();
    let empty = vec![Vec::new(); n];
    let ctx = Ctx {
        policies,
        row,
        stack,
        spec,
    };
    let root = build(&ctx, prompts, rng, phases, 0, &empty, &empty, pre)?;
    let mut out = Vec::new();
    finish(policies, spec, root, &mut out, phases)?;
    Ok(out)
}

/// What stays the same over a prompt's whole rollout tree.
struct Ctx<'a> {
    policies: &'a [Option<Policy>],
    row: &'a RowInput<'a>,
    stack: &'a RewardStack,
    spec: &'a RolloutSpec<'a>,
}

#[allow(clippy::too_many_arguments)]
fn build(
    ctx: &Ctx,
    prompts: &[String],
    rng: &mut ChaCha8Rng,
    phases: &mut Phases,
    turn: usize,
    prompt_hist: &[Vec<String>],
    resp_hist: &[Vec<String>],
    pre: Option<Presampled>,
) -> Result<Node> {
    let Ctx {
        policies,
        row,
        stack,
        spec,
    } = *ctx;
    let n = policies.len();
    // One RNG stream per agent, drawn from the run's stream: the same completions whether the
    // agents sample one after the other or at the same time.
    let seeds: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    // The agents sampled here: all of them in one process, this rank's share under MPI (an
    // agent's first replica samples it).
    let local: Vec<usize> = (0..n).filter(|&i| spec.samples[i]).collect();
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
            let sample =
                |&i: &usize| sample_agent(held(policies, i)?, i, &prompts[i], turn, spec, seeds[i]);
            let mine = if spec.parallel && local.len() > 1 {
                local.par_iter().map(sample).collect::<Result<_>>()?
            } else {
                local.iter().map(sample).collect::<Result<_>>()?
            };
            phases.sampling += since(t);
            mine
        }
    };
    let mut prompts = prompts.to_vec();
    let agents = if spec.distributed() {
        let t = std::time::Instant::now();
        let all = rollouts::share_rollouts(spec.world, &local, mine, &mut prompts)?;
        phases.comm += since(t);
        all
    } else {
        mine
    };
    let prompts = &prompts[..];
    let joint = joint_actions(n, spec.k, spec.cross);
    let batch: Vec<JointSample> = joint
        .iter()
        .map(|combo| JointSample {
            prompt: row.prompt.to_string(),
            completions: combo
                .iter()
                .enumerate()
                .map(|(a, &c)| agents[a].texts[c].clone())
                .collect(),
            fields: row.fields.clone(),
        })
        .collect();
    let t = std::time::Instant::now();
    let scored = if spec.distributed() {
        let mut secs = 0.0;
        let s = rollouts::root_scores(spec.world, || {
            let t = std::time::Instant::now();
            let s = stack.score(&batch);
            secs = since(t);
            s
        });
        phases.reward += secs;
        phases.comm += since(t) - secs;
        s?
    } else {
        let s = stack.score(&batch)?;
        phases.reward += since(t);
        s
    };
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
            let t = std::time::Instant::now();
            let input = TransitionInput {
                prompt: row.prompt,
                fields: row.fields,
                turn: turn + 1,
                completions: &parent,
                prompt_history: &ph,
                response_history: &rh,
            };
            let next = if spec.distributed() {
                let mut secs = 0.0;
                let next = rollouts::root_prompts(spec.world, || {
                    let t = std::time::Instant::now();
                    let next = transition.next_prompts(&input).map_err(Error::from);
                    secs = since(t);
                    next
                });
                phases.transition += secs;
                phases.comm += since(t) - secs;
                next?
            } else {
                let next = transition.next_prompts(&input)?;
                phases.transition += since(t);
                next
            };
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
            children.push(build(ctx, &next, rng, phases, turn + 1, &ph, &rh, None)?);
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

/// Returns of a node's joint actions: reward + discount · mean(child returns) (CoMLRL).
fn joint_returns(node: &Node, discount: f64) -> Vec<f32> {
    if node.children.is_empty() {
        return node.rewards.clone();
    }
    node.rewards
        .iter()
        .zip(&node.children)
        .map(|(r, child)| {
            let cr = joint_returns(child, discount);
            let m = cr.iter().map(|&x| x as f64).sum::<f64>() / cr.len().max(1) as f64;
            (*r as f64 + discount * m) as f32
        })
        .collect()
}

/// Computes returns and advantages and flattens the tree in creation order.
fn finish(
    policies: &[Option<Policy>],
    spec: &RolloutSpec,
    node: Node,
    out: &mut Vec<NodeSample>,
    phases: &mut Phases,
) -> Result<()> {
    let n = policies.len();
    let jr = joint_returns(&node, spec.discount);
    let Node {
        turn,
        mut agents,
        joint,
        rewards,
        components,
        children,
    } = node;
    let returns = completion_returns(&joint, &jr, n, spec.k);
    if let Some((refs, _)) = spec.reference {
        let local: Vec<usize> = (0..n).filter(|&i| spec.samples[i]).collect();
        for &i in &local {
            let t = std::time::Instant::now();
            agents[i].kl = kl_k3(held(policies, i)?, held(refs, i)?, &agents[i])?;
            phases.kl += since(t);
        }
        if spec.distributed() {
            let t = std::time::Instant::now();
            rollouts::share_kl(spec.world, &mut agents, &local)?;
            phases.comm += since(t);
        }
    }
    for (a, mut r) in agents.iter_mut().zip(returns) {
        if let Some((_, coef)) = spec.reference {
            for (ret, kl) in r.iter_mut().zip(&a.kl) {
                *ret -= (coef * *kl as f64) as f32;
            }
        }
        a.advantages = advantages(&r, spec.baseline, spec.normalize);
        a.returns = r;
    }
    out.push(NodeSample {
        turn,
        agents,
        rewards,
        components,
    });
    for child in children {
        finish(policies, spec, child, out, phases)?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rewards: Vec<f32>, children: Vec<Node>) -> Node {
        Node {
            turn: 0,
            agents: vec![],
            joint: vec![],
            rewards,
            components: vec![],
            children,
        }
    }

    #[test]
    fn returns_add_discounted_mean_of_children() {
        let leaf = |r: Vec<f32>| node(r, vec![]);
        let root = node(
            vec![1.0, 2.0],
            vec![leaf(vec![0.0, 4.0]), leaf(vec![1.0, 1.0])],
        );
        assert_eq!(
            joint_returns(&root, 0.5),
            vec![1.0 + 0.5 * 2.0, 2.0 + 0.5 * 1.0]
        );
        assert_eq!(joint_returns(&leaf(vec![3.0]), 0.9), vec![3.0]);
    }
}
