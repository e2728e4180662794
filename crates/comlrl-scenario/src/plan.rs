//! The validated, resolved scenario (the "plan") that the trainer reads: every default applied,
//! every relative path made absolute, the dataset rows loaded, the templates compiled.
use crate::data::Dataset;
use crate::spec::{ProcessorSpec, RewardSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use crate::agent_keys::{AgentPlan, Sampling};
pub use crate::critic_keys::{CriticPlan, CriticType};
pub use crate::logging_keys::{LoggingPlan, WANDB_PROJECT};
pub use crate::preference_keys::{PreferencePlan, MAX_CANDIDATES};
pub use crate::trainer_keys::TrainerPlan;
pub use comlrl_spec::{CodeSource, TransitionPlan};

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
    /// Save a checkpoint every this many training steps (one step = one training prompt); 0 =
    /// only at the end.
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
    /// The preference trainers' settings (MADPO).
    pub preference: PreferencePlan,
    /// Settings that are valid but have no effect or look like a mistake; show them to the user.
    pub warnings: Vec<String>,
}

impl Scenario {
    /// Epochs in which the run only samples and hands the algorithm its candidates: MARLHF's
    /// first, or one per round of an iterative algorithm (one pass over the prompts each).
    pub fn collect_epochs(&self) -> usize {
        match self.trainer.algorithm.iterative() {
            true => self.preference.num_iterations,
            false => self.trainer.algorithm.collect_epochs(),
        }
    }

    /// Passes over the training prompts of one round of an iterative algorithm: `madpo_iter`'s
    /// round is its collecting pass (its DPO passes run over the pairs, not the prompts);
    /// `marlhf_iter`'s is that pass and then `num_train_epochs` online ones. 1 otherwise.
    pub fn epochs_per_round(&self) -> usize {
        match self.trainer.algorithm {
            Algorithm::MarlhfIter => self.trainer.num_train_epochs.saturating_add(1),
            _ => 1,
        }
    }

    /// Whether 0-based `epoch` is a collecting one ([`Scenario::collect_epochs`]): the first
    /// of each round of an iterative algorithm, else one of the algorithm's first.
    pub fn collecting(&self, epoch: usize) -> bool {
        match self.trainer.algorithm.iterative() {
            true => epoch.is_multiple_of(self.epochs_per_round()) && epoch < self.run_epochs(),
            false => epoch < self.collect_epochs(),
        }
    }

    /// Passes over the training prompts: an iterative algorithm's rounds (each
    /// [`Scenario::epochs_per_round`]), else the trainer's (`TrainerPlan::run_epochs`).
    pub fn run_epochs(&self) -> usize {
        match self.trainer.algorithm.iterative() {
            true => self
                .preference
                .num_iterations
                .saturating_mul(self.epochs_per_round()),
            false => self.trainer.run_epochs(),
        }
    }

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

/// How an adapter agent's frozen base holds its projections' weights in memory
/// (`agents.base_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaseDtype {
    /// 32-bit float, as the weights are trained.
    F32,
    /// bfloat16: half the bytes; the products widen them to f32 block by block.
    Bf16,
    /// GGUF's Q8_0 blocks (32 int8 values and an f16 scale): 34 bytes per 32 weights; the
    /// products dequantize them block by block.
    #[serde(rename = "q8_0")]
    Q8_0,
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

/// The training algorithm (`trainer.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Multi-agent group-relative policy optimisation (CoMLRL's `MAGRPOTrainer`).
    Magrpo,
    /// MAGRPO with no baseline, `advantage_mode: raw` (CoMLRL's `MAREINFORCETrainer`).
    Mareinforce,
    /// MAGRPO with the leave-one-out baseline, `advantage_mode: rloo` (`MARLOOTrainer`).
    Marloo,
    /// MAGRPO with the group's best return as baseline, `advantage_mode: max`
    /// (`MAReMaxTrainer`).
    Maremax,
    /// Multi-agent direct preference optimisation, offline and reference-free (CoMLRL's
    /// `MADPOTrainer`; its settings are the `preference` section).
    Madpo,
    /// Independent actor-critic: a critic per agent (CoMLRL's `IACTrainer`; its keys are
    /// `trainer.critic`'s, `critic_keys.rs`).
    Iac,
    /// Multi-agent RLHF (CoMLRL's `MARLHFTrainer`): a joint reward model learnt from the
    /// preference pairs of a first epoch, then online MARL against it (the `preference`
    /// section's `rl_algorithm` and `reward_*` keys).
    Marlhf,
    /// Multi-agent actor-critic: one centralized critic reading every agent's prompt (CoMLRL's
    /// `MAACTrainer`; its keys are `trainer.critic`'s too).
    Maac,
    /// Iterative MADPO (CoMLRL's `MADPOIterTrainer`): `preference.num_iterations` rounds, each
    /// sampling the current policy's candidates against a comparator's, then DPO on the round's
    /// (replayed) preference set.
    #[serde(rename = "madpo_iter")]
    MadpoIter,
    /// Iterative MARLHF (CoMLRL's `MARLHFIterTrainer`): `preference.num_iterations` rounds,
    /// each sampling the current policy's candidates against a comparator's, then a joint
    /// reward model trained afresh on the round's (replayed) pairs, then `num_train_epochs` of
    /// online MARL against it.
    #[serde(rename = "marlhf_iter")]
    MarlhfIter,
}

