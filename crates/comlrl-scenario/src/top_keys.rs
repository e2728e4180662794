//! The top level's key table (`keys.rs` has the macro and the row syntax): the sections and the
//! run-wide settings. [`RawTop`] reads each key's value as JSON, so that sections are
//! deserialized (and their errors collected) one by one and `agents` / `reward` can take two
//! shapes; [`RawScenario`] is the resolved scenario as written back; the docs table derives from
//! it too. `resolve.rs` reads the sections.
use crate::agent_keys::RawAgent;
use crate::dataset_keys::RawDataset;
use crate::keys::section;
use crate::logging_keys::RawLogging;
use crate::preference_keys::RawPreference;
use crate::spec::{ProcessorSpec, RewardSpec};
use crate::trainer_keys::RawTrainer;
use serde::{Serialize, Serializer};
use std::path::PathBuf;

section! {
    raw /// A scenario's top level as read: each key's value as JSON.
        RawTop;
    written /// A resolved scenario as written back (`Scenario::to_yaml`): every section explicit.
        RawScenario;
    read {
        /// Training (and evaluation) prompts.
        dataset: RawDataset, kind "mapping", shown "required", why "";
        /// The cooperating agents.
        agents: Vec<RawAgent>, kind "mapping or list", shown "required", why "";
        /// The joint reward term(s).
        reward: Vec<RewardSpec>, kind "mapping or list", shown "required", why "";
        /// Steps applied to the weighted reward sum.
        reward_processors: ProcessorChain, kind "list", shown "`[]`", why "";
        /// MAGRPO settings (CoMLRL `MAGRPOConfig`).
        trainer: RawTrainer, kind "mapping", shown "all defaults", why "";
        /// Logging cadence and tracking back-ends.
        logging: RawLogging, kind "mapping", shown "all defaults", why "";
        /// The preference trainers' settings (CoMLRL `MADPOConfig`; `trainer.algorithm: madpo`).
        preference: RawPreference, kind "mapping", shown "all defaults", why "";
        /// Seed of the run's random number generators, so that a run can be repeated. 42 is the
        /// usual HF/TRL default.
        seed: u64 = 42, kind "integer ≥ 0", why "";
        /// Run folder (checkpoints, logs). Final models go to `<output_dir>/models/agent_<i>`, as
        /// CoMLRL's `save_model(f"{output_dir}/models")`. Relative to the scenario file.
        output_dir: PathBuf, kind "path", shown "`runs/<scenario name>`", why "";
        /// Save a checkpoint every N training steps (one step = one training prompt, as CoMLRL
        /// counts them); `0` saves only at the end (CoMLRL saves only at the end). Ctrl-C always
        /// writes one. A checkpoint holds the weights, AdamW moments, RNG state, buffered
        /// rollouts and the resolved scenario, so `--resume` continues exactly.
        checkpoint_every: u64 = 0, kind "integer ≥ 0", why "";
    }
}

/// The processor chain as the resolved scenario writes it: `- scale: 100.0` rather than YAML
/// tags (`- !scale 100.0`), as users write them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessorChain(pub Vec<ProcessorSpec>);

impl Serialize for ProcessorChain {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let maps: Vec<serde_json::Value> = self
            .0
            .iter()
            .map(|x| serde_json::to_value(x).unwrap_or(serde_json::Value::Null))
            .collect();
        maps.serialize(s)
    }
}
