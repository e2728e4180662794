//! Which pairs a round of an iterative preference trainer trains on (CoMLRL 1.4.3
//! `MADPOIterTrainer._select_iteration_preference_pairs`, which `MARLHFIterTrainer` inherits): every round's pairs are kept as a
//! shard (its range of the preference set), and `replay_mode` picks from them.
//!
//! - `current`: the round's own pairs, in order (the pass shuffles them);
//! - `nearest_k`: `sample_size` pairs from the last `replay_k` shards (this round's included);
//! - `all_history`: from every shard;
//! - `lambda_decay`: from every shard, shard of age a (0: this round's) weighted
//!   (1−λ)·λ^a, normalised (λ = 1: all alike).
//!
//! Sampling as CoMLRL's `_sample_replay_preferences`: shards with no pair are left out; each of
//! the `sample_size` draws picks a shard by weight; each shard then gives its count of pairs
//! without replacement (whole shuffled copies first when the count exceeds it); all of them
//! shuffled. CoMLRL draws from Python's `random`, this from the run's seeded generator: the
//! weights, the shards and the counts' rule are CoMLRL's, the draws are not.
use comlrl_scenario::ReplayMode;
use rand::seq::SliceRandom;
use rand::Rng;
use std::ops::Range;

/// A round's replay settings (`preference.replay_*`).
#[derive(Debug, Clone, Copy)]
pub struct Replay {
    /// `replay_mode`.
    pub mode: ReplayMode,
    /// `replay_k` (required by `nearest_k`).
    pub k: Option<usize>,
    /// `replay_lambda` (required by `lambda_decay`).
    pub lambda: Option<f64>,
    /// `replay_sample_size`.
    pub sample_size: Option<usize>,
}

/// `lambda_decay`'s weights of `n` shards, oldest first (CoMLRL `_lambda_decay_weights`).
pub fn lambda_decay_weights(n: usize, lambda: f64) -> Vec<f64> {
    if n == 0 {
        return Vec::new();
    }
    if lambda == 1.0 {
        return vec![1.0 / n as f64; n];
    }
    let mut newest_first: Vec<f64> = (0..n)
        .map(|age| (1.0 - lambda) * lambda.powi(age as i32))
        .collect();
    let mut norm: f64 = newest_first.iter().sum();
    if norm <= 0.0 {
        newest_first = std::iter::once(1.0)
            .chain(std::iter::repeat_n(0.0, n - 1))
            .collect();
        norm = 1.0;
    }
    newest_first.iter().rev().map(|w| w / norm).collect()
}

/// Pairs a replaying round draws (CoMLRL `_replay_sample_size`): `replay_sample_size`, else the
/// round's own count, else the latest shard's that has any.
pub fn sample_size(explicit: Option<usize>, current: usize, shard_sizes: &[usize]) -> usize {
    explicit.unwrap_or_else(|| match current {
        0 => shard_sizes
            .iter()
            .rev()
            .copied()
            .find(|&n| n > 0)
            .unwrap_or(0),
        n => n,
    })
}

/// What a round draws (CoMLRL's decision before its draws).
#[derive(Debug, Clone, PartialEq)]
pub enum Draw {
    /// `current`: the round's own pairs, as they are.
    Current,
    /// `sample_size` pairs from the rounds `shards` (0-based round indices, oldest first; only
    /// rounds with pairs: CoMLRL keeps no shard for a round without), chosen by `weights`
    /// (`None`: alike).
    Sample {
        /// The rounds drawn from.
        shards: Vec<usize>,
        /// Their weights, in that order (`None`: alike).
        weights: Option<Vec<f64>>,
        /// Pairs drawn.
        sample_size: usize,
    },
}