impl Algorithm {
    /// As a scenario writes it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Magrpo => "magrpo",
            Algorithm::Mareinforce => "mareinforce",
            Algorithm::Marloo => "marloo",
            Algorithm::Maremax => "maremax",
            Algorithm::Madpo => "madpo",
            Algorithm::Iac => "iac",
            Algorithm::Marlhf => "marlhf",
            Algorithm::Maac => "maac",
            Algorithm::MadpoIter => "madpo_iter",
            Algorithm::MarlhfIter => "marlhf_iter",
        }
    }

    /// The `advantage_mode` an algorithm is defined by: CoMLRL's MAREINFORCE, MARLOO and
    /// MAReMax are its MAGRPO trainer with this mode as their config's default and nothing
    /// else changed. `None`: the algorithm leaves the mode to `trainer.advantage_mode`.
    pub fn fixed_advantage_mode(self) -> Option<AdvantageMode> {
        match self {
            Algorithm::Magrpo
            | Algorithm::Madpo
            | Algorithm::MadpoIter
            | Algorithm::MarlhfIter
            | Algorithm::Iac
            | Algorithm::Maac
            | Algorithm::Marlhf => None,
            Algorithm::Mareinforce => Some(AdvantageMode::Raw),
            Algorithm::Marloo => Some(AdvantageMode::Rloo),
            Algorithm::Maremax => Some(AdvantageMode::Max),
        }
    }

    /// Epochs before the `num_train_epochs` ones in which the run only samples and collects
    /// (MARLHF's preference epoch, after which its reward model trains); 0 for the others.
    pub fn collect_epochs(self) -> usize {
        match self {
            Algorithm::Marlhf => 1,
            _ => 0,
        }
    }

    /// Whether the `preference` section applies (MADPO's pairs, MARLHF's pairs and reward
    /// model).
    pub fn learns_from_preferences(self) -> bool {
        matches!(
            self,
            Algorithm::Madpo | Algorithm::Marlhf | Algorithm::MadpoIter | Algorithm::MarlhfIter
        )
    }

    /// Whether the algorithm runs in rounds against a comparator (`madpo_iter`,
    /// `marlhf_iter`).
    pub fn iterative(self) -> bool {
        matches!(self, Algorithm::MadpoIter | Algorithm::MarlhfIter)
    }

    /// Whether the algorithm learns a joint reward model (`marlhf`, `marlhf_iter`).
    pub fn learns_reward_model(self) -> bool {
        matches!(self, Algorithm::Marlhf | Algorithm::MarlhfIter)
    }

    /// `trainer.advantage_mode`'s default under this algorithm.
    pub fn default_advantage_mode(self) -> AdvantageMode {
        self.fixed_advantage_mode().unwrap_or(AdvantageMode::Mean)
    }
}

