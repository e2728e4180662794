//! The MAGRPO training loop: per training prompt, rollouts of every agent, joint rewards and
//! advantages; every `rollout_buffer_size` prompts one update round (`update`); evaluation
//! (`eval`); metrics, checkpoints, signals, the final models and the plot.
//!
//! Under `mpirun` each rank holds only its agents (`None` slots for the others); the loop runs
//! in lockstep on every rank (see `docs/distributed.md`): rank 0 alone writes metrics, the plot
//! and the manifests. An agent with `replicas` > 1 is held by several ranks: its first replica
//! samples it, all of them train it (`replicas`).
use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::model::{Policy, SamplingParams};
use crate::train::optim::adamw::{AdamW, AdamWConfig};
use crate::train::optim::moments::StateDtype;
use crate::train::run::checkpoint::TrainState;
use crate::train::run::dir::RunLock;
use crate::train::run::verify::Expect;
use crate::train::setup::agents;
use comlrl_reward::RewardStack;
use comlrl_scenario::{Dtype, JointMode, Scenario};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod eval;
mod finish;
mod start;
mod step;
mod update;

/// Callbacks for progress display (the CLI draws a progress bar; tests pass `()`).
pub trait Observer {
    /// Training starts: `total_steps` in all, `done` of them already (resumed runs).
    fn start(&mut self, _total_steps: usize, _done: usize) {}
    /// Step `step` finished with this mean joint reward, in this many seconds.
    fn step(&mut self, _step: usize, _reward_mean: f64, _step_seconds: f64) {}
    /// Epoch `epoch` (from 1) is complete, with this mean joint reward (after processors). A
    /// resumed run reports the epochs it completed before, at its start.
    fn epoch(&mut self, _epoch: usize, _reward_mean: f64) {}
    /// A note or warning for the user.
    fn message(&mut self, _msg: &str) {}
    /// A metrics row was written to metrics.jsonl (trackers forward it).
    fn metrics(&mut self, _row: &crate::metrics::Row) {}
    /// The run ended: `ok` is false when it failed.
    fn finished(&mut self, _ok: bool) {}
}

impl Observer for () {}

/// What a finished (or interrupted) run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Training steps completed, resumed ones included.
    pub steps_done: usize,
    /// Training steps of the whole run.
    pub total_steps: usize,
    /// Stopped by a signal before the end (a checkpoint was written).
    pub interrupted: bool,
    /// Mean joint reward (after processors) of each completed epoch.
    pub epoch_reward_means: Vec<f64>,
    /// The run directory.
    pub output_dir: PathBuf,
}

/// A MAGRPO run: the agents' policies and optimizers, the reward and the scenario.
pub struct Trainer {
    scenario: Scenario,
    /// Each agent's policy, `None` when another rank holds it.
    policies: Vec<Option<Policy>>,
    /// Frozen copies of the initial policies, kept only when `kl_coef` ≠ 0.
    references: Option<Vec<Option<Policy>>>,
    optims: Vec<Option<AdamW>>,
    stack: RewardStack,
    transition: Option<Box<dyn comlrl_reward::TransitionFn>>,
    sampling: Vec<SamplingParams>,
    component_names: Vec<String>,
    yaml: String,
    interrupt: Arc<AtomicBool>,
    /// Stop after this many steps without writing checkpoints or final models (benchmarks).
    stop_after: Option<usize>,
    /// Each agent's template + chat template.
    prompts: Arc<crate::train::rollout::prompt::Prompts>,
    /// The claim on the output directory (taken by `run` when the caller has not given one).
    lock: Option<RunLock>,
    /// The run's processes.
    world: Arc<dyn World>,
    /// Which rank holds which agent.
    placement: Placement,
    /// Each replicated agent's sub-world of replica ranks.
    replicas: crate::train::world::replicas::Replicas,
    /// `samples[i]`: this rank samples agent `i` and writes its files (its first replica).
    samples: Vec<bool>,
}

impl Trainer {
    /// Checks the output directory, loads models and rewards.
    pub fn new(scenario: Scenario) -> Result<Self> {
        Self::in_world(scenario, crate::dist::single())
    }

