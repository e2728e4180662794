//! `trainer.entropy_coef` (TRL 1.16's `entropy_coef`): loss = policy loss − c · H̄, H̄ the mean
//! next-token entropy over the tokens the loss acts on (the counted completion tokens, times
//! the high-entropy mask when `top_entropy_quantile` is below 1), whatever `loss_aggregation`
//! (TRL does not rescale it by the policy term's normaliser). d H / d logits is
//! −p ⊙ (log p + H), seeded per position in the LM head's fused backward beside the log-probs'
//! weights (`SequenceLoss::entropy`), so the bonus costs no second head product.
//!
//! H̄'s denominator is the whole mini-batch's count of such tokens (one optimizer step's),
//! however the passes split it (`micro_batch_size`, replicas). TRL takes a mean per micro-batch
//! divided by the gradient-accumulation steps: the same when a step is one micro-batch, or
//! when its micro-batches hold equally many tokens.
use super::entropy_mask::EntropyMask;
use crate::error::Result;
use crate::model::grad::token_weights::TokenWeights;
use crate::train::rollout::AgentRollout;
use crate::train::update::passes::SequenceLoss;
use candle_core::Tensor;

/// The bonus's weight on each token's entropy: d loss / d H_t = −c / D where the loss acts on
/// token t, D the mini-batch's count of such tokens.
pub(super) struct EntropyBonus {
    /// −c / D.
    per_token: f32,
    /// `[sample][completion][token]`: whether the bonus acts on the token.
    acts: Vec<Vec<Vec<bool>>>,
}

impl EntropyBonus {
    /// The bonus of coefficient `coef` over `samples` (`None` when it is off: `coef` 0 and not
    /// `on`): on the tokens of the completions `counted(sample, completion)` says the loss
    /// counts, where `mask` (the high-entropy mask) keeps them. Under adaptive control it is
    /// `on` at a coefficient of 0 too: its seeds are then 0 (the kernel runs as without), and
    /// its tokens' entropy is still computed and measured.
    pub fn new(
        samples: &[&AgentRollout],
        counted: impl Fn(usize, usize) -> bool,
        mask: Option<&EntropyMask>,
        coef: f64,
        on: bool,
    ) -> Option<Self> {
        if coef == 0.0 && !on {
            return None;
        }
        let acts: Vec<Vec<Vec<bool>>> = samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.completions
                    .iter()
                    .enumerate()
                    .map(|(j, c)| {
                        (0..c.len())
                            .map(|t| counted(i, j) && mask.is_none_or(|m| m.keeps(i, j, t)))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let tokens = acts.iter().flatten().flatten().filter(|&&a| a).count();
        // TRL: effective_mask.sum().clamp(min=1).
        let per_token = (-coef / tokens.max(1) as f64) as f32;
        Some(EntropyBonus { per_token, acts })
    }

    /// The seeds of one pass: `rows` of sample `group`, `width` positions a row.
    fn seeds(&self, group: usize, rows: &[usize], width: usize) -> Vec<f32> {
        let mut w = vec![0f32; rows.len() * width];
        for (r, &j) in rows.iter().enumerate() {
            for (t, &on) in self.acts[group][j].iter().enumerate().take(width) {
                if on {
                    w[r * width + t] = self.per_token;
                }
            }
        }
        w
    }
}

/// A loss with the entropy bonus beside it: the policy loss's seeds and value unchanged.
pub(super) struct WithBonus<'a> {
    pub policy: &'a dyn SequenceLoss,
    pub bonus: &'a EntropyBonus,
}

impl SequenceLoss for WithBonus<'_> {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        self.policy.coefs(group, rows)
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        self.policy.loss(group, rows, lp)
    }

    fn tokens(&self, group: usize, rows: &[usize]) -> Option<Box<dyn TokenWeights + '_>> {
        self.policy.tokens(group, rows)
    }

    fn entropy(&self, group: usize, rows: &[usize], width: usize) -> Option<Vec<f32>> {
        Some(self.bonus.seeds(group, rows, width))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// −c / D on the tokens the loss acts on, D counting every counted completion's tokens
    /// (kept by the mask), 0 elsewhere and at padding.
    #[test]
    fn seeds_spread_the_coefficient_over_the_acting_tokens() {
        let mut a = AgentRollout::sampled(vec![9], vec![vec![1, 2, 3], vec![4], vec![]], vec![]);
        a.advantages = vec![0.0, 1.0, 0.0];
        let samples = [&a];
        let flags = [true, true, false];
        let counted = |_: usize, j: usize| flags[j];
        let b = EntropyBonus::new(&samples, counted, None, 0.02, false).unwrap();
        let w = b.seeds(0, &[0, 1], 4);
        let h = -0.02f32 / 4.0;
        assert_eq!(w, vec![h, h, h, 0.0, h, 0.0, 0.0, 0.0]);
        let mask = EntropyMask(vec![vec![vec![true, false, true], vec![false], vec![]]]);
        let b = EntropyBonus::new(&samples, counted, Some(&mask), 0.02, false).unwrap();
        let h = -0.02f32 / 2.0;
        assert_eq!(b.seeds(0, &[0, 1], 3), vec![h, 0.0, h, 0.0, 0.0, 0.0]);
        assert!(EntropyBonus::new(&samples, counted, None, 0.0, false).is_none());
        // On at 0 (adaptive control's closed gate): zero seeds.
        let b = EntropyBonus::new(&samples, counted, None, 0.0, true).unwrap();
        assert!(b.seeds(0, &[0, 1], 3).iter().all(|&w| w == 0.0));
    }
}
