//! The defaults of the sections written out by hand (dataset, top level), with where they come
//! from; `trainer`, `logging` and per-agent defaults are rows of their key tables
//! (`trainer_keys.rs`, `logging_keys.rs`, `agent_keys.rs`). Values marked "CoMLRL"
//! are those of `MAGRPOConfig` in CoMLRL 1.4 (`comlrl/trainers/reinforce/magrpo.py`), so that a
//! scenario means what the same settings mean in the Python library.

/// Agents in `agents: {model: ...}` without `count` (CoMLRL `num_agents` = 2); the default of
/// the `count` row in `agent_keys.rs`, also the count assumed when `agents` is missing.
pub const AGENT_COUNT: usize = 2;
/// Column holding the prompt (CoMLRL reads `item["prompt"]`).
pub const PROMPT_FIELD: &str = "prompt";
/// Config of a `dataset.hub` dataset (the name `datasets` gives a dataset without configs).
pub const HUB_CONFIG: &str = "default";
/// Split of the training set of a `dataset.hub` dataset (the eval set must name its split).
pub const HUB_SPLIT: &str = "train";

// The `trainer` defaults and their reasons are rows of the key table in `trainer_keys.rs`.

/// Log every N training steps, one step = one training prompt (CoMLRL `logging_steps` 50).
pub const LOGGING_STEPS: usize = 50;
/// W&B project when `logging.wandb` has none (CoMLRL's default project name).
pub const WANDB_PROJECT: &str = "comlrl";
/// Seed of the run (the common HF/TRL default).
pub const SEED: u64 = 42;
/// Checkpoint cadence in training steps (one step = one training prompt): 0 = only the final
/// save.
pub const CHECKPOINT_EVERY: u64 = 0;
/// Run folder, relative to the scenario file: `runs/<scenario stem>`.
pub const OUTPUT_ROOT: &str = "runs";
