//! The MAGRPO policy-gradient loss of one agent over buffered node samples:
//! per sample (1/K)·Σ_k −A_k·Σ_t log π(y_k,t | prompt, y_k,<t) over real completion tokens
//! (pads masked, the last real token included), averaged over the samples of a mini-batch.
//! [`LossShape`] changes the weight of each sequence's Σ_t log π (`trainer.loss_aggregation`:
//! GRPO's per-sequence mean, DAPO's token mean, Dr. GRPO's constant) and leaves out truncated
//! completions (`trainer.mask_truncated_completions`); its default is the loss above, bit for
//! bit. Every variant weighs whole sequences, so the passes are the same.
//! A sequence whose advantage is exactly 0 adds exactly 0 to the loss and to every gradient, so
//! it is not computed (groups whose K returns are all equal cost nothing) unless a term other
//! than the policy's reaches it (`kl_in_loss`, the entropy bonus); a mini-batch with no
//! other sequence still scores one, so the optimizer steps with zero gradients for the same
//! parameters as always (as torch's AdamW does after `backward()` of a zero loss).
//! The passes themselves (chunks, recompute, replicas' shares) are `train::update::passes`.
use super::entropy_bonus::{EntropyBonus, WithBonus};
use super::entropy_mask::mini_batch_mask;
use super::token_terms::{check_refs, PerToken};
use crate::error::Result;
use crate::model::grad::recompute::PassPlan;
use crate::model::{ComputeDtype, Policy};
use crate::train::rollout::AgentRollout;
use crate::train::update::passes::{sequence_grads, Group, SequenceLoss};
use crate::train::update::{LossGrads, Share};
use candle_core::{Tensor, Var};
pub use comlrl_scenario::LossAggregation;

/// How the loss weighs each sequence: the aggregation of its token log-probs and whether
/// truncated completions count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossShape {
    /// `trainer.loss_aggregation`.
    pub aggregation: LossAggregation,
    /// The agent's `max_new_tokens`: `constant`'s denominator is G·B times it.
    pub max_new_tokens: usize,
    /// `trainer.mask_truncated_completions`: a completion whose last token is neither an EOS nor
    /// the pad token weighs 0 and its tokens are not counted.
    pub mask_truncated: bool,
}

impl LossShape {
    /// MAGRPO's loss (CoMLRL): the sequence sum, every completion counted.
    pub const MAGRPO: LossShape = LossShape {
        aggregation: LossAggregation::SequenceSum,
        max_new_tokens: 0,
        mask_truncated: false,
    };

    /// Whether this is MAGRPO's loss (whatever `max_new_tokens`, which only `constant` reads).
    pub fn is_magrpo(&self) -> bool {
        self.aggregation == LossAggregation::SequenceSum && !self.mask_truncated
    }
}

/// Forward + backward of the mini-batch `samples` for `policy`, `chunk` sequences per pass
/// (0: all K sequences of a sample in one pass); with `recompute`, each pass keeps only layer
/// inputs and re-runs one layer at a time in the backward (see `model::recompute`). Only the
/// passes of `share` are computed; with replicas and `chunk` 0 a sample's sequences are split
/// into one pass per replica. The products run in f32, every layer re-run (see
/// [`loss_and_grads_in`]).
pub fn loss_and_grads(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
    chunk: usize,
    recompute: bool,
    share: Share,
) -> Result<LossGrads> {
    loss_and_grads_in(
        policy,
        vars,
        samples,
        chunk,
        recompute,
        share,
        PassPlan::rerun_all(ComputeDtype::F32),
    )
}

/// [`loss_and_grads`] with the recomputed passes run as `plan` says: the big products in
/// `plan.dtype` (`trainer.compute_dtype`; `Bf16` runs on the recomputed path only, `recompute`
/// true, else it is an error) and up to `plan.keep_bytes` of kept layer activations per pass
/// (`trainer.activation_budget_mb`).
pub fn loss_and_grads_in(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
) -> Result<LossGrads> {
    loss_and_grads_shaped(
        policy,
        vars,
        samples,
        chunk,
        recompute,
        share,
        plan,
        LossShape::MAGRPO,
    )
}

