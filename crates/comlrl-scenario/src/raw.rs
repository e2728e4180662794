//! Raw serde mirror of the scenario YAML: exactly what a file may say, nothing resolved.
//! Fields are optional (absence selects the documented default, see `defaults.rs`), every struct
//! denies unknown keys, and the same types serialize the resolved scenario back (`emit.rs`).
use crate::data::DataFormat;
use crate::plan::{AdvantageMode, Dtype, JointMode, LrScheduler};
use serde::{Deserialize, Deserializer, Serialize};
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

/// `dataset:` — training rows (inline `prompts`, a `path` or a `hub` dataset) and an optional
/// `eval` set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDataset {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DataFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<RawDataSource>,
}

/// `dataset.eval:` — same shape as `dataset`, without a nested `eval`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDataSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DataFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
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

/// `agents: {count: N, model: ..., ...}` — N agents with the same settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgentGroup {
    pub count: Option<usize>,
    pub model: String,
    pub dtype: Option<Dtype>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[serde(default, deserialize_with = "nullable")]
    pub top_k: Option<Option<usize>>,
    pub max_new_tokens: Option<usize>,
    pub learning_rate: Option<f64>,
    pub template: Option<String>,
    pub chat_template: Option<String>,
    pub system_prompt: Option<String>,
}

impl RawAgentGroup {
    /// The settings shared by every agent of the group.
    pub fn agent(&self) -> RawAgent {
        RawAgent {
            model: self.model.clone(),
            dtype: self.dtype,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_new_tokens: self.max_new_tokens,
            learning_rate: self.learning_rate,
            template: self.template.clone(),
            chat_template: self.chat_template.clone(),
            system_prompt: self.system_prompt.clone(),
        }
    }
}

/// One entry of `agents: [...]` (heterogeneous agents).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Dtype>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub top_k: Option<Option<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// `none` | `auto` | a path to a `.jinja` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

/// `trainer.external_transition:` — exactly one of `rhai` / `plugin`, plus free-form `params`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rhai: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Json>,
}

/// `trainer:` — CoMLRL's `MAGRPOConfig` (1.4 names) plus optimizer settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrainer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_train_epochs: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_learning_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_generations: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_mode: Option<JointMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advantage_mode: Option<AdvantageMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advantage_normalization: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_buffer_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_batch_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discount: Option<f64>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub early_termination_threshold: Option<Option<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_transition: Option<RawTransition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_prompt_passthrough: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_interval: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_num_samples: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_batch_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_grad_norm: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_scheduler: Option<LrScheduler>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_coef: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_beta1: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_beta2: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_epsilon: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_sampling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_updates: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_checkpointing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_joint_actions: Option<usize>,
}

/// `logging:` — cadence and tracking back-ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLogging {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<RawWandb>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<bool>,
}

/// `logging.wandb:` — Weights & Biases run settings (see the README, "Experiment tracking").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWandb {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

/// Keeps `key: null` (Some(None)) apart from an absent key (None), for settings whose default
/// is not "off" (`top_k` defaults to 50, `early_termination_threshold` to -0.2).
fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}
