//! The preference pairs of MADPO and MARLHF (CoMLRL 1.4.3
//! `MADPOTrainer._select_preference_pair_indices`, which `MARLHFTrainer` inherits): of a
//! prompt's K joint candidates (candidate i = every agent's i-th answer, `joint_mode: aligned`)
//! with one joint reward each, every ordered (winner, loser) with a positive reward gap, then
//! `pair_selection`:
//!
//! - `reward_gap`: the `pairs_per_sample` largest gaps; equal gaps keep the order the pairs were
//!   listed in (winner, then loser, ascending), as Python's stable sort does;
//! - `all`: every pair, by (winner, loser);
//! - `random`: a uniform shuffle, then the first `pairs_per_sample` (CoMLRL shuffles with
//!   Python's `random`; this draws from the run's seeded generator, so the same seed gives the
//!   same pairs here, not CoMLRL's).
//!
//! Gaps are computed in f64 from the f32 rewards (exact), so a tie is a true tie.
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

pub use comlrl_scenario::PairSelection;

/// One selected pair of a prompt's joint candidates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairIndex {
    /// The preferred candidate (higher joint reward).
    pub winner: usize,
    /// The other one.
    pub loser: usize,
    /// reward(winner) − reward(loser), > 0.
    pub gap: f64,
}

/// The pairs of one prompt's `rewards` that `selection` keeps (`limit`: at most this many,
/// `None` for every one; `all` ignores it). At most K·(K−1)/2 pairs have a positive gap, so the
/// list is bounded by the candidate count, which the scenario bounds.
pub fn select_pairs(
    rewards: &[f32],
    selection: PairSelection,
    limit: Option<usize>,
    rng: &mut impl Rng,
) -> Vec<PairIndex> {
    let mut pairs = Vec::new();
    for (i, &ri) in rewards.iter().enumerate() {
        for (j, &rj) in rewards.iter().enumerate() {
            let gap = ri as f64 - rj as f64;
            if i != j && gap > 0.0 {
                pairs.push(PairIndex {
                    winner: i,
                    loser: j,
                    gap,
                });
            }
        }
    }
    match selection {
        // Listed by (winner, loser) already.
        PairSelection::All => return pairs,
        // Stable: equal gaps keep their listed order.
        PairSelection::RewardGap => pairs.sort_by(|a, b| b.gap.total_cmp(&a.gap)),
        PairSelection::Random => pairs.shuffle(rng),
        // Only iterative rounds have a comparator (the scenario refuses it elsewhere); over one
        // policy's candidates it ranks as `reward_gap`.
        PairSelection::ComparatorReward => pairs.sort_by(|a, b| b.gap.total_cmp(&a.gap)),
    }
    if let Some(n) = limit {
        pairs.truncate(n);
    }
    pairs
}

/// One pair of an iterative round (CoMLRL 1.4.3 `MADPOIterTrainer._select_policy_comparison_pairs`):
/// the current policy's candidate `index` against the comparator's candidate `index`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ComparedPair {
    /// The candidate index both sides share.
    pub index: usize,
    /// The current policy's candidate won (else the comparator's).
    pub current_wins: bool,
    /// |reward(current) − reward(comparator)|, > 0.
    pub gap: f64,
    /// The comparator candidate's reward.
    pub comparator_reward: f64,
}

/// The pairs of one prompt of an iterative round: for each index i < min(K, K'), the current
/// policy's candidate i against the comparator's candidate i when their rewards differ; then
/// `selection`: `comparator_reward` the highest comparator rewards first (equal ones by the
/// larger gap), `reward_gap` the largest gaps first, `all` by index, `random` shuffled from
/// `rng`; equal keys keep index order (Python's stable sort, also with `reverse=True`); at most
/// `limit` but under `all`. Rewards are compared in f64 from the f32 rewards.
pub fn select_compared_pairs(
    current: &[f32],
    comparator: &[f32],
    selection: PairSelection,
    limit: Option<usize>,
    rng: &mut impl Rng,
) -> Vec<ComparedPair> {
    let mut pairs: Vec<ComparedPair> = current
        .iter()
        .zip(comparator)
        .enumerate()
        .filter_map(|(index, (&c, &p))| {
            let gap = c as f64 - p as f64;
            (gap != 0.0).then_some(ComparedPair {
                index,
                current_wins: gap > 0.0,
                gap: gap.abs(),
                comparator_reward: p as f64,
            })
        })
        .collect();
    match selection {
        PairSelection::All => return pairs,
        PairSelection::Random => pairs.shuffle(rng),
        PairSelection::RewardGap => pairs.sort_by(|a, b| b.gap.total_cmp(&a.gap)),
        PairSelection::ComparatorReward => pairs.sort_by(|a, b| {
            b.comparator_reward
                .total_cmp(&a.comparator_reward)
                .then(b.gap.total_cmp(&a.gap))
        }),
    }
    if let Some(n) = limit {
        pairs.truncate(n);
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn gaps_ties_and_limits() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let r = [0.5, 1.0, 0.0, 1.0];
        let idx = |p: Vec<PairIndex>| -> Vec<(usize, usize)> {
            p.iter().map(|p| (p.winner, p.loser)).collect()
        };
        // Equal rewards (1 and 3) make no pair; equal gaps keep the listed order.
        let all = select_pairs(&r, PairSelection::All, None, &mut rng);
        assert_eq!(idx(all), [(0, 2), (1, 0), (1, 2), (3, 0), (3, 2)]);
        let gap = select_pairs(&r, PairSelection::RewardGap, Some(3), &mut rng);
        // Gaps 1.0, 1.0, then the three of 0.5 in listed order: (0, 2) first.
        assert_eq!(idx(gap), [(1, 2), (3, 2), (0, 2)]);
        let rand = select_pairs(&r, PairSelection::Random, Some(3), &mut rng);
        assert_eq!(rand.len(), 3);
        assert!(rand.iter().all(|p| r[p.winner] > r[p.loser]));
        // No positive gap, no pair.
        assert!(select_pairs(&[1.0, 1.0], PairSelection::All, None, &mut rng).is_empty());
    }
}
