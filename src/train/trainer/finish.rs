//! The end of a run: the final models (all agents or none, atomically) unless it was
//! interrupted or a benchmark, also when the last step's checkpoint could not be written, the
//! plot of metrics.jsonl, and the run's summary.
use super::{RunSummary, Trainer};
use crate::dist::World;
use crate::error::{Error, Result};
use crate::metrics::read_jsonl;
use crate::model::Policy;
use crate::train::run::checkpoint::TrainState;

impl Trainer {
    /// Saves the final models (a finished run only), draws the plot (rank 0) and sums up.
    pub(super) fn finish(&self, state: TrainState, interrupted: bool) -> Result<RunSummary> {
        let out = self.scenario.output_dir.clone();
        let n_agents = self.scenario.agents.len();
        if !interrupted && self.stop_after.is_none() {
            save_models(
                &self.policies,
                &self.samples,
                &self.scenario.models_dir(),
                self.world.as_ref(),
            )?;
        }
        let rows_json = match self.world.is_root() {
            true => read_jsonl(&out.join("metrics.jsonl")).unwrap_or_default(),
            false => vec![],
        };
        if !rows_json.is_empty() {
            crate::train::report::plot::plot(&rows_json, n_agents, &out.join("training.svg"))?;
        }
        let epoch_reward_means = state
            .epoch_rewards
            .iter()
            .map(|(s, n)| s / (*n).max(1) as f64)
            .collect();
        Ok(RunSummary {
            steps_done: state.step,
            total_steps: self.total_steps(),
            interrupted,
            epoch_reward_means,
            output_dir: out,
        })
    }

    /// The checkpoint after the last step failed (a full disk, say). Without it the run's
    /// training would be lost when no earlier checkpoint exists, so the final models (a third
    /// to half of a checkpoint's bytes: no AdamW moments) are saved all the same, and the
    /// error says so. A single process only: with several ranks the failure may be one rank's,
    /// and the save is a collective the others would not join.
    pub(super) fn after_failed_checkpoint(&self, e: Error, state: &TrainState) -> Error {
        let last = state.step == self.total_steps() && self.stop_after.is_none();
        if !last || self.world.size() > 1 {
            return e;
        }
        let models = self.scenario.models_dir();
        match save_models(&self.policies, &self.samples, &models, self.world.as_ref()) {
            Ok(()) => e.at_step(
                state.step,
                format!(
                    "the final checkpoint (step {}) could not be written; the trained models \
                     were saved to {}",
                    state.step,
                    models.display()
                ),
            ),
            Err(_) => e,
        }
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