/// What multiplies or adds to each token's loss beside its sequence's weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenTerms {
    /// `trainer.top_entropy_quantile`: below 1, only the highest-entropy tokens keep their
    /// loss (`entropy_mask`).
    pub top_entropy_quantile: f64,
    /// `trainer.kl_in_loss` β: each counted token adds β · k3 to its loss (`token_terms`).
    pub kl_in_loss: f64,
    /// `trainer.entropy_coef` c: the loss less c · the mean entropy of the tokens it acts on
    /// (`entropy_bonus`); under adaptive control, the coefficient this step applies.
    pub entropy_coef: f64,
    /// The bonus is on even where `entropy_coef` is 0 (adaptive control, `entropy_control`):
    /// every counted completion is computed and the entropy of the tokens it acts on measured.
    pub entropy_on: bool,
}

impl TokenTerms {
    /// None: every token weighs its sequence's weight.
    pub const NONE: TokenTerms = TokenTerms {
        top_entropy_quantile: 1.0,
        kl_in_loss: 0.0,
        entropy_coef: 0.0,
        entropy_on: false,
    };

    /// Whether the high-entropy mask is on.
    pub fn masks_entropy(&self) -> bool {
        self.top_entropy_quantile < 1.0
    }

    /// Whether any per-token term that weighs the log-probs is on (the entropy bonus weighs
    /// the entropy alone: the log-probs keep their sequence weights).
    pub fn any(&self) -> bool {
        self.masks_entropy() || self.kl_in_loss != 0.0
    }

    /// Whether a term reaches completions whose advantage is 0 (the KL term, the entropy
    /// bonus): they are then computed.
    pub fn keeps_zero_advantage(&self) -> bool {
        self.kl_in_loss != 0.0 || self.has_bonus()
    }

    /// Whether the entropy bonus is on (at a coefficient of 0 too, under adaptive control).
    pub fn has_bonus(&self) -> bool {
        self.entropy_coef != 0.0 || self.entropy_on
    }
}

/// [`loss_and_grads_in`] with each sequence weighed as `shape` says ([`sequence_weights`]).
#[allow(clippy::too_many_arguments)]
pub fn loss_and_grads_shaped(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
    shape: LossShape,
) -> Result<LossGrads> {
    loss_and_grads_terms(
        policy,
        vars,
        samples,
        chunk,
        recompute,
        share,
        plan,
        shape,
        TokenTerms::NONE,
    )
}

/// [`loss_and_grads_shaped`] with the per-token `terms` (the high-entropy mask).
#[allow(clippy::too_many_arguments)]
pub fn loss_and_grads_terms(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
    shape: LossShape,
    terms: TokenTerms,
) -> Result<LossGrads> {
    let counted = Counted::new(samples, shape, policy);
    // The KL term and the entropy bonus weigh every counted token, whatever its advantage.
    let scored = rows_to_score(samples, &counted, terms.keeps_zero_advantage());
    if terms.kl_in_loss != 0.0 {
        check_refs(samples, &scored)?;
    }
    let skipped = samples
        .iter()
        .zip(&scored)
        .map(|(s, rows)| s.completions.iter().filter(|c| !c.is_empty()).count() - rows.len())
        .sum();
    let groups: Vec<Group> = samples
        .iter()
        .zip(scored)
        .map(|(s, rows)| Group {
            prompt: &s.prompt_ids,
            completions: &s.completions,
            rows,
        })
        .collect();
    let (mask, kept_entropy) = match terms.masks_entropy() {
        true => {
            let (m, h) = mini_batch_mask(
                policy,
                samples,
                |i, j| counted.get(i, j),
                terms.top_entropy_quantile,
                chunk,
                plan.logit_scale,
            )?;
            (Some(m), h)
        }
        false => (None, None),
    };
    let bonus = EntropyBonus::new(
        samples,
        |i, j| counted.get(i, j),
        mask.as_ref(),
        terms.entropy_coef,
        terms.entropy_on,
    );
    let run = |loss: &dyn SequenceLoss| -> Result<LossGrads> {
        match &bonus {
            Some(bonus) => {
                let with = WithBonus {
                    policy: loss,
                    bonus,
                };
                sequence_grads(policy, vars, &groups, &with, chunk, recompute, share, plan)
            }
            None => sequence_grads(policy, vars, &groups, loss, chunk, recompute, share, plan),
        }
    };
    let mut out = if terms.any() {
        let weights = PerToken {
            samples,
            coefs: sequence_weights_of(samples, shape, &counted)?,
            agg: aggregation_factors(samples, shape, &counted)?,
            mask: mask.as_ref(),
            beta: terms.kl_in_loss,
            kl: Default::default(),
        };
        let mut out = run(&weights)?;
        out.pass_kl = std::mem::take(&mut *weights.kl.lock().unwrap_or_else(|e| e.into_inner()));
        out
    } else if shape.is_magrpo() {
        run(&Advantages {
            samples,
            scale: 1.0 / samples.len().max(1) as f64,
        })?
    } else {
        run(&Weights(sequence_weights_of(samples, shape, &counted)?))?
    };
    out.skipped = skipped;
    if terms.has_bonus() {
        out.bonus_entropy = kept_entropy;
    }
    Ok(out)
}

