//! MARLHF (CoMLRL 1.4.3's `MARLHFTrainer`): a joint reward model learnt from preference pairs,
//! then online MARL against it (`trainer.algorithm: marlhf`).
//!
//! - The run's first epoch is a collecting one (`Algorithm::collect`): each training prompt is
//!   sampled with `preference.num_candidates` answers per agent and scored by the task reward;
//!   the pairs that `pair_selection` keeps (MADPO's, `rollout::pairs`) become joint texts in
//!   CoMLRL's layout (`reward_model::joint_text`).
//! - The epoch ends in the reward model's training (`set`: `reward_num_train_epochs` shuffled
//!   passes of `reward_train_batch_size` pairs, the Bradley–Terry loss, torch's AdamW as
//!   CoMLRL's); the model is frozen afterwards.
//! - Then `num_train_epochs` of MAGRPO (with `rl_algorithm`'s advantage mode): every joint
//!   action of a training prompt is scored by the reward model instead of the task reward
//!   (`Algorithm::rescore`); the task's terms stay in the metrics (`reward/<term>`), and
//!   evaluation reports the task reward, as CoMLRL's `evaluate` does.
//!
//! What the checkpoint keeps (with agent 0's files): the collected pairs and the generator that
//! selects and shuffles them, whether the reward model is trained, and its weights, so a
//! resumed run never samples the set or trains the model again. The final models get
//! `models/reward_model/` (the backbone in Hugging Face layout, the head as
//! `reward_head.safetensors`).
pub mod iter;
pub mod reward_model;
pub mod set;

use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::model::{LoadOptions, ModelSource, Policy, RolloutCopies, ValueHead};
use crate::train::algorithms::algorithm::Algorithm;
use crate::train::algorithms::round::{AgentUpdate, Round};
use crate::train::rollout::{Node, NodeSample};
use crate::train::run::checkpoint::{read_weights, write_weights, CheckpointPart};
use crate::train::setup::models::source_of;
use crate::train::update::plan::pass_plan;
use candle_core::DType;
use comlrl_scenario::Scenario;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reward_model::{joint_text, JointRewardModel};
use serde::{Deserialize, Serialize};
use set::{RewardTraining, TextSet};
use std::path::Path;

/// The checkpoint's state file (with agent 0's files).
pub const STATE_FILE: &str = "marlhf_state.json";
/// The checkpoint's reward model weights (backbone and head).
pub const WEIGHTS_FILE: &str = "marlhf_reward_model.safetensors";

/// The most a checkpoint's state file may hold (joint texts; far below this).
const FILE_CAP: u64 = 1 << 34;

/// What the checkpoint keeps beside the reward model's weights.
#[derive(Serialize, Deserialize)]
struct Saved {
    set: TextSet,
    rng: ChaCha8Rng,
    trained: Option<RewardTraining>,
}

/// MARLHF with a scenario's settings, its preference set and its reward model.
pub struct Marlhf {
    /// The online algorithm (the registry's MAGRPO).
    online: Box<dyn Algorithm>,
    set: TextSet,
    rng: ChaCha8Rng,
    rm: JointRewardModel,
    /// The reward model's source, as written (for messages).
    rm_spec: String,
    /// Where the reward model's backbone is loaded from, and how (a fresh one per round of
    /// `marlhf_iter`).
    rm_source: ModelSource,
    rm_opts: LoadOptions,
    /// The seed of the reward head's initialisation.
    seed: u64,
    /// How the reward model trained (`None`: not yet).
    trained: Option<RewardTraining>,
    cfg: set::TrainConfig,
    plan: PassPlan,
}

