//! MADPO's preference set: built once from the first pass over the training prompts (each
//! prompt's K aligned joint candidates and their joint rewards), trained on for every epoch,
//! and kept in checkpoints so that a resumed run never samples it again. Only the candidates a
//! selected pair uses are kept (K = 80 answers of every agent for every prompt would be most of
//! the memory otherwise).
use crate::error::{Error, Result};
use crate::train::rollout::pairs::{select_compared_pairs, select_pairs, PairSelection};
use crate::train::rollout::NodeSample;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// One agent's part of a prompt in the set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryAgent {
    /// The agent's prompt, tokenized.
    pub prompt: Vec<u32>,
    /// The candidates the prompt's pairs use (token ids as sampled, EOS included when the
    /// answer stopped there), indexed by [`Pair::winner`] / [`Pair::loser`].
    pub candidates: Vec<Vec<u32>>,
}

/// One prompt of the set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Each agent, in order.
    pub agents: Vec<EntryAgent>,
    /// The mean joint reward of all K candidates (CoMLRL's `candidate_reward_mean`).
    pub reward_mean: f64,
}

/// One preference pair: two joint candidates of one prompt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// The prompt's index in [`PreferenceSet::entries`].
    pub entry: usize,
    /// The preferred candidate's index in the entry.
    pub winner: usize,
    /// The other candidate's index in the entry.
    pub loser: usize,
    /// Joint reward of the winner.
    pub winner_reward: f32,
    /// Joint reward of the loser (below the winner's).
    pub loser_reward: f32,
}

/// The whole set, in the order the prompts were sampled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreferenceSet {
    /// The prompts.
    pub entries: Vec<Entry>,
    /// Every pair, prompt after prompt, each prompt's in selection order.
    pub pairs: Vec<Pair>,
    /// Prompts that gave no pair (every candidate's reward equal).
    pub tied_prompts: usize,
}

impl PreferenceSet {
    /// Adds the pairs of one prompt's first-turn node (aligned: candidate i = every agent's
    /// i-th completion, reward i its joint reward).
    pub fn add(
        &mut self,
        node: &NodeSample,
        selection: PairSelection,
        limit: Option<usize>,
        rng: &mut impl Rng,
    ) -> Result<()> {
        Self::check(node)?;
        let chosen: Vec<(usize, usize)> = select_pairs(&node.rewards, selection, limit, rng)
            .iter()
            .map(|p| (p.winner, p.loser))
            .collect();
        self.push(node, &chosen);
        Ok(())
    }

    /// Adds the pairs of one prompt of an iterative round: `node`'s first `current`
    /// candidates are the current policy's, the rest the comparator's (aligned, as in
    /// [`PreferenceSet::add`]); candidate i of each side pair up (`select_compared_pairs`).
    /// Returns the pairs added.
    pub fn add_compared(
        &mut self,
        node: &NodeSample,
        current: usize,
        selection: PairSelection,
        limit: Option<usize>,
        rng: &mut impl Rng,
    ) -> Result<usize> {
        Self::check(node)?;
        if current > node.rewards.len() {
            return Err(Error::Internal(format!(
                "{current} current candidates of {} in all",
                node.rewards.len()
            )));
        }
        let (mine, theirs) = node.rewards.split_at(current);
        let chosen: Vec<(usize, usize)> =
            select_compared_pairs(mine, theirs, selection, limit, rng)
                .iter()
                .map(|p| match p.current_wins {
                    true => (p.index, current + p.index),
                    false => (current + p.index, p.index),
                })
                .collect();
        self.push(node, &chosen);
        Ok(chosen.len())
    }

    /// The aligned candidates and finite rewards a set needs.
    fn check(node: &NodeSample) -> Result<()> {
        let k = node.rewards.len();
        if let Some(a) = node.agents.iter().find(|a| a.completions.len() != k) {
            return Err(Error::Internal(format!(
                "MADPO needs aligned joint candidates: {} rewards but {} completions",
                k,
                a.completions.len()
            )));
        }
        if let Some(r) = node.rewards.iter().find(|r| !r.is_finite()) {
            return Err(Error::Diverged(format!(
                "a joint reward is {r}: MADPO cannot rank candidates by it"
            )));
        }
        Ok(())
    }

    /// Adds `node` as a prompt with the `chosen` (winner, loser) pairs of its candidates (a
    /// tied prompt when there are none).
    fn push(&mut self, node: &NodeSample, chosen: &[(usize, usize)]) {
        let k = node.rewards.len();
        if chosen.is_empty() {
            self.tied_prompts += 1;
            return;
        }
        // The candidates the pairs use, renumbered in first-use order.
        let mut used: Vec<usize> = Vec::new();
        let mut slot = |c: usize| match used.iter().position(|&u| u == c) {
            Some(s) => s,
            None => {
                used.push(c);
                used.len() - 1
            }
        };
        let entry = self.entries.len();
        let pairs: Vec<Pair> = chosen
            .iter()
            .map(|&(w, l)| Pair {
                entry,
                winner: slot(w),
                loser: slot(l),
                winner_reward: node.rewards[w],
                loser_reward: node.rewards[l],
            })
            .collect();
        let agents = node
            .agents
            .iter()
            .map(|a| EntryAgent {
                prompt: a.prompt_ids.clone(),
                candidates: used.iter().map(|&c| a.completions[c].clone()).collect(),
            })
            .collect();
        let reward_mean = node.rewards.iter().map(|&r| r as f64).sum::<f64>() / k.max(1) as f64;
        self.entries.push(Entry {
            agents,
            reward_mean,
        });
        self.pairs.extend(pairs);
    }
}
