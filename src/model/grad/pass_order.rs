//! The order in which a mini-batch's recomputed passes run. One after another, every pass
//! after the first runs its LM head next to all the gradients the earlier passes accumulated;
//! **heads first**, every pass's forward and LM head run before any pass's layers go backward,
//! so the head's working set (in bf16 its two packed copies and a chunk's logits, several
//! vocabulary × hidden buffers) never coexists with the layers' gradients, at the price of
//! holding the waiting passes' layer inputs and kept activations until their backward. The
//! order with the lower peak is taken per mini-batch; heads first also packs the head once per
//! mini-batch instead of once per pass. Either order adds the same terms into the same
//! accumulators; only the tied embedding/head accumulator sums them in another order.
//!
//! In either order the first pass's backward runs first, while most gradients do not exist
//! yet: that pass also keeps its top layers' activations in the room they leave
//! ([`PassPlan::keep_top_bytes`], sized by `top_budget`).
use super::head_backward;
use super::logprob::ScoreLayout;
use super::packed_weights::{Head, PackedWeights};
use super::recompute::{forward_and_head_with, weighted_logprob_grads_with, PassPlan, PassStats};
use super::token_weights::TokenWeights;
use super::value::ValueTop;
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::kernels::bf16_gemm;
use crate::model::kernels::compute_dtype::ComputeDtype;
use candle_core::{Result, Tensor, Var};

/// One pass of a mini-batch: its rows and each row's loss coefficient.
pub struct Pass<'a> {
    /// The rows (prompts and completions) of the pass.
    pub layout: &'a ScoreLayout,
    /// One coefficient per row (see `recompute::weighted_logprob_grads`).
    pub coef: Vec<f32>,
    /// Each token's weight from its current log-prob instead (a clipped ratio; see
    /// `token_weights`); `None`: `coef`.
    pub tokens: Option<Box<dyn TokenWeights + 'a>>,
    /// Each position's weight on its entropy (rows × completion width; an entropy bonus),
    /// seeded in the same head backward; `None`: no entropy term.
    pub entropy: Option<Vec<f32>>,
    /// A value head read from the same final hidden state, its loss's gradient joined with
    /// the log-probs' (see `value::ValueTop`); `None`: none.
    pub value: Option<ValueTop<'a>>,
}

/// How [`run_passes`] ordered the passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Each pass's forward, head and backward before the next pass starts.
    OneByOne,
    /// Every pass's forward and head, then every pass's backward.
    HeadsFirst,
}