/// d loss / d Σ_t log π of every completion of a mini-batch (`[sample][completion]`) under
/// `shape`, as the update seeds it: −A times the aggregation's weight, 0 for a completion the
/// loss leaves out (empty, or truncated with `mask_truncated`). `eos_ids` and `pad_id` are the
/// agent's (what marks a completion as stopped).
pub fn sequence_weights(
    samples: &[&AgentRollout],
    shape: LossShape,
    eos_ids: &[u32],
    pad_id: u32,
) -> Result<Vec<Vec<f32>>> {
    let counted = Counted::with_ids(samples, shape, eos_ids, pad_id);
    sequence_weights_of(samples, shape, &counted)
}

/// Which completions of each sample the loss counts: those with tokens and, with
/// `mask_truncated`, that stopped by themselves (TRL: the last id is an EOS or the pad id).
pub struct Counted(Vec<Vec<bool>>);

impl Counted {
    /// The completions `shape` counts, with the agent's EOS and pad ids.
    pub fn new(samples: &[&AgentRollout], shape: LossShape, policy: &Policy) -> Self {
        Self::with_ids(samples, shape, &policy.eos_ids, policy.pad_id)
    }

    fn with_ids(samples: &[&AgentRollout], shape: LossShape, eos: &[u32], pad: u32) -> Self {
        Counted(
            samples
                .iter()
                .map(|s| {
                    s.completions
                        .iter()
                        .map(|c| match c.last() {
                            None => false,
                            Some(last) => {
                                !shape.mask_truncated || eos.contains(last) || *last == pad
                            }
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// Whether completion `j` of sample `sample` counts.
    pub fn get(&self, sample: usize, j: usize) -> bool {
        self.0[sample][j]
    }
}

fn sequence_weights_of(
    samples: &[&AgentRollout],
    shape: LossShape,
    counted: &Counted,
) -> Result<Vec<Vec<f32>>> {
    let factors = aggregation_factors(samples, shape, counted)?;
    let b = samples.len().max(1) as f64;
    Ok(samples
        .iter()
        .zip(factors)
        .map(|(s, f)| {
            let k = s.completions.len() as f64;
            f.iter()
                .enumerate()
                .map(|(j, &w)| {
                    let a = s.advantages.get(j).copied().unwrap_or(0.0);
                    // A factor is 0 only for a completion the loss leaves out.
                    if w == 0.0 || a == 0.0 {
                        return 0.0;
                    }
                    match shape.aggregation {
                        // In this order: the bits MAGRPO's parity fixtures were made with.
                        LossAggregation::SequenceSum => (-(a as f64) * (1.0 / b) / k) as f32,
                        _ => (-(a as f64) * w) as f32,
                    }
                })
                .collect()
        })
        .collect())
}

/// The weight `shape`'s aggregation gives each token of every completion of a mini-batch
/// (`[sample][completion]`; 0 for a completion the loss leaves out): what the clipped
/// surrogate of each token is multiplied by (`clip`). At ratio 1 a completion's weight in
/// [`sequence_weights`] is −A times this.
pub(super) fn aggregation_factors(
    samples: &[&AgentRollout],
    shape: LossShape,
    counted: &Counted,
) -> Result<Vec<Vec<f64>>> {
    let b = samples.len().max(1) as f64;
    let n = samples
        .iter()
        .map(|s| s.completions.len())
        .sum::<usize>()
        .max(1) as f64;
    let tokens: usize = samples
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.completions
                .iter()
                .enumerate()
                .filter(move |&(j, _)| counted.get(i, j))
                .map(|(_, c)| c.len())
        })
        .sum();
    if shape.aggregation == LossAggregation::Constant && shape.max_new_tokens == 0 {
        return Err(crate::Error::Internal(
            "loss_aggregation `constant` needs the agent's max_new_tokens".into(),
        ));
    }
    Ok(samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let k = s.completions.len() as f64;
            (0..s.completions.len())
                .map(|j| {
                    if !counted.get(i, j) {
                        return 0.0;
                    }
                    let len = s.completions[j].len() as f64;
                    match shape.aggregation {
                        LossAggregation::SequenceSum => 1.0 / b / k,
                        LossAggregation::SequenceMean => 1.0 / (n * len),
                        LossAggregation::TokenMean => 1.0 / tokens.max(1) as f64,
                        LossAggregation::Constant => 1.0 / (n * shape.max_new_tokens as f64),
                    }
                })
                .collect()
        })
        .collect())
}

/// Each sequence weighs −A/(K·B): its advantage over its sample's K sequences and the
/// mini-batch's B samples.
struct Advantages<'a> {
    samples: &'a [&'a AgentRollout],
    /// 1/B.
    scale: f64,
}

