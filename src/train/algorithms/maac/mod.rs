//! MAAC, multi-agent actor-critic (CoMLRL 1.4.3's `MAACTrainer`, CoLLM-CC of arXiv
//! 2601.21972): each agent an actor as under IAC, one centralized critic for all of them
//! (`trainer.algorithm: maac`, `trainer.critic`). Checked step for step against CoMLRL's
//! trainer (`tests/train/maac_step.rs`):
//!
//! - `joint`: the critic's input, every agent's prompt as `[Agent i] <prompt>` (and for a Q
//!   critic the joint action), tokenized by agent 0's tokenizer;
//! - `central`: the critic as a run holds it (its own model, AdamW, checkpoint files and final
//!   model) and its update round: one step per mini-batch on every agent's targets, or
//!   CoMLRL's one step per agent (`compat_critic_steps`).
//!
//! The algorithm ([`Maac`]): targets as IAC's (the reward less the KL penalty; multi-turn
//! r_t + γ · V_old of the next turn's joint text, each turn trained as a group of its own);
//! V_old of every buffered joint action is read when the round starts (the critic has not
//! changed since the rollouts, so it is what CoMLRL reads at rollout time), each agent's
//! advantages target − V_old z-scored over its own buffer; per mini-batch of
//! `train_batch_size` nodes (buffer order; CoMLRL shuffles each agent's buffer first, the same
//! with its default of one mini-batch per buffer) one actor step per agent, as IAC's, and the
//! critic's steps. The actors never read the critic's new values, nor the critic the actors',
//! so the critic's steps run first and the agents' after, as under CoMLRL's sequence.
//!
//! On MPI ranks the one critic lives on agent 0's rank (loaded, trained, checkpointed there):
//! each rank decodes its agents' prompts and the ranks all-gather them (the critic's joint text
//! needs every agent's), the critic's rank reads V_old, makes every agent's targets and
//! advantages and takes the critic's steps, and sends each agent's advantages and critic
//! statistics to every rank (as bits: the agents' steps are the one-process run's); each rank
//! then steps its own actors. With `agents[i].replicas` the critic stays one copy, on agent 0's
//! first replica (the others of agent 0 hold none): its round is the one-process run's, on the
//! same rows, and its advantages reach every replica in the same message; each agent's
//! replicas split its actor's passes and sum their gradients (`Learner::step`), as MAGRPO's.
pub mod central;
pub mod joint;

use crate::dist::codec::{Dec, Enc};
use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::model::{Policy, Tokenizer};
use crate::train::algorithms::actor_critic::actor::{actor_grads, trained_tokens, ActorSample};
use crate::train::algorithms::actor_critic::advantage::advantages;
use crate::train::algorithms::actor_critic::critic::{check_ids, Row};
use crate::train::algorithms::actor_critic::targets::{
    episode, single_turn, steps_per_round, td_targets, turn_groups,
};
use crate::train::algorithms::algorithm::Algorithm;
use crate::train::algorithms::round::{AgentUpdate, Round, StepRule};
use crate::train::optim::schedule::lr_at;
use crate::train::rollout::{Node, NodeSample};
use crate::train::update::plan::pass_plan;
use crate::train::world::agent_values::{share_agent_texts, share_from_holder};
use central::{critic_round, Central, CriticRound, CriticStep};
use comlrl_scenario::{CriticType, Scenario};

/// MAAC with a scenario's settings and its critic.
pub struct Maac {
    /// Agents in the run.
    agents: usize,
    /// Completions per agent per node.
    k: usize,
    /// Turns per episode (more than 1: TD(0) targets, one completion per agent and turn).
    turns: usize,
    /// γ of the TD(0) targets.
    discount: f64,
    /// The KL penalty's coefficient (0: off).
    kl_coef: f64,
    /// Z-score the advantages over each agent's buffer.
    normalize: bool,
    /// The critic loss's coefficient.
    value_loss_coef: f64,
    /// CoMLRL's N critic steps per mini-batch.
    compat: bool,
    /// A Q critic (the joint action in its text).
    q: bool,
    /// Buffered nodes per mini-batch.
    batch: usize,
    /// Nodes per update round.
    buffer: usize,
    /// Rows per pass when reading V_old.
    read_rows: usize,
    /// Re-run layers in the backward (`gradient_checkpointing`).
    recompute: bool,
    plan: PassPlan,
    /// The critic, on the rank that holds agent 0 (`None` on the others).
    central: Option<Central>,
    /// Cut each response at its first pad token before the actor's loss (CoMLRL's
    /// `compat_pad_cut`).
    compat_pad_cut: bool,
}

