//! IAC, independent actor-critic (CoMLRL 1.4.3's `IACTrainer`, CoLLM-DC of arXiv 2601.21972):
//! each agent an actor with a critic of its own (`trainer.algorithm: iac`, `trainer.critic`).
//! The update's core is checked step for step against CoMLRL's trainer
//! (`tests/train/iac_step.rs`). Its advantage, actor loss and critic loss are the actor-critic
//! family's (`algorithms/actor_critic/`, shared with MAAC); this folder holds
//! `critics`: each agent's critic as a run holds it (loaded beside the agents this rank
//! holds, its AdamW), what it adds to checkpoints and to the final models.
//!
//! The algorithm ([`Iac`]): a completion's target is its reward (single turn), less
//! `kl_coef` · its reference KL when the penalty is on (CoMLRL's reward shaping); V_old is read
//! when the round starts — the critic has not changed since the buffer's rollouts, so it is
//! the value CoMLRL reads at rollout time, and a rank needs only the critics of the agents it
//! holds. Mini-batches of `train_batch_size` nodes in buffer order (CoMLRL shuffles the buffer
//! first; the same with its default of one mini-batch per buffer): per mini-batch one actor
//! step (through `Learner::step`) and one critic step (its own AdamW at
//! `critic.learning_rate`, the run's schedule and clipping). On every replica of an agent the
//! critic computes its whole mini-batch, so the copies stay identical without an exchange.
//!
//! Multi-turn (`num_turns` > 1, one completion per agent and turn; `tests/train/ac_turns_step.rs`):
//! a turn's target is r_t + γ · V_old of the episode's next turn, formed in the round from the
//! V_old it reads (the round drains whole episodes, so they are the rollout's values), and the
//! turns train one after the other, each with its own advantages and mini-batches, as CoMLRL's
//! `_process_buffer`. Each agent's targets need only its own critic, so MPI placement is as for
//! a single turn.
pub mod critics;

use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::train::algorithms::actor_critic::actor::{actor_grads, trained_tokens, ActorSample};
use crate::train::algorithms::actor_critic::advantage::advantages;
use crate::train::algorithms::actor_critic::critic::{self, Clip, CriticGrads, Row, ValueLoss};
use crate::train::algorithms::actor_critic::shared::{self, shared_grads, SharedBatch};
use crate::train::algorithms::actor_critic::targets::{
    episode, single_turn, steps_per_round, td_targets, turn_groups,
};
use crate::train::algorithms::algorithm::Algorithm;
use crate::train::algorithms::round::{AgentUpdate, Learner, Round};
use crate::train::optim::schedule::lr_at;
use crate::train::rollout::{Node, NodeSample};
use crate::train::update::plan::pass_plan;
use crate::train::update::LossGrads;
use candle_core::Var;
use comlrl_scenario::Scenario;
use critics::{CriticSlot, Critics};

/// IAC with a scenario's settings and the critics this rank holds.
pub struct Iac {
    /// Completions per agent per node.
    k: usize,
    /// Turns per episode (more than 1: TD(0) targets, one completion per agent and turn).
    turns: usize,
    /// γ of the TD(0) targets.
    discount: f64,
    /// The KL penalty's coefficient (0: off).
    kl_coef: f64,
    /// Z-score the advantages over the buffer.
    normalize: bool,
    /// The critic loss's coefficient.
    value_loss_coef: f64,
    /// A shared head's value clipping range (`None`: no clipping).
    value_clip: Option<f64>,
    /// Cut each response at its first pad token before the actor's loss (CoMLRL's
    /// `compat_pad_cut`).
    compat_pad_cut: bool,
    /// Buffered nodes per mini-batch.
    batch: usize,
    /// Nodes per update round.
    buffer: usize,
    /// Rows per pass when reading V_old.
    read_rows: usize,
    /// Re-run layers in the backward (`gradient_checkpointing`).
    recompute: bool,
    plan: PassPlan,
    critics: Critics,
}

impl Iac {
    /// IAC as `s.trainer` sets it up, with a critic for each agent this rank holds (`Some` in
    /// `agents`).
    pub fn new(s: &Scenario, agents: &[Option<crate::model::Policy>]) -> Result<Self> {
        let t = &s.trainer;
        let c = t.critic.as_ref().ok_or_else(|| {
            Error::Internal("trainer.algorithm iac without a resolved `trainer.critic`".into())
        })?;
        Ok(Iac {
            k: t.num_generations,
            turns: t.num_turns.max(1),
            discount: t.discount,
            kl_coef: t.kl_coef,
            normalize: t.advantage_normalization,
            value_loss_coef: c.value_loss_coef,
            value_clip: c.value_clip_range,
            compat_pad_cut: c.compat_pad_cut,
            batch: t.train_batch_size.max(1),
            buffer: t.rollout_buffer_size.max(1),
            read_rows: match t.micro_batch_size {
                0 => 8,
                n => n,
            },
            recompute: t.gradient_checkpointing,
            plan: pass_plan(t),
            critics: Critics::load(s, c, agents)?,
        })
    }