impl SequenceLoss for Advantages<'_> {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        let s = self.samples[group];
        let k = s.completions.len();
        rows.iter()
            .map(|&j| (-(s.advantages[j] as f64) * self.scale / k as f64) as f32)
            .collect()
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        let s = self.samples[group];
        let k = s.completions.len();
        let adv: Vec<f32> = rows.iter().map(|&j| s.advantages[j]).collect();
        let adv = Tensor::from_vec(adv, rows.len(), lp.device())?.to_dtype(lp.dtype())?;
        Ok(((lp.sum(1)? * adv)?.sum_all()?.neg()? * (self.scale / k as f64))?)
    }
}

/// Each sequence weighs its precomputed coefficient ([`sequence_weights`]).
struct Weights(Vec<Vec<f32>>);

impl SequenceLoss for Weights {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        rows.iter().map(|&j| self.0[group][j]).collect()
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        let w = Tensor::from_vec(self.coefs(group, rows), rows.len(), lp.device())?
            .to_dtype(lp.dtype())?;
        Ok((lp.sum(1)? * w)?.sum_all()?)
    }
}

/// The sequences of each sample that the loss computes: those it counts (with tokens, and not
/// masked as truncated) with a nonzero advantage (any advantage with `keep_zero`: a per-token
/// KL term, the entropy bonus). When that leaves the whole mini-batch empty
/// but some completion has tokens, the shortest such completion of the first sample with one is
/// kept (its weight 0), so the gradients come out as zeros rather than missing.
pub(super) fn rows_to_score(
    samples: &[&AgentRollout],
    counted: &Counted,
    keep_zero: bool,
) -> Vec<Vec<usize>> {
    let with_tokens = |s: &AgentRollout| -> Vec<usize> {
        (0..s.completions.len())
            .filter(|&j| !s.completions[j].is_empty())
            .collect()
    };
    let mut rows: Vec<Vec<usize>> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            with_tokens(s)
                .into_iter()
                .filter(|&j| counted.get(i, j))
                .filter(|&j| keep_zero || s.advantages.get(j).is_none_or(|&a| a != 0.0))
                .collect()
        })
        .collect();
    if rows.iter().all(Vec::is_empty) {
        let first = samples.iter().enumerate().find_map(|(i, s)| {
            let shortest = with_tokens(s)
                .into_iter()
                .min_by_key(|&j| s.completions[j].len())?;
            Some((i, shortest))
        });
        if let Some((i, j)) = first {
            rows[i].push(j);
        }
    }
    rows
}
