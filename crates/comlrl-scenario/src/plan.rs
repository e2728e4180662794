//! The validated, resolved scenario (the "plan") that the trainer reads: every default applied,
//! every relative path made absolute, the dataset rows loaded, the templates compiled.
use crate::data::Dataset;
use crate::spec::{ProcessorSpec, RewardSpec};
use crate::template::Template;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A fully resolved scenario. Built by [`crate::load`]; see the README's "Scenario reference" for every key.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The scenario file stem (`story_len_ratio`); default W&B run name and output folder.
    pub name: String,
    /// The scenario file as given to the loader.
    pub source: PathBuf,
    /// Absolute directory that relative paths were resolved against (the file's directory).
    pub base_dir: PathBuf,
    /// The `--set` overrides that were applied, in order.
    pub overrides: Vec<String>,
    /// Seed of every random number generator of the run.
    pub seed: u64,
    /// Absolute run directory (checkpoints, logs); final models go to [`Scenario::models_dir`].
    pub output_dir: PathBuf,
    /// Save a checkpoint every this many optimizer steps; 0 = only at the end.
    pub checkpoint_every: u64,
    /// Training and evaluation rows.
    pub dataset: DatasetPlan,
    /// One entry per agent, in order; `agents.len()` is the number of agents.
    pub agents: Vec<AgentPlan>,
    /// The joint reward.
    pub reward: RewardPlan,
    /// MAGRPO and optimizer settings.
    pub trainer: TrainerPlan,
    /// Logging cadence and tracking back-ends.
    pub logging: LoggingPlan,
    /// Settings that are valid but have no effect or look like a mistake; show them to the user.
    pub warnings: Vec<String>,
}

impl Scenario {
    /// Where the trained agents are saved: `<output_dir>/models` (one `agent_<i>` folder each).
    pub fn models_dir(&self) -> PathBuf {
        self.output_dir.join("models")
    }
}

/// Training rows and the optional evaluation rows.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetPlan {
    /// Training rows.
    pub train: Dataset,
    /// Evaluation rows, if `dataset.eval` is set.
    pub eval: Option<Dataset>,
}

/// Numeric type of an agent's weights during training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// The model loader chooses: f32 on CPU (bf16 on an accelerator, at the loader's discretion).
    Auto,
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
    /// 16-bit IEEE float.
    F16,
}

/// Where an agent's weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// `builtin:<name>`, e.g. `builtin:tiny`: a model shipped with comlrl (name without prefix).
    Builtin(String),
    /// A local directory (written starting with `./`, `../` or `/`) or a `*.gguf` file, made absolute.
    Local(PathBuf),
    /// A Hugging Face Hub id such as `Qwen/Qwen2.5-0.5B`.
    Hub(String),
}

/// A model as written (`spec`) and what it resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    /// The model as written in the scenario.
    pub spec: String,
    /// Where it resolved to.
    pub source: ModelSource,
}

/// Sampling settings of one agent's rollouts (CoMLRL: `MAGRPOConfig.temperature`, ...).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Sampling temperature.
    pub temperature: f64,
    /// Nucleus-sampling probability mass.
    pub top_p: f64,
    /// `None`: no top-k filtering.
    pub top_k: Option<usize>,
    /// Most tokens generated per completion.
    pub max_new_tokens: usize,
}

/// One agent: model, dtype, sampling, learning rate and prompt template.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentPlan {
    /// The agent's position in `agents`, from 0.
    pub index: usize,
    /// The agent's model.
    pub model: ModelRef,
    /// Numeric type of the weights during training.
    pub dtype: Dtype,
    /// Numeric type sampling decodes in (`f32`, or `bf16` copies of the weights).
    pub sampling_dtype: Dtype,
    /// Sampling settings of its rollouts.
    pub sampling: Sampling,
    /// This agent's AdamW learning rate (`agents.learning_rate`, else `trainer.agent_learning_rate`).
    pub learning_rate: f64,
    /// First-turn prompt of this agent, rendered from a dataset row.
    pub template: Template,
    /// How the rendered prompt is wrapped for the model (`agents.chat_template`).
    pub chat_template: ChatTemplateSpec,
    /// The system message given to the chat template (`agents.system_prompt`).
    pub system_prompt: Option<String>,
}

/// `agents.chat_template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplateSpec {
    /// `none`: the prompt is fed to the model as it is.
    None,
    /// `auto`: the model's own template (its tokenizer files, or GGUF metadata).
    Auto,
    /// A `.jinja` file (absolute path) and its text, compiled when the scenario was loaded.
    File {
        /// Absolute path of the `.jinja` file.
        path: PathBuf,
        /// The template text.
        source: String,
    },
}

impl ChatTemplateSpec {
    /// As written in a scenario: `none`, `auto` or the file's path.
    pub fn as_setting(&self) -> String {
        match self {
            ChatTemplateSpec::None => "none".into(),
            ChatTemplateSpec::Auto => "auto".into(),
            ChatTemplateSpec::File { path, .. } => path.display().to_string(),
        }
    }
}

