//! The MAGRPO policy-gradient loss of one agent over buffered node samples:
//! per sample (1/K)·Σ_k −A_k·Σ_t log π(y_k,t | prompt, y_k,<t) over real completion tokens
//! (pads masked, the last real token included), averaged over the samples of a mini-batch.
//! A sequence whose advantage is exactly 0 adds exactly 0 to the loss and to every gradient, so
//! it is not computed (groups whose K returns are all equal cost nothing); a mini-batch with no
//! other sequence still scores one, so the optimizer steps with zero gradients for the same
//! parameters as always (as torch's AdamW does after `backward()` of a zero loss).
//! The passes themselves (chunks, recompute, replicas' shares) are `train::update::passes`.
use crate::error::Result;
use crate::model::grad::recompute::PassPlan;
use crate::model::{ComputeDtype, Policy};
use crate::train::rollout::AgentRollout;
use crate::train::update::passes::{sequence_grads, Group, SequenceLoss};
use crate::train::update::{LossGrads, Share};
use candle_core::{Tensor, Var};

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
    let scored = rows_to_score(samples);
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
    let weights = Advantages {
        samples,
        scale: 1.0 / samples.len().max(1) as f64,
    };
    let mut out = sequence_grads(
        policy, vars, &groups, &weights, chunk, recompute, share, plan,
    )?;
    out.skipped = skipped;
    Ok(out)
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

/// The sequences of each sample that the loss computes: those with tokens (an empty completion
/// contributes nothing) and a nonzero advantage. When that leaves the whole mini-batch empty
/// but some completion has tokens, the shortest such completion of the first sample with one is
/// kept, so the gradients come out as zeros rather than missing.
fn rows_to_score(samples: &[&AgentRollout]) -> Vec<Vec<usize>> {
    let with_tokens = |s: &AgentRollout| -> Vec<usize> {
        (0..s.completions.len())
            .filter(|&j| !s.completions[j].is_empty())
            .collect()
    };
    let mut rows: Vec<Vec<usize>> = samples
        .iter()
        .map(|s| {
            with_tokens(s)
                .into_iter()
                .filter(|&j| s.advantages.get(j).is_none_or(|&a| a != 0.0))
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
