//! The order in which a mini-batch's recomputed passes run. One after another, every pass
//! after the first runs its LM head next to all the gradients the earlier passes accumulated;
//! **heads first**, every pass's forward and LM head run before any pass's layers go backward,
//! so the head's working set (in bf16 its two packed copies and a chunk's logits: 0.74 GB at
//! Qwen2.5-0.5B) never coexists with the layers' gradients (1.44 GB there), at the price of
//! holding the waiting passes' layer inputs and kept activations until their backward. The
//! order with the lower peak is taken per mini-batch; heads first also packs the head once per
//! mini-batch instead of once per pass. Either order adds the same terms into the same
//! accumulators; only the tied embedding/head accumulator sums them in another order.
use super::causal_lm::CausalLm;
use super::compute::{ComputeDtype, Prepared};
use super::head_grad;
use super::logprob::ScoreLayout;
use super::recompute::{forward_and_head, PassPlan, PassStats};
use candle_core::{Result, Tensor, Var};

/// One pass of a mini-batch: its rows and each row's loss coefficient.
pub struct Pass<'a> {
    /// The rows (prompts and completions) of the pass.
    pub layout: &'a ScoreLayout,
    /// One coefficient per row (see `recompute::weighted_logprob_grads`).
    pub coef: Vec<f32>,
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

/// [`run_passes`] in a given order.
pub fn run_passes_in(
    order: Order,
    model: &CausalLm,
    passes: &[Pass<'_>],
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
) -> Result<Vec<PassStats>> {
    let mut stats = Vec::with_capacity(passes.len());
    match order {
        Order::OneByOne => {
            for p in passes {
                let head = Prepared::new(&model.lm_head, plan.dtype)?;
                let pending = forward_and_head(model, p.layout, &p.coef, vars, acc, plan, &head)?;
                drop(head);
                stats.push(pending.backward(model, vars, acc)?);
            }
        }
        Order::HeadsFirst => {
            let head = Prepared::new(&model.lm_head, plan.dtype)?;
            let mut pending = Vec::with_capacity(passes.len());
            for p in passes {
                pending.push(forward_and_head(
                    model, p.layout, &p.coef, vars, acc, plan, &head,
                )?);
            }
            drop(head);
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
/// only where it surely lowers the peak: at Qwen2.5-0.5B in bf16 the first of two 8-sequence
/// passes waits with ≤ 0.2 GB against a 0.74 GB head phase; in f32 (no packed head) and on
/// small models with many passes the order stays one by one.
pub fn choose(model: &CausalLm, passes: &[Pass<'_>], plan: PassPlan) -> Result<Order> {
    let waiting = passes
        .iter()
        .take(passes.len().saturating_sub(1))
        .map(|p| waiting_bytes(model, p.layout, plan))
        .sum::<Result<usize>>()?;
    Ok(if waiting < head_bytes(model, plan.dtype)? {
        Order::HeadsFirst
    } else {
        Order::OneByOne
    })
}

/// Bytes a pass holds between its head and its backward, at most (see
/// `recompute::Pending::bytes`).
pub fn waiting_bytes(model: &CausalLm, layout: &ScoreLayout, plan: PassPlan) -> Result<usize> {
    let (b, s) = layout.ids.dims2()?;
    let hidden = model.cfg.hidden_size * model.dtype().size_in_bytes();
    Ok((model.layers.len() + 1) * b * s * hidden + plan.keep_bytes)
}

/// Bytes the LM head's phase holds: its packed copies (bf16) and one chunk.
fn head_bytes(model: &CausalLm, dt: ComputeDtype) -> Result<usize> {
    let (v, h) = model.lm_head.dims2()?;
    let packed = match dt {
        ComputeDtype::F32 => 0,
        ComputeDtype::Bf16 => 2 * v * h * 2,
    };
    Ok(packed + head_grad::chunk_bytes(dt))
}