impl Maac {
    /// MAAC as `s.trainer` sets it up, with its critic where agent 0's first replica is
    /// (`samples[0]`: this process samples agent 0; one copy of the critic per run).
    pub fn new(s: &Scenario, samples: &[bool]) -> Result<Self> {
        let t = &s.trainer;
        let c = t.critic.as_ref().ok_or_else(|| {
            Error::Internal("trainer.algorithm maac without a resolved `trainer.critic`".into())
        })?;
        // One copy, not one per replica of agent 0: the others would hold its weights and
        // AdamW moments only to compute the same round again (see docs/distributed.md).
        let central = match samples.first() {
            Some(true) => Some(Central::load(s, c)?),
            _ => None,
        };
        Ok(Maac {
            agents: s.agents.len(),
            k: t.num_generations,
            turns: t.num_turns.max(1),
            discount: t.discount,
            kl_coef: t.kl_coef,
            normalize: t.advantage_normalization,
            value_loss_coef: c.value_loss_coef,
            compat: c.compat_critic_steps,
            compat_pad_cut: c.compat_pad_cut,
            q: c.r#type == CriticType::Q,
            batch: t.train_batch_size.max(1),
            buffer: t.rollout_buffer_size.max(1),
            read_rows: match t.micro_batch_size {
                0 => 8,
                n => n,
            },
            recompute: t.gradient_checkpointing,
            plan: pass_plan(t),
            central,
        })
    }
}

/// Agent i's metrics of mini-batch b from the critic's steps: its value loss (its own step
/// under `compat_critic_steps`, else its part of the joint step), the mean value, the step's
/// gradient norm.
fn critic_metrics(steps: &[CriticStep], i: usize, b: usize) -> (f64, f64, f64) {
    let s = steps
        .iter()
        .find(|s| s.batch == b && s.agent.is_none_or(|a| a == i));
    match s {
        Some(s) => {
            let mean =
                s.values.iter().map(|&v| v as f64).sum::<f64>() / s.values.len().max(1) as f64;
            (
                s.agent_loss.get(i).copied().unwrap_or(0.0),
                mean,
                s.grad_norm,
            )
        }
        None => (0.0, 0.0, 0.0),
    }
}

/// What the critic's part of a round reads.
struct CriticContext<'c> {
    buffer: &'c [NodeSample],
    /// Every agent's decoded prompt of each buffered node.
    prompts: &'c [Vec<String>],
    /// Agent 0's tokenizer (CoMLRL's critic reads agent 0's tokens).
    tokenizer: &'c Tokenizer,
    /// The turn of each row.
    turns: &'c [usize],
    /// Each turn's rows.
    groups: &'c [(usize, Vec<usize>)],
    /// The rows of each mini-batch.
    batches: &'c [Vec<usize>],
    /// Optimizer steps the agents had taken before the round.
    base_step: u64,
    rule: StepRule,
}

/// What the critic's rank sends every rank: per agent its advantages (raw and normalised, per
/// row) and per mini-batch its critic statistics (value loss, mean value, gradient norm).
struct CriticShare {
    adv: Vec<(Vec<f32>, Vec<f32>)>,
    metrics: Vec<Vec<(f64, f64, f64)>>,
}

impl CriticShare {
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        for ((a, z), m) in self.adv.iter().zip(&self.metrics) {
            e.f32s(a).f32s(z).usize(m.len());
            for &(loss, mean, norm) in m {
                e.f64(loss).f64(mean).f64(norm);
            }
        }
        e.0
    }

    /// `agents` agents' advantages of `rows` rows and statistics of `batches` mini-batches.
    fn decode(bytes: &[u8], agents: usize, rows: usize, batches: usize) -> Result<Self> {
        let what = "the maac critic's advantages";
        let mut d = Dec::new(bytes, what);
        let (mut adv, mut metrics) = (Vec::new(), Vec::new());
        for i in 0..agents {
            let (a, z) = (d.f32s()?, d.f32s()?);
            let m = d.usize()?;
            if a.len() != rows || z.len() != rows || m != batches {
                return Err(Error::Distributed(format!(
                    "{what}: agent {i} has {} advantages and {m} mini-batches' statistics, \
                     the round {rows} rows and {batches} mini-batches",
                    a.len()
                )));
            }
            let stats = (0..m)
                .map(|_| Ok((d.f64()?, d.f64()?, d.f64()?)))
                .collect::<Result<Vec<_>>>()?;
            adv.push((a, z));
            metrics.push(stats);
        }
        d.end()?;
        Ok(CriticShare { adv, metrics })
    }
}

