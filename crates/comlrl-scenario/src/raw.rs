//! Raw serde mirror of the scenario YAML: exactly what a file may say, nothing resolved. The
//! sections' mirrors derive from their key tables (`top_keys.rs`, `dataset_keys.rs`,
//! `agent_keys.rs`, `trainer_keys.rs`, `logging_keys.rs`); the two sub-mappings below are read by
//! the code of the key that holds them. Every struct denies unknown keys, and the same types
//! serialize the resolved scenario back (`emit.rs`).
pub use crate::agent_keys::{RawAgent, RawAgentGroup};
pub use crate::critic_keys::RawCritic;
pub use crate::dataset_keys::{RawDataSource, RawDataset};
pub use crate::logging_keys::RawLogging;
pub use crate::preference_keys::RawPreference;
pub use crate::top_keys::{ProcessorChain, RawScenario, RawTop};
pub use crate::trainer_keys::RawTrainer;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

type Json = serde_json::Value;

/// `agents.adapter:` — a LoRA adapter on the agent's frozen base (read by `adapter.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdapter {
    /// r.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    /// α.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Dropout on the adapter's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f64>,
    /// The projections that carry adapters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<String>>,
    /// A PEFT adapter directory to start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<PathBuf>,
    /// rsLoRA's scaling α/√r.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rslora: Option<bool>,
}

/// `trainer.external_transition:` — exactly one of `rhai` / `plugin`, plus free-form `params`
/// and the robustness keys of a reward term (`time_budget_ms`, `isolate`, `on_error`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransition {
    /// A Rhai script that writes the next-turn prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rhai: Option<PathBuf>,
    /// A native transition plugin (a bare name gets the platform prefix and suffix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PathBuf>,
    /// Free-form JSON handed to the script or plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Json>,
    /// Wall-clock budget of one call in milliseconds (as on a reward term).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_budget_ms: Option<u64>,
    /// Run the plugin in a child process (plugins only; as on a reward term).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<bool>,
    /// `fail` (default) or `skip_step` when a call fails (as on a reward term).
    #[serde(default, skip_serializing_if = "crate::spec::OnError::is_fail")]
    pub on_error: crate::spec::OnError,
}

/// `logging.wandb:` — Weights & Biases run settings (see the README, "Experiment tracking").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWandb {
    /// W&B project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// W&B entity (user or team); the account default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Run name; defaults to the scenario name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tags attached to the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}
