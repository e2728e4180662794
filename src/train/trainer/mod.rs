//! The training loop every algorithm shares: per training prompt, the rollouts of every agent,
//! scored and turned into training samples by the algorithm; every `rollout_buffer_size`
//! prompts an update round (the algorithm's, between the memory housekeeping); evaluation;
//! metrics, checkpoints, signals, the final models and the plot.
//!
//! A [`Trainer`] holds its parts by role: the [`Settings`] that drive the run, the [`Agents`]
//! this process holds, the [`Rewards`], the [`Strategy`] of its part in the run (alone, or one
//! of several MPI ranks, see `docs/distributed.md`) and the [`Algorithm`]. The loop borrows
//! them apart (`run`). Under `mpirun` each rank holds only its agents (`None` slots for the
//! others) and the loop runs in lockstep on every rank: rank 0 alone writes metrics, the plot
//! and the manifests. An agent with `replicas` > 1 is held by several ranks: its first replica
//! samples it, all of them train it.
//!
//! Files: `observer`, `settings`, `start`, `eval`, `finish`, `run` (the loop), this file.
//! Imports every other folder of `train`.
mod eval;
mod finish;
mod observer;
mod run;
mod settings;
mod start;

pub use observer::{Observer, RunSummary};
pub use settings::Settings;

use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::train::algorithms::{registry, Algorithm};
use crate::train::rollout::joint::check_joint_actions;
use crate::train::run::dir::{check_output_dir, guard_output_dir, RunLock};
use crate::train::setup::{centralized, Agents, Rewards};
use crate::train::world::{strategy, Strategy};
use comlrl_scenario::Scenario;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A training run: its settings, agents, rewards, part in the world and algorithm.
pub struct Trainer {
    settings: Settings,
    agents: Agents,
    rewards: Rewards,
    strategy: Box<dyn Strategy>,
    algorithm: Box<dyn Algorithm>,
}

impl Trainer {
    /// Checks the output directory, loads models and rewards.
    pub fn new(scenario: Scenario) -> Result<Self> {
        Self::in_world(scenario, crate::dist::single())
    }

    /// [`Trainer::new`] as one rank of `world`: loads only the agents placed on this rank.
    /// A centralized actor (`trainer.collaboration_mode: centralized`) trains as the one agent
    /// of `setup::centralized::actor_scenario`, its reward splitting each answer into the
    /// scenario's agents' outputs; checkpoints keep the scenario as written.
    pub fn in_world(scenario: Scenario, world: Arc<dyn World>) -> Result<Self> {
        guard_output_dir(&scenario)?;
        check_output_dir(&scenario.output_dir)?;
        check_joint_actions(&scenario)?;
        let rewards = Rewards::load(&scenario)?;
        let yaml = scenario.to_yaml();
        let scenario = match rewards.roles {
            Some(_) => centralized::actor_scenario(&scenario)?,
            None => scenario,
        };
        let placement = Placement::new(&scenario, world.as_ref())?;
        let mut agents = Agents::load(&scenario, &placement)?;
        // Every rank counts every agent's cut-off completions in the metrics.
        crate::train::world::run::share_ends(world.as_ref(), &mut agents.ends)?;
        let strategy = strategy(world, placement);
        strategy.supports(&scenario)?;
        let algorithm = registry::build(&scenario, &agents.policies, &agents.samples)?;
        Ok(Self {
            settings: Settings::with_yaml(scenario, yaml),
            agents,
            rewards,
            strategy,
            algorithm,
        })
    }

    /// A flag that, once set (e.g. by Ctrl-C), makes the loop checkpoint and stop after the
    /// current step.
    pub fn interrupt_flag(&self) -> Arc<AtomicBool> {
        self.settings.interrupt.clone()
    }

    /// Runs under a claim on the output directory taken beforehand (the CLI claims it before
    /// loading models and starting trackers); without one, `run` claims it itself.
    pub fn hold(&mut self, lock: RunLock) -> Result<()> {
        let out = &self.settings.scenario.output_dir;
        if lock.dir() != out.as_path() {
            return Err(Error::run_dir(
                lock.dir(),
                format!(
                    "the run lock is for {}, the scenario writes to {}",
                    lock.dir().display(),
                    out.display()
                ),
            ));
        }
        self.settings.lock = Some(lock);
        Ok(())
    }

    /// Makes `run` stop after `steps` steps and write no checkpoint or final model: for
    /// benchmarks that time part of a scenario.
    pub fn stop_after(&mut self, steps: usize) {
        self.settings.stop_after = Some(steps);
    }

    /// Trains to the end (or until interrupted), continuing from the latest checkpoint when
    /// `resume`.
    pub fn run(&mut self, resume: bool, obs: &mut dyn Observer) -> Result<RunSummary> {
        let Trainer {
            settings,
            agents,
            rewards,
            strategy,
            algorithm,
        } = self;
        let result = run::Loop {
            settings,
            agents,
            rewards,
            strategy: strategy.as_ref(),
            algorithm: algorithm.as_mut(),
        }
        .run(resume, obs);
        obs.finished(result.is_ok());
        result
    }
}
