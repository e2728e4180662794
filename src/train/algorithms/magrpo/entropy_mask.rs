//! `trainer.top_entropy_quantile` (TRL's `top_entropy_quantile`, ρ of arXiv 2506.01939): only
//! the tokens whose next-token entropy is at least the (1 − ρ) quantile of the mini-batch's
//! counted completion tokens keep their loss, as TRL's `get_high_entropy_mask` (torch's
//! `quantile` with linear interpolation over the tokens its `mask` counts: truncated
//! completions left out under `mask_truncated_completions`, every other completion counted
//! whatever its advantage). The mask multiplies each token's loss before the aggregation,
//! whose normaliser stays the counted tokens (TRL). The threshold spans the whole mini-batch,
//! so the entropies are scored in a forward of their own before the first backward.
use crate::error::Result;
use crate::model::grad::logprob::completion_logprobs_entropies;
use crate::model::{Mode, Policy, ScoreLayout};
use crate::train::rollout::AgentRollout;

/// Which tokens keep their loss: `[sample][completion][token]` (empty for a completion the
/// loss does not count).
#[derive(Debug, Clone, PartialEq)]
pub struct EntropyMask(pub Vec<Vec<Vec<bool>>>);

impl EntropyMask {
    /// Whether token `t` of completion `j` of sample `s` keeps its loss.
    pub fn keeps(&self, s: usize, j: usize, t: usize) -> bool {
        self.0[s][j].get(t).copied().unwrap_or(false)
    }
}

/// The entropy of every token of every completion of `samples` that `counted(sample,
/// completion)` says the loss counts (`[sample][completion][token]`, empty where not counted),
/// scored `chunk` completions at a time (0: a sample's at once) with the logits times
/// `logit_scale`.
pub fn token_entropies(
    policy: &Policy,
    samples: &[&AgentRollout],
    counted: impl Fn(usize, usize) -> bool,
    chunk: usize,
    logit_scale: f64,
) -> Result<Vec<Vec<Vec<f32>>>> {
    let mut out = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let mut per = vec![Vec::new(); s.completions.len()];
        let rows: Vec<usize> = (0..s.completions.len())
            .filter(|&j| counted(i, j))
            .collect();
        let per_pass = if chunk == 0 { rows.len().max(1) } else { chunk };
        for part in rows.chunks(per_pass) {
            let prompts: Vec<&[u32]> = vec![&s.prompt_ids; part.len()];
            let comps: Vec<&[u32]> = part.iter().map(|&j| s.completions[j].as_slice()).collect();
            let layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id)?;
            let c = layout.completion_width;
            let (_, ent) =
                completion_logprobs_entropies(&policy.model, &layout, Mode::Infer, logit_scale)?;
            for (r, &j) in part.iter().enumerate() {
                per[j] = ent[r * c..r * c + s.completions[j].len()].to_vec();
            }
        }
        out.push(per);
    }
    Ok(out)
}

/// torch's `quantile(values, q)` (linear interpolation between the closest ranks); `None`
/// without values.
pub fn quantile(values: &[f32], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// The mask that keeps the tokens whose entropy is at least the (1 − `keep`) quantile of all
/// the entropies given (`keep` = ρ = `top_entropy_quantile`).
pub fn high_entropy_mask(entropies: &[Vec<Vec<f32>>], keep: f64) -> EntropyMask {
    let all: Vec<f32> = entropies.iter().flatten().flatten().copied().collect();
    let threshold = quantile(&all, 1.0 - keep);
    EntropyMask(
        entropies
            .iter()
            .map(|s| {
                s.iter()
                    .map(|c| {
                        c.iter()
                            .map(|&h| threshold.is_some_and(|t| h as f64 >= t))
                            .collect()
                    })
                    .collect()
            })
            .collect(),
    )
}

/// [`high_entropy_mask`] of the mini-batch `samples`, its entropies scored first, and the mean
/// entropy of the tokens it keeps (`None` if none): what an adaptive entropy bonus acting on
/// those tokens measures.
pub(super) fn mini_batch_mask(
    policy: &Policy,
    samples: &[&AgentRollout],
    counted: impl Fn(usize, usize) -> bool,
    keep: f64,
    chunk: usize,
    logit_scale: f64,
) -> Result<(EntropyMask, Option<f64>)> {
    let ent = token_entropies(policy, samples, counted, chunk, logit_scale)?;
    let mask = high_entropy_mask(&ent, keep);
    let (mut sum, mut n) = (0f64, 0usize);
    for (s, m) in ent.iter().zip(&mask.0) {
        for (c, k) in s.iter().zip(m) {
            for (&h, &keep) in c.iter().zip(k) {
                if keep {
                    sum += h as f64;
                    n += 1;
                }
            }
        }
    }
    Ok((mask, (n > 0).then(|| sum / n as f64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch.quantile's linear interpolation, and TRL's ≥ threshold.
    #[test]
    fn quantile_interpolates_and_the_mask_keeps_the_top() {
        let v = [3.0f32, 1.0, 4.0, 1.5, 9.0];
        assert_eq!(quantile(&v, 0.5), Some(3.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(9.0));
        // rank 0.3 · 4 = 1.2: 1.5 + 0.2 · (3 − 1.5).
        assert!((quantile(&v, 0.3).unwrap() - 1.8).abs() < 1e-12);
        assert_eq!(quantile(&[], 0.5), None);
        let ent = vec![vec![vec![3.0, 1.0], vec![]], vec![vec![4.0, 1.5, 9.0]]];
        let m = high_entropy_mask(&ent, 0.5);
        assert_eq!(
            m.0,
            vec![
                vec![vec![true, false], vec![]],
                vec![vec![true, false, true]]
            ]
        );
        // ρ = 0 keeps only the highest; ρ = 1 keeps every token.
        let top = high_entropy_mask(&ent, 0.0);
        assert_eq!(top.0.iter().flatten().flatten().filter(|&&k| k).count(), 1);
        let all = high_entropy_mask(&ent, 1.0);
        assert!(all.0.iter().flatten().flatten().all(|&k| k));
    }
}
