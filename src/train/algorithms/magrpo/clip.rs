//! The clipped surrogate of re-used samples (`trainer.ppo_epochs`, `importance_level`,
//! `clip_eps`, `clip_eps_high`, `clip_delta`): TRL 1.16's `_compute_loss` for its `grpo`,
//! `bnpo`, `dr_grpo`, `dapo` and `luspo` losses. Each counted token t of completion i adds
//! agg_i · −min(c1·A_i, c2·A_i), where r is the probability ratio π/π_old of the token
//! (`token`) or exp(mean_t(log π − log π_old)) of the completion (`sequence`, GSPO),
//! c2 = clip(r, 1 − ε, 1 + ε_high), c1 = r, or min(r, δ) with `clip_delta`, and agg_i the
//! weight `loss_aggregation` gives each token of i (MAGRPO's 1/(G·B), GRPO's 1/(G·B·|o_i|), …).
//! Its gradient w.r.t. log π_t is agg_i · −A_i · r · (the share of the min's gradient that
//! reaches the unclipped or clipped term, torch's: half each on a tie), computed per token from
//! the current log-probs (`model::grad::token_weights`).
//!
//! π_old: a completion computed before the round's first optimizer step is on-policy, its
//! ratio exactly 1 (TRL: the detached current log-probs), and the log-probs that pass computes
//! are kept as π_old for later passes, so a later pass compares log-probs of the same
//! precision. A completion first computed after a step compares with its sampling-time
//! log-probs (`AgentRollout::sampling_logprobs`).
use super::entropy_bonus::{EntropyBonus, WithBonus};
use super::entropy_mask::{mini_batch_mask, EntropyMask};
use super::loss::{aggregation_factors, rows_to_score, Counted, LossShape, TokenTerms};
use super::token_terms::{check_refs, kl_term};
use crate::error::Result;
use crate::model::grad::recompute::PassPlan;
use crate::model::grad::token_weights::TokenWeights;
use crate::model::Policy;
use crate::train::rollout::AgentRollout;
use crate::train::update::passes::{sequence_grads, Group, SequenceLoss};
use crate::train::update::{LossGrads, Share};
use candle_core::{Tensor, Var};
use comlrl_scenario::ImportanceLevel;
use std::sync::Mutex;

/// The ratio's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip {
    /// `token` or `sequence` (never `none` here).
    pub level: ImportanceLevel,
    /// 1 − `low` is the lower clip (`clip_eps`).
    pub low: f64,
    /// 1 + `high` is the upper clip (`clip_eps_high`, else `clip_eps`).
    pub high: f64,
    /// `clip_delta`: the unclipped term's cap.
    pub delta: Option<f64>,
}

/// One unit's (a token's or a sequence's) surrogate −min(c1·A, c2·A) at ratio `r`: its value
/// and d value / d r as torch's autograd gives it (clamp passes the gradient on its closed
/// interval; `minimum` splits it in half on a tie).
pub fn surrogate(clip: &Clip, r: f64, a: f64) -> (f64, f64) {
    let (lo, hi) = (1.0 - clip.low, 1.0 + clip.high);
    let c2 = r.clamp(lo, hi);
    let g2 = if (lo..=hi).contains(&r) { 1.0 } else { 0.0 };
    let (c1, g1) = match clip.delta {
        Some(d) => (r.min(d), if r <= d { 1.0 } else { 0.0 }),
        None => (r, 1.0),
    };
    let (x, y) = (c1 * a, c2 * a);
    let (sx, sy) = if x < y {
        (1.0, 0.0)
    } else if x > y {
        (0.0, 1.0)
    } else {
        (0.5, 0.5)
    };
    (-x.min(y), -a * (sx * g1 + sy * g2))
}

/// What a mini-batch's ratios were (TRL's `clip_ratio/*` and the ratio's mean and max).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClipStats {
    /// Units (tokens, or sequences at `sequence` level) with r < 1 − ε and A < 0.
    pub low: f64,
    /// Units with r > 1 + ε_high and A > 0.
    pub high: f64,
    /// Σ r over the computed units, and their count.
    pub ratio_sum: f64,
    /// See `ratio_sum`.
    pub units: f64,
    /// The largest r.
    pub ratio_max: f64,
    /// TRL's denominator of the clip fractions: the mini-batch's counted tokens (`token`) or
    /// its sequences (`sequence`), computed or not.
    pub denominator: f64,
}

