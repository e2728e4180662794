//! An update round as the loop hands it to an algorithm: one [`Learner`] per agent this rank
//! trains — its policy, its optimizer, its replica group — run one after the other or at the
//! same time. An algorithm computes each mini-batch's gradients; [`Learner::step`] does the
//! rest the same way for every algorithm: the sum over the agent's replicas, the learning rate
//! of the schedule, the clipped AdamW step, the sampling copies following the weights, and the
//! round's statistics.
use crate::dist::World;
use crate::error::Result;
use crate::model::Policy;
use crate::train::optim::adamw::AdamW;
use crate::train::optim::schedule::lr_at;
use crate::train::report::timing::{since, Phases};
use crate::train::update::housekeeping::Freed;
use crate::train::update::{LossGrads, Share};
use crate::train::world::replicas::Replicas;
use candle_core::Var;
use comlrl_scenario::plan::LrScheduler;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::time::Instant;

/// How every optimizer step of a run is taken: the learning-rate schedule over the run's
/// optimizer steps and the gradient clipping.
#[derive(Debug, Clone, Copy)]
pub struct StepRule {
    /// Optimizer steps each agent takes over the whole run.
    pub total_steps: usize,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// The schedule after the warm-up.
    pub scheduler: LrScheduler,
    /// Clip each step's gradients to this global L2 norm.
    pub max_grad_norm: Option<f64>,
}

/// What one agent's part of an update round reports.
#[derive(Debug, Default)]
pub struct AgentUpdate {
    /// Optimizer steps the agent has taken, this round's included.
    pub opt_steps: u64,
    /// Sum of the mini-batch losses.
    pub loss: f64,
    /// Sum of the mini-batch gradient norms (before clipping).
    pub grad_norm: f64,
    /// Optimizer steps taken this round.
    pub updates: usize,
    /// The learning rate of the last step.
    pub lr: f64,
    /// Seconds of the forward, backward, optimizer and replica sums.
    pub phases: Phases,
    /// Model FLOPs of the forward and backward passes.
    pub flops: f64,
    /// Sums of the algorithm's own per-step metrics (logged as `agent_<i>/<name>`, their mean
    /// per step).
    pub extra: BTreeMap<String, f64>,
}

/// One agent in an update round.
pub struct Learner<'a> {
    index: usize,
    policy: &'a Policy,
    opt: &'a mut AdamW,
    vars: Vec<Var>,
    replicas: &'a Replicas,
    /// The sampling copies were not freed for the round: they follow each step.
    copies_follow: bool,
    rule: StepRule,
    report: AgentUpdate,
}

impl<'a> Learner<'a> {
    /// The agent's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The agent's policy.
    pub fn policy(&self) -> &'a Policy {
        self.policy
    }

    /// The trainable variables, in the optimizer's (and the gradients') order.
    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// Optimizer steps the agent has taken so far (this round's included).
    pub fn opt_steps(&self) -> u64 {
        self.report.opt_steps
    }

    /// How this round's steps are taken (an algorithm that steps an optimizer of its own, a
    /// critic's, follows the same schedule and clipping).
    pub fn rule(&self) -> StepRule {
        self.rule
    }

    /// The passes of each mini-batch this replica of the agent computes.
    pub fn share(&self) -> Share {
        self.replicas.share(self.index)
    }

    /// Sums a mini-batch's gradients, losses and entropies over the agent's replicas (none with
    /// one copy), once: [`Learner::step`] does it unless this was called first, for what is
    /// logged from the whole mini-batch before the step.
    pub fn reduce(&mut self, lg: &mut LossGrads) -> Result<()> {
        if lg.reduced {
            return Ok(());
        }
        let tick = Instant::now();
        self.replicas.reduce(self.index, &self.vars, lg)?;
        self.report.phases.comm += since(tick);
        lg.reduced = true;
        Ok(())
    }

    /// One optimizer step on a mini-batch's gradients: summed over the agent's replicas (none
    /// with one copy), then AdamW at the schedule's learning rate with the clipping; the
    /// sampling copies follow unless the round freed them.
    pub fn step(&mut self, mut lg: LossGrads) -> Result<()> {
        self.reduce(&mut lg)?;
        let u = &mut self.report;
        let tick = Instant::now();
        let r = &self.rule;
        let lr = lr_at(
            self.opt.cfg.lr,
            u.opt_steps as usize,
            r.total_steps,
            r.warmup,
            r.scheduler,
        );
        let norm = self.opt.step_grads(&lg.grads, lr, r.max_grad_norm)?;
        drop(lg.grads);
        // The next mini-batch's LoRA dropout masks are the next step's.
        self.policy.set_update_step(self.opt.step);
        if self.copies_follow {
            self.policy.weights_changed()?;
        }
        u.phases.optimizer += since(tick);
        u.phases.forward += lg.forward_s;
        u.phases.backward += lg.backward_s;
        u.flops += lg.flops;
        u.opt_steps = self.opt.step;
        u.loss += lg.loss;
        u.grad_norm += norm;
        u.updates += 1;
        u.lr = lr;
        Ok(())
    }

    /// Adds `value` to the round's sum of the algorithm's metric `name`.
    pub fn record(&mut self, name: &str, value: f64) {
        *self.report.extra.entry(name.to_string()).or_default() += value;
    }

    /// One optimizer step's metrics of a multi-turn episode's turn `turn` (0-based), logged as
    /// `agent_<i>/turn_<turn + 1>/<name>`, their mean over that turn's steps (the window
    /// divides by the `turn_<turn + 1>/steps` this counts), as CoMLRL tags its per-turn
    /// metrics `turn_<t>/`.
    pub fn record_turn(&mut self, turn: usize, metrics: &[(&str, f64)]) {
        let prefix = format!("turn_{}/", turn + 1);
        for (name, value) in metrics {
            self.record(&format!("{prefix}{name}"), *value);
        }
        self.record(
            &format!("{prefix}{}", crate::train::report::window::TURN_STEPS),
            1.0,
        );
    }
}