/// Runs the recomputed `passes` of one mini-batch in the [`Order`] with the lower estimated
/// peak ([`choose`]), adding every gradient into `acc`; returns each pass's stats in
/// `passes`' order.
pub fn run_passes(
    model: &CausalLm,
    passes: &[Pass<'_>],
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
) -> Result<(Order, Vec<PassStats>)> {
    let order = choose(model, passes, plan)?;
    Ok((order, run_passes_in(order, model, passes, vars, acc, plan)?))
}

/// [`run_passes`] in a given order. `plan.keep_top_bytes` is set here: the first pass's from
/// the gradients not yet allocated (unless `plan.keep_bytes` is 0), 0 for the others.
pub fn run_passes_in(
    order: Order,
    model: &CausalLm,
    passes: &[Pass<'_>],
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
) -> Result<Vec<PassStats>> {
    let mut stats = Vec::with_capacity(passes.len());
    // The first pass's backward runs first, while most gradients are not allocated yet. A
    // budget of 0 means every layer re-runs (`trainer.activation_budget_mb: 0`).
    let top = match plan.keep_bytes {
        0 => 0,
        _ => top_budget(model, passes, vars, acc, plan.dtype)?,
    };
    let first = PassPlan {
        keep_top_bytes: top,
        ..plan
    };
    let rest = PassPlan {
        keep_top_bytes: 0,
        ..plan
    };
    let plan_of = |i: usize| if i == 0 { first } else { rest };
    // Every weight prepared once for all the passes where the copies fit (`packed_weights`).
    let packed = PackedWeights::for_passes(model, passes.len(), plan.dtype, plan.pack_bytes)?;
    let packed = packed.as_ref();
    match order {
        Order::OneByOne => {
            for (i, p) in passes.iter().enumerate() {
                let plan = plan_of(i);
                stats.push(weighted_logprob_grads_with(
                    model,
                    p.layout,
                    &p.coef,
                    p.tokens.as_deref(),
                    p.entropy.as_deref(),
                    p.value.as_ref(),
                    vars,
                    acc,
                    plan,
                    packed,
                )?);
            }
        }
        Order::HeadsFirst => {
            let head = Head::new(model, plan.dtype, packed)?;
            let mut pending = Vec::with_capacity(passes.len());
            for (i, p) in passes.iter().enumerate() {
                pending.push(forward_and_head_with(
                    model,
                    p.layout,
                    &p.coef,
                    p.tokens.as_deref(),
                    p.entropy.as_deref(),
                    p.value.as_ref(),
                    vars,
                    acc,
                    plan_of(i),
                    &head,
                    packed,
                )?);
            }
            drop(head);
            // The head's packed G chunks would wait idle in the pool through the layers.
            bf16_gemm::release_scratch();
            for p in pending {
                stats.push(p.backward(model, vars, acc)?);
            }
        }
    }
    Ok(stats)
}

/// Heads first when what the passes before the last must hold while they wait (their layer
/// inputs, top gradient and up to `plan.keep_bytes` of kept activations) is less than the
/// head's working set that one-by-one would hold next to every gradient. The waiting bytes
/// are an upper bound (a pass counts its whole activation budget), so heads first is taken
/// only where it surely lowers the peak: typically a large vocabulary in bf16 with few
/// passes; in f32 (no packed head) and on small models with many passes the order stays one
/// by one.
pub fn choose(model: &CausalLm, passes: &[Pass<'_>], plan: PassPlan) -> Result<Order> {
    let waiting = passes
        .iter()
        .take(passes.len().saturating_sub(1))
        .map(|p| waiting_bytes(model, p.layout, plan))
        .sum::<Result<usize>>()?;
    Ok(if waiting < head_bytes(model, passes, plan.dtype)? {
        Order::HeadsFirst
    } else {
        Order::OneByOne
    })
}

/// Bytes of top-layer activations the first pass may keep besides its budget
/// (`PassPlan::keep_top_bytes`): the gradients not yet allocated, less the LM head's own and its
/// phase's working set. Until its backward those bytes stand in for gradients that do not exist
/// yet, and the backward frees a kept layer's activations about as fast as it allocates that
/// layer's gradients (the two are of a size at usual sequence lengths), staying inside the
/// head phase's room that is free by then, so the peak stays where the last gradients are
/// added.
fn top_budget(
    model: &CausalLm,
    passes: &[Pass<'_>],
    vars: &[Var],
    acc: &[Option<Tensor>],
    dt: ComputeDtype,
) -> Result<usize> {
    let bytes = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
    let head = model.lm_head().id();
    let unallocated: usize = vars
        .iter()
        .zip(acc)
        .filter(|(v, a)| a.is_none() && v.as_tensor().id() != head)
        .map(|(v, _)| bytes(v.as_tensor()))
        .sum();
    Ok(unallocated.saturating_sub(head_bytes(model, passes, dt)?))
}

/// Bytes a pass holds between its head and its backward, at most (see
/// `recompute::Pending::bytes`).
pub fn waiting_bytes(model: &CausalLm, layout: &ScoreLayout, plan: PassPlan) -> Result<usize> {
    let (b, s) = layout.ids.dims2()?;
    let hidden = model.cfg.hidden_size * model.dtype().size_in_bytes();
    Ok((model.layers.len() + 1) * b * s * hidden + plan.keep_bytes + plan.keep_top_bytes)
}

/// Bytes the LM head's phase holds: its packed copies (bf16) and one chunk of the largest pass.
fn head_bytes(model: &CausalLm, passes: &[Pass<'_>], dt: ComputeDtype) -> Result<usize> {
    let (v, h) = model.lm_head().dims2()?;
    let packed = match dt {
        ComputeDtype::F32 => 0,
        ComputeDtype::Bf16 => 2 * v * h * 2,
    };
    let rows = passes
        .iter()
        .map(|p| p.layout.targets.elem_count())
        .max()
        .unwrap_or(0);
    Ok(packed + head_backward::chunk_bytes(dt, rows, v))
}
