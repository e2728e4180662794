//! Every default of a scenario in one place, with where it comes from. Values marked "CoMLRL"
//! are those of `MAGRPOConfig` in CoMLRL 1.4 (`comlrl/trainers/reinforce/magrpo.py`), so that a
//! scenario means what the same settings mean in the Python library.
use crate::plan::{AdvantageMode, Dtype, JointMode, LrScheduler};

/// Agents in `agents: {model: ...}` without `count` (CoMLRL `num_agents` = 2).
pub const AGENT_COUNT: usize = 2;
/// Weights dtype: let the loader choose (f32 on CPU, where bf16/f16 matmuls are slow or absent).
pub const DTYPE: Dtype = Dtype::Auto;
/// Sampling decodes with the f32 weights themselves (`auto` means the same); `bf16` is opt-in.
pub const SAMPLING_DTYPE: Dtype = Dtype::F32;
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

/// Passes over the training set (CoMLRL 20).
pub const NUM_TRAIN_EPOCHS: usize = 20;
/// AdamW learning rate of every agent (CoMLRL `agent_learning_rate` 5e-6).
pub const AGENT_LEARNING_RATE: f64 = 5.0e-6;
/// Generations per agent per prompt, the group size G (CoMLRL 4; ≥ 2 for a group baseline).
pub const NUM_GENERATIONS: usize = 4;
/// How generations form joint actions (CoMLRL `aligned`).
pub const JOINT_MODE: JointMode = JointMode::Aligned;
/// Most joint actions per rollout node. Each is one reward call over N completions, and the
/// node keeps its reward, per-term values and its share of every agent's return: cheap each,
/// but `cross` grows as num_generations^agents (8 generations, 4 agents: 4096). 4096 keeps a
/// node's scoring to seconds and its memory to a few MB with a wide margin for multi-turn trees
/// (joint^turns nodes); raise it knowingly.
pub const MAX_JOINT_ACTIONS: usize = 4096;
/// Group baseline (CoMLRL `mean`, i.e. MAGRPO).
pub const ADVANTAGE_MODE: AdvantageMode = AdvantageMode::Mean;
/// Divide group advantages by their standard deviation (CoMLRL true).
pub const ADVANTAGE_NORMALIZATION: bool = true;
/// Node samples buffered per agent before an update (CoMLRL 2).
pub const ROLLOUT_BUFFER_SIZE: usize = 2;
/// Turns per episode. CoMLRL defaults to 2, which requires an external transition; 1 is the
/// single-turn MAGRPO of the paper's examples and needs nothing else, so it is our default.
pub const NUM_TURNS: usize = 1;
/// Discount over turns (CoMLRL 0.9).
pub const DISCOUNT: f64 = 0.9;
/// Stop expanding a branch when its mean reward exceeds this (CoMLRL -0.2); multi-turn only.
pub const EARLY_TERMINATION_THRESHOLD: Option<f64> = Some(-0.2);
/// Use the transition's prompt verbatim in later turns (CoMLRL false).
pub const EXTERNAL_PROMPT_PASSTHROUGH: bool = false;
/// Evaluate every N training prompts (CoMLRL 16); 0 = never. Needs `dataset.eval`.
pub const EVAL_INTERVAL: usize = 16;
/// Eval prompts per evaluation (CoMLRL 4).
pub const EVAL_NUM_SAMPLES: usize = 4;
/// Eval batch size (CoMLRL 1).
pub const EVAL_BATCH_SIZE: usize = 1;
/// Gradient clipping: off, as in CoMLRL (which does not clip).
pub const MAX_GRAD_NORM: Option<f64> = None;
/// Linear warmup steps: none (CoMLRL has no schedule).
pub const WARMUP_STEPS: usize = 0;
/// Schedule: constant, as CoMLRL's plain AdamW.
pub const LR_SCHEDULER: LrScheduler = LrScheduler::Constant;
/// Reference-KL penalty: off (CoMLRL MAGRPO has none by default).
pub const KL_COEF: f64 = 0.0;
/// AdamW β1 (torch default, which CoMLRL uses).
pub const ADAM_BETA1: f64 = 0.9;
/// AdamW β2 (torch default).
pub const ADAM_BETA2: f64 = 0.999;
/// AdamW ε (torch default).
pub const ADAM_EPSILON: f64 = 1e-8;
/// AdamW decoupled weight decay (torch `AdamW` default 0.01, which CoMLRL inherits).
pub const WEIGHT_DECAY: f64 = 0.01;
/// Agents sample at the same time (one thread-pool task each). Same results as one after the
/// other (each agent has its own RNG stream); costs only a KV cache per agent.
pub const PARALLEL_SAMPLING: bool = true;
/// The prompts of one rollout buffer (up to its update) sample in one batch: each decode step
/// reads the weights once for all their rows. Same policy and RNG streams as one prompt at a
/// time; only the last bits of the logits can differ.
pub const BATCH_BUFFER_SAMPLING: bool = true;
/// Agents compute their updates at the same time. Same results; costs a second set of
/// gradient accumulators (one copy of the weights) and of activations.
pub const PARALLEL_UPDATES: bool = true;
/// Completions per forward/backward pass in the loss (gradients are accumulated across passes,
/// so the result does not depend on it). Smaller uses less activation memory.
pub const MICRO_BATCH_SIZE: usize = 2;
/// Keep only each decoder layer's input in the loss's forward and re-run one layer at a time
/// in the backward (transformers' `gradient_checkpointing`): one extra forward pass for a
/// fraction of the activation memory.
pub const GRADIENT_CHECKPOINTING: bool = true;

/// Log every N optimizer steps (CoMLRL `logging_steps` 50).
pub const LOGGING_STEPS: usize = 50;
/// W&B project when `logging.wandb` has none (CoMLRL's default project name).
pub const WANDB_PROJECT: &str = "comlrl";
/// Seed of the run (the common HF/TRL default).
pub const SEED: u64 = 42;
/// Checkpoint cadence in optimizer steps: 0 = only the final save.
pub const CHECKPOINT_EVERY: u64 = 0;
/// Run folder, relative to the scenario file: `runs/<scenario stem>`.
pub const OUTPUT_ROOT: &str = "runs";
