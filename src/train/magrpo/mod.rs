//! The MAGRPO training loop: per training prompt, rollouts of every agent, joint rewards and
//! advantages; every `rollout_buffer_size` prompts one update round (`update`); evaluation
//! (`eval`); metrics, checkpoints, signals, the final models and the plot.
//!
//! Under `mpirun` each rank holds only its agents (`None` slots for the others); the loop runs
//! in lockstep on every rank (see `docs/distributed.md`): rank 0 alone writes metrics, the plot
//! and the manifests. An agent with `replicas` > 1 is held by several ranks: its first replica
//! samples it, all of them train it (`replicas`).
use super::advantage::Baseline;
use super::checkpoint::{self, TrainState};
use super::optim::{AdamW, AdamWConfig};
use super::presample::sample_group;
use super::rollout::{rollout_presampled, NodeSample, RolloutSpec, RowInput};
use super::rundir::{self, RunLock, StartMode};
use super::setup;
use super::timing::Phases;
use super::verify::Expect;
use super::window::Window;
use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::metrics::{read_jsonl, MetricsSink};
use crate::model::{Policy, SamplingParams};
use comlrl_reward::RewardStack;
use comlrl_scenario::{AdvantageMode, JointMode, Scenario};
use rand::SeedableRng;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod eval;
mod gather;
mod replicas;
mod update;

