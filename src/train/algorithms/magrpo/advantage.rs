//! Group-relative advantages: a baseline per prompt group (mean, raw, max, leave-one-out) and
//! optional normalisation, computed in f32 in the same order of operations as CoMLRL/torch.
use serde::{Deserialize, Serialize};

/// How a group's rewards become advantages before normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Baseline {
    /// A = R − mean(R) (CoMLRL's default).
    Mean,
    /// A = R.
    Raw,
    /// A = R − max(R).
    Max,
    /// Leave-one-out: A = (K·R − ΣR)/(K − 1).
    Rloo,
}

/// Advantages of one group of K returns.
pub fn advantages(returns: &[f32], baseline: Baseline, normalize: bool) -> Vec<f32> {
    let k = returns.len();
    if k == 0 {
        return vec![];
    }
    let kf = k as f32;
    let sum: f32 = returns.iter().sum();
    let mean = sum / kf;
    let mut a: Vec<f32> = match baseline {
        Baseline::Mean => returns.iter().map(|r| r - mean).collect(),
        Baseline::Raw => returns.to_vec(),
        Baseline::Max => {
            let max = returns.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            returns.iter().map(|r| r - max).collect()
        }
        Baseline::Rloo => {
            if k < 2 {
                vec![0.0; k]
            } else {
                returns
                    .iter()
                    .map(|r| (kf * r - sum) / (kf - 1.0))
                    .collect()
            }
        }
    };
    if normalize {
        let m = a.iter().sum::<f32>() / kf;
        let var = a.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / kf;
        let std = var.sqrt().max(1e-6);
        a.iter_mut().for_each(|x| *x = (*x - m) / std);
    }
    a
}
