//! The defaults of the sections written out by hand (agents, dataset, top level), with where
//! they come from; `trainer` and `logging` defaults are rows of their key tables
//! (`trainer_keys.rs`, `logging_keys.rs`). Values marked "CoMLRL"
//! are those of `MAGRPOConfig` in CoMLRL 1.4 (`comlrl/trainers/reinforce/magrpo.py`), so that a
//! scenario means what the same settings mean in the Python library.
use crate::plan::Dtype;

/// Agents in `agents: {model: ...}` without `count` (CoMLRL `num_agents` = 2).
pub const AGENT_COUNT: usize = 2;
/// Weights dtype: let the loader choose (f32 on CPU, where bf16/f16 matmuls are slow or absent).
pub const DTYPE: Dtype = Dtype::Auto;
/// Sampling temperature (CoMLRL 0.6).
pub const TEMPERATURE: f64 = 0.6;
/// Nucleus sampling mass (CoMLRL 0.6).
pub const TOP_P: f64 = 0.6;
/// Top-k filter (CoMLRL 50); `null` disables it.
pub const TOP_K: Option<usize> = Some(50);
/// Completion length cap in tokens (CoMLRL 256).
pub const MAX_NEW_TOKENS: usize = 256;
/// First-turn prompt: the dataset prompt as is (CoMLRL's default formatter).
pub const TEMPLATE: &str = "{prompt}";
/// Column holding the prompt (CoMLRL reads `item["prompt"]`).
pub const PROMPT_FIELD: &str = "prompt";
/// Config of a `dataset.hub` dataset (the name `datasets` gives a dataset without configs).
pub const HUB_CONFIG: &str = "default";
/// Split of the training set of a `dataset.hub` dataset (the eval set must name its split).
pub const HUB_SPLIT: &str = "train";
/// Chat template: none (the prompt is fed to the model as is, as the seed example does).
pub const CHAT_TEMPLATE: &str = "none";

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