impl Marlhf {
    /// MARLHF as the scenario sets it up, training online with `online` (the registry's
    /// MAGRPO), with an empty set and the reward model loaded (`preference.reward_model`, else
    /// agent 0's model) with a fresh head.
    ///
    /// Under MPI every rank holds its own copy of the reward model and trains it the same way:
    /// every rank already has every agent's answers (the rollout's all-gather) and the same
    /// pairs, so the copies stay bit-identical without an exchange, and each rank rescores its
    /// rollouts itself instead of waiting for a broadcast every step. The copy costs no more
    /// peak memory than one owner would: rank 0, which would own it, holds agents too, and a
    /// machine's need is its largest rank's.
    pub fn new(s: &Scenario, online: Box<dyn Algorithm>) -> Result<Self> {
        let p = &s.preference;
        let model = p.reward_model.as_ref().unwrap_or(&s.agents[0].model);
        let opts = LoadOptions {
            seed: s.seed,
            // The reward model never samples.
            rollout_copies: RolloutCopies::Never,
            copies_now: false,
            ..LoadOptions::default()
        };
        let rm_source = source_of(model, &s.base_dir)?;
        let rm = fresh_reward_model(&rm_source, &opts, &model.spec, s.seed)?;
        Ok(Marlhf {
            online,
            set: TextSet::default(),
            // Its own stream: selecting and shuffling never move the sampling generator.
            rng: ChaCha8Rng::seed_from_u64(s.seed ^ 0x6d61_726c_6866_0002),
            rm,
            rm_spec: model.spec.clone(),
            rm_source,
            rm_opts: opts,
            seed: s.seed,
            trained: None,
            cfg: set::TrainConfig {
                selection: p.pair_selection,
                limit: p.pairs_per_sample,
                lr: p.reward_learning_rate,
                epochs: p.reward_num_train_epochs,
                batch: p.reward_train_batch_size,
                max_length: p.reward_max_length,
                freeze_backbone: p.reward_freeze_backbone,
            },
            plan: pass_plan(&s.trainer),
        })
    }

    /// The reward model's score of each joint text (no gradient).
    pub fn score(&self, texts: &[String]) -> Result<Vec<f32>> {
        let out = set::score(&self.rm, texts, self.cfg.max_length)?;
        if let Some(bad) = out.iter().find(|v| !v.is_finite()) {
            return Err(Error::Diverged(format!(
                "the reward model ({}) scored a joint action {bad}: lower preference.reward_learning_rate",
                self.rm_spec
            )));
        }
        Ok(out)
    }

    /// Trains the reward model on `pairs` (of its set): `reward_num_train_epochs` shuffled
    /// passes with a new optimizer.
    fn train_reward_model_on(&mut self, pairs: &[set::TextPair]) -> Result<()> {
        let vars = match self.cfg.freeze_backbone {
            true => vec![
                (
                    "reward_head.weight".to_string(),
                    self.rm.head.weight.clone(),
                ),
                ("reward_head.bias".to_string(), self.rm.head.bias.clone()),
            ],
            false => self.rm.vars(),
        };
        let mut opt = set::reward_adamw(vars, self.cfg.lr);
        let report = set::train(
            &self.rm,
            &mut opt,
            pairs,
            &self.cfg,
            &mut self.rng,
            self.plan,
        )
        .map_err(|e| e.within(format!("training the reward model {}", self.rm_spec)))?;
        self.trained = Some(report);
        Ok(())
    }
}

/// A reward model as CoMLRL's `_init_reward_model` makes it: the backbone loaded from
/// `source`, a fresh head (seeded from `seed`).
fn fresh_reward_model(
    source: &ModelSource,
    opts: &LoadOptions,
    spec: &str,
    seed: u64,
) -> Result<JointRewardModel> {
    let policy = Policy::load(source, opts)
        .map_err(|e| Error::from(e).within(format!("the reward model {spec}")))?;
    let head = ValueHead::init(
        policy.config.hidden_size,
        None,
        seed ^ 0x6d61_726c_6866_0001,
        DType::F32,
        policy.model.device(),
    )?;
    Ok(JointRewardModel { policy, head })
}

