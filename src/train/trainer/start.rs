//! The start of a run: rank 0 claims the output directory (the others learn the run id), and
//! the training state is the latest checkpoint's (`--resume`) or a fresh one.
use super::observer::Observer;
use super::settings::Settings;
use crate::error::{Error, Result};
use crate::train::algorithms::Algorithm;
use crate::train::run::checkpoint;
use crate::train::run::dir::{self, RunLock, StartMode};
use crate::train::run::TrainState;
use crate::train::setup::Agents;
use crate::train::world::Strategy;
use rand::SeedableRng;

/// Claims the output directory (rank 0; the others learn the run id) and returns the training
/// state: the latest checkpoint's with `resume` (weights, optimizer moments and the
/// algorithm's part restored in place), else a fresh one, for `terms` reward terms. The lock
/// is held until the run ends.
pub(super) fn start(
    settings: &mut Settings,
    agents: &mut Agents,
    terms: usize,
    strategy: &dyn Strategy,
    algorithm: &mut dyn Algorithm,
    resume: bool,
    obs: &mut dyn Observer,
) -> Result<(TrainState, Option<RunLock>)> {
    let out = settings.scenario.output_dir.clone();
    let world = strategy.world();
    let claimed = match (settings.lock.take(), world.is_root()) {
        (Some(l), _) => Some(Ok(l)),
        (None, true) => {
            let mode = match resume {
                true => StartMode::Resume,
                false => StartMode::Fresh,
            };
            Some(dir::claim(&out, mode))
        }
        (None, false) => None,
    };
    let (run_id, lock) = strategy.share_claim(claimed)?;
    let vocab = agents
        .policies
        .iter()
        .map(|p| p.as_ref().map_or(usize::MAX, |p| p.config.vocab_size))
        .collect();
    let expect = settings.expect(terms, vocab, strategy.recorded_ranks());
    let state = match (resume, checkpoint::latest(&out)?) {
        (true, Some(dir)) => {
            let (st, yaml, notes) = checkpoint::load(
                &dir,
                &agents.policies,
                &mut agents.optims,
                algorithm,
                &expect,
                &run_id,
                world.rank(),
            )?;
            for note in &notes {
                obs.message(note);
            }
            if yaml != settings.yaml {
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
            opt_steps: vec![0; settings.scenario.agents.len()],
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(settings.scenario.seed),
            buffer: vec![],
            window: settings.new_window(terms),
            metrics_rows: 0,
            epoch_rewards: vec![],
            ranks: strategy.recorded_ranks(),
            trained: settings.trained(),
        },
    };
    Ok((state, lock))
}
