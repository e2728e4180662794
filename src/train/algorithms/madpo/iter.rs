//! Iterative MADPO (CoMLRL 1.4.3's `MADPOIterTrainer`): `preference.num_iterations` rounds,
//! each one collecting epoch of the loop (`Scenario::collect_epochs`). In a round every prompt's
//! current-policy candidates (`num_candidates`) are sampled beside a comparator's
//! (`comparator_num_candidates`), all scored by the task reward; candidate i of each side form a
//! pair when their rewards differ, `pair_selection` keeps some (`rollout::pairs`,
//! `select_compared_pairs`). At the round's end the round's pairs join the history as a shard,
//! `replay_mode` picks the pairs to train on (`replay`), and `trainer.num_train_epochs` passes of
//! MADPO's loss run over them (`Madpo::train_pass`).
//!
//! The comparator (`comparator_policy`) is the shared `preference::comparator`. A pair's two
//! sides are token ids as sampled; an endpoint's texts are encoded as CoMLRL does: the agent's
//! tokenizer, no special tokens, so no EOS.
//!
//! The checkpoint holds the preference history (every round's pairs and the entries they use),
//! the shards, the round index and the generators, so a resumed run goes on collecting the
//! round where it stopped and never samples a finished prompt again; the `history`
//! comparator's policies are read back from their saved folders.
use super::set::PreferenceSet;
use super::Madpo;
use crate::error::{Error, Result};
use crate::model::Policy;
use crate::train::algorithms::algorithm::{Algorithm, Comparison};
use crate::train::algorithms::preference::check_round_shards;
use crate::train::algorithms::preference::comparator::Comparators;
use crate::train::algorithms::preference::replay::{self, Replay};
use crate::train::algorithms::round::{AgentUpdate, Round};
use crate::train::rollout::pairs::PairSelection;
use crate::train::rollout::{Node, NodeSample};
use crate::train::run::checkpoint::CheckpointPart;
use comlrl_scenario::Scenario;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::Path;

/// The checkpoint file (written with agent 0's files).
pub const CHECKPOINT_FILE: &str = "madpo_iter_state.json";

/// The most a checkpoint's state file may hold (token ids; far below this).
const FILE_CAP: u64 = 1 << 34;

/// What the checkpoint keeps.
#[derive(Serialize, Deserialize)]
struct Saved {
    set: PreferenceSet,
    shards: Vec<Range<usize>>,
    iteration: usize,
    rng: ChaCha8Rng,
}

/// Iterative MADPO with its history of rounds.
pub struct MadpoIter {
    madpo: Madpo,
    agents: usize,
    comparators: Comparators,
    selection: PairSelection,
    limit: Option<usize>,
    replay: Replay,
    /// DPO passes over a round's pairs.
    passes: usize,
    /// Each finished round's range of `madpo.set.pairs`.
    shards: Vec<Range<usize>>,
    /// Rounds finished (trained).
    iteration: usize,
}

impl MadpoIter {
    /// Iterative MADPO as `s.preference` sets it up, with its comparator
    /// (`Comparators::new`). `agents` are the policies as loaded.
    pub fn new(s: &Scenario, agents: &[Option<Policy>]) -> Result<Self> {
        let p = &s.preference;
        Ok(MadpoIter {
            madpo: Madpo::new(s),
            agents: s.agents.len(),
            comparators: Comparators::new(s, agents)?,
            selection: p.pair_selection,
            limit: p.pairs_per_sample,
            replay: Replay {
                mode: p.replay_mode,
                k: p.replay_k,
                lambda: p.replay_lambda,
                sample_size: p.replay_sample_size,
            },
            passes: s.trainer.num_train_epochs,
            shards: Vec::new(),
            iteration: 0,
        })
    }

    /// Where this round's pairs start in the set.
    fn round_start(&self) -> usize {
        self.shards.last().map_or(0, |r| r.end)
    }
}

impl Algorithm for MadpoIter {
    fn name(&self) -> &'static str {
        "madpo_iter"
    }

    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        Ok(root.into_reward_samples())
    }

    /// The passes over the round's pairs as `replay` will size them.
    fn steps_per_round(&self) -> usize {
        let start = self.round_start();
        let current = self.madpo.set.pairs.len().saturating_sub(start);
        let mut sizes: Vec<usize> = self.shards.iter().map(|r| r.len()).collect();
        sizes.push(current);
        let n = match replay::draw(&self.replay, &sizes) {
            replay::Draw::Current => current,
            replay::Draw::Sample { sample_size, .. } => sample_size,
        };
        self.passes * n.div_ceil(self.madpo.batch)
    }

    fn comparison(&self) -> Option<Comparison<'_>> {
        Some(self.comparators.comparison())
    }

    fn collect(&mut self, _prompts: &[String], samples: &[NodeSample]) -> Result<()> {
        for node in samples.iter().filter(|n| n.turn == 0) {
            self.madpo.set.add_compared(
                node,
                self.comparators.current,
                self.selection,
                self.limit,
                &mut self.madpo.rng,
            )?;
        }
        Ok(())
    }

    fn update(
        &mut self,
        mut round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        let team = round.team();
        let learners = super::preference_learners(&mut round, buffer, "madpo_iter")?;
        let start = self.round_start();
        let generated = self.madpo.set.pairs.len() - start;
        self.shards.push(start..self.madpo.set.pairs.len());
        let pairs = replay::select(
            &self.replay,
            &self.madpo.set.pairs,
            &self.shards,
            &mut self.madpo.rng,
        );
        for _ in 0..self.passes {
            self.madpo.train_pass(learners, team, &pairs)?;
        }
        // The window reports an algorithm's metric as its mean over the agent's steps (a
        // round's window holds that round's steps alone): these are per round.
        let steps = (self.passes * pairs.len().div_ceil(self.madpo.batch)).max(1) as f64;
        for l in learners.iter_mut() {
            l.record("iter_round", (self.iteration + 1) as f64 * steps);
            l.record("iter_round_pairs", generated as f64 * steps);
            l.record("iter_train_pairs", pairs.len() as f64 * steps);
        }
        self.iteration += 1;
        self.comparators.round_done(
            self.iteration - 1,
            learners.iter().map(|l| (l.index(), l.policy())),
        )?;
        Ok(round.finish())
    }
}

impl CheckpointPart for MadpoIter {
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
            set: self.madpo.set.clone(),
            shards: self.shards.clone(),
            iteration: self.iteration,
            rng: self.madpo.rng.clone(),
        };
        let text = serde_json::to_string(&saved)
            .map_err(|e| Error::serialize("the MADPOIter state", e))?;
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
            .map_err(|e| Error::checkpoint_by(&path, "not a MADPOIter state", e))?;
        check_round_shards(&path, &saved.shards, saved.iteration, saved.set.pairs.len())?;
        super::check_set(&saved.set, self.agents, &path)?;
        self.madpo.set = saved.set;
        self.madpo.rng = saved.rng;
        self.shards = saved.shards;
        self.iteration = saved.iteration;
        self.comparators.load_history(self.iteration)
    }
}