/// Callbacks for progress display (the CLI draws a progress bar; tests pass `()`).
pub trait Observer {
    /// Training starts: `total_steps` in all, `done` of them already (resumed runs).
    fn start(&mut self, _total_steps: usize, _done: usize) {}
    /// Step `step` finished with this mean joint reward, in this many seconds.
    fn step(&mut self, _step: usize, _reward_mean: f64, _step_seconds: f64) {}
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
    prompts: Arc<super::prompt::Prompts>,
    /// The claim on the output directory (taken by `run` when the caller has not given one).
    lock: Option<RunLock>,
    /// The run's processes.
    world: Arc<dyn World>,
    /// Which rank holds which agent.
    placement: Placement,
    /// Each replicated agent's sub-world of replica ranks.
    replicas: replicas::Replicas,
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
        setup::check_output_dir(&scenario.output_dir)?;
        setup::check_joint_actions(&scenario)?;
        let placement = Placement::new(&scenario, world.as_ref())?;
        let stack = setup::reward_stack(&scenario)?;
        let transition = setup::transition(&scenario)?;
        let policies = setup::load_placed(&scenario, |i| placement.holds(i), true)?;
        for (a, p) in scenario.agents.iter().zip(&policies) {
            if let Some(p) = p {
                setup::check_agent_prompt_lengths(&scenario, a, p)?;
            }
        }
        let references = if scenario.trainer.kl_coef != 0.0 {
            // Only the sampling replica computes the reference KL.
            Some(setup::load_placed(
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
            .map(|(p, a)| {
                let cfg = AdamWConfig {
                    lr: a.learning_rate,
                    beta1: t.adam_beta1,
                    beta2: t.adam_beta2,
                    eps: t.adam_epsilon,
                    weight_decay: t.weight_decay,
                };
                p.as_ref().map(|p| AdamW::new(p.vars(), cfg))
            })
            .collect();
        let sampling = scenario.agents.iter().map(setup::sampling).collect();
        let component_names = stack
            .component_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        let yaml = scenario.to_yaml();
        let prompts = Arc::new(super::prompt::Prompts::for_placed(&scenario, &policies)?);
        let replicas = match placement.replicated() {
            true => replicas::Replicas::new(&placement, world.as_ref()),
            false => replicas::Replicas::none(scenario.agents.len()),
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
        super::joint::joint_count(
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

    fn run_inner(&mut self, resume: bool, obs: &mut dyn Observer) -> Result<RunSummary> {
        let out = self.scenario.output_dir.clone();
        let n_agents = self.scenario.agents.len();
        let world = self.world.clone();
        let root = world.is_root();
        // Rank 0 claims the output directory and tells the others the run id. Held until this
        // run ends (dropping it releases the output directory).
        let claimed = match (self.lock.take(), root) {
            (Some(l), _) => Some(Ok(l)),
            (None, true) => {
                let mode = if resume {
                    StartMode::Resume
                } else {
                    StartMode::Fresh
                };
                Some(rundir::claim(&out, mode))
            }
            (None, false) => None,
        };
        let (run_id, _lock) = gather::share_claim(world.as_ref(), claimed)?;
        let expect = self.expect();
        let mut state = match (resume, checkpoint::latest(&out)?) {
            (true, Some(dir)) => {
                let (st, yaml) = checkpoint::load(
                    &dir,
                    &self.policies,
                    &mut self.optims,
                    &expect,
                    &run_id,
                    world.rank(),
                )?;
                if yaml != self.yaml {
                    obs.message(&format!(
                        "warning: the scenario differs from the one saved in {}; continuing with the current one",
                        dir.display()
                    ));
                }
                obs.message(&format!(
                    "resuming from {} (step {})",
                    dir.display(),
                    st.step
                ));
                st
            }
            (true, None) => {
                return Err(Error::run_dir(
                    &out,
                    format!(
                        "--resume: no checkpoint in {}; start a new run with --overwrite",
                        checkpoint::checkpoints_dir(&out).display()
                    ),
                ))
            }
            (false, _) => TrainState {
                run_id,
                step: 0,
                opt_steps: vec![0; n_agents],
                rng: rand_chacha::ChaCha8Rng::seed_from_u64(self.scenario.seed),
                buffer: vec![],
                window: Window::new(
                    n_agents,
                    self.component_names.len(),
                    self.eval_enabled(),
                    self.scenario.trainer.kl_coef != 0.0,
                ),
                metrics_rows: 0,
                epoch_rewards: vec![],
                ranks: self.state_ranks(),
            },
        };
        // Only rank 0 writes metrics.jsonl.
        let mut sink = match root {
            true => {
                let (sink, note) = MetricsSink::open(&out, state.metrics_rows, state.step)?;
                if let Some(note) = note {
                    obs.message(&note);
                }
                Some(sink)
            }
            false => None,
        };
        let total = self.total_steps();
        let rows = self.scenario.dataset.train.rows.len();
        let t = self.scenario.trainer.clone();
        let spec_sampling = self.sampling.clone();
        // Moved out for the loop (the loop borrows `self` mutably); put back at the end.
        let references = self.references.take();
        let transition = self.transition.take();
        let prompts = self.prompts.clone();
        let samples = self.samples.clone();
        let spec = RolloutSpec {
            k: t.num_generations,
            cross: t.joint_mode == JointMode::Cross,
            baseline: match t.advantage_mode {
                AdvantageMode::Mean => Baseline::Mean,
                AdvantageMode::Raw => Baseline::Raw,
                AdvantageMode::Max => Baseline::Max,
                AdvantageMode::Rloo => Baseline::Rloo,
            },
            normalize: t.advantage_normalization,
            sampling: &spec_sampling,
            reference: references.as_deref().map(|r| (r, t.kl_coef)),
            turns: t.num_turns,
            discount: t.discount,
            early_termination: t.early_termination_threshold,
            transition: transition.as_deref(),
            prompts: &prompts.0,
            passthrough: t.external_prompt_passthrough,
            parallel: t.parallel_sampling,
            world: world.as_ref(),
            samples: &samples,
        };
        log::debug!("models loaded; {}", crate::runtime::memory_line());
        obs.start(total, state.step);
        let mut interrupted = false;
        let limit = self.stop_after.map_or(total, |n| n.min(total));
        // First-turn completions of the next prompts, sampled together ahead of their steps.
        let mut pending = std::collections::VecDeque::new();
        while state.step < limit {
            let step = state.step;
            let (epoch, r) = (step / rows, step % rows);
            let row = &self.scenario.dataset.train.rows[r];
            let prompts = self.prompts.render(row)?;
            let t0 = Instant::now();
            let input = RowInput {
                prompt: &row.prompt,
                fields: &row.fields,
            };
            let mut phases = Phases::default();
            let where_ = format!("step {} (epoch {}, prompt {})", step + 1, epoch + 1, r + 1);
            // The prompts up to the next update see the same policies: sample them in one batch.
            let group = t
                .rollout_buffer_size
                .max(1)
                .saturating_sub(state.buffer.len())
                .min(rows - r)
                .min(limit - step);
            if pending.is_empty() && t.batch_buffer_sampling && t.num_turns == 1 && group > 1 {
                let rendered = (r..r + group)
                    .map(|i| self.prompts.render(&self.scenario.dataset.train.rows[i]))
                    .collect::<Result<Vec<_>>>()?;
                let mut group_phases = Phases::default();
                let sampled = sample_group(
                    &self.policies,
                    &rendered,
                    &spec,
                    &state.rng,
                    &mut group_phases,
                )
                .map_err(|e| e.at_step(step + 1, where_.clone()))?;
                // Each step of the group is charged an equal share of its sampling time.
                let share = group_phases.sampling / group as f64;
                pending = sampled.into_iter().map(|p| (p, share)).collect();
            }
            let pre = pending.pop_front().map(|(p, share)| {
                phases.sampling += share;
                p
            });
            let nodes = match rollout_presampled(
                &self.policies,
                &prompts,
                &input,
                &self.stack,
                &spec,
                &mut state.rng,
                &mut phases,
                pre,
            ) {
                Ok(nodes) => nodes,
                // A term with `on_error: skip_step` failed: this prompt trains nothing.
                Err(Error::Reward(e @ comlrl_reward::RewardError::SkipStep { .. })) => {
                    obs.message(&format!("warning: {where_} skipped: {e}"));
                    state.window.skipped_steps += 1;
                    Vec::new()
                }
                Err(e) => return Err(e.at_step(step + 1, where_)),
            };
            state.window.phases.add(&phases);
            log::debug!(
                "step {}: sampled; {}",
                step + 1,
                crate::runtime::memory_line()
            );
            for node in nodes {
                record_rollout(&mut state, &node, epoch);
                state.buffer.push(node);
            }
            let size = t.rollout_buffer_size.max(1);
            while state.buffer.len() >= size {
                // Never reached with presampled prompts left (the group ends at the update).
                pending.clear();
                let batch: Vec<NodeSample> = state.buffer.drain(..size).collect();
                self.update(&mut state, batch)?;
            }
            // CoMLRL flushes what is left at the end of every epoch.
            if r + 1 == rows && !state.buffer.is_empty() {
                pending.clear();
                let batch = std::mem::take(&mut state.buffer);
                self.update(&mut state, batch)?;
            }
            state.window.seconds += t0.elapsed().as_secs_f64();
            state.window.steps += 1;
            state.step += 1;
            if self.eval_enabled() && state.step % t.eval_interval == 0 {
                state.window.eval = Some(self.evaluate(&spec, state.step)?);
            }
            let mean = state.window.rewards.iter().map(|&x| x as f64).sum::<f64>()
                / state.window.rewards.len().max(1) as f64;
            obs.step(state.step, mean, t0.elapsed().as_secs_f64());
            let log_now =
                state.step % self.scenario.logging.steps.max(1) == 0 || state.step == total;
            if log_now {
                if self.placement.distributed() {
                    let t = Instant::now();
                    gather::merge_window(world.as_ref(), &self.placement, &mut state.window)?;
                    state.window.phases.comm += t.elapsed().as_secs_f64();
                }
                let row = state
                    .window
                    .row(state.step, epoch + 1, &self.component_names);
                if let (Some(row), Some(sink)) = (row, sink.as_mut()) {
                    sink.write(&row)?;
                    obs.metrics(&row);
                }
                state.window = Window::new(
                    n_agents,
                    self.component_names.len(),
                    self.eval_enabled(),
                    self.scenario.trainer.kl_coef != 0.0,
                );
            }
            if let Some(sink) = &sink {
                state.metrics_rows = sink.rows;
            }
            let every = self.scenario.checkpoint_every as usize;
            // A signal may reach the ranks at different steps: stop when any rank has one.
            let stop = gather::any(world.as_ref(), self.interrupt.load(Ordering::SeqCst));
            let benchmark = self.stop_after.is_some();
            if !benchmark && ((every > 0 && state.step % every == 0) || stop || state.step == total)
            {
                self.replicas
                    .check_identical(&self.policies, &self.placement, state.step)?;
                checkpoint::save(
                    &out,
                    &state,
                    &self.policies,
                    &self.optims,
                    &self.samples,
                    &self.yaml,
                    world.as_ref(),
                )?;
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
        if !interrupted && self.stop_after.is_none() {
            save_models(
                &self.policies,
                &self.samples,
                &self.scenario.models_dir(),
                world.as_ref(),
            )?;
        }
        let rows_json = match root {
            true => read_jsonl(&out.join("metrics.jsonl")).unwrap_or_default(),
            false => vec![],
        };
        if !rows_json.is_empty() {
            super::plot::plot(&rows_json, n_agents, &out.join("training.svg"))?;
        }
        self.references = references;
        self.transition = transition;
        let epoch_reward_means = state
            .epoch_rewards
            .iter()
            .map(|(s, n)| s / (*n).max(1) as f64)
            .collect();
        Ok(RunSummary {
            steps_done: state.step,
            total_steps: total,
            interrupted,
            epoch_reward_means,
            output_dir: out,
        })
    }
}

/// Saves every agent into one temporary `models` directory, then renames it into place: the
/// final models are all there or none is. A collective: each rank saves the agents it holds,
/// rank 0 renames once all are written. Only an agent's first replica (`writes[i]`) saves it.
fn save_models(
    policies: &[Option<Policy>],
    writes: &[bool],
    models: &std::path::Path,
    world: &dyn World,
) -> Result<()> {
    let parent = models.parent().unwrap_or(std::path::Path::new("."));
    let tmp = parent.join(".models.tmp");
    if world.is_root() && tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    world.barrier();
    for (i, p) in policies.iter().enumerate() {
        if let (Some(p), true) = (p, writes[i]) {
            p.save(&tmp.join(format!("agent_{i}")))?;
        }
    }
    world.barrier();
    if !world.is_root() {
        return Ok(());
    }
    if models.exists() {
        std::fs::remove_dir_all(models).map_err(|e| Error::io(models, e))?;
    }
    std::fs::rename(&tmp, models).map_err(|e| Error::io(models, e))
}

fn record_rollout(state: &mut TrainState, s: &NodeSample, epoch: usize) {
    let w = &mut state.window;
    if s.turn > 0 {
        // Later turns: their own reward means; agent statistics below cover every node.
        if w.turn_rewards.len() < s.turn {
            w.turn_rewards.resize(s.turn, (0.0, 0));
        }
        let slot = &mut w.turn_rewards[s.turn - 1];
        slot.0 += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
        slot.1 += s.rewards.len();
    } else {
        w.rewards.extend_from_slice(&s.rewards);
    }
    for comp in &s.components {
        for (slot, v) in w.components.iter_mut().zip(comp) {
            slot.0 += *v as f64;
            slot.1 += 1;
        }
    }
    for (aw, a) in w.agents.iter_mut().zip(&s.agents) {
        aw.kl_sum += a.kl.iter().map(|&k| k as f64).sum::<f64>();
        for (c, r) in a.completions.iter().zip(&a.returns) {
            aw.len_sum += c.len() as f64;
            aw.returns_sum += *r as f64;
            aw.completions += 1;
            w.generated_tokens += c.len();
        }
    }
    if s.turn > 0 {
        return;
    }
    if state.epoch_rewards.len() <= epoch {
        state.epoch_rewards.resize(epoch + 1, (0.0, 0));
    }
    let e = &mut state.epoch_rewards[epoch];
    e.0 += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
    e.1 += s.rewards.len();
}