    /// [`Trainer::new`] as one rank of `world`: loads only the agents placed on this rank.
    pub fn in_world(scenario: Scenario, world: Arc<dyn World>) -> Result<Self> {
        agents::guard_output_dir(&scenario)?;
        agents::check_output_dir(&scenario.output_dir)?;
        agents::check_joint_actions(&scenario)?;
        let placement = Placement::new(&scenario, world.as_ref())?;
        let stack = agents::reward_stack(&scenario)?;
        let transition = agents::transition(&scenario)?;
        let memory = agents::check_memory(
            &scenario,
            |i| placement.holds(i),
            |i| placement.is_local(i),
            crate::train::setup::memory::Lookup::Download,
        )?;
        log::debug!(
            "memory estimate: {} at the peak for {} agent(s) ({} available)",
            crate::train::setup::memory::human(memory.peak),
            memory.agents.len(),
            memory
                .available
                .as_ref()
                .map_or("unknown".into(), |(b, _)| {
                    crate::train::setup::memory::human(*b)
                })
        );
        let policies = agents::load_placed(&scenario, |i| placement.holds(i), true)?;
        for (a, p) in scenario.agents.iter().zip(&policies) {
            if let Some(p) = p {
                agents::check_agent_prompt_lengths(&scenario, a, p)?;
            }
        }
        let references = if scenario.trainer.kl_coef != 0.0 {
            // Only the sampling replica computes the reference KL.
            Some(agents::load_placed(
                &scenario,
                |i| placement.is_local(i),
                false,
            )?)
        } else {
            None
        };
        let t = &scenario.trainer;
        let optims = policies
            .iter()
            .zip(&scenario.agents)
            .enumerate()
            .map(|(i, (p, a))| {
                let cfg = AdamWConfig {
                    lr: a.learning_rate,
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
                let seed = scenario.seed ^ (i as u64).wrapping_mul(0xa076_1d64_78bd_642f);
                p.as_ref()
                    .map(|p| AdamW::with_state(p.vars(), cfg, state, seed))
            })
            .collect();
        let sampling = scenario.agents.iter().map(agents::sampling).collect();
        let component_names = stack
            .component_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        let yaml = scenario.to_yaml();
        let prompts = Arc::new(crate::train::rollout::prompt::Prompts::for_placed(
            &scenario, &policies,
        )?);
        let replicas = match placement.replicated() {
            true => crate::train::world::replicas::Replicas::new(&placement, world.as_ref()),
            false => crate::train::world::replicas::Replicas::none(scenario.agents.len()),
        };
        let samples = (0..scenario.agents.len())
            .map(|i| placement.is_local(i))
            .collect();
        Ok(Self {
            scenario,
            policies,
            references,
            optims,
            stack,
            transition,
            sampling,
            component_names,
            yaml,
            interrupt: Arc::new(AtomicBool::new(false)),
            stop_after: None,
            prompts,
            lock: None,
            world,
            placement,
            replicas,
            samples,
        })
    }

    /// A flag that, once set (e.g. by Ctrl-C), makes the loop checkpoint and stop after the
    /// current step.
    pub fn interrupt_flag(&self) -> Arc<AtomicBool> {
        self.interrupt.clone()
    }

    /// Runs under a claim on the output directory taken beforehand (the CLI claims it before
    /// loading models and starting trackers); without one, `run` claims it itself.
    pub fn hold(&mut self, lock: RunLock) -> Result<()> {
        if lock.dir() != self.scenario.output_dir {
            return Err(Error::run_dir(
                lock.dir(),
                format!(
                    "the run lock is for {}, the scenario writes to {}",
                    lock.dir().display(),
                    self.scenario.output_dir.display()
                ),
            ));
        }
        self.lock = Some(lock);
        Ok(())
    }

    /// Makes `run` stop after `steps` steps and write no checkpoint or final model: for
    /// benchmarks that time part of a scenario.
    pub fn stop_after(&mut self, steps: usize) {
        self.stop_after = Some(steps);
    }

    fn total_steps(&self) -> usize {
        self.scenario.trainer.num_train_epochs * self.scenario.dataset.train.rows.len()
    }

    /// Optimizer steps per agent over the whole run (for the LR schedule): nodes per prompt
    /// (every branch expanded; early termination makes the real count smaller), updates of
    /// `rollout_buffer_size` nodes with a flush at each epoch's end, and mini-batches per update.
    fn total_opt_steps(&self) -> usize {
        let t = &self.scenario.trainer;
        // Saturating: the scenario bounds the joint actions per node, but a deep multi-turn
        // tree may still count more nodes than fit (the schedule is then flat at the start).
        let joint = self.joint_per_node();
        let nodes_per_prompt = (0..t.num_turns).fold(0usize, |acc, turn| {
            acc.saturating_add(joint.saturating_pow(turn as u32))
        });
        let rows = self.scenario.dataset.train.rows.len();
        let size = t.rollout_buffer_size.max(1);
        let updates_per_epoch = rows.saturating_mul(nodes_per_prompt).div_ceil(size);
        let per_update = size.div_ceil(t.train_batch_size.max(1));
        t.num_train_epochs
            .saturating_mul(updates_per_epoch)
            .saturating_mul(per_update)
    }

    /// Joint actions scored per rollout node (bounded by the scenario's `max_joint_actions`).
    fn joint_per_node(&self) -> usize {
        let t = &self.scenario.trainer;
        crate::train::rollout::joint::joint_count(
            self.scenario.agents.len(),
            t.num_generations,
            t.joint_mode == JointMode::Cross,
        )
        .unwrap_or(usize::MAX)
    }

    /// What a checkpoint's state must fit to be resumed with this scenario.
    fn expect(&self) -> Expect {
        let t = &self.scenario.trainer;
        Expect {
            agents: self.scenario.agents.len(),
            k: t.num_generations,
            joint: self.joint_per_node(),
            terms: self.component_names.len(),
            turns: t.num_turns,
            total_steps: self.total_steps(),
            epochs: t.num_train_epochs,
            vocab: self
                .policies
                .iter()
                .map(|p| p.as_ref().map_or(usize::MAX, |p| p.config.vocab_size))
                .collect(),
            ranks: self.state_ranks(),
        }
    }

    /// The agents' ranks as a checkpoint records them (empty for a one-process run).
    fn state_ranks(&self) -> Vec<usize> {
        match self.placement.distributed() {
            true => self.placement.owners.clone(),
            false => vec![],
        }
    }

    /// Trains to the end (or until interrupted), continuing from the latest checkpoint when
    /// `resume`.
    pub fn run(&mut self, resume: bool, obs: &mut dyn Observer) -> Result<RunSummary> {
        let result = self.run_inner(resume, obs);
        obs.finished(result.is_ok());
        result
    }

    /// The algorithm: resume or start, then per training prompt one step (rollouts, rewards,
    /// advantages; an update round when the buffer is full), evaluation when due, the logging
    /// window, a checkpoint when due or on a signal; at the end the final models and the plot.
    fn run_inner(&mut self, resume: bool, obs: &mut dyn Observer) -> Result<RunSummary> {
        let (mut state, _lock) = self.start(resume, obs)?;
        let mut sink = self.open_metrics(&state, obs)?;
        let total = self.total_steps();
        let limit = self.stop_after.map_or(total, |n| n.min(total));
        // Moved out for the loop (the loop borrows `self` mutably); put back at the end.
        let references = self.references.take();
        let transition = self.transition.take();
        let (prompts, samples) = (self.prompts.clone(), self.samples.clone());
        let sampling = self.sampling.clone();
        let world = self.world.clone();
        let spec = self.rollout_spec(
            &sampling,
            references.as_deref(),
            transition.as_deref(),
            &prompts.0,
            &samples,
            world.as_ref(),
        );
        log::debug!("models loaded; {}", crate::runtime::memory_line());
        if let Some(note) = crate::train::setup::agents::compute_dtype_note(&self.scenario.trainer)
        {
            obs.message(&note);
        }
        obs.start(total, state.step);
        let rows = self.scenario.dataset.train.rows.len().max(1);
        for e in 1..=state.step / rows {
            report_epoch(&state, e, obs);
        }
        // First-turn completions of the next prompts, sampled together ahead of their steps.
        let mut pending = VecDeque::new();
        let mut interrupted = false;
        while state.step < limit {
            let t0 = Instant::now();
            self.train_step(&mut state, &spec, &mut pending, limit, obs)?;
            state.window.seconds += t0.elapsed().as_secs_f64();
            state.window.steps += 1;
            state.step += 1;
            if self.eval_enabled() && state.step % self.scenario.trainer.eval_interval == 0 {
                state.window.eval = Some(self.evaluate(&spec, state.step)?);
            }
            let mean = state.window.rewards.iter().map(|&x| x as f64).sum::<f64>()
                / state.window.rewards.len().max(1) as f64;
            obs.step(state.step, mean, t0.elapsed().as_secs_f64());
            self.log_window(&mut state, sink.as_mut(), obs)?;
            if state.step.is_multiple_of(rows) {
                report_epoch(&state, state.step / rows, obs);
            }
            // A signal may reach the ranks at different steps: stop when any rank has one.
            let stop = crate::train::world::run::any(world.as_ref(), self.interrupt.load(Ordering::SeqCst));
            if let Err(e) = self.checkpoint_if_due(&state, stop) {
                return Err(self.after_failed_checkpoint(e, &state));
            }
            if stop && state.step < total {
                interrupted = true;
                obs.message(&format!(
                    "interrupted: checkpoint written at step {}; continue with --resume",
                    state.step
                ));
                break;
            }
        }
        self.references = references;
        self.transition = transition;
        self.finish(state, interrupted)
    }
}

/// Tells `obs` that epoch `e` (from 1) is complete, with its mean joint reward.
fn report_epoch(state: &TrainState, e: usize, obs: &mut dyn Observer) {
    if let Some((sum, n)) = state.epoch_rewards.get(e - 1) {
        obs.epoch(e, sum / (*n).max(1) as f64);
    }
}
