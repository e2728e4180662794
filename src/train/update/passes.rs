//! The gradients of a loss that weighs each sequence's log-probability: over a mini-batch of
//! groups (the completions of one prompt, which share it), loss = Σ_rows w_row · Σ_t log π(y_t |
//! prompt, y_<t) over real completion tokens (pads masked, the last real token included). An
//! algorithm says which rows count and how they weigh ([`SequenceLoss`]); this runs them.
//!
//! A group's rows go through the model `chunk` at a time (sorted by length so a chunk pads
//! little); gradients are added in place into one buffer per parameter, so only one chunk's
//! activations and one backward pass's gradients live at a time. With `recompute` a pass keeps
//! only layer inputs and re-runs one layer at a time in the backward, seeded with each row's
//! weight (`model::recompute`); else candle's autograd differentiates the algorithm's loss.
//!
//! Data-parallel replicas ([`Share`]) number the mini-batch's passes in order and each computes
//! the passes `p` with `p mod R` = its replica index; their gradients are then summed across
//! the replicas (`train::world::replicas`).
use super::grads::{LossGrads, Share};
use crate::error::Result;
use crate::model::decoder::flops;
use crate::model::grad::accumulators::take_grads;
use crate::model::grad::pass_order::{run_passes, Pass};
use crate::model::grad::recompute::{prompt_part, PassPlan};
use crate::model::grad::token_weights::TokenWeights;
use crate::model::grad::value::ValueTop;
use crate::model::{
    completion_logprobs_entropy_scaled, completion_logprobs_scaled, ComputeDtype, Mode, Policy,
    ScoreLayout, TrainWithDropout,
};
use candle_core::{Tensor, Var};
use std::time::Instant;

/// The completions of one prompt in a mini-batch, and which of them the loss computes.
pub struct Group<'a> {
    /// The prompt's token ids.
    pub prompt: &'a [u32],
    /// Every completion of the prompt.
    pub completions: &'a [Vec<u32>],
    /// The indices of the completions the loss computes (others add nothing to it).
    pub rows: Vec<usize>,
}

/// How each computed sequence of a mini-batch weighs in the loss.
pub trait SequenceLoss: Sync {
    /// d loss / d Σ_t log π of each of `rows` of group `group`: the seeds of the recomputed
    /// backward.
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32>;

    /// The loss of one pass — `rows` of group `group` — from their token log-probs `lp`
    /// (rows × completion width, pads 0), as autograd operations (the path without recompute).
    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor>;

    /// Each token's weight from its current log-prob, for a loss that is not a constant
    /// weight on each sequence (a clipped ratio): then `coefs` and `loss` are not used.
    fn tokens(&self, _group: usize, _rows: &[usize]) -> Option<Box<dyn TokenWeights + '_>> {
        None
    }

    /// d loss / d H of each position of a pass (`rows` of group `group`, `width` positions a
    /// row, row-major; H the next-token entropy there): an entropy term in the loss, seeded in
    /// the LM head's fused backward beside the log-probs' weights. `None`: no entropy term.
    fn entropy(&self, _group: usize, _rows: &[usize], _width: usize) -> Option<Vec<f32>> {
        None
    }

    /// A value head read from the same pass as `rows` of group `group`, its loss's gradient
    /// joined with the log-probs' before the final norm (a value head on the actor's own
    /// backbone; see `value::ValueTop`): the values come back in [`LossGrads::values`]. Only
    /// the recomputed passes read one (`recompute: true`). `None`: no value.
    fn value(&self, _group: usize, _rows: &[usize]) -> Option<ValueTop<'_>> {
        None
    }
}

