//! The loss with per-token terms (`loss::TokenTerms`): each counted token's weight is its
//! sequence's weight where the high-entropy mask keeps it (`entropy_mask`), plus, with
//! `trainer.kl_in_loss` β, the gradient of β · agg_i · k3_t, the reference KL of the token
//! added to its loss before the aggregation (TRL's `beta` term, without its bias correction):
//! k3 = exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1, d k3 / d ℓ = 1 − exp(ℓ_ref − ℓ), agg_i the weight
//! `loss_aggregation` gives each token of completion i.
use super::entropy_mask::EntropyMask;
use crate::error::Result;
use crate::model::grad::token_weights::TokenWeights;
use crate::train::rollout::AgentRollout;
use crate::train::update::passes::SequenceLoss;
use candle_core::Tensor;
use std::sync::Mutex;

/// The per-token loss of a mini-batch.
pub(super) struct PerToken<'a> {
    pub samples: &'a [&'a AgentRollout],
    /// `[sample][completion]`: d loss / d Σ_t log π without the mask.
    pub coefs: Vec<Vec<f32>>,
    /// `[sample][completion]`: the aggregation's weight of each token (0: not counted).
    pub agg: Vec<Vec<f64>>,
    pub mask: Option<&'a EntropyMask>,
    /// β of `kl_in_loss` (0: no KL term).
    pub beta: f64,
    /// Σ k3 over each computed pass's tokens and their count, by the pass's first completion
    /// (TRL's `kl` metric: `LossGrads::pass_kl`).
    pub kl: Mutex<Vec<(usize, usize, f64, f64)>>,
}

impl SequenceLoss for PerToken<'_> {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        rows.iter().map(|&j| self.coefs[group][j]).collect()
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        let w = Tensor::from_vec(self.coefs(group, rows), rows.len(), lp.device())?
            .to_dtype(lp.dtype())?;
        Ok((lp.sum(1)? * w)?.sum_all()?)
    }

    fn tokens(&self, group: usize, rows: &[usize]) -> Option<Box<dyn TokenWeights + '_>> {
        Some(Box::new(PerTokenPass {
            loss: self,
            group,
            rows: rows.to_vec(),
        }))
    }
}

struct PerTokenPass<'a> {
    loss: &'a PerToken<'a>,
    group: usize,
    rows: Vec<usize>,
}

impl TokenWeights for PerTokenPass<'_> {
    fn weights(&self, lp: &[f32], mask: &[f32], width: usize) -> (Vec<f32>, f64) {
        let l = self.loss;
        let mut w = vec![0f32; lp.len()];
        let mut value = 0f64;
        let (mut kl_sum, mut kl_n) = (0f64, 0f64);
        for (r, &j) in self.rows.iter().enumerate() {
            let coef = l.coefs[self.group][j];
            let at = r * width;
            let n = (0..width).take_while(|&t| mask[at + t] != 0.0).count();
            for t in 0..n {
                if l.mask.is_none_or(|m| m.keeps(self.group, j, t)) {
                    w[at + t] = coef;
                    value += coef as f64 * lp[at + t] as f64;
                }
            }
            let agg = l.agg[self.group][j];
            if l.beta != 0.0 && agg != 0.0 {
                let refs = &l.samples[self.group].ref_logprobs[j];
                for t in 0..n {
                    let (g, k3) = kl_term(refs[t], lp[at + t]);
                    w[at + t] += (agg * l.beta * g) as f32;
                    value += agg * l.beta * k3;
                    kl_sum += k3;
                    kl_n += 1.0;
                }
            }
        }
        if kl_n > 0.0 {
            let first = self.rows.first().copied().unwrap_or(0);
            let mut kl = l.kl.lock().unwrap_or_else(|e| e.into_inner());
            kl.push((self.group, first, kl_sum, kl_n));
        }
        (w, value)
    }
}

/// (d k3 / d ℓ, k3) of one token: k3 = exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1.
pub(super) fn kl_term(reference: f32, lp: f32) -> (f64, f64) {
    let d = reference as f64 - lp as f64;
    let e = d.exp();
    (1.0 - e, e - d - 1.0)
}

/// An error unless every completion of `rows` has its reference log-probs, one per token.
pub(super) fn check_refs(samples: &[&AgentRollout], rows: &[Vec<usize>]) -> Result<()> {
    for (s, rows) in samples.iter().zip(rows) {
        for &j in rows {
            let n = s.ref_logprobs.get(j).map(Vec::len);
            if n != Some(s.completions[j].len()) {
                return Err(crate::Error::Config(format!(
                    "a completion of {} tokens has {} reference log-probs for `kl_in_loss` (a \
                     rollout buffer restored from a checkpoint written without the reference \
                     KL?); resume with the settings it was written with, or start the run afresh",
                    s.completions[j].len(),
                    n.unwrap_or(0)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// k3 and its derivative: 0 where the log-probs agree, the derivative against a difference
    /// quotient elsewhere.
    #[test]
    fn the_kl_term_and_its_gradient() {
        assert_eq!(kl_term(-1.5, -1.5), (0.0, 0.0));
        for (r, l) in [(-1.0f32, -2.0f32), (-3.0, -0.5)] {
            let (g, k) = kl_term(r, l);
            assert!(k > 0.0);
            let h = 1e-3f64;
            let k3 = |l: f64| {
                let d = r as f64 - l;
                d.exp() - d - 1.0
            };
            let fd = (k3(l as f64 + h) - k3(l as f64 - h)) / (2.0 * h);
            assert!((g - fd).abs() < 1e-5, "{g} vs {fd}");
        }
    }
}
