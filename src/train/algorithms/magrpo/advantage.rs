//! Group-relative advantages: a baseline per prompt group (mean, raw, max, leave-one-out) and
//! optional normalisation, computed in f32 in the same order of operations as CoMLRL/torch.
//! Normalisation re-centres a group on its mean and divides by a spread: the group's own
//! (CoMLRL, TRL `scale_rewards: group`), one taken over every return of the rollout buffer
//! (TRL `batch`: [`batch_spread`], applied by the update with [`rescale`]), or none (TRL
//! `none`); the spread is the population standard deviation floored at 1e-6 (CoMLRL) or the
//! sample one plus 1e-4 (TRL's `nanstd(x) + 1e-4`).
pub use comlrl_scenario::{AdvantageScale, AdvantageStd};
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

/// Whether and how advantages are normalised (`trainer.advantage_normalization`,
/// `advantage_scale`, `advantage_std`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Normalization {
    /// Re-centre each group and divide by the spread below; `false` leaves the baseline's
    /// values as they are.
    pub on: bool,
    /// Over which returns the spread is taken.
    pub scale: AdvantageScale,
    /// Which standard deviation, with its epsilon.
    pub std: AdvantageStd,
}

impl Normalization {
    /// CoMLRL's: the group's population standard deviation, floored at 1e-6 (`on`), or none.
    pub fn comlrl(on: bool) -> Self {
        Normalization {
            on,
            scale: AdvantageScale::Group,
            std: AdvantageStd::Population,
        }
    }

    /// Whether the update divides the buffer's advantages by one spread ([`batch_spread`]).
    pub fn per_batch(&self) -> bool {
        self.on && self.scale == AdvantageScale::Batch
    }
}

/// Advantages of one group of K returns, CoMLRL's normalisation when `normalize`.
pub fn advantages(returns: &[f32], baseline: Baseline, normalize: bool) -> Vec<f32> {
    advantages_with(returns, baseline, Normalization::comlrl(normalize))
}

/// Advantages of one group of K returns. With `norm.scale` `batch` the group is only
/// re-centred here: the update divides the whole buffer by [`batch_spread`].
pub fn advantages_with(returns: &[f32], baseline: Baseline, norm: Normalization) -> Vec<f32> {
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
    if norm.on {
        let m = a.iter().sum::<f32>() / kf;
        match norm.scale {
            AdvantageScale::Group => {
                let std = spread(&a, m, norm.std);
                a.iter_mut().for_each(|x| *x = (*x - m) / std);
            }
            AdvantageScale::Batch | AdvantageScale::None => {
                a.iter_mut().for_each(|x| *x -= m);
            }
        }
    }
    a
}

/// The divisor of `x` (mean `m`): √(Σ(x − m)²/n) floored at 1e-6, or √(Σ(x − m)²/(n − 1)) +
/// 1e-4 (torch's `nanstd`: the population variance times n/(n − 1)).
fn spread(x: &[f32], m: f32, std: AdvantageStd) -> f32 {
    let n = x.len() as f32;
    let var = x.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / n;
    match std {
        AdvantageStd::Population => var.sqrt().max(1e-6),
        // One value has no sample spread; its re-centred advantage is 0 whatever divides it.
        AdvantageStd::Sample if x.len() < 2 => 1.0,
        AdvantageStd::Sample => (var * (n / (n - 1.0))).sqrt() + 1e-4,
    }
}

/// The spread (as [`Normalization::std`] says) of every return of an agent's rollout buffer,
/// the groups' returns pooled: TRL's `scale_rewards: batch`. A buffer of one return has no
/// sample spread; it gets 1 (its advantage is 0 anyway after re-centring).
pub fn batch_spread<'a>(groups: impl IntoIterator<Item = &'a [f32]>, std: AdvantageStd) -> f32 {
    let all: Vec<f32> = groups.into_iter().flatten().copied().collect();
    if all.is_empty() || (all.len() < 2 && std == AdvantageStd::Sample) {
        return 1.0;
    }
    let m = all.iter().sum::<f32>() / all.len() as f32;
    spread(&all, m, std)
}

/// Divides re-centred advantages by the buffer's spread.
pub fn rescale(advantages: &mut [f32], spread: f32) {
    advantages.iter_mut().for_each(|x| *x /= spread);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_comlrl_bit_for_bit() {
        let r = [0.5f32, 2.0, -1.25, 3.0];
        for base in [Baseline::Mean, Baseline::Raw, Baseline::Max, Baseline::Rloo] {
            for on in [false, true] {
                let with = advantages_with(&r, base, Normalization::comlrl(on));
                assert_eq!(advantages(&r, base, on), with);
            }
        }
    }

    #[test]
    fn sample_spread_is_bessel_corrected_plus_epsilon() {
        let r = [1.0f32, 2.0, 4.0, 5.0];
        let norm = Normalization {
            on: true,
            scale: AdvantageScale::Group,
            std: AdvantageStd::Sample,
        };
        let a = advantages_with(&r, Baseline::Mean, norm);
        // mean 3, Σ(x − m)² = 10, sample std √(10/3).
        let std = (10.0f64 / 3.0).sqrt() + 1e-4;
        for (got, x) in a.iter().zip(r) {
            assert!((*got as f64 - (x as f64 - 3.0) / std).abs() < 1e-6, "{a:?}");
        }
    }

    #[test]
    fn none_only_recentres_and_batch_divides_by_the_pooled_spread() {
        let g1 = [1.0f32, 3.0];
        let g2 = [10.0f32, 14.0];
        let mut norm = Normalization {
            on: true,
            scale: AdvantageScale::None,
            std: AdvantageStd::Sample,
        };
        assert_eq!(advantages_with(&g1, Baseline::Raw, norm), vec![-1.0, 1.0]);
        norm.scale = AdvantageScale::Batch;
        let mut a = advantages_with(&g2, Baseline::Mean, norm);
        assert_eq!(a, vec![-2.0, 2.0]);
        let s = batch_spread([&g1[..], &g2[..]], AdvantageStd::Sample);
        // Pooled: mean 7, Σ(x − m)² = 36 + 16 + 9 + 49 = 110, sample std √(110/3).
        assert!((s as f64 - ((110.0f64 / 3.0).sqrt() + 1e-4)).abs() < 1e-5);
        rescale(&mut a, s);
        assert!((a[1] - 2.0 / s).abs() < 1e-7);
        let p = batch_spread([&g1[..], &g2[..]], AdvantageStd::Population);
        assert!((p as f64 - (110.0f64 / 4.0).sqrt()).abs() < 1e-5);
    }
}