/// The joint reward: weighted terms (paths absolute, names filled in) and the processor chain.
#[derive(Debug, Clone, PartialEq)]
pub struct RewardPlan {
    /// Weighted reward terms, summed.
    pub terms: Vec<RewardSpec>,
    /// Processors applied to the summed reward, in order.
    pub processors: Vec<ProcessorSpec>,
}

/// How each agent's G generations are combined into joint actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JointMode {
    /// The g-th generations of all agents form joint action g: G joint actions per prompt.
    Aligned,
    /// Cartesian product of the agents' generations: G^N joint actions per prompt.
    Cross,
}

/// Baseline subtracted from each joint return within its group (CoMLRL `advantage_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdvantageMode {
    /// R - mean(R) (MAGRPO).
    Mean,
    /// R, no baseline (MAREINFORCE).
    Raw,
    /// R - max(R) (MAREMAX).
    Max,
    /// R - mean of the other G-1 returns (MARLOO), i.e. G/(G-1) * (R - mean(R)).
    Rloo,
}

/// Learning-rate schedule after the warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrScheduler {
    /// Keep the learning rate.
    Constant,
    /// Decay linearly to 0 over training.
    Linear,
    /// Decay along a half cosine to 0 over training.
    Cosine,
}

/// A Rhai script or a native plugin, as an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeSource {
    /// A Rhai script.
    Rhai(PathBuf),
    /// As written (resolved against the scenario dir); a bare name is mapped to the platform's
    /// `lib<name>.so` / `<name>.dll` / `lib<name>.dylib` by the plugin loader.
    Plugin(PathBuf),
}

/// The multi-turn external transition: code that writes each agent's next-turn prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionPlan {
    /// The script or plugin.
    pub source: CodeSource,
    /// Free-form JSON handed to it (`{}` when none).
    pub params: serde_json::Value,
}

/// Every `MAGRPOConfig` setting (CoMLRL 1.4 names) plus comlrl's optimizer extras.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerPlan {
    /// Passes over the training prompts.
    pub num_train_epochs: usize,
    /// AdamW learning rate of every agent that does not set its own.
    pub agent_learning_rate: f64,
    /// G: completions per agent per prompt (at least 2).
    pub num_generations: usize,
    /// How the agents' generations form joint actions.
    pub joint_mode: JointMode,
    /// Group baseline subtracted from each return.
    pub advantage_mode: AdvantageMode,
    /// Divide the group's advantages by their standard deviation.
    pub advantage_normalization: bool,
    /// Node samples buffered per agent before an update.
    pub rollout_buffer_size: usize,
    /// Always set: defaults to `rollout_buffer_size`.
    pub train_batch_size: usize,
    /// Turns per episode; more than 1 needs an external transition.
    pub num_turns: usize,
    /// γ for returns across turns (multi-turn only).
    pub discount: f64,
    /// `None`: never stop a branch early.
    pub early_termination_threshold: Option<f64>,
    /// Set iff `num_turns > 1`.
    pub external_transition: Option<TransitionPlan>,
    /// Use the transition's prompt verbatim instead of passing it through the agent's template.
    pub external_prompt_passthrough: bool,
    /// Evaluate every this many training prompts; 0 = never.
    pub eval_interval: usize,
    /// Eval prompts per evaluation.
    pub eval_num_samples: usize,
    /// Eval batch size.
    pub eval_batch_size: usize,
    /// `None`: no gradient clipping.
    pub max_grad_norm: Option<f64>,
    /// Linear learning-rate warmup from 0 over this many optimizer steps.
    pub warmup_steps: usize,
    /// Learning-rate schedule after the warmup.
    pub lr_scheduler: LrScheduler,
    /// Reference-KL penalty coefficient; 0 = off (no reference model is kept).
    pub kl_coef: f64,
    /// AdamW β1.
    pub adam_beta1: f64,
    /// AdamW β2.
    pub adam_beta2: f64,
    /// AdamW ε.
    pub adam_epsilon: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f64,
    /// Agents sample at the same time.
    pub parallel_sampling: bool,
    /// The prompts of one rollout buffer sample in one batch (same policy, same RNG streams).
    pub batch_buffer_sampling: bool,
    /// Agents compute their updates at the same time.
    pub parallel_updates: bool,
    /// Completions per forward/backward pass in the loss; 0 = all K of a node sample at once.
    pub micro_batch_size: usize,
    /// Recompute layer activations in the backward instead of keeping them.
    pub gradient_checkpointing: bool,
    /// Most joint actions a rollout node may score (`cross`: num_generations^agents).
    pub max_joint_actions: usize,
}

/// Logging cadence and the (reserved) tracking back-ends.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggingPlan {
    /// Write a metrics row every this many training steps (one step = one training prompt).
    pub steps: usize,
    /// Weights & Biases run settings; `None` = W&B off (the `--wandb*` flags can turn it on).
    pub wandb: Option<WandbPlan>,
    /// Write TensorBoard event files under `<output_dir>/tb/`.
    pub tensorboard: bool,
}

/// Weights & Biases run settings, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct WandbPlan {
    /// W&B project.
    pub project: String,
    /// W&B entity (user or team); the account default when absent.
    pub entity: Option<String>,
    /// Run name; defaults to the scenario name.
    pub name: String,
    /// Tags attached to the run.
    pub tags: Vec<String>,
}
