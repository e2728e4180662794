//! Reward throughput measurement (`comlrl bench`): score a deterministic synthetic batch of
//! joint samples and report joint samples per second.
use crate::{JointSample, RewardError, RewardFn};
use serde::Serialize;
use std::time::Instant;

/// One throughput measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchResult {
    /// The reward's name.
    pub name: String,
    /// Joint samples scored in the timed run.
    pub samples: usize,
    /// Wall-clock seconds of the timed run.
    pub seconds: f64,
    /// `samples / seconds`.
    pub samples_per_s: f64,
}

/// `n` deterministic joint samples of `agents` completions each: mixed ASCII and non-ASCII
/// text (`é`, `日本`, emoji) of 0 to ~600 characters, some empty.
pub fn synthetic_batch(n: usize, agents: usize) -> Vec<JointSample> {
    const PIECES: [&str; 6] = ["the quick ", "brown fox ", "é", "日本", "🙂", "jumps over "];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    (0..n)
        .map(|i| {
            let completions = (0..agents)
                .map(|_| {
                    let pieces = next() % 60;
                    (0..pieces)
                        .map(|_| PIECES[next() % PIECES.len()])
                        .collect::<String>()
                })
                .collect();
            JointSample::new(format!("Write a story #{i}:"), completions)
        })
        .collect()
}

/// Score `batch` once to warm up (first 64 samples), then time one call over the whole batch.
pub fn throughput_on(
    reward: &dyn RewardFn,
    batch: &[JointSample],
) -> Result<BenchResult, RewardError> {
    reward.score(&batch[..batch.len().min(64)])?;
    let start = Instant::now();
    let scores = reward.score(batch)?;
    let seconds = start.elapsed().as_secs_f64();
    debug_assert_eq!(scores.len(), batch.len());
    Ok(BenchResult {
        name: reward.name().to_string(),
        samples: batch.len(),
        seconds,
        samples_per_s: if seconds > 0.0 {
            batch.len() as f64 / seconds
        } else {
            f64::INFINITY
        },
    })
}

/// Throughput of `reward` on [`synthetic_batch`]`(n_samples, 2)`.
pub fn throughput(reward: &dyn RewardFn, n_samples: usize) -> Result<BenchResult, RewardError> {
    throughput_on(reward, &synthetic_batch(n_samples, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Len;
    impl RewardFn for Len {
        fn name(&self) -> &str {
            "len"
        }
        fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
            Ok(batch
                .iter()
                .map(|s| s.completions[0].chars().count() as f32)
                .collect())
        }
    }

    #[test]
    fn synthetic_is_deterministic_and_measures() {
        let a = synthetic_batch(50, 2);
        assert_eq!(a, synthetic_batch(50, 2));
        assert!(a
            .iter()
            .any(|s| s.completions[0].len() != s.completions[0].chars().count()));
        let r = throughput(&Len, 1000).expect("bench");
        assert_eq!((r.name.as_str(), r.samples), ("len", 1000));
        assert!(r.samples_per_s > 0.0);
    }
}