/// Forward + backward of the mini-batch `groups` for `policy`, `chunk` rows per pass (0: all of
/// a group's rows in one pass, split into one pass per replica); the gradients of `vars`, in
/// order. Only the passes of `share` are computed. With `recompute` the passes run as `plan`
/// says: the big products in `plan.dtype` (`Bf16` runs on the recomputed path only, else it is
/// an error) and up to `plan.keep_bytes` of kept layer activations per pass.
#[allow(clippy::too_many_arguments)]
pub fn sequence_grads(
    policy: &Policy,
    vars: &[Var],
    groups: &[Group],
    weights: &dyn SequenceLoss,
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
) -> Result<LossGrads> {
    let compute = plan.dtype;
    if !recompute && compute != ComputeDtype::F32 {
        return Err(crate::error::Error::Config(format!(
            "trainer.compute_dtype {compute} runs on the recomputed loss only: set \
             `gradient_checkpointing: true` or `compute_dtype: f32`"
        )));
    }
    let mut acc: Vec<Option<Tensor>> = vec![None; vars.len()];
    let mut out = LossGrads::default();
    // The passes of this share, laid out.
    let mut mine = Vec::new();
    let mut pass = 0usize;
    for (g, group) in groups.iter().enumerate() {
        let mut order = group.rows.clone();
        if order.is_empty() {
            continue;
        }
        // Longest first, so each chunk holds sequences of similar length.
        order.sort_by_key(|&j| std::cmp::Reverse(group.completions[j].len()));
        let per_pass = match chunk {
            0 => order.len().div_ceil(share.of.max(1)),
            c => c,
        };
        for part in order.chunks(per_pass) {
            let number = pass;
            pass += 1;
            if number % share.of.max(1) != share.index {
                continue;
            }
            let t = Instant::now();
            let prompts: Vec<&[u32]> = vec![group.prompt; part.len()];
            let comps: Vec<&[u32]> = part
                .iter()
                .map(|&j| group.completions[j].as_slice())
                .collect();
            let mut layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id)?;
            let (rows, width) = layout.ids.dims2()?;
            // PEFT's train mode: an adapter's dropout masks, each row's drawn from its place in
            // the mini-batch (group, completion), so the mask does not depend on the chunking,
            // the replica or recomputation.
            let seqs = part
                .iter()
                .map(|&j| ((g as u64) << 32) | j as u64)
                .collect();
            layout.dropout = policy.lora_dropout(seqs, width);
            let c = layout.completion_width;
            out.flops += match prompt_part(&policy.model, &layout, plan.share_prompt && recompute)?
            {
                Some(p) => flops::train_flops_shared(&policy.config, rows, p, width - p, c),
                None => flops::train_flops(&policy.config, rows, width, c),
            };
            out.forward_s += t.elapsed().as_secs_f64();
            mine.push(Mine {
                number,
                group: g,
                rows: part.to_vec(),
                layout,
            });
        }
    }
    if recompute {
        let passes: Vec<Pass> = mine
            .iter()
            .map(|m| Pass {
                layout: &m.layout,
                coef: weights.coefs(m.group, &m.rows),
                tokens: weights.tokens(m.group, &m.rows),
                entropy: weights.entropy(m.group, &m.rows, m.layout.completion_width),
                value: weights.value(m.group, &m.rows),
            })
            .collect();
        let (order, stats) = run_passes(&policy.model, &passes, vars, &mut acc, plan)?;
        log::debug!("{} passes, {order:?}", passes.len());
        for (m, st) in mine.iter().zip(stats) {
            out.loss += st.loss;
            out.kept_layers += st.kept_layers;
            out.kept_bytes_max = out.kept_bytes_max.max(st.kept_bytes);
            out.passes.push((m.number, st.loss));
            out.forward_s += st.forward_s;
            out.backward_s += st.backward_s;
            out.entropy_sum += st.entropy_sum;
            out.entropy_tokens += st.entropy_tokens;
            out.pass_entropy
                .push((m.number, st.entropy_sum, st.entropy_tokens));
            out.values.extend(
                m.rows
                    .iter()
                    .zip(&st.values)
                    .map(|(&r, &v)| (m.group, r, v)),
            );
        }
    } else {
        for m in &mine {
            if weights.value(m.group, &m.rows).is_some() {
                return Err(crate::error::Error::Internal(
                    "a value head joined with the log-probs' pass needs the recomputed passes \
                     (gradient_checkpointing)"
                        .into(),
                ));
            }
            let t = Instant::now();
            let entropy = weights.entropy(m.group, &m.rows, m.layout.completion_width);
            let (lp, ent) = match (entropy, &m.layout.dropout) {
                (None, None) => (
                    completion_logprobs_scaled(
                        &policy.model,
                        &m.layout,
                        Mode::Train,
                        plan.logit_scale,
                    )?,
                    None,
                ),
                (None, Some(d)) => (
                    completion_logprobs_scaled(
                        &policy.model,
                        &m.layout,
                        TrainWithDropout(d),
                        plan.logit_scale,
                    )?,
                    None,
                ),
                (Some(hw), d) => {
                    let (lp, ent) = match d {
                        None => completion_logprobs_entropy_scaled(
                            &policy.model,
                            &m.layout,
                            Mode::Train,
                            plan.logit_scale,
                        )?,
                        Some(d) => completion_logprobs_entropy_scaled(
                            &policy.model,
                            &m.layout,
                            TrainWithDropout(d),
                            plan.logit_scale,
                        )?,
                    };
                    (lp, Some((ent, hw)))
                }
            };
            let (loss, value) = match weights.tokens(m.group, &m.rows) {
                None => {
                    let loss = weights.loss(m.group, &m.rows, &lp)?;
                    let value = loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
                    (loss, value)
                }
                // Σ w_t · log π_t with the weights taken at the current log-probs: the
                // surrogate's gradient; its value is the one `tokens` gives.
                Some(tw) => {
                    let (b, c) = lp.dims2()?;
                    let vals = lp
                        .detach()
                        .to_dtype(candle_core::DType::F32)?
                        .flatten_all()?
                        .to_vec1::<f32>()?;
                    let mask = m
                        .layout
                        .target_mask
                        .to_dtype(candle_core::DType::F32)?
                        .flatten_all()?
                        .to_vec1::<f32>()?;
                    let (w, value) = tw.weights(&vals, &mask, c);
                    let w = Tensor::from_vec(w, (b, c), lp.device())?.to_dtype(lp.dtype())?;
                    ((lp * w)?.sum_all()?, value)
                }
            };
            // The entropy term: Σ h·H through the graph, its value logged with the loss.
            let (loss, value) = match ent {
                None => (loss, value),
                Some((ent, hw)) => {
                    let mask = m.layout.target_mask.to_dtype(ent.dtype())?;
                    let tokens = mask.sum_all()?.to_dtype(candle_core::DType::F64)?;
                    let ent_sum = ent.detach().sum_all()?.to_dtype(candle_core::DType::F64)?;
                    let (sum, n) = (ent_sum.to_scalar::<f64>()?, tokens.to_scalar::<f64>()?);
                    out.entropy_sum += sum;
                    out.entropy_tokens += n;
                    out.pass_entropy.push((m.number, sum, n));
                    let hw =
                        Tensor::from_vec(hw, ent.shape(), ent.device())?.to_dtype(ent.dtype())?;
                    let term = (ent * hw)?.sum_all()?;
                    let v = term.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
                    ((loss + term)?, value + v)
                }
            };
            out.loss += value;
            out.passes.push((m.number, value));
            out.forward_s += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut grads = loss.backward()?;
            drop(loss);
            take_grads(&mut grads, vars, &mut acc)?;
            out.backward_s += t.elapsed().as_secs_f64();
        }
    }
    out.grads = acc;
    Ok(out)
}

/// One pass this process computes: its number in the mini-batch, its group and rows.
struct Mine {
    number: usize,
    group: usize,
    rows: Vec<usize>,
    layout: ScoreLayout,
}