impl ClipStats {
    /// (name, value) of each logged metric (`agent_<i>/<name>`), TRL's names for the clip
    /// fractions.
    pub fn metrics(&self) -> [(&'static str, f64); 5] {
        let d = self.denominator.max(1.0);
        [
            ("clip_ratio/low_mean", self.low / d),
            ("clip_ratio/high_mean", self.high / d),
            ("clip_ratio/region_mean", (self.low + self.high) / d),
            ("ratio_mean", self.ratio_sum / self.units.max(1.0)),
            ("ratio_max", self.ratio_max),
        ]
    }
}

/// What one mini-batch's clipped loss gives besides its gradients: the ratios' statistics and,
/// for the completions it computed on-policy, their log-probs (`[sample][completion]`, `None`
/// where not computed on-policy) to serve as π_old later.
pub struct Clipped {
    /// The mini-batch's gradients and loss (the surrogate's value).
    pub grads: LossGrads,
    /// Its ratios.
    pub stats: ClipStats,
    /// The log-probs of the completions it computed on-policy.
    pub captured: Vec<Vec<Option<Vec<f32>>>>,
}

/// π_old of one completion.
#[derive(Debug, Clone, Copy)]
pub enum Old<'a> {
    /// The policy has not stepped since sampling: the current log-probs (ratio 1).
    OnPolicy,
    /// These log-probs, one per token.
    Known(&'a [f32]),
    /// Not known: an error if the loss computes the completion.
    Missing,
}

/// The clipped loss of one mini-batch: `old[s][j]` is π_old of completion j of sample s
/// (on-policy ones' current log-probs are captured).
#[allow(clippy::too_many_arguments)]
pub fn clipped_loss_and_grads(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
    old: &[Vec<Old<'_>>],
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
    shape: LossShape,
    clip: Clip,
    agent: usize,
) -> Result<Clipped> {
    clipped_loss_and_grads_terms(
        policy,
        vars,
        samples,
        old,
        chunk,
        recompute,
        share,
        plan,
        shape,
        clip,
        agent,
        TokenTerms::NONE,
    )
}

/// [`clipped_loss_and_grads`] with the per-token `terms`: under the high-entropy mask a
/// token's surrogate counts only where the mask keeps it (TRL multiplies its per-token loss);
/// the ratio's statistics still count every token.
#[allow(clippy::too_many_arguments)]
pub fn clipped_loss_and_grads_terms(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
    old: &[Vec<Old<'_>>],
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
    shape: LossShape,
    clip: Clip,
    agent: usize,
    terms: TokenTerms,
) -> Result<Clipped> {
    let counted = Counted::new(samples, shape, policy);
    let agg = aggregation_factors(samples, shape, &counted)?;
    let scored = rows_to_score(samples, &counted, terms.keeps_zero_advantage());
    if terms.kl_in_loss != 0.0 {
        check_refs(samples, &scored)?;
    }
    let skipped = samples
        .iter()
        .zip(&scored)
        .map(|(s, rows)| s.completions.iter().filter(|c| !c.is_empty()).count() - rows.len())
        .sum();
    let denominator = match clip.level {
        ImportanceLevel::Sequence => samples.iter().map(|s| s.completions.len()).sum::<usize>(),
        _ => samples
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let counted = &counted;
                s.completions
                    .iter()
                    .enumerate()
                    .filter(move |&(j, _)| counted.get(i, j))
                    .map(|(_, c)| c.len())
            })
            .sum(),
    } as f64;
    for (i, (s, rows)) in samples.iter().zip(&scored).enumerate() {
        for &j in rows {
            match old.get(i).and_then(|o| o.get(j)) {
                Some(Old::OnPolicy) => {}
                Some(Old::Known(o)) if o.len() == s.completions[j].len() => {}
                Some(Old::Known(o)) => {
                    return Err(crate::Error::Internal(format!(
                        "{} old log-probs for a completion of {} tokens",
                        o.len(),
                        s.completions[j].len()
                    )))
                }
                Some(Old::Missing) | None => {
                    return Err(crate::Error::Config(format!(
                        "agent {}: a re-used completion has no sampling-time log-probs to \
                         compare with (a rollout buffer restored from a checkpoint written \
                         without a ratio?); resume with the settings it was written with, or \
                         start the run afresh",
                        agent
                    )))
                }
            }
        }
    }
    let groups: Vec<Group> = samples
        .iter()
        .zip(scored)
        .map(|(s, rows)| Group {
            prompt: &s.prompt_ids,
            completions: &s.completions,
            rows,
        })
        .collect();
    let (mask, kept_entropy) = if terms.masks_entropy() {
        let (m, h) = mini_batch_mask(
            policy,
            samples,
            |i, j| counted.get(i, j),
            terms.top_entropy_quantile,
            chunk,
            plan.logit_scale,
        )?;
        (Some(m), h)
    } else {
        (None, None)
    };
    let bonus = EntropyBonus::new(
        samples,
        |i, j| counted.get(i, j),
        mask.as_ref(),
        terms.entropy_coef,
        terms.entropy_on,
    );
    let loss = ClippedLoss {
        samples,
        old,
        agg,
        mask,
        beta: terms.kl_in_loss,
        kl: Default::default(),
        clip,
        stats: Mutex::new(ClipStats {
            denominator,
            ..Default::default()
        }),
        captured: Mutex::new(
            samples
                .iter()
                .map(|s| vec![None; s.completions.len()])
                .collect(),
        ),
    };
    let mut grads = match &bonus {
        // The bonus is added after the surrogate (TRL), its seeds beside the token weights.
        Some(bonus) => {
            let with = WithBonus {
                policy: &loss,
                bonus,
            };
            sequence_grads(policy, vars, &groups, &with, chunk, recompute, share, plan)?
        }
        None => sequence_grads(policy, vars, &groups, &loss, chunk, recompute, share, plan)?,
    };
    grads.skipped = skipped;
    if terms.has_bonus() {
        grads.bonus_entropy = kept_entropy;
    }
    grads.pass_kl = std::mem::take(&mut *loss.kl.lock().unwrap_or_else(|e| e.into_inner()));
    let stats = *loss.stats.lock().unwrap_or_else(|e| e.into_inner());
    let captured = loss
        .captured
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    Ok(Clipped {
        grads,
        stats,
        captured,
    })
}

struct ClippedLoss<'a> {
    samples: &'a [&'a AgentRollout],
    old: &'a [Vec<Old<'a>>],
    /// Each completion's per-token weight under `loss_aggregation` (0: not counted).
    agg: Vec<Vec<f64>>,
    /// The high-entropy mask (`top_entropy_quantile`), when on.
    mask: Option<EntropyMask>,
    /// β of `kl_in_loss` (0: no KL term), and Σ k3 over each computed pass's tokens with
    /// their count, by the pass's first completion (`LossGrads::pass_kl`).
    beta: f64,
    kl: Mutex<Vec<(usize, usize, f64, f64)>>,
    clip: Clip,
    stats: Mutex<ClipStats>,
    captured: Mutex<Vec<Vec<Option<Vec<f32>>>>>,
}

