//! Iterative MARLHF (CoMLRL 1.4.3's `MARLHFIterTrainer`, `trainer.algorithm: marlhf_iter`):
//! `preference.num_iterations` rounds, each `Scenario::epochs_per_round` passes over the
//! training prompts.
//!
//! - The round's first pass collects (`Algorithm::collect`): every prompt's current-policy
//!   candidates (`num_candidates`) are sampled beside the comparator's
//!   (`comparator_num_candidates`, the shared `preference::comparator`) and ranked by the task
//!   reward, or, under `scoring_reward: reward_model`, by the previous round's reward model
//!   (the first round by the task reward, as CoMLRL, which has no model yet); candidate i of
//!   each side form a pair when their rewards differ and `pair_selection` keeps some, as joint
//!   texts (`TextSet::add_compared`).
//! - The pass ends in the round's reward-model step: the round's pairs join the history as a
//!   shard, `replay_mode` picks the pairs to train on (`preference::replay`), and a reward model
//!   made afresh (the backbone loaded again, a new head, a new optimizer: CoMLRL's
//!   `_clear_reward_model` + `_init_reward_model` every round) trains on them as MARLHF's.
//! - Then `trainer.num_train_epochs` online passes (`rl_algorithm`, the MAGRPO family) against
//!   that model, exactly as MARLHF's online phase: the task's terms stay in the metrics and
//!   evaluation reports the task reward.
//!
//! A round whose replay gives no pair trains no reward model and skips its online passes
//! (CoMLRL `continue`s): the loop samples nothing until the next round (`Algorithm::idle`).
//!
//! The checkpoint keeps the text pairs of every round, the rounds' ranges, the round index, the
//! phase, the generator and the reward model's weights, so a resumed run never samples a
//! finished prompt of a round again nor retrains its reward model.
//!
//! On MPI ranks (as MARLHF's, `Marlhf::new`) every rank holds a copy of each round's reward
//! model and trains it alike: the comparator samples with each agent's rank (the agents
//! themselves, or a `model` comparator loaded beside them) and the rollout's all-gather gives
//! every rank every agent's candidates, so every rank collects the same pairs with the same
//! generator, trains the same fresh model on them and scores the online rollouts itself; the
//! online passes are the `rl_algorithm`'s placement. Only agent 0's rank writes the state and
//! the model; every rank reads them on resume.
use super::reward_model::joint_text;
use super::set::{RewardTraining, TextSet};
use super::{fresh_reward_model, Marlhf};
use crate::error::{Error, Result};
use crate::model::Policy;
use crate::train::algorithms::algorithm::{Algorithm, Comparison};
use crate::train::algorithms::preference::check_round_shards;
use crate::train::algorithms::preference::comparator::Comparators;
use crate::train::algorithms::preference::replay::{self, Replay};
use crate::train::algorithms::round::{AgentUpdate, Round};
use crate::train::rollout::{Node, NodeSample};
use crate::train::run::checkpoint::{read_weights, write_weights, CheckpointPart};
use comlrl_scenario::{Scenario, ScoringReward};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::Path;

/// The checkpoint's state file (with agent 0's files).
pub const STATE_FILE: &str = "marlhf_iter_state.json";
/// The checkpoint's reward model weights (backbone and head).
pub const WEIGHTS_FILE: &str = "marlhf_iter_reward_model.safetensors";

/// The most a checkpoint's state file may hold (joint texts; far below this).
const FILE_CAP: u64 = 1 << 34;

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Its first pass: collecting pairs.
    Collecting,
    /// Its online passes, against the round's reward model.
    Online,
    /// No pair to train on: nothing until the next round.
    Idle,
}

/// What the checkpoint keeps beside the reward model's weights.
#[derive(Serialize, Deserialize)]
struct Saved {
    set: TextSet,
    shards: Vec<Range<usize>>,
    iteration: usize,
    phase: Phase,
    rng: ChaCha8Rng,
    trained: Option<RewardTraining>,
}

