//! MADPO, multi-agent direct preference optimisation (CoMLRL 1.4.3's `MADPOTrainer`): offline
//! and reference-free. The first pass over the training prompts samples K aligned joint
//! candidates per prompt (`preference.num_candidates`, the rollout's `num_generations`) and
//! scores them; the pairs with a positive joint-reward gap that `pair_selection` keeps form the
//! preference set (`set`; the pairs are `rollout::pairs`). At the end of every epoch the set is shuffled and each
//! mini-batch of `train_batch_size` pairs takes one AdamW step per agent on the
//! joint-factorised DPO loss (`loss`): every agent's Δ of the mini-batch is scored first, then
//! each agent's gradients and step, as CoMLRL's `_update_from_preference_batch` orders them.
//!
//! It is the loop's one offline algorithm (`Algorithm::offline`): no sampling after the first
//! epoch. The set and the generator that shuffles it are its checkpoint file
//! (`madpo_preference.json`), so a resumed run never samples the set again.
pub mod iter;
pub mod loss;
pub mod set;

use crate::dist::World;
use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::train::algorithms::algorithm::Algorithm;
use crate::train::algorithms::round::{AgentUpdate, Learner, Round};
use crate::train::rollout::pairs::PairSelection;
use crate::train::rollout::{Node, NodeSample};
use crate::train::run::checkpoint::CheckpointPart;
use crate::train::update::plan::pass_plan;
use crate::train::world::agent_values::share_agent_values;
use comlrl_scenario::Scenario;
use loss::{agent_grads, deltas, sequence_logprobs, LastToken};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use set::{Pair, PreferenceSet};
use std::path::Path;

/// The checkpoint file (written with agent 0's files).
pub const CHECKPOINT_FILE: &str = "madpo_preference.json";

/// The most a checkpoint's preference file may hold (the set is token ids; far below this).
const FILE_CAP: u64 = 1 << 34;

/// What the checkpoint keeps: the set and the generator that selects (`random`) and shuffles.
#[derive(Serialize, Deserialize)]
struct Saved {
    set: PreferenceSet,
    rng: ChaCha8Rng,
}

/// MADPO with a scenario's settings and its preference set.
pub struct Madpo {
    agents: usize,
    beta: f64,
    selection: PairSelection,
    limit: Option<usize>,
    last: LastToken,
    /// Environment steps per trained pair (0: not counted).
    env_steps_per_pair: usize,
    /// Pairs per mini-batch.
    batch: usize,
    /// Candidates per scoring / gradient pass (0: a prompt's at once).
    micro_batch: usize,
    recompute: bool,
    plan: PassPlan,
    set: PreferenceSet,
    rng: ChaCha8Rng,
}

impl Madpo {
    /// MADPO as `s.trainer` and `s.preference` set it up, with an empty set.
    pub fn new(s: &Scenario) -> Self {
        let (t, p) = (&s.trainer, &s.preference);
        Madpo {
            agents: s.agents.len(),
            beta: p.dpo_beta,
            selection: p.pair_selection,
            limit: p.pairs_per_sample,
            // CoMLRL's centralized MADPO scores with `joint_sequence_log_prob`, every token.
            last: if p.compat_last_token
                && t.collaboration_mode != comlrl_scenario::CollaborationMode::Centralized
            {
                LastToken::Dropped
            } else {
                LastToken::Counted
            },
            env_steps_per_pair: if p.use_environment_step {
                p.environment_steps_per_pair
            } else {
                0
            },
            batch: t.train_batch_size.max(1),
            micro_batch: t.micro_batch_size,
            recompute: t.gradient_checkpointing,
            // Temperature 1: CoMLRL's MADPO scores with the plain logits.
            plan: pass_plan(t),
            set: PreferenceSet::default(),
            // Its own stream: selecting and shuffling never move the sampling generator.
            rng: ChaCha8Rng::seed_from_u64(s.seed ^ 0x6d61_6470_6f00_0001),
        }
    }

    /// The preference set built so far.
    pub fn set(&self) -> &PreferenceSet {
        &self.set
    }

    /// Which tokens of a candidate its sequence log-prob counts.
    pub fn last_token(&self) -> LastToken {
        self.last
    }
}

impl Algorithm for Madpo {
    fn name(&self) -> &'static str {
        "madpo"
    }

    /// Each completion's return is its joint candidate's reward (aligned), for the metrics and
    /// evaluation; MADPO itself reads only the rewards.
    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        Ok(root.into_reward_samples())
    }

    fn steps_per_round(&self) -> usize {
        self.set.pairs.len().div_ceil(self.batch)
    }

    fn offline(&self) -> bool {
        true
    }

    fn collect(&mut self, _prompts: &[String], samples: &[NodeSample]) -> Result<()> {
        for node in samples.iter().filter(|n| n.turn == 0) {
            self.set
                .add(node, self.selection, self.limit, &mut self.rng)?;
        }
        Ok(())
    }

    fn update(
        &mut self,
        mut round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        let team = round.team();
        let learners = preference_learners(&mut round, buffer, "madpo")?;
        let pairs = self.set.pairs.clone();
        self.train_pass(learners, team, &pairs)?;
        Ok(round.finish())
    }
}

/// The learners of a round of `alg` (`madpo`, `madpo_iter`), which trains on its preference
/// set: the agents this rank holds, in order (every agent in one process; under MPI the ranks
/// exchange each mini-batch's Δ, see [`Madpo::train_pass`]). An error where a rollout buffer
/// came in.
pub(crate) fn preference_learners<'r, 'a>(
    round: &'r mut Round<'a>,
    buffer: &[NodeSample],
    alg: &str,
) -> Result<&'r mut [Learner<'a>]> {
    if !buffer.is_empty() {
        return Err(Error::Internal(format!(
            "{alg} trains on its preference set, not on a rollout buffer"
        )));
    }
    Ok(round.learners())
}