impl Maac {
    /// The critic's part of a round (on agent 0's rank): V_old of every buffered joint action
    /// (the critic has not changed since the rollouts, so it is what CoMLRL reads at rollout
    /// time), every agent's targets and advantages, then the critic's steps.
    fn critic_part(&self, central: &mut Central, c: &CriticContext) -> Result<CriticShare> {
        let (buffer, k) = (c.buffer, self.k.max(1));
        let max_pos = central.critic.policy.model.max_positions();
        let ids = joint::joint_ids_of(buffer, c.prompts, c.tokenizer, k, self.q, max_pos)?;
        let rows: Vec<Row> = ids.iter().map(|v| (&v[..], &[][..])).collect();
        let old = {
            let view = central.critic.view();
            check_ids(&view, &rows, 0)?;
            let mut old = Vec::with_capacity(rows.len());
            for chunk in rows.chunks(self.read_rows) {
                old.extend(view.values(chunk)?);
            }
            old
        };
        if let Some(v) = old.iter().find(|v| !v.is_finite()) {
            return Err(Error::Diverged(format!(
                "optimizer step {}: the maac critic's value V_old is {v} (CoMLRL would raise \
                 on the losses it makes); lower trainer.critic.learning_rate or set \
                 max_grad_norm",
                c.base_step + 1
            )));
        }
        // Row j = n·k + g: node n's joint action g; agent i's target is its g-th return.
        let mut targets: Vec<Vec<f32>> = vec![Vec::with_capacity(rows.len()); self.agents];
        for s in buffer {
            for (i, t) in targets.iter_mut().enumerate() {
                let r = &s.agents[i].returns;
                if r.len() != k {
                    return Err(Error::Internal(format!(
                        "agent {i} has {} returns in a node, not {k}",
                        r.len()
                    )));
                }
                t.extend_from_slice(r);
            }
        }
        // Multi-turn (k = 1): TD(0) targets from V_old of the next turn's joint text (read now,
        // with the critic of the rollouts: a round drains whole episodes).
        if self.turns > 1 {
            for t in targets.iter_mut() {
                *t = td_targets(c.turns, t, &old, self.discount);
            }
        }
        let adv: Vec<(Vec<f32>, Vec<f32>)> = targets
            .iter()
            .map(|t| {
                let (mut a, mut z) = (vec![0f32; t.len()], vec![0f32; t.len()]);
                for (_, idx) in c.groups {
                    let tg: Vec<f32> = idx.iter().map(|&j| t[j]).collect();
                    let o: Vec<f32> = idx.iter().map(|&j| old[j]).collect();
                    let (ga, gz) = advantages(&tg, &o, self.normalize);
                    for (m, &j) in idx.iter().enumerate() {
                        (a[j], z[j]) = (ga[m], gz[m]);
                    }
                }
                (a, z)
            })
            .collect();
        let base_lr = central.opt.cfg.lr;
        let rule = c.rule;
        let lr = |b: usize| {
            lr_at(
                base_lr,
                c.base_step as usize + b,
                rule.total_steps,
                rule.warmup,
                rule.scheduler,
            )
        };
        let how = CriticRound {
            coef: self.value_loss_coef,
            compat: self.compat,
            plan: self.plan,
            max_grad_norm: rule.max_grad_norm,
            lr: &lr,
        };
        let steps = critic_round(central, &rows, &targets, c.batches, &how)?;
        let metrics = (0..self.agents)
            .map(|i| {
                (0..c.batches.len())
                    .map(|b| critic_metrics(&steps, i, b))
                    .collect()
            })
            .collect();
        Ok(CriticShare { adv, metrics })
    }
}

