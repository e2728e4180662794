//! The start of a run: rank 0 claims the output directory, the state is a fresh one or the
//! latest checkpoint's (`--resume`), rank 0 opens the metrics sink, and the rollout settings
//! are put together from the scenario.
use super::{Observer, Trainer};
use crate::dist::World;
use crate::error::{Error, Result};
use crate::metrics::MetricsSink;
use crate::model::{Policy, SamplingParams};
use crate::train::algorithms::magrpo::advantage::Baseline;
use crate::train::report::window::Window;
use crate::train::rollout::prompt::PromptFormatter;
use crate::train::rollout::tree::RolloutSpec;
use crate::train::run::checkpoint::{self, TrainState};
use crate::train::run::dir::{self, RunLock, StartMode};
use crate::train::world::run;
use comlrl_reward::TransitionFn;
use comlrl_scenario::{AdvantageMode, JointMode};
use rand::SeedableRng;

impl Trainer {
    /// Claims the output directory (rank 0; the others learn the run id) and returns the
    /// training state: the latest checkpoint's with `resume`, else a fresh one. The lock is
    /// held until the run ends.
    pub(super) fn start(
        &mut self,
        resume: bool,
        obs: &mut dyn Observer,
    ) -> Result<(TrainState, Option<RunLock>)> {
        let out = self.scenario.output_dir.clone();
        let n_agents = self.scenario.agents.len();
        let world = self.world.clone();
        let claimed = match (self.lock.take(), world.is_root()) {
            (Some(l), _) => Some(Ok(l)),
            (None, true) => {
                let mode = if resume {
                    StartMode::Resume
                } else {
                    StartMode::Fresh
                };
                Some(dir::claim(&out, mode))
            }
            (None, false) => None,
        };
        let (run_id, lock) = run::share_claim(world.as_ref(), claimed)?;
        let expect = self.expect();
        let state = match (resume, checkpoint::latest(&out)?) {
            (true, Some(dir)) => {
                let (st, yaml, notes) = checkpoint::load(
                    &dir,
                    &self.policies,
                    &mut self.optims,
                    &expect,
                    &run_id,
                    world.rank(),
                )?;
                for note in &notes {
                    obs.message(note);
                }
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
                window: self.new_window(),
                metrics_rows: 0,
                epoch_rewards: vec![],
                ranks: self.state_ranks(),
            },
        };
        Ok((state, lock))
    }

    /// An empty logging window.
    pub(super) fn new_window(&self) -> Window {
        Window::new(
            self.scenario.agents.len(),
            self.component_names.len(),
            self.eval_enabled(),
            self.scenario.trainer.kl_coef != 0.0,
        )
    }

    /// metrics.jsonl, opened where `state` left it; only rank 0 writes it.
    pub(super) fn open_metrics(
        &self,
        state: &TrainState,
        obs: &mut dyn Observer,
    ) -> Result<Option<MetricsSink>> {
        if !self.world.is_root() {
            return Ok(None);
        }
        let (sink, note) =
            MetricsSink::open(&self.scenario.output_dir, state.metrics_rows, state.step)?;
        if let Some(note) = note {
            obs.message(&note);
        }
        Ok(Some(sink))
    }

    /// How this run's rollouts are produced, from the trainer settings and the parts the loop
    /// holds while it runs.
    pub(super) fn rollout_spec<'a>(
        &self,
        sampling: &'a [SamplingParams],
        references: Option<&'a [Option<Policy>]>,
        transition: Option<&'a dyn TransitionFn>,
        prompts: &'a [Option<PromptFormatter>],
        samples: &'a [bool],
        world: &'a dyn World,
    ) -> RolloutSpec<'a> {
        let t = &self.scenario.trainer;
        RolloutSpec {
            k: t.num_generations,
            cross: t.joint_mode == JointMode::Cross,
            baseline: match t.advantage_mode {
                AdvantageMode::Mean => Baseline::Mean,
                AdvantageMode::Raw => Baseline::Raw,
                AdvantageMode::Max => Baseline::Max,
                AdvantageMode::Rloo => Baseline::Rloo,
            },
            normalize: t.advantage_normalization,
            sampling,
            reference: references.map(|r| (r, t.kl_coef)),
            turns: t.num_turns,
            discount: t.discount,
            early_termination: t.early_termination_threshold,
            transition,
            prompts,
            passthrough: t.external_prompt_passthrough,
            parallel: t.parallel_sampling,
            world,
            samples,
        }
    }
}