    /// One agent's part of an update round: V_old of its buffered completions, the
    /// advantages, then per mini-batch an actor step and a critic step (shared: the value
    /// gradient's backbone part joined with the actor's before its step, in one backbone pass
    /// where it can serve; the head stepped by its own AdamW at the agent's learning rate).
    fn train_agent(&self, learner: &mut Learner<'_>, buffer: &[NodeSample]) -> Result<()> {
        let i = learner.index();
        let slot = self.critics.slot(i)?;
        let mut slot = slot
            .lock()
            .map_err(|_| Error::Internal(format!("agent {i}: the critic's lock is poisoned")))?;
        let slot = &mut *slot;
        let actor = learner.policy();
        let shared = slot.own.is_none();
        // Every completion of the buffer, node by node: (node, completion) and its target.
        let mut at: Vec<(usize, usize)> = Vec::new();
        let mut targets: Vec<f32> = Vec::new();
        for (n, s) in buffer.iter().enumerate() {
            let a = s.agents.get(i).ok_or_else(|| {
                Error::Internal(format!("a buffered node has no rollout of agent {i}"))
            })?;
            for (g, r) in a.returns.iter().enumerate() {
                at.push((n, g));
                targets.push(*r);
            }
        }
        let row = |&(n, g): &(usize, usize)| -> Row<'_> {
            let a = &buffer[n].agents[i];
            (&a.prompt_ids[..], &a.completions[g][..])
        };
        let rows: Vec<Row> = at.iter().map(row).collect();
        let old = {
            let view = slot.on(actor);
            critic::check_ids(&view, &rows, i)?;
            let mut old = Vec::with_capacity(rows.len());
            for chunk in rows.chunks(self.read_rows) {
                old.extend(view.values(chunk)?);
            }
            old
        };
        if let Some(v) = old.iter().find(|v| !v.is_finite()) {
            return Err(Error::Diverged(format!(
                "agent {i}, optimizer step {}: the critic's value V_old is {v} (CoMLRL would \
                 raise on the losses it makes); lower {} or set max_grad_norm",
                learner.opt_steps() + 1,
                match shared {
                    true => "the agent's learning rate (the head trains with it)",
                    false => "trainer.critic.learning_rate",
                }
            )));
        }
        // Multi-turn: TD(0) targets from the next turn's V_old (read now, with the critic of
        // the rollouts: a round drains whole episodes).
        let turns: Vec<usize> = at.iter().map(|&(n, _)| buffer[n].turn).collect();
        if self.turns > 1 {
            targets = td_targets(&turns, &targets, &old, self.discount);
        }
        // Each turn a buffer of its own: its advantages, its mini-batches (one turn in all
        // when single-turn).
        let groups = turn_groups(&turns);
        let (mut adv, mut norm) = (vec![0f32; at.len()], vec![0f32; at.len()]);
        for (_, idx) in &groups {
            let t: Vec<f32> = idx.iter().map(|&j| targets[j]).collect();
            let o: Vec<f32> = idx.iter().map(|&j| old[j]).collect();
            let (a, z) = advantages(&t, &o, self.normalize);
            for (k, &j) in idx.iter().enumerate() {
                (adv[j], norm[j]) = (a[k], z[k]);
            }
        }
        let per_batch = self.batch * self.k.max(1);
        let rule = learner.rule();
        let batches: Vec<(usize, Vec<usize>)> = groups
            .iter()
            .flat_map(|(turn, idx)| idx.chunks(per_batch).map(|c| (*turn, c.to_vec())))
            .collect();
        for (b, (turn, idx)) in batches.iter().enumerate() {
            let pad_cut = self.compat_pad_cut.then_some(actor.pad_id);
            let responses: Vec<Vec<u32>> = idx
                .iter()
                .map(|&j| {
                    let (n, g) = at[j];
                    trained_tokens(&buffer[n].agents[i].completions[g], pad_cut)
                })
                .collect();
            let samples: Vec<ActorSample> = idx
                .iter()
                .zip(&responses)
                .map(|(&j, response)| ActorSample {
                    prompt: &buffer[at[j].0].agents[i].prompt_ids,
                    response: std::slice::from_ref(response),
                    advantage: norm[j],
                })
                .collect();
            let step = learner.opt_steps() + 1;
            let batch_rows: Vec<Row> = idx.iter().map(|&j| rows[j]).collect();
            let batch_targets: Vec<f32> = idx.iter().map(|&j| targets[j]).collect();
            let batch_old: Vec<f32> = idx.iter().map(|&j| old[j]).collect();
            let loss = ValueLoss {
                targets: &batch_targets,
                coef: self.value_loss_coef,
                clip: match (shared, self.value_clip) {
                    (true, Some(range)) => Some(Clip {
                        old: &batch_old,
                        range,
                    }),
                    _ => None,
                },
            };
            // A critic's adapter dropout draws the masks of its own optimizer step.
            if let Some(own) = &slot.own {
                own.set_update_step(slot.opt.step);
            }
            let (lg, cg) = self
                .batch_grads(learner, slot, &samples, &batch_rows, loss)
                .map_err(|e| match e {
                    Error::Diverged(m) => Error::Diverged(format!(
                        "agent {i}, optimizer step {step} (mini-batch {}): {m}",
                        b + 1
                    )),
                    e => e,
                })?;
            if !lg.loss.is_finite() {
                return Err(Error::Diverged(format!(
                    "agent {i}, optimizer step {step} (mini-batch {} of the round): the actor's \
                     loss is {} (CoMLRL raises here too); lower agent_learning_rate or set \
                     max_grad_norm",
                    b + 1,
                    lg.loss
                )));
            }
            learner.step(lg)?;
            let value_grads = cg.grads;
            let opt = &mut slot.opt;
            let lr = lr_at(
                opt.cfg.lr,
                opt.step as usize,
                rule.total_steps,
                rule.warmup,
                rule.scheduler,
            );
            let norm_c = opt.step_grads(&value_grads, lr, rule.max_grad_norm)?;
            let mean =
                |v: &mut dyn Iterator<Item = f64>, n: usize| v.sum::<f64>() / n.max(1) as f64;
            learner.record("value_loss", cg.loss);
            learner.record(
                "value_mean",
                mean(&mut cg.values.iter().map(|&v| v as f64), cg.values.len()),
            );
            learner.record(
                "advantage_mean",
                mean(&mut idx.iter().map(|&j| adv[j] as f64), idx.len()),
            );
            learner.record("critic_grad_norm", norm_c);
            if self.turns > 1 {
                let a = mean(&mut idx.iter().map(|&j| adv[j] as f64), idx.len());
                learner.record_turn(*turn, &[("value_loss", cg.loss), ("advantage_mean", a)]);
            }
        }
        Ok(())
    }

    /// One mini-batch's gradients: the actor's loss over `samples` and the value loss over
    /// `rows`. A separate critic: the actor's passes, then the critic's own (its backbone and
    /// head). A head on the agent's backbone: the value gradient's backbone part joined with
    /// the actor's, in one pass per sequence where it can serve (`actor_critic::shared`, which
    /// says where it cannot), the head's gradient alone in the critic's part.
    fn batch_grads(
        &self,
        learner: &Learner<'_>,
        slot: &CriticSlot,
        samples: &[ActorSample],
        rows: &[Row],
        loss: ValueLoss,
    ) -> Result<(LossGrads, CriticGrads)> {
        let actor = learner.policy();
        let view = slot.on(actor);
        let share = learner.share();
        match slot.own {
            None => {
                let head: Vec<Var> = critic::head_vars(&slot.head)
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect();
                let how = shared::passes(samples, rows, slot.at, self.recompute, share);
                log::debug!(
                    "agent {}: the shared head's mini-batch in {how:?}",
                    learner.index()
                );
                let batch = SharedBatch {
                    view,
                    samples,
                    rows,
                    loss,
                };
                let vars = learner.vars();
                shared_grads(&batch, vars, &head, self.recompute, share, self.plan, how)
            }
            Some(_) => {
                let vars = learner.vars();
                let lg = actor_grads(actor, vars, samples, self.recompute, share, self.plan)?;
                let own: Vec<Var> = slot.opt.params.iter().map(|p| p.var.clone()).collect();
                let l = loss;
                let cg = view.loss_and_grads(rows, l.targets, l.coef, l.clip, &own, self.plan)?;
                Ok((lg, cg))
            }
        }
    }
}

impl Algorithm for Iac {
    fn name(&self) -> &'static str {
        "iac"
    }

    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        match self.turns {
            1 => Ok(vec![single_turn(root, self.k, self.kl_coef, "iac")?]),
            _ => episode(root, self.kl_coef, "iac"),
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
        round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        round.each_agent(|learner| self.train_agent(learner, buffer))
    }
}

impl crate::train::run::checkpoint::CheckpointPart for Iac {
    fn files(&self, agent: usize) -> Vec<String> {
        self.critics.files(agent)
    }

    fn save(&self, dir: &std::path::Path, writes: &[bool]) -> Result<()> {
        self.critics.save(dir, writes)
    }

    fn load(&mut self, dir: &std::path::Path, held: &[bool]) -> Result<()> {
        self.critics.load(dir, held)
    }

    fn save_models(&self, models: &std::path::Path, writes: &[bool]) -> Result<()> {
        self.critics.save_models(models, writes)
    }
}