impl Algorithm for Maac {
    fn name(&self) -> &'static str {
        "maac"
    }

    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        match self.turns {
            1 => Ok(vec![single_turn(root, self.k, self.kl_coef, "maac")?]),
            _ => episode(root, self.kl_coef, "maac"),
        }
    }

    fn steps_per_round(&self) -> usize {
        steps_per_round(self.buffer, self.batch, self.turns)
    }

    fn whole_episodes(&self) -> bool {
        self.turns > 1
    }

    fn update(
        &mut self,
        mut round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        let team = round.team();
        let (held, base_step, rule) = {
            let ls = round.learners();
            let held: Vec<(usize, &Policy)> = ls.iter().map(|l| (l.index(), l.policy())).collect();
            // Every agent steps once per mini-batch: agent 0's count (on the critic's rank, its
            // first learner) is every agent's.
            let first = ls.first();
            (
                held,
                first.map_or(0, |l| l.opt_steps()),
                first.map(|l| l.rule()),
            )
        };
        let n = self.agents;
        let k = self.k.max(1);
        // The critic's text needs every agent's prompt, decoded by the agent's tokenizer.
        let mine = held
            .iter()
            .map(|&(i, p)| Ok((i, joint::decoded_prompts(buffer, i, p)?)))
            .collect::<Result<Vec<_>>>()?;
        let prompts = share_agent_texts(team, &mine, n, "the agents' prompts for the maac critic")?;
        // Row j = n·k + g: node n's joint action g.
        let turns: Vec<usize> = (0..buffer.len() * k).map(|j| buffer[j / k].turn).collect();
        // Each turn a buffer of its own (CoMLRL's `_process_buffer`): each agent's advantages
        // z-scored over the turn's rows, the turn's mini-batches after the previous turn's.
        let groups = turn_groups(&turns);
        let (batch_turns, batches): (Vec<usize>, Vec<Vec<usize>>) = groups
            .iter()
            .flat_map(|(turn, idx)| idx.chunks(self.batch * k).map(|c| (*turn, c.to_vec())))
            .unzip();
        let mut central = self.central.take();
        let part = central.as_mut().map(|central| {
            let agent0 = held
                .first()
                .filter(|(i, _)| *i == 0)
                .map(|(_, p)| &p.tokenizer)
                .ok_or_else(|| Error::Internal("maac's critic without agent 0".into()))?;
            let rule =
                rule.ok_or_else(|| Error::Internal("maac's critic without agents".into()))?;
            let ctx = CriticContext {
                buffer,
                prompts: &prompts,
                tokenizer: agent0,
                turns: &turns,
                groups: &groups,
                batches: &batches,
                base_step,
                rule,
            };
            self.critic_part(central, &ctx).map(|s| s.encode())
        });
        self.central = central;
        let shared = share_from_holder(team, part, "the maac critic's advantages")?;
        let shared = CriticShare::decode(&shared, n, buffer.len() * k, batches.len())?;
        let (recompute, plan, compat_pad_cut) = (self.recompute, self.plan, self.compat_pad_cut);
        let multi_turn = self.turns > 1;
        round.each_agent(|learner| {
            let i = learner.index();
            let (a, norm) = &shared.adv[i];
            for (b, idx) in batches.iter().enumerate() {
                let pad_cut = compat_pad_cut.then_some(learner.policy().pad_id);
                let responses: Vec<Vec<u32>> = idx
                    .iter()
                    .map(|&j| trained_tokens(&buffer[j / k].agents[i].completions[j % k], pad_cut))
                    .collect();
                let samples: Vec<ActorSample> = idx
                    .iter()
                    .zip(&responses)
                    .map(|(&j, response)| ActorSample {
                        prompt: &buffer[j / k].agents[i].prompt_ids,
                        response: std::slice::from_ref(response),
                        advantage: norm[j],
                    })
                    .collect();
                let step = learner.opt_steps() + 1;
                let lg = actor_grads(
                    learner.policy(),
                    learner.vars(),
                    &samples,
                    recompute,
                    learner.share(),
                    plan,
                )?;
                if !lg.loss.is_finite() {
                    return Err(Error::Diverged(format!(
                        "agent {i}, optimizer step {step} (mini-batch {} of the round): the \
                         actor's loss is {} (CoMLRL raises here too); lower \
                         agent_learning_rate or set max_grad_norm",
                        b + 1,
                        lg.loss
                    )));
                }
                learner.step(lg)?;
                let (loss, mean, gnorm) = shared.metrics[i][b];
                learner.record("value_loss", loss);
                learner.record("value_mean", mean);
                learner.record(
                    "advantage_mean",
                    idx.iter().map(|&j| a[j] as f64).sum::<f64>() / idx.len().max(1) as f64,
                );
                learner.record("critic_grad_norm", gnorm);
                if multi_turn {
                    learner.record_turn(
                        batch_turns[b],
                        &[
                            ("value_loss", loss),
                            (
                                "advantage_mean",
                                idx.iter().map(|&j| a[j] as f64).sum::<f64>()
                                    / idx.len().max(1) as f64,
                            ),
                        ],
                    );
                }
            }
            Ok(())
        })
    }
}

impl crate::train::run::checkpoint::CheckpointPart for Maac {
    fn files(&self, agent: usize) -> Vec<String> {
        match agent {
            0 => Central::files(),
            _ => vec![],
        }
    }

    fn save(&self, dir: &std::path::Path, writes: &[bool]) -> Result<()> {
        match (&self.central, writes.first().copied().unwrap_or(false)) {
            (Some(c), true) => c.save(dir),
            _ => Ok(()),
        }
    }

    fn load(&mut self, dir: &std::path::Path, held: &[bool]) -> Result<()> {
        match (&mut self.central, held.first().copied().unwrap_or(false)) {
            (Some(c), true) => c.load_checkpoint(dir),
            _ => Ok(()),
        }
    }

    fn save_models(&self, models: &std::path::Path, writes: &[bool]) -> Result<()> {
        match (&self.central, writes.first().copied().unwrap_or(false)) {
            (Some(c), true) => c.save_models(models),
            _ => Ok(()),
        }
    }
}
