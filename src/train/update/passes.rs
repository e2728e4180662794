//! The MAGRPO policy-gradient loss of one agent over buffered node samples:
//! per sample (1/K)·Σ_k −A_k·Σ_t log π(y_k,t | prompt, y_k,<t) over real completion tokens
//! (pads masked, the last real token included), averaged over the samples of a mini-batch.
//! A sequence whose advantage is exactly 0 adds exactly 0 to the loss and to every gradient, so
//! it is not computed (groups whose K returns are all equal cost nothing); a mini-batch with no
//! other sequence still scores one, so the optimizer steps with zero gradients for the same
//! parameters as always (as torch's AdamW does after `backward()` of a zero loss).
//! A sample's K sequences go through the model `chunk` at a time (sorted by length so a chunk
//! pads little); gradients are added in place into one buffer per parameter, so only one
//! chunk's activations and one backward pass's gradients live at a time.
//!
//! Data-parallel replicas ([`Share`]) number the mini-batch's passes in order and each computes
//! the passes `p` with `p mod R` = its replica index; their gradients are then summed across
//! the replicas (`magrpo::replicas`).
use crate::error::Result;
use crate::model::accumulate::take_grads;
use crate::model::flops;
use crate::model::pass_order::{run_passes, Pass};
use crate::model::recompute::{prompt_part, PassPlan};
use crate::model::{completion_logprobs, ComputeDtype, Mode, Policy, ScoreLayout};
use crate::train::rollout::tree::AgentRollout;
use candle_core::{Tensor, Var};
use std::time::Instant;

/// Loss value and accumulated gradients (in `vars` order) of one mini-batch.
#[derive(Default)]
pub struct LossGrads {
    /// The loss value.
    pub loss: f64,
    /// Gradient of each variable; `None` where it got none.
    pub grads: Vec<Option<Tensor>>,
    /// Seconds in the scoring forward (log-probs and loss) and in backward + accumulation.
    pub forward_s: f64,
    /// See `forward_s`.
    pub backward_s: f64,
    /// Model FLOPs of the forward and backward (3 × the forward's matmul FLOPs, padding
    /// included, recomputation not counted, a shared prompt counted once).
    pub flops: f64,
    /// Layers of the recomputed passes that kept their activations instead of re-running
    /// (summed over passes), and the most bytes one pass kept.
    pub kept_layers: usize,
    /// See `kept_layers`.
    pub kept_bytes_max: usize,
    /// The loss of each pass computed here, by its number in the mini-batch (so replicas can
    /// add them up in the one-process order).
    pub passes: Vec<(usize, f64)>,
    /// Sequences of the mini-batch left out because their advantage is exactly 0 (all
    /// replicas count the whole mini-batch's).
    pub skipped: usize,
}

/// Which of a mini-batch's passes this process computes: replica `index` of `of`.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    /// This replica's position, `0..of`.
    pub index: usize,
    /// The agent's replicas.
    pub of: usize,
}

impl Share {
    /// The whole mini-batch (one copy of the agent).
    pub const ALL: Share = Share { index: 0, of: 1 };
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
    let compute = plan.dtype;
    if !recompute && compute != ComputeDtype::F32 {
        return Err(crate::error::Error::Config(format!(
            "trainer.compute_dtype {compute} runs on the recomputed loss only: set \
             `gradient_checkpointing: true` or `compute_dtype: f32`"
        )));
    }
    let mut acc: Vec<Option<Tensor>> = vec![None; vars.len()];
    let mut out = LossGrads::default();
    let scale = 1.0 / samples.len().max(1) as f64;
    // The passes of this share, laid out.
    let scored = rows_to_score(samples);
    out.skipped = samples
        .iter()
        .zip(&scored)
        .map(|(s, rows)| s.completions.iter().filter(|c| !c.is_empty()).count() - rows.len())
        .sum();
    let mut mine = Vec::new();
    let mut pass = 0usize;
    for (s, mut order) in samples.iter().zip(scored) {
        let k = s.completions.len();
        if order.is_empty() {
            continue;
        }
        // Longest first, so each chunk holds sequences of similar length.
        order.sort_by_key(|&j| std::cmp::Reverse(s.completions[j].len()));
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
            let prompts: Vec<&[u32]> = vec![s.prompt_ids.as_slice(); part.len()];
            let comps: Vec<&[u32]> = part.iter().map(|&j| s.completions[j].as_slice()).collect();
            let layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id)?;
            let (rows, width) = layout.ids.dims2()?;
            let c = layout.completion_width;
            out.flops += match prompt_part(&policy.model, &layout, plan.share_prompt && recompute)?
            {
                Some(p) => flops::train_flops_shared(&policy.config, rows, p, width - p, c),
                None => flops::train_flops(&policy.config, rows, width, c),
            };
            let adv: Vec<f32> = part.iter().map(|&j| s.advantages[j]).collect();
            out.forward_s += t.elapsed().as_secs_f64();
            mine.push(Mine {
                number,
                layout,
                adv,
                k,
            });
        }
    }
    if recompute {
        let passes: Vec<Pass> = mine
            .iter()
            .map(|m| Pass {
                layout: &m.layout,
                // d loss / d Σ_t log π of each row.
                coef: m
                    .adv
                    .iter()
                    .map(|&a| (-(a as f64) * scale / m.k as f64) as f32)
                    .collect(),
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
        }
    } else {
        for m in &mine {
            let t = Instant::now();
            let lp = completion_logprobs(&policy.model, &m.layout, Mode::Train)?;
            let adv = Tensor::from_vec(m.adv.clone(), m.adv.len(), policy.model.device())?
                .to_dtype(lp.dtype())?;
            let loss = ((lp.sum(1)? * adv)?.sum_all()?.neg()? * (scale / m.k as f64))?;
            let value = loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
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

/// One pass this process computes: its number in the mini-batch, rows, and each row's
/// advantage over the sample's `k` sequences.
struct Mine {
    number: usize,
    layout: ScoreLayout,
    adv: Vec<f32>,
    k: usize,
}