/// The agents an update round trains on this rank.
pub struct Round<'a> {
    learners: Vec<Learner<'a>>,
    parallel: bool,
    /// The run's processes: an algorithm whose agents' losses read each other's numbers
    /// (MADPO's Δ) exchanges them over it (a world of one for a process alone).
    team: &'a dyn World,
}

impl<'a> Round<'a> {
    /// A round over the agents held here (`Some` in both `policies` and `optims`), each
    /// starting from its `opt_steps`; `parallel` trains them at the same time. `team` is the
    /// run's world (every rank takes part in every round).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        policies: &'a [Option<Policy>],
        optims: &'a mut [Option<AdamW>],
        opt_steps: &[u64],
        replicas: &'a Replicas,
        freed: &Freed,
        rule: StepRule,
        parallel: bool,
        team: &'a dyn World,
    ) -> Self {
        let learners = policies
            .iter()
            .zip(optims.iter_mut())
            .enumerate()
            .filter_map(|(i, (p, o))| Some((i, p.as_ref()?, o.as_mut()?)))
            .map(|(index, policy, opt)| {
                // The round's first mini-batch draws the LoRA dropout masks of the agent's
                // next optimizer step (restored on resume with the optimizer).
                policy.set_update_step(opt.step);
                (index, policy, opt)
            })
            .map(|(index, policy, opt)| Learner {
                index,
                policy,
                vars: opt.params.iter().map(|p| p.var.clone()).collect(),
                opt,
                replicas,
                copies_follow: !freed.released(index),
                rule,
                report: AgentUpdate {
                    opt_steps: opt_steps[index],
                    ..Default::default()
                },
            })
            .collect();
        Round {
            learners,
            parallel,
            team,
        }
    }

    /// The run's processes, for an algorithm's exchanges between ranks (collectives: every
    /// rank calls them at the same point of the round).
    pub fn team(&self) -> &'a dyn World {
        self.team
    }

    /// The learners, for an algorithm whose agents step together mini-batch by mini-batch
    /// (MADPO: each agent's loss reads every agent's scores of the mini-batch, taken before any
    /// of them steps); [`Round::finish`] then gives what they reported.
    pub fn learners(&mut self) -> &mut [Learner<'a>] {
        &mut self.learners
    }

    /// What each learner reported, with its agent index (after [`Round::learners`]).
    pub fn finish(self) -> Vec<(usize, AgentUpdate)> {
        self.learners
            .into_iter()
            .map(|l| (l.index, l.report))
            .collect()
    }

    /// Runs `train` for every learner (at the same time when the round is parallel) and
    /// returns what each reported, with its agent index.
    pub fn each_agent(
        self,
        train: impl Fn(&mut Learner<'a>) -> Result<()> + Sync,
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        let work = |mut l: Learner<'a>| -> Result<(usize, AgentUpdate)> {
            train(&mut l)?;
            Ok((l.index, l.report))
        };
        if self.parallel && self.learners.len() > 1 {
            self.learners.into_par_iter().map(work).collect()
        } else {
            self.learners.into_iter().map(work).collect()
        }
    }
}