impl Madpo {
    /// One pass over `pairs` (of the set): shuffled as CoMLRL shuffles the whole list every
    /// epoch, then `train_batch_size` at a time, one AdamW step per agent and mini-batch.
    /// `learners` are the agents this rank holds, in order; each mini-batch's Δ of every agent
    /// is all-gathered over `team` (a collective: every rank holds the same set and shuffles it
    /// with the same generator, so all take the same mini-batches).
    pub(crate) fn train_pass(
        &mut self,
        learners: &mut [Learner<'_>],
        team: &dyn World,
        pairs: &[Pair],
    ) -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.shuffle(&mut self.rng);
        let gaps = |b: &[Pair]| {
            b.iter()
                .map(|p| (p.winner_reward - p.loser_reward) as f64)
                .sum::<f64>()
                / b.len().max(1) as f64
        };
        let total = pairs.len() as f64;
        for (b, chunk) in order.chunks(self.batch).enumerate() {
            let batch: Vec<Pair> = chunk.iter().map(|&i| pairs[i]).collect();
            // Every agent's Δ of the mini-batch before any agent steps: this rank's agents
            // score theirs, and the ranks exchange them (one f32 per pair and agent, never
            // token log-probs).
            let mut mine = Vec::with_capacity(learners.len());
            for l in learners.iter() {
                let a = l.index();
                let lps = sequence_logprobs(
                    l.policy(),
                    &self.set,
                    &batch,
                    a,
                    self.last,
                    self.micro_batch,
                )?;
                mine.push((a, deltas(&lps, &batch)));
            }
            let what = format!("MADPO's Δ of mini-batch {}", b + 1);
            let all = share_agent_values(team, &mine, self.agents, &what)?;
            let mut rows = vec![vec![0f32; self.agents]; batch.len()];
            for (a, d) in all.iter().enumerate() {
                if d.len() != batch.len() {
                    return Err(Error::Distributed(format!(
                        "{what}: agent {a} has {} values for {} pairs",
                        d.len(),
                        batch.len()
                    )));
                }
                for (row, &x) in rows.iter_mut().zip(d) {
                    row[a] = x;
                }
            }
            for l in learners.iter_mut() {
                let a = l.index();
                let (lg, stats) = agent_grads(
                    l.policy(),
                    l.vars(),
                    &self.set,
                    &batch,
                    &rows,
                    a,
                    self.beta,
                    self.last,
                    self.micro_batch,
                    self.recompute,
                    l.share(),
                    self.plan,
                )
                .map_err(|e| e.for_agent(a, None))?;
                // The replicas' sum replaces the loss with the passes' (the weighted surrogate's
                // value): the logged loss is the DPO loss, which every replica computed whole.
                let mut lg = lg;
                l.reduce(&mut lg)?;
                lg.loss = stats.loss;
                l.step(lg)?;
                l.record("dpo_margin", stats.margin);
                l.record("dpo_accuracy", stats.accuracy);
                l.record("pair_reward_gap", gaps(&batch));
                l.record("preference_pairs", total);
                l.record("env_steps", (self.env_steps_per_pair * batch.len()) as f64);
            }
        }
        Ok(())
    }
}

impl CheckpointPart for Madpo {
    fn files(&self, agent: usize) -> Vec<String> {
        if agent == 0 {
            vec![CHECKPOINT_FILE.into()]
        } else {
            vec![]
        }
    }

    fn save(&self, dir: &Path, writes: &[bool]) -> Result<()> {
        if !writes.first().copied().unwrap_or(false) {
            return Ok(());
        }
        let saved = Saved {
            set: self.set.clone(),
            rng: self.rng.clone(),
        };
        let text = serde_json::to_string(&saved)
            .map_err(|e| Error::serialize("the MADPO preference set", e))?;
        let path = dir.join(CHECKPOINT_FILE);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }

    /// Every rank reads the file (written with agent 0's): each trains its agents on the same
    /// set, in the same order.
    fn load(&mut self, dir: &Path, _held: &[bool]) -> Result<()> {
        let path = dir.join(CHECKPOINT_FILE);
        let text =
            comlrl_scenario::files::read_text(&path, FILE_CAP, "it is not a file comlrl wrote")
                .map_err(|e| Error::io(&path, e))?;
        let saved: Saved = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint_by(&path, "not a MADPO preference set", e))?;
        check_set(&saved.set, self.agents, &path)?;
        self.set = saved.set;
        self.rng = saved.rng;
        Ok(())
    }
}

/// A preference set read from the checkpoint `path`: every pair names candidates its entry
/// holds, for each of the `agents`.
pub(crate) fn check_set(set: &PreferenceSet, agents: usize, path: &Path) -> Result<()> {
    let bad = set.pairs.iter().find(|p| {
        set.entries.get(p.entry).is_none_or(|e| {
            e.agents.len() != agents
                || e.agents
                    .iter()
                    .any(|a| a.candidates.len() <= p.winner.max(p.loser) || a.prompt.is_empty())
        })
    });
    match bad {
        Some(p) => Err(Error::checkpoint(
            path,
            format!("its preference set is inconsistent: a pair names candidates it does not hold ({p:?})"),
        )),
        None => Ok(()),
    }
}
