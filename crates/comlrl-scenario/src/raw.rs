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
    /// The evaluation rows, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<RawDataSource>,
}

/// `dataset.eval:` — same shape as `dataset`, without a nested `eval`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDataSource {
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
    /// Number of agents (2 unless set).
    pub count: Option<usize>,
    /// A Hub id, a local directory or `.gguf` file, or `builtin:<name>`.
    pub model: String,
    /// Numeric type of the weights during training.
    pub dtype: Option<Dtype>,
    /// Numeric type of the weight copies sampling decodes with.
    pub sampling_dtype: Option<Dtype>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus-sampling probability mass.
    pub top_p: Option<f64>,
    /// Top-k filtering; `null` turns it off.
    #[serde(default, deserialize_with = "nullable")]
    pub top_k: Option<Option<usize>>,
    /// Most tokens generated per completion.
    pub max_new_tokens: Option<usize>,
    /// This agent's AdamW learning rate (else `trainer.agent_learning_rate`).
    pub learning_rate: Option<f64>,
    /// The agent's first-turn prompt, built from the dataset row.
    pub template: Option<String>,
    /// `none` | `auto` | a path to a `.jinja` file.
    pub chat_template: Option<String>,
    /// The system message given to the chat template.
    pub system_prompt: Option<String>,
}

impl RawAgentGroup {
    /// The settings shared by every agent of the group.
    pub fn agent(&self) -> RawAgent {
        RawAgent {
            model: self.model.clone(),
            dtype: self.dtype,
            sampling_dtype: self.sampling_dtype,
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
    /// A Hub id, a local directory or `.gguf` file, or `builtin:<name>`.
    pub model: String,
    /// Numeric type of the weights during training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Dtype>,
    /// Numeric type of the weight copies sampling decodes with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_dtype: Option<Dtype>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus-sampling probability mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Top-k filtering; `null` turns it off.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub top_k: Option<Option<usize>>,
    /// Most tokens generated per completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// This agent's AdamW learning rate (else `trainer.agent_learning_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    /// The agent's first-turn prompt, built from the dataset row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// `none` | `auto` | a path to a `.jinja` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
    /// The system message given to the chat template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

/// `trainer.external_transition:` — exactly one of `rhai` / `plugin`, plus free-form `params`.
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
}

/// `trainer:` — CoMLRL's `MAGRPOConfig` (1.4 names) plus optimizer settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTrainer {
    /// Passes over the training prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_train_epochs: Option<usize>,
    /// AdamW learning rate of every agent that does not set its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_learning_rate: Option<f64>,
    /// G: completions per agent per prompt (at least 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_generations: Option<usize>,
    /// How the agents' generations form joint actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_mode: Option<JointMode>,
    /// Group baseline subtracted from each return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advantage_mode: Option<AdvantageMode>,
    /// Divide the group's advantages by their standard deviation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advantage_normalization: Option<bool>,
    /// Node samples buffered per agent before an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_buffer_size: Option<usize>,
    /// Mini-batch size within an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_batch_size: Option<usize>,
    /// Turns per episode; more than 1 needs an external transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<usize>,
    /// γ for returns across turns (multi-turn only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discount: Option<f64>,
    /// Stop expanding a branch whose mean reward exceeds this (multi-turn only).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub early_termination_threshold: Option<Option<f64>>,
    /// Code that writes each agent's next-turn prompt (multi-turn only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_transition: Option<RawTransition>,
    /// Use the transition's prompt verbatim instead of passing it through the agent's template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_prompt_passthrough: Option<bool>,
    /// Evaluate every this many training prompts; 0 = never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_interval: Option<usize>,
    /// Eval prompts per evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_num_samples: Option<usize>,
    /// Eval batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_batch_size: Option<usize>,
    /// Gradient-norm clipping threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_grad_norm: Option<f64>,
    /// Linear learning-rate warmup from 0 over this many optimizer steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<usize>,
    /// Learning-rate schedule after the warmup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_scheduler: Option<LrScheduler>,
    /// Reference-KL penalty coefficient; 0 = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_coef: Option<f64>,
    /// AdamW β1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_beta1: Option<f64>,
    /// AdamW β2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_beta2: Option<f64>,
    /// AdamW ε.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adam_epsilon: Option<f64>,
    /// AdamW decoupled weight decay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    /// Agents sample at the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_sampling: Option<bool>,
    /// The prompts of one rollout buffer sample in one batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_buffer_sampling: Option<bool>,
    /// Agents compute their updates at the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_updates: Option<bool>,
    /// Completions per forward/backward pass in the loss; 0 = all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batch_size: Option<usize>,
    /// Recompute layer activations in the backward instead of keeping them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_checkpointing: Option<bool>,
    /// Most joint actions a rollout node may score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_joint_actions: Option<usize>,
}

/// `logging:` — cadence and tracking back-ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLogging {
    /// Write a metrics row every this many training steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    /// Weights & Biases run settings; absent = W&B off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<RawWandb>,
    /// Write TensorBoard event files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<bool>,
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

/// Keeps `key: null` (Some(None)) apart from an absent key (None), for settings whose default
/// is not "off" (`top_k` defaults to 50, `early_termination_threshold` to -0.2).
fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}