/// Iterative MARLHF with its history of rounds.
pub struct MarlhfIter {
    /// The reward model, its training and the online algorithm (MARLHF's); its set holds every
    /// round's pairs.
    marlhf: Marlhf,
    comparators: Comparators,
    replay: Replay,
    scoring: ScoringReward,
    /// Each finished collecting pass's range of `marlhf.set.pairs`.
    shards: Vec<Range<usize>>,
    /// Rounds whose collecting pass finished.
    iteration: usize,
    phase: Phase,
}

impl MarlhfIter {
    /// Iterative MARLHF as the scenario sets it up: MARLHF's reward model and online algorithm
    /// (`online`, the registry's), the comparator (`Comparators::new`).
    pub fn new(
        s: &Scenario,
        agents: &[Option<Policy>],
        online: Box<dyn Algorithm>,
    ) -> Result<Self> {
        let p = &s.preference;
        let comparators = Comparators::new(s, agents)?;
        Ok(MarlhfIter {
            marlhf: Marlhf::new(s, online)?,
            comparators,
            replay: Replay {
                mode: p.replay_mode,
                k: p.replay_k,
                lambda: p.replay_lambda,
                sample_size: p.replay_sample_size,
            },
            scoring: p.scoring_reward,
            shards: Vec::new(),
            iteration: 0,
            phase: Phase::Collecting,
        })
    }

    /// Where the round stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Where this round's pairs start in the set.
    fn round_start(&self) -> usize {
        self.shards.last().map_or(0, |r| r.end)
    }

    /// `node`'s joint candidates scored by the reward model (CoMLRL's
    /// `_preference_scoring_raw_and_processed_rewards` under `reward_model`).
    fn rescored(&self, prompts: &[String], node: &NodeSample) -> Result<NodeSample> {
        let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let k = node.rewards.len();
        let texts = (0..k)
            .map(|c| {
                let completions = node
                    .agents
                    .iter()
                    .map(|a| a.texts.get(c).map(String::as_str).unwrap_or(""))
                    .collect::<Vec<_>>();
                joint_text(&prompts, &completions)
            })
            .collect::<Vec<_>>();
        let mut node = node.clone();
        node.rewards = self.marlhf.score(&texts)?;
        Ok(node)
    }

    /// The round's reward-model step: the round's pairs become a shard, the replayed pairs
    /// train a fresh reward model (or, with none, the round idles).
    fn train_round(&mut self, mut round: Round<'_>) -> Result<Vec<(usize, AgentUpdate)>> {
        let start = self.round_start();
        let end = self.marlhf.set.pairs.len();
        self.shards.push(start..end);
        self.iteration += 1;
        let pairs = replay::select(
            &self.replay,
            &self.marlhf.set.pairs,
            &self.shards,
            &mut self.marlhf.rng,
        );
        let r = self.iteration;
        if pairs.is_empty() {
            self.phase = Phase::Idle;
        } else {
            // CoMLRL clears the model and builds it again from its source every round.
            let m = &self.marlhf;
            let seed = m.seed.wrapping_add(r as u64 - 1);
            self.marlhf.rm = fresh_reward_model(&m.rm_source, &m.rm_opts, &m.rm_spec, seed)?;
            self.marlhf
                .train_reward_model_on(&pairs)
                .map_err(|e| e.within(format!("round {r}")))?;
            self.phase = Phase::Online;
        }
        for l in round.learners() {
            if let Some(t) = &self.marlhf.trained {
                if self.phase == Phase::Online {
                    l.record("reward_model_loss", t.loss);
                    l.record("reward_model_accuracy", t.accuracy);
                }
            }
            l.record("iter_round", r as f64);
            l.record("iter_round_pairs", (end - start) as f64);
            l.record("iter_train_pairs", pairs.len() as f64);
            l.record("preference_pairs", end as f64);
        }
        Ok(round.finish())
    }
}