/// What a round draws given every round's pair count (`rounds`, this round's last).
pub fn draw(replay: &Replay, rounds: &[usize]) -> Draw {
    if replay.mode == ReplayMode::Current {
        return Draw::Current;
    }
    let current = rounds.last().copied().unwrap_or(0);
    let shards: Vec<usize> = (0..rounds.len()).filter(|&i| rounds[i] > 0).collect();
    let sizes: Vec<usize> = shards.iter().map(|&i| rounds[i]).collect();
    let sample_size = sample_size(replay.sample_size, current, &sizes);
    let (shards, weights) = match replay.mode {
        ReplayMode::NearestK => {
            let k = replay.k.unwrap_or(1);
            (shards[shards.len().saturating_sub(k)..].to_vec(), None)
        }
        ReplayMode::LambdaDecay => {
            let w = lambda_decay_weights(shards.len(), replay.lambda.unwrap_or(1.0));
            (shards, Some(w))
        }
        _ => (shards, None),
    };
    Draw::Sample {
        shards,
        weights,
        sample_size,
    }
}

/// The pairs a round trains on: `rounds` are every round's range of `pairs` (this round's
/// last).
pub fn select<P: Clone>(
    replay: &Replay,
    pairs: &[P],
    rounds: &[Range<usize>],
    rng: &mut impl Rng,
) -> Vec<P> {
    let sizes: Vec<usize> = rounds.iter().map(|r| r.len()).collect();
    let (shards, weights, n) = match draw(replay, &sizes) {
        Draw::Current => {
            return rounds
                .last()
                .map(|r| pairs[r.clone()].to_vec())
                .unwrap_or_default()
        }
        Draw::Sample {
            shards,
            weights,
            sample_size,
        } => (shards, weights, sample_size),
    };
    if n == 0 || shards.is_empty() {
        return Vec::new();
    }
    let weights = weights.unwrap_or_else(|| vec![1.0; shards.len()]);
    let total: f64 = weights.iter().sum();
    let mut counts = vec![0usize; shards.len()];
    for _ in 0..n {
        // Python's `random.choices`: the first cumulative weight above u·total.
        let u = rng.random::<f64>() * total;
        let mut acc = 0.0;
        let mut pick = shards.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            acc += w;
            if u < acc {
                pick = i;
                break;
            }
        }
        counts[pick] += 1;
    }
    let mut out = Vec::with_capacity(n);
    for (&round, count) in shards.iter().zip(counts) {
        let shard = &pairs[rounds[round].clone()];
        let mut left = count;
        while left > 0 {
            let mut copy = shard.to_vec();
            copy.shuffle(rng);
            copy.truncate(left);
            left -= copy.len();
            out.extend(copy);
        }
    }
    out.shuffle(rng);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[derive(Debug, Clone, PartialEq)]
    struct Pair {
        entry: usize,
    }

    fn pair(entry: usize) -> Pair {
        Pair { entry }
    }

    #[test]
    fn draws_come_from_the_chosen_shards() {
        let pairs: Vec<Pair> = (0..9).map(pair).collect();
        // Three rounds: 4 pairs, none, 5 pairs.
        let shards = [0..4, 4..4, 4..9];
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let current = Replay {
            mode: ReplayMode::Current,
            k: None,
            lambda: None,
            sample_size: None,
        };
        assert_eq!(select(&current, &pairs, &shards, &mut rng), pairs[4..9]);
        // nearest_k 2: the empty round is no shard, so the first and the last; 5 draws (the
        // round's count).
        let near = Replay {
            mode: ReplayMode::NearestK,
            k: Some(2),
            ..current
        };
        let got = select(&near, &pairs, &shards, &mut rng);
        assert_eq!(got.len(), 5);
        let near1 = Replay { k: Some(1), ..near };
        let mut got: Vec<usize> = select(&near1, &pairs, &shards, &mut rng)
            .iter()
            .map(|p| p.entry)
            .collect();
        got.sort();
        // Without replacement from the last round alone.
        assert_eq!(got, [4, 5, 6, 7, 8]);
        // More draws than a shard holds: whole copies first.
        let all = Replay {
            mode: ReplayMode::AllHistory,
            sample_size: Some(40),
            ..current
        };
        let got = select(&all, &pairs, &shards, &mut rng);
        assert_eq!(got.len(), 40);
        // λ = 0 puts every weight on the newest round.
        let lam = Replay {
            mode: ReplayMode::LambdaDecay,
            lambda: Some(0.0),
            sample_size: Some(12),
            ..current
        };
        assert!(select(&lam, &pairs, &shards, &mut rng)
            .iter()
            .all(|p| p.entry >= 4));
    }
}
