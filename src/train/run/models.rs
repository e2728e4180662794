//! The final models of a run: every agent saved in Hugging Face layout under `models/`, all of
//! them or none.
use crate::dist::World;
use crate::error::{Error, Result};
use crate::model::Policy;
use crate::train::run::checkpoint::CheckpointPart;
use std::path::Path;

/// Saves every agent into one temporary `models` directory, then renames it into place: the
/// final models are all there or none is. A collective: each rank saves the agents it holds,
/// rank 0 renames once all are written. Only an agent's first replica (`writes[i]`) saves it,
/// and the algorithm's networks beside it (`extra`, e.g. critics).
pub fn save_models(
    policies: &[Option<Policy>],
    writes: &[bool],
    extra: &dyn CheckpointPart,
    models: &Path,
    world: &dyn World,
) -> Result<()> {
    let parent = models.parent().unwrap_or(Path::new("."));
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
    extra.save_models(&tmp, writes)?;
    world.barrier();
    if !world.is_root() {
        return Ok(());
    }
    if models.exists() {
        std::fs::remove_dir_all(models).map_err(|e| Error::io(models, e))?;
    }
    std::fs::rename(&tmp, models).map_err(|e| Error::io(models, e))
}