/// Which of a prompt's positive-gap candidate pairs MADPO keeps (`preference.pair_selection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairSelection {
    /// The `pairs_per_sample` largest reward gaps.
    RewardGap,
    /// Every pair.
    All,
    /// `pairs_per_sample` pairs drawn uniformly.
    Random,
    /// Iterative trainers only: the pairs whose comparator candidate has the highest reward
    /// first (ties: the larger gap), as CoMLRL's `comparator_reward`.
    ComparatorReward,
}

/// Who writes a comparator's candidates of all agents (`preference.comparator_generation_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparatorGenerationMode {
    /// Each agent's comparator answers that agent's prompt.
    Decentralized,
    /// One comparator answers every agent's prompt at once (CoMLRL's tagged protocol), and the
    /// answer is split into the agents' outputs.
    Centralized,
}

/// What ranks the candidates of a `marlhf_iter` round (`preference.scoring_reward`, CoMLRL's
/// `preference_scoring_reward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoringReward {
    /// The task reward.
    Task,
    /// The previous round's reward model (the task reward in the first round).
    RewardModel,
}

/// Which of the earlier rounds' preference sets a round of `madpo_iter` trains on
/// (`preference.replay_mode`, CoMLRL's `preference_replay_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayMode {
    /// The round's own set.
    Current,
    /// A sample of the last `replay_k` rounds' sets.
    NearestK,
    /// A sample of every round's set.
    AllHistory,
    /// A sample of every round's set, newer rounds weighted by a geometric `replay_lambda`.
    LambdaDecay,
}

/// Whose candidates a round of `madpo_iter` compares the current policy's with
/// (`preference.comparator_policy`, CoMLRL's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparatorPolicy {
    /// The current policy itself, with its own draws.
    Current,
    /// A frozen copy of the current policy taken at the round's start.
    CurrentCopy,
    /// A fixed model (`preference.comparator_model`).
    Model,
    /// The policy as it was `comparator_history_k` rounds ago (the initial one before that).
    History,
    /// An OpenAI-compatible chat-completions endpoint (`preference.comparator_api_*`).
    Api,
}

/// The online algorithm MARLHF trains with against its reward model
/// (`preference.rl_algorithm`, CoMLRL's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RlAlgorithm {
    /// MAGRPO (`advantage_mode: mean`).
    Magrpo,
    /// MAREINFORCE (`advantage_mode: raw`).
    Mareinforce,
    /// MARLOO (`advantage_mode: rloo`).
    Marloo,
    /// MAReMax (`advantage_mode: max`).
    Maremax,
    /// IAC: a critic per agent (`trainer.critic`).
    Iac,
    /// MAAC: one central critic (`trainer.critic`).
    Maac,
}

impl RlAlgorithm {
    /// As a scenario writes it.
    pub fn name(self) -> &'static str {
        match self {
            RlAlgorithm::Magrpo => "magrpo",
            RlAlgorithm::Mareinforce => "mareinforce",
            RlAlgorithm::Marloo => "marloo",
            RlAlgorithm::Maremax => "maremax",
            RlAlgorithm::Iac => "iac",
            RlAlgorithm::Maac => "maac",
        }
    }

    /// The MAGRPO `advantage_mode` it stands for (`None`: an actor-critic backend).
    pub fn advantage_mode(self) -> Option<AdvantageMode> {
        match self {
            RlAlgorithm::Magrpo => Some(AdvantageMode::Mean),
            RlAlgorithm::Mareinforce => Some(AdvantageMode::Raw),
            RlAlgorithm::Marloo => Some(AdvantageMode::Rloo),
            RlAlgorithm::Maremax => Some(AdvantageMode::Max),
            RlAlgorithm::Iac | RlAlgorithm::Maac => None,
        }
    }
}