impl SequenceLoss for ClippedLoss<'_> {
    // At ratio 1: what the passes are sized and ordered with (the token weights replace it).
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        let s = self.samples[group];
        rows.iter()
            .map(|&j| (-(s.advantages[j] as f64) * self.agg[group][j]) as f32)
            .collect()
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        let w = Tensor::from_vec(self.coefs(group, rows), rows.len(), lp.device())?
            .to_dtype(lp.dtype())?;
        Ok((lp.sum(1)? * w)?.sum_all()?)
    }

    fn tokens(&self, group: usize, rows: &[usize]) -> Option<Box<dyn TokenWeights + '_>> {
        Some(Box::new(PassWeights {
            loss: self,
            group,
            rows: rows.to_vec(),
        }))
    }
}

/// The token weights of one pass: `rows` of sample `group`.
struct PassWeights<'a> {
    loss: &'a ClippedLoss<'a>,
    group: usize,
    rows: Vec<usize>,
}

impl TokenWeights for PassWeights<'_> {
    fn weights(&self, lp: &[f32], mask: &[f32], width: usize) -> (Vec<f32>, f64) {
        let l = self.loss;
        let s = l.samples[self.group];
        let clip = &l.clip;
        let mut w = vec![0f32; lp.len()];
        let mut value = 0f64;
        let (mut kl_sum, mut kl_n) = (0f64, 0f64);
        let mut stats = ClipStats::default();
        let mut captured = Vec::new();
        for (r, &j) in self.rows.iter().enumerate() {
            let a = s.advantages.get(j).copied().unwrap_or(0.0) as f64;
            let agg = l.agg[self.group][j];
            let at = r * width;
            let n = (0..width).take_while(|&t| mask[at + t] != 0.0).count();
            let cur = &lp[at..at + n];
            let old = match l.old[self.group][j] {
                Old::Known(o) => Some(o),
                _ => {
                    captured.push((j, cur.to_vec()));
                    None
                }
            };
            let log_ratio = |t: usize| match old {
                Some(o) => cur[t] as f64 - o[t] as f64,
                None => 0.0,
            };
            let mut unit = |r_: f64| {
                stats.units += 1.0;
                stats.ratio_sum += r_;
                stats.ratio_max = stats.ratio_max.max(r_);
                if r_ < 1.0 - clip.low && a < 0.0 {
                    stats.low += 1.0;
                }
                if r_ > 1.0 + clip.high && a > 0.0 {
                    stats.high += 1.0;
                }
            };
            match clip.level {
                ImportanceLevel::Sequence => {
                    let mean = (0..n).map(log_ratio).sum::<f64>() / (n.max(1) as f64);
                    let ratio = mean.exp();
                    unit(ratio);
                    let (v, d) = surrogate(clip, ratio, a);
                    match &l.mask {
                        None => {
                            value += agg * n as f64 * v;
                            // d mean / d log π_t = 1/|o|, times the |o| tokens the loss sums.
                            let g = (agg * d * ratio) as f32;
                            w[at..at + n].fill(g);
                        }
                        Some(m) => {
                            // The kept tokens' copies of the sequence's surrogate, each
                            // reaching every token through the mean.
                            let kept = (0..n).filter(|&t| m.keeps(self.group, j, t)).count();
                            value += agg * kept as f64 * v;
                            let g = (agg * d * ratio * kept as f64 / n.max(1) as f64) as f32;
                            w[at..at + n].fill(g);
                        }
                    }
                }
                _ => {
                    for t in 0..n {
                        let ratio = log_ratio(t).exp();
                        unit(ratio);
                        let (v, d) = surrogate(clip, ratio, a);
                        if l.mask.as_ref().is_some_and(|m| !m.keeps(self.group, j, t)) {
                            continue;
                        }
                        value += agg * v;
                        w[at + t] = (agg * d * ratio) as f32;
                    }
                }
            }
            // TRL adds β · k3 to each token's loss after the surrogate (and its mask).
            if l.beta != 0.0 && agg != 0.0 {
                let refs = &s.ref_logprobs[j];
                for t in 0..n {
                    let (g, k3) = kl_term(refs[t], cur[t]);
                    w[at + t] += (agg * l.beta * g) as f32;
                    value += agg * l.beta * k3;
                    kl_sum += k3;
                    kl_n += 1.0;
                }
            }
        }
        {
            let mut total = l.stats.lock().unwrap_or_else(|e| e.into_inner());
            total.low += stats.low;
            total.high += stats.high;
            total.ratio_sum += stats.ratio_sum;
            total.units += stats.units;
            total.ratio_max = total.ratio_max.max(stats.ratio_max);
        }
        if kl_n > 0.0 {
            let first = self.rows.first().copied().unwrap_or(0);
            let mut kl = l.kl.lock().unwrap_or_else(|e| e.into_inner());
            kl.push((self.group, first, kl_sum, kl_n));
        }
        let mut keep = l.captured.lock().unwrap_or_else(|e| e.into_inner());
        for (j, v) in captured {
            keep[self.group][j] = Some(v);
        }
        (w, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIP: Clip = Clip {
        level: ImportanceLevel::Token,
        low: 0.2,
        high: 0.28,
        delta: None,
    };

    /// Inside the clip range the surrogate is −r·A with gradient −A; outside it, on the side
    /// the advantage pushes towards, the clipped term wins and the gradient is 0; on the other
    /// side the unclipped term still carries it.
    #[test]
    fn clipping_stops_the_gradient_only_where_the_advantage_pushes() {
        assert_eq!(surrogate(&CLIP, 1.0, 2.0), (-2.0, -2.0));
        assert_eq!(surrogate(&CLIP, 1.5, 2.0), (-2.0 * 1.28, 0.0));
        assert_eq!(surrogate(&CLIP, 0.5, 2.0), (-1.0, -2.0));
        assert_eq!(surrogate(&CLIP, 0.5, -2.0), (2.0 * 0.8, 0.0));
        assert_eq!(surrogate(&CLIP, 1.5, -2.0), (3.0, 2.0));
        // δ caps the unclipped term of a negative advantage: no gradient above it.
        let delta = Clip {
            delta: Some(1.4),
            ..CLIP
        };
        let (v, d) = surrogate(&delta, 1.5, -2.0);
        assert!((v - 2.8).abs() < 1e-12 && d == 0.0);
    }
}