impl Algorithm for Marlhf {
    fn name(&self) -> &'static str {
        "marlhf"
    }

    /// The collecting epoch's candidates as they are (returns = their rewards, as MADPO's);
    /// then the online algorithm's targets.
    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        match self.trained {
            None => Ok(root.into_reward_samples()),
            Some(_) => self.online.targets(root),
        }
    }

    fn steps_per_round(&self) -> usize {
        self.online.steps_per_round()
    }

    fn collect(&mut self, prompts: &[String], samples: &[NodeSample]) -> Result<()> {
        for node in samples.iter().filter(|n| n.turn == 0) {
            self.set.add(prompts, node, &self.cfg, &mut self.rng)?;
        }
        Ok(())
    }

    fn rescore(&self, prompts: &[String], root: &mut Node) -> Result<()> {
        if self.trained.is_none() {
            return Err(Error::Internal(
                "MARLHF's online phase started before its reward model trained".into(),
            ));
        }
        let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let texts = root
            .joint
            .iter()
            .map(|choice| {
                let completions = choice
                    .iter()
                    .zip(&root.agents)
                    .map(|(&c, a)| a.texts.get(c).map(String::as_str).unwrap_or(""))
                    .collect::<Vec<_>>();
                joint_text(&prompts, &completions)
            })
            .collect::<Vec<_>>();
        let scores = self.score(&texts)?;
        if scores.len() != root.rewards.len() {
            return Err(Error::Internal(format!(
                "{} reward-model scores for {} joint actions",
                scores.len(),
                root.rewards.len()
            )));
        }
        root.rewards = scores;
        Ok(())
    }

    fn update(
        &mut self,
        mut round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        if self.trained.is_some() {
            return self.online.update(round, buffer);
        }
        if !buffer.is_empty() {
            return Err(Error::Internal(
                "MARLHF's reward model trains on its preference set, not on a rollout buffer"
                    .into(),
            ));
        }
        let pairs = std::mem::take(&mut self.set.pairs);
        let trained = self.train_reward_model_on(&pairs);
        self.set.pairs = pairs;
        trained?;
        let t = self.trained.as_ref().expect("just trained");
        for l in round.learners() {
            l.record("reward_model_loss", t.loss);
            l.record("reward_model_accuracy", t.accuracy);
            l.record("preference_pairs", self.set.pairs.len() as f64);
        }
        Ok(round.finish())
    }
}

impl CheckpointPart for Marlhf {
    fn files(&self, agent: usize) -> Vec<String> {
        let mut files = self.online.files(agent);
        if agent == 0 {
            files.extend([STATE_FILE.to_string(), WEIGHTS_FILE.to_string()]);
        }
        files
    }

    fn save(&self, dir: &Path, writes: &[bool]) -> Result<()> {
        self.online.save(dir, writes)?;
        if !writes.first().copied().unwrap_or(false) {
            return Ok(());
        }
        let saved = Saved {
            set: self.set.clone(),
            rng: self.rng.clone(),
            trained: self.trained.clone(),
        };
        let text = serde_json::to_string(&saved)
            .map_err(|e| Error::serialize("the MARLHF preference set", e))?;
        let path = dir.join(STATE_FILE);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        write_weights(&self.rm.vars(), &dir.join(WEIGHTS_FILE))
    }

    /// Every rank reads the state and the reward model (written with agent 0's files): each
    /// holds its own copy of the model (see [`Marlhf::new`]).
    fn load(&mut self, dir: &Path, held: &[bool]) -> Result<()> {
        self.online.load(dir, held)?;
        let path = dir.join(STATE_FILE);
        let text =
            comlrl_scenario::files::read_text(&path, FILE_CAP, "it is not a file comlrl wrote")
                .map_err(|e| Error::io(&path, e))?;
        let saved: Saved = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint_by(&path, "not a MARLHF state", e))?;
        check_text_set(&saved.set, &path)?;
        read_weights(&self.rm.vars(), &dir.join(WEIGHTS_FILE))?;
        self.set = saved.set;
        self.rng = saved.rng;
        self.trained = saved.trained;
        Ok(())
    }

    fn save_models(&self, models: &Path, writes: &[bool]) -> Result<()> {
        self.online.save_models(models, writes)?;
        if !writes.first().copied().unwrap_or(false) || self.trained.is_none() {
            return Ok(());
        }
        let dir = models.join("reward_model");
        self.rm
            .policy
            .save(&dir)
            .map_err(|e| Error::from(e).within(format!("the reward model {}", self.rm_spec)))?;
        let head = vec![
            (
                "reward_head.weight".to_string(),
                self.rm.head.weight.clone(),
            ),
            ("reward_head.bias".to_string(), self.rm.head.bias.clone()),
        ];
        write_weights(&head, &dir.join("reward_head.safetensors"))
    }
}

/// A preference set read from the checkpoint `path`: no empty joint text.
pub(crate) fn check_text_set(set: &TextSet, path: &Path) -> Result<()> {
    match set
        .pairs
        .iter()
        .find(|p| p.winner.is_empty() || p.loser.is_empty())
    {
        Some(p) => Err(Error::checkpoint(
            path,
            format!(
                "its preference set holds an empty joint text (pair with rewards {} / {})",
                p.winner_reward, p.loser_reward
            ),
        )),
        None => Ok(()),
    }
}