/// How the agents are laid out (`trainer.collaboration_mode`; `preference.collaboration_mode`
/// for the preference trainers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollaborationMode {
    /// One policy per agent, each over its own prompt.
    Decentralized,
    /// One policy writing every agent's part (CoMLRL; ported for MAGRPO and its family).
    Centralized,
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

/// A published recipe (`trainer.preset`): the defaults it gives the keys it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// Dr. GRPO (arXiv 2503.20783): `loss_aggregation: constant`, `advantage_scale: none`.
    DrGrpo,
    /// DAPO (arXiv 2503.14476) as TRL's paper index sets it: `loss_aggregation: token_mean`,
    /// `mask_truncated_completions: true`, token-level ratios clipped to [0.8, 1.28]
    /// (`clip_eps` 0.2, `clip_eps_high` 0.28). Its dynamic sampling is not implemented.
    Dapo,
    /// GSPO (arXiv 2507.18071, v2 section 5.1, as TRL's paper index sets it):
    /// `importance_level: sequence`, `loss_aggregation: sequence_mean`, `clip_eps` 3e-4,
    /// `clip_eps_high` 4e-4.
    Gspo,
}

impl Preset {
    /// As a scenario writes it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::DrGrpo => "dr_grpo",
            Preset::Dapo => "dapo",
            Preset::Gspo => "gspo",
        }
    }

    /// `trainer.loss_aggregation`'s default under `preset`.
    pub fn loss_aggregation(preset: Option<Preset>) -> LossAggregation {
        match preset {
            Some(Preset::DrGrpo) => LossAggregation::Constant,
            Some(Preset::Dapo) => LossAggregation::TokenMean,
            Some(Preset::Gspo) => LossAggregation::SequenceMean,
            _ => LossAggregation::SequenceSum,
        }
    }

    /// `trainer.advantage_scale`'s default under `preset`.
    pub fn advantage_scale(preset: Option<Preset>) -> AdvantageScale {
        match preset {
            Some(Preset::DrGrpo) => AdvantageScale::None,
            _ => AdvantageScale::Group,
        }
    }

    /// `trainer.mask_truncated_completions`' default under `preset`.
    pub fn mask_truncated_completions(preset: Option<Preset>) -> bool {
        preset == Some(Preset::Dapo)
    }

    /// `trainer.importance_level`'s default under `preset` with `ppo_epochs` passes: the
    /// presets' own; else `token` when the buffer is passed over more than once, `none` (no
    /// ratio: CoMLRL) when once.
    pub fn importance_level(preset: Option<Preset>, ppo_epochs: usize) -> ImportanceLevel {
        match preset {
            Some(Preset::Gspo) => ImportanceLevel::Sequence,
            Some(Preset::Dapo) => ImportanceLevel::Token,
            _ if ppo_epochs > 1 => ImportanceLevel::Token,
            _ => ImportanceLevel::None,
        }
    }

    /// `trainer.clip_eps`' default under `preset` (TRL's `epsilon`).
    pub fn clip_eps(preset: Option<Preset>) -> f64 {
        match preset {
            Some(Preset::Gspo) => 3e-4,
            _ => 0.2,
        }
    }

    /// `trainer.clip_eps_high`'s default under `preset` (TRL's `epsilon_high`; `None`: the
    /// same as `clip_eps`).
    pub fn clip_eps_high(preset: Option<Preset>) -> Option<f64> {
        match preset {
            Some(Preset::Dapo) => Some(0.28),
            Some(Preset::Gspo) => Some(4e-4),
            _ => None,
        }
    }
}

/// Whether and how the loss weighs each token by the probability ratio π/π_old of re-used
/// samples (`trainer.importance_level`, TRL's `importance_sampling_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportanceLevel {
    /// No ratio: every mini-batch is differentiated as if on-policy (CoMLRL).
    None,
    /// One ratio per token, exp(log π − log π_old), clipped (PPO, GRPO, DAPO).
    Token,
    /// One ratio per sequence, exp(mean_t(log π − log π_old)), clipped (GSPO).
    Sequence,
}

