//! The end of a run: the final models (all agents or none, atomically) unless it was
//! interrupted or a benchmark, also when the last step's checkpoint could not be written, the
//! plot of metrics.jsonl, and the run's summary.
use super::observer::RunSummary;
use super::settings::Settings;
use crate::error::{Error, Result};
use crate::metrics::read_jsonl;
use crate::train::report::plot::plot;
use crate::train::run::checkpoint::CheckpointPart;
use crate::train::run::models::save_models;
use crate::train::run::TrainState;
use crate::train::setup::Agents;
use crate::train::world::Strategy;

/// Saves the final models (a finished run only), draws the plot (rank 0) and sums up.
pub(super) fn finish(
    settings: &Settings,
    agents: &Agents,
    strategy: &dyn Strategy,
    extra: &dyn CheckpointPart,
    state: TrainState,
    interrupted: bool,
) -> Result<RunSummary> {
    let s = &settings.scenario;
    let out = s.output_dir.clone();
    let world = strategy.world();
    if !interrupted && settings.stop_after.is_none() {
        save_models(
            &agents.policies,
            &agents.samples,
            extra,
            &s.models_dir(),
            world,
        )?;
    }
    let rows_json = match world.is_root() {
        true => read_jsonl(&out.join("metrics.jsonl")).unwrap_or_default(),
        false => vec![],
    };
    if !rows_json.is_empty() {
        plot(&rows_json, s.agents.len(), &out.join("training.svg"))?;
    }
    let epoch_reward_means = state
        .epoch_rewards
        .iter()
        .map(|(s, n)| s / (*n).max(1) as f64)
        .collect();
    Ok(RunSummary {
        steps_done: state.step,
        total_steps: settings.total_steps(),
        interrupted,
        epoch_reward_means,
        output_dir: out,
    })
}

/// The checkpoint after the last step failed (a full disk, say). Without it the run's training
/// would be lost when no earlier checkpoint exists, so the final models (a third to half of a
/// checkpoint's bytes: no AdamW moments) are saved all the same, and the error says so. Only
/// where this process may write alone: with several ranks the failure may be one rank's, and
/// the save is a collective the others would not join.
pub(super) fn after_failed_checkpoint(
    settings: &Settings,
    agents: &Agents,
    strategy: &dyn Strategy,
    extra: &dyn CheckpointPart,
    e: Error,
    state: &TrainState,
) -> Error {
    let last = state.step == settings.total_steps() && settings.stop_after.is_none();
    if !last || !strategy.writes_alone() {
        return e;
    }
    let models = settings.scenario.models_dir();
    match save_models(
        &agents.policies,
        &agents.samples,
        extra,
        &models,
        strategy.world(),
    ) {
        Ok(()) => e.at_step(
            state.step,
            format!(
                "the final checkpoint (step {}) could not be written; the trained models were \
                 saved to {}",
                state.step,
                models.display()
            ),
        ),
        Err(_) => e,
    }
}