impl Algorithm for MarlhfIter {
    fn name(&self) -> &'static str {
        "marlhf_iter"
    }

    /// The online algorithm's (evaluation too; a collecting pass's candidates are the loop's
    /// reward samples).
    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        self.marlhf.online.targets(root)
    }

    fn steps_per_round(&self) -> usize {
        self.marlhf.online.steps_per_round()
    }

    fn comparison(&self) -> Option<Comparison<'_>> {
        Some(self.comparators.comparison())
    }

    fn idle(&self) -> bool {
        self.phase == Phase::Idle
    }

    fn collect(&mut self, prompts: &[String], samples: &[NodeSample]) -> Result<()> {
        self.phase = Phase::Collecting;
        let by_model = self.scoring == ScoringReward::RewardModel && self.marlhf.trained.is_some();
        for node in samples.iter().filter(|n| n.turn == 0) {
            let scored;
            let node = match by_model {
                true => {
                    scored = self.rescored(prompts, node)?;
                    &scored
                }
                false => node,
            };
            let current = self.comparators.current;
            let cfg = &self.marlhf.cfg;
            self.marlhf
                .set
                .add_compared(prompts, node, current, cfg, &mut self.marlhf.rng)?;
        }
        Ok(())
    }

    fn rescore(&self, prompts: &[String], root: &mut Node) -> Result<()> {
        self.marlhf.rescore(prompts, root)
    }

    fn update(
        &mut self,
        round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        match self.phase {
            Phase::Online => self.marlhf.online.update(round, buffer),
            // Nothing trains before the next round.
            Phase::Idle => Ok(round.finish()),
            Phase::Collecting => {
                if !buffer.is_empty() {
                    return Err(Error::Internal(
                        "MARLHFIter's reward model trains on its preference set, not on a rollout buffer"
                            .into(),
                    ));
                }
                self.train_round(round)
            }
        }
    }
}

impl CheckpointPart for MarlhfIter {
    fn files(&self, agent: usize) -> Vec<String> {
        let mut files = self.marlhf.online.files(agent);
        if agent == 0 {
            files.extend([STATE_FILE.to_string(), WEIGHTS_FILE.to_string()]);
        }
        files
    }

    fn save(&self, dir: &Path, writes: &[bool]) -> Result<()> {
        self.marlhf.online.save(dir, writes)?;
        if !writes.first().copied().unwrap_or(false) {
            return Ok(());
        }
        let saved = Saved {
            set: self.marlhf.set.clone(),
            shards: self.shards.clone(),
            iteration: self.iteration,
            phase: self.phase,
            rng: self.marlhf.rng.clone(),
            trained: self.marlhf.trained.clone(),
        };
        let text = serde_json::to_string(&saved)
            .map_err(|e| Error::serialize("the MARLHFIter state", e))?;
        let path = dir.join(STATE_FILE);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        write_weights(&self.marlhf.rm.vars(), &dir.join(WEIGHTS_FILE))
    }

    /// Every rank reads the state and the round's reward model (written with agent 0's files):
    /// each holds its own copy (see the module's notes).
    fn load(&mut self, dir: &Path, held: &[bool]) -> Result<()> {
        self.marlhf.online.load(dir, held)?;
        let path = dir.join(STATE_FILE);
        let text =
            comlrl_scenario::files::read_text(&path, FILE_CAP, "it is not a file comlrl wrote")
                .map_err(|e| Error::io(&path, e))?;
        let saved: Saved = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint_by(&path, "not a MARLHFIter state", e))?;
        check_round_shards(&path, &saved.shards, saved.iteration, saved.set.pairs.len())?;
        if saved.phase == Phase::Online && saved.trained.is_none() {
            return Err(Error::checkpoint(
                &path,
                "it is in a round's online passes but holds no trained reward model",
            ));
        }
        super::check_text_set(&saved.set, &path)?;
        // The round's model as saved (a fresh head and backbone are overwritten here).
        read_weights(&self.marlhf.rm.vars(), &dir.join(WEIGHTS_FILE))?;
        self.marlhf.set = saved.set;
        self.marlhf.rng = saved.rng;
        self.marlhf.trained = saved.trained;
        self.shards = saved.shards;
        self.iteration = saved.iteration;
        self.phase = saved.phase;
        Ok(())
    }

    fn save_models(&self, models: &Path, writes: &[bool]) -> Result<()> {
        self.marlhf.save_models(models, writes)
    }
}