/// How a mini-batch's per-token log-probs are summed into the loss (`trainer.loss_aggregation`).
/// Each is a weight on every sequence's Σ_t log π: A times the factor below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossAggregation {
    /// 1/(G·B): the sum over a sequence's tokens, averaged over the sequences (MAGRPO).
    SequenceSum,
    /// 1/(G·B·|o|): each sequence's mean over its tokens, averaged over the sequences (GRPO;
    /// TRL `loss_type: grpo`).
    SequenceMean,
    /// 1/(active tokens of the mini-batch): one mean over every token (DAPO; TRL `dapo`, and
    /// `bnpo` with one micro-batch per step).
    TokenMean,
    /// 1/(G·B·max_new_tokens): a constant (Dr. GRPO; TRL `dr_grpo`).
    Constant,
}

/// The standard deviation that advantage normalization divides by (`trainer.advantage_std`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvantageStd {
    /// √(Σ(x − m)²/n), floored at 1e-6 (CoMLRL).
    Population,
    /// √(Σ(x − m)²/(n − 1)) + 1e-4 (TRL's Bessel-corrected `nanstd` and its epsilon).
    Sample,
}

/// Which returns the normalization's standard deviation is taken over
/// (`trainer.advantage_scale`, TRL's `scale_rewards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvantageScale {
    /// The group's own (CoMLRL; TRL `group`).
    Group,
    /// Every return of the agent's rollout buffer (TRL `batch`).
    Batch,
    /// None: advantages are only re-centred (TRL `none`, Dr. GRPO).
    None,
}

/// How several reward terms become the return the advantages are computed from
/// (`trainer.reward_aggregation`, TRL's `multi_objective_aggregation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardAggregation {
    /// The weighted sum of the raw terms, after the processors (CoMLRL; TRL's default).
    SumThenNormalize,
    /// Each term z-scored within its group first, then weighted and summed (GDPO).
    NormalizeThenSum,
}

/// The temperature the update's log-probs are computed at (`trainer.logprob_temperature`):
/// written `1` or `sampling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogprobTemperature {
    /// 1: the model's own distribution (CoMLRL).
    One,
    /// Each agent's sampling temperature: the logits divided by it (TRL).
    Sampling,
}

impl Serialize for LogprobTemperature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LogprobTemperature::One => s.serialize_u64(1),
            LogprobTemperature::Sampling => s.serialize_str("sampling"),
        }
    }
}

impl<'de> Deserialize<'de> for LogprobTemperature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(f64),
            Word(String),
        }
        match Written::deserialize(d)? {
            Written::Number(1.0) => Ok(LogprobTemperature::One),
            Written::Word(w) if w == "1" => Ok(LogprobTemperature::One),
            Written::Word(w) if w == "sampling" => Ok(LogprobTemperature::Sampling),
            other => Err(serde::de::Error::custom(format!(
                "expected `1` or `sampling`, got {}",
                match other {
                    Written::Number(x) => x.to_string(),
                    Written::Word(w) => format!("`{w}`"),
                }
            ))),
        }
    }
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

/// `agents.adapter`: a LoRA adapter trained on the agent's frozen base, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterPlan {
    /// r (with `init`, the directory's).
    pub rank: usize,
    /// α (with `init`, the directory's).
    pub alpha: f64,
    /// PEFT's `lora_dropout` p in [0, 1) on the low-rank branch's input in the update's
    /// passes (0 unless set: PEFT's default); `None` only with `init`: the directory's.
    pub dropout: Option<f64>,
    /// The projections that carry adapters (with `init`, the directory's).
    pub targets: Vec<String>,
    /// A PEFT adapter directory (absolute) to start from instead of PEFT's fresh init.
    pub init: Option<PathBuf>,
    /// rsLoRA's scaling α/√r instead of α/r (with `init`, the directory's).
    pub rslora: bool,
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
