//! Raw serde mirror of the scenario YAML: exactly what a file may say, nothing resolved.
//! Fields are optional (absence selects the documented default, see `defaults.rs` and the key
//! tables such as `trainer_keys.rs` and `agent_keys.rs`), every struct
//! denies unknown keys, and the same types serialize the resolved scenario back (`emit.rs`).
pub use crate::agent_keys::{RawAgent, RawAgentGroup};
use crate::data::DataFormat;
pub use crate::logging_keys::RawLogging;
pub use crate::trainer_keys::RawTrainer;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

type Json = serde_json::Value;

/// The top level, with each section kept as a JSON value so that sections are deserialized (and
/// their errors collected) one by one, and `agents` / `reward` can take two shapes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTop {
    pub dataset: Option<Json>,
    pub agents: Option<Json>,
    pub reward: Option<Json>,
    pub reward_processors: Option<Json>,
    pub trainer: Option<Json>,
    pub logging: Option<Json>,
    pub output_dir: Option<Json>,
    pub seed: Option<Json>,
    pub checkpoint_every: Option<Json>,
}

/// Declares a data-source struct: the seven source keys shared by `dataset` and `dataset.eval`,
/// then the struct's own fields. serde's `flatten` cannot be combined with `deny_unknown_fields`,
/// so the keys are written into each struct from this one list instead.
macro_rules! data_source_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($extra:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Inline prompts, one row each.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub prompts: Option<Vec<String>>,
            /// A JSONL, JSON, CSV or parquet file of rows.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub path: Option<PathBuf>,
            /// File format, when the extension does not tell.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub format: Option<DataFormat>,
            /// The column with the prompt (`prompt` unless set); a dotted path reaches nested fields.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub prompt_field: Option<String>,
            /// A Hugging Face Hub dataset, `org/name`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub hub: Option<String>,
            /// With `hub`: the dataset config (`default` unless set).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub config: Option<String>,
            /// With `hub`: the split and an optional slice (`train[:1100]`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub split: Option<String>,
            $($extra)*
        }
    };
}

data_source_struct! {
    /// `dataset:` — training rows (inline `prompts`, a `path` or a `hub` dataset) and an optional
    /// `eval` set.
    pub struct RawDataset {
        /// The evaluation rows, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub eval: Option<RawDataSource>,
    }
}

data_source_struct! {
    /// `dataset.eval:` — same shape as `dataset`, without a nested `eval`.
    pub struct RawDataSource {}
}

impl RawDataset {
    /// The training source and the eval source.
    pub fn split(self) -> (RawDataSource, Option<RawDataSource>) {
        let train = RawDataSource {
            prompts: self.prompts,
            path: self.path,
            format: self.format,
            prompt_field: self.prompt_field,
            hub: self.hub,
            config: self.config,
            split: self.split,
        };
        (train, self.eval)
    }
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
