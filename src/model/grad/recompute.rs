//! Gradients of a weighted sum of completion log-probs with activation recomputation
//! (gradient checkpointing): a forward pass without a graph keeps only each decoder layer's
//! input; the backward pass then goes layer by layer from the top, re-running one layer with a
//! graph and back-propagating the gradient of its output. Live memory is one layer's
//! activations plus the layer inputs, instead of every layer's, for one extra forward pass.
//! Gradients are added into the caller's accumulators, so one pass's gradients never exist
//! twice (the plain path holds a whole backward pass's gradients next to the accumulators).
//! Within a byte budget ([`PassPlan::keep_bytes`]) the first forward keeps layers' activations
//! (bottom layer first) and those layers skip their re-run: the same numbers, less compute
//! where activations are small (the extra forward is a quarter of a small model's update).
//!
//! Where every row of a pass continues the same prompt (a node sample's K completions) and
//! [`PassPlan::share_prompt`] allows, the prompt is computed once as one row that the others
//! attend to (`shared_prompt`, [`prompt_part`]).
//!
//! A critic's pass ([`value_forward`], [`ValuePass::backward`]) runs the same forward and
//! layers' backward with a value head on top instead of the LM head: the values at one chosen
//! row per sequence, then, from the caller's seeds d loss / d v, the head's backward by hand
//! (`value_backward`) and the final norm's at those rows only. A value head on the actor's own
//! backbone is read in the log-prob pass instead (`value::ValueTop`, [`forward_and_head_with`]):
//! its gradient joins the LM head's at the final hidden state, so one backward serves both.
use super::accumulators::{take_grads, GradSlots};
use super::head_backward::{head_backward, head_logprobs};
use super::layer_backward::{self, LayerInput};
use super::logprob::ScoreLayout;
use super::packed_weights::{Head, PackedWeights, Products};
pub use super::shared_prompt::prompt_part;
use super::shared_prompt::PromptPart;
use super::token_weights::TokenWeights;
use super::value::{flat_rows, value_columns, ValueTop};
use super::value_backward::value_head_backward;
use crate::model::decoder::attention::AttnInputs;
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::Mode;
use crate::model::decoder::trace::{self, Op};
use crate::model::decoder::value_head::ValueHead;
use crate::model::kernels::add_in_place::scatter_rows_add;
use crate::model::kernels::compute_dtype::{ComputeDtype, Prepared};
use candle_core::{Module, Result, Tensor, Var};

/// What one recomputed pass reports.
#[derive(Debug, Clone, Default)]
pub struct PassStats {
    /// The loss value.
    pub loss: f64,
    /// Seconds in the graph-free forward and the LM head (its forward and backward together,
    /// chunk by chunk; see `head_backward`).
    pub forward_s: f64,
    /// Seconds in the rest: the final norm's backward and every layer's re-run + backward.
    pub backward_s: f64,
    /// Layers whose activations the forward kept (they were not re-run), and their bytes.
    pub kept_layers: usize,
    /// See `kept_layers`.
    pub kept_bytes: usize,
    /// Σ of the entropy of the next-token distribution over the pass's completion tokens
    /// (pads left out), and their count: the mean entropy TRL logs.
    pub entropy_sum: f64,
    /// See `entropy_sum`.
    pub entropy_tokens: f64,
    /// The values a [`ValueTop`] read in this pass, one per row (empty without one).
    pub values: Vec<f32>,
}

/// How a recomputed pass runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassPlan {
    /// The projections' and the LM head's products, forward and backward (`kernels::compute_dtype`).
    pub dtype: ComputeDtype,
    /// Bytes of layer activations the first forward may keep (layers whose activations no
    /// longer fit are re-run in the backward); 0 re-runs every layer.
    pub keep_bytes: usize,
    /// Further bytes of the *top* layers' activations to keep: the layers the backward meets
    /// first, whose activations are freed while the gradients are still being allocated
    /// (`pass_order` gives it to the pass whose backward runs first). Whole layers, counted
    /// by the first kept layer's size.
    pub keep_top_bytes: usize,
    /// Compute a prompt that every row of a pass shares once (`trainer.share_prompt`, see
    /// [`prompt_part`]); else every row whole.
    pub share_prompt: bool,
    /// Bytes of weight copies (bf16 packed, or f32 Wᵀ) a mini-batch of several passes may
    /// hold to prepare each weight once for all of them (`packed_weights`); 0: none.
    pub pack_bytes: usize,
    /// The LM head's logits are multiplied by this before the log-softmax (1 / the sampling
    /// temperature with `trainer.logprob_temperature: sampling`, as TRL scores); 1: as they are.
    pub logit_scale: f64,
}

impl PassPlan {
    /// Products in `dtype`, every layer re-run in the backward, each row computed whole.
    pub fn rerun_all(dtype: ComputeDtype) -> Self {
        Self {
            dtype,
            keep_bytes: 0,
            keep_top_bytes: 0,
            share_prompt: false,
            pack_bytes: 0,
            logit_scale: 1.0,
        }
    }
}

/// Loss = Σ_b coef_b · Σ_t log π(y_bt | …) over the layout's completions (pads count 0).
/// The gradient of every tensor in `vars` is added into `acc`. `coef` has one entry per row
/// of the layout. The products run in f32, every layer re-run (see
/// [`weighted_logprob_grads_in`]).
pub fn weighted_logprob_grads(
    model: &CausalLm,
    layout: &ScoreLayout,
    coef: &[f32],
    vars: &[Var],
    acc: &mut [Option<Tensor>],
) -> Result<PassStats> {
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    weighted_logprob_grads_in(model, layout, coef, vars, acc, plan, None)
}

/// [`weighted_logprob_grads`] run as `plan` says, the products taking their weights from
/// `packed` where a mini-batch packed them once (bf16; else the LM head is packed for this pass
/// alone). `plan.dtype` `Bf16` needs the hand-written layer path (f32 weights on the CPU):
/// elsewhere it is an error rather than a silent f32 update.
pub fn weighted_logprob_grads_in(
    model: &CausalLm,
    layout: &ScoreLayout,
    coef: &[f32],
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
    packed: Option<&PackedWeights>,
) -> Result<PassStats> {
    weighted_logprob_grads_with(
        model, layout, coef, None, None, None, vars, acc, plan, packed,
    )
}

/// [`weighted_logprob_grads_in`] with each token's weight from `tokens` when given (then
/// `coef` is not read; see `token_weights`), each position's entropy weighted by `entropy`
/// when given (rows × completion width, row-major: an entropy bonus's seeds), and a value head
/// read from the same final hidden state when `value` is given (its loss's gradient joined
/// before the final norm's backward; see [`forward_and_head_with`]).
#[allow(clippy::too_many_arguments)]
pub fn weighted_logprob_grads_with(
    model: &CausalLm,
    layout: &ScoreLayout,
    coef: &[f32],
    tokens: Option<&dyn TokenWeights>,
    entropy: Option<&[f32]>,
    value: Option<&ValueTop>,
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
    packed: Option<&PackedWeights>,
) -> Result<PassStats> {
    let head = Head::new(model, plan.dtype, packed)?;
    let pending = forward_and_head_with(
        model, layout, coef, tokens, entropy, value, vars, acc, plan, &head, packed,
    )?;
    drop(head);
    pending.backward(model, vars, acc)
}

/// A pass whose forward and LM head have run: what its layers' backward still needs.
pub struct Pending<'a> {
    layout: &'a ScoreLayout,
    products: Products<'a>,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
    /// Every layer's input, bottom first (the top layer's output is gone: `g` replaced it).
    inputs: Vec<Tensor>,
    /// Per layer, the activations its forward kept (`None`: re-run in the backward).
    kept: Vec<Option<layer_backward::Kept>>,
    /// d loss / d (the top layer's output).
    g: Tensor,
    /// A prompt shared by every row, computed once; the fields above are then those of the
    /// rows after it.
    prompt: Option<PromptPart>,
    stats: PassStats,
}

impl Pending<'_> {
    /// Bytes this pending pass holds: layer inputs, kept activations and the top gradient.
    pub fn bytes(&self) -> usize {
        let t = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        let prompt = self
            .prompt
            .as_ref()
            .map_or(0, |p| p.inputs.iter().map(t).sum::<usize>() + t(&p.g));
        self.inputs.iter().map(t).sum::<usize>() + t(&self.g) + self.stats.kept_bytes + prompt
    }

    /// Per layer, bottom first, whether its activations were kept (it will not re-run).
    pub fn kept_layers(&self) -> Vec<bool> {
        self.kept.iter().map(Option::is_some).collect()
    }

    /// The layers' backward, top to bottom (re-running a layer whose activations were not
    /// kept), then the embedding's gradient rows; every gradient added into `acc`.
    pub fn backward(
        self,
        model: &CausalLm,
        vars: &[Var],
        acc: &mut [Option<Tensor>],
    ) -> Result<PassStats> {
        let start = std::time::Instant::now();
        let Pending {
            layout,
            products,
            cos,
            sin,
            mask,
            mut inputs,
            mut kept,
            mut g,
            mut prompt,
            mut stats,
        } = self;
        let inp = AttnInputs {
            cos: &cos,
            sin: &sin,
            mask: &mask,
        };
        // Layers, top to bottom: re-run one layer, back-propagate d(out) (by hand for f32 on
        // the CPU, else through a graph).
        let slots = GradSlots::new(vars);
        for layer in model.layers.iter().rev() {
            let x = inputs.pop().expect("one input per layer");
            let k = kept.pop().expect("one entry per layer");
            if layer_backward::supported(layer, &x) {
                // With a shared prompt, its row goes through the layer's products with the rows.
                let xp = prompt.as_mut().map(|pp| pp.inputs.pop());
                let xp = xp.map(|x| x.expect("one prompt input per layer"));
                let pinp = prompt.as_ref().map(PromptPart::inp);
                let input = LayerInput {
                    x: &x,
                    inp: &inp,
                    prompt: xp.as_ref().zip(pinp.as_ref()),
                };
                let dyp = prompt.as_ref().map(|pp| &pp.g);
                let (dx, dxp) = layer_backward::layer_backward(
                    layer, &input, &g, dyp, &slots, acc, products, k,
                )?;
                g = dx;
                if let (Some(pp), Some(dxp)) = (prompt.as_mut(), dxp) {
                    pp.g = dxp;
                }
                continue;
            }
            let x = Var::from_tensor(&x)?;
            let y = trace::paused(|| {
                layer.forward(x.as_tensor(), &model.rope, &inp, None, &Mode::Train)
            })?;
            let surrogate = (y * &g)?.sum_all()?;
            let mut grads = surrogate.backward()?;
            drop(surrogate);
            g = grads.remove(x.as_tensor()).ok_or_else(|| {
                candle_core::Error::Msg("no gradient reached a layer input".into())
            })?;
            take_grads(&mut grads, vars, acc)?;
        }

        // Embedding lookup: its gradient rows go straight into the accumulator.
        if let Some(i) = vars
            .iter()
            .position(|v| v.as_tensor().id() == model.embed_tokens.id())
        {
            if acc[i].is_none() {
                acc[i] = Some(model.embed_tokens.zeros_like()?);
            }
            if let Some(a) = &acc[i] {
                trace::backward(|| Op::Embed(model.embed_tokens.id()));
                let rows = |ids: &Tensor, g: &Tensor| -> Result<()> {
                    let (b, s, hd) = g.dims3()?;
                    scatter_rows_add(a, ids, &g.reshape((b * s, hd))?)
                };
                match &prompt {
                    Some(pp) => {
                        rows(&pp.ids, &pp.g)?;
                        let p = pp.ids.dim(1)?;
                        rows(&layout.ids.narrow(1, p, layout.ids.dim(1)? - p)?, &g)?;
                    }
                    None => rows(&layout.ids, &g)?,
                }
            }
        }
        stats.backward_s += start.elapsed().as_secs_f64();
        Ok(stats)
    }
}

/// A pass's forward through the layers, before the final norm: what every top of a pass (the
/// LM head's log-probs, a critic's value head) and the layers' backward need.
struct Layers<'a> {
    layout: &'a ScoreLayout,
    products: Products<'a>,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
    /// Every layer's input, bottom first, then the top layer's output.
    inputs: Vec<Tensor>,
    kept: Vec<Option<layer_backward::Kept>>,
    prompt: Option<PromptPart>,
    /// Columns of the shared prompt part (0 without one): the rows hold the columns after it.
    p: usize,
    kept_layers: usize,
    kept_bytes: usize,
}

/// The forward without a graph, keeping layer inputs and, within `plan.keep_bytes`, layers'
/// activations; the layers' products take their weights from `packed` where it has them.
fn forward_layers<'a>(
    model: &CausalLm,
    layout: &'a ScoreLayout,
    plan: PassPlan,
    packed: Option<&'a PackedWeights>,
) -> Result<Layers<'a>> {
    let dt = plan.dtype;
    let products = Products::with(dt, packed).dropping(layout.dropout.as_ref());
    let embedding = candle_nn::Embedding::new(model.embed_tokens.clone(), model.cfg.hidden_size);
    // With a shared prompt part of P tokens the rows below are the last S = T + C − P columns.
    let split = prompt_part(model, layout, plan.share_prompt)?;
    let p = split.unwrap_or(0);
    let width = layout.ids.dim(1)?;
    let cols = |t: &Tensor, dim: usize| t.narrow(dim, p, width - p)?.contiguous();
    let (ids, pos, mask) = match split {
        Some(_) => (
            cols(&layout.ids, 1)?,
            cols(&layout.pos, 1)?,
            cols(&layout.mask, 2)?,
        ),
        None => (layout.ids.clone(), layout.pos.clone(), layout.mask.clone()),
    };
    let (cos, sin) = model.rope.tables(&pos)?;
    let mask = mask.to_dtype(model.dtype())?;
    let inp = AttnInputs {
        cos: &cos,
        sin: &sin,
        mask: &mask,
    };
    let mut prompt = split
        .map(|p| PromptPart::new(model, layout, &embedding, p))
        .transpose()?;

    // Forward, keeping layer inputs (detached: each layer's graph is freed at once) and the
    // hand-written layers' activations while they fit the budget, bottom first, then those of
    // the top layers that fit `keep_top_bytes` (known once a layer's size is).
    let n = model.layers.len();
    let mut inputs = Vec::with_capacity(n + 1);
    let mut kept: Vec<Option<layer_backward::Kept>> = Vec::with_capacity(n);
    let mut budget = plan.keep_bytes;
    let mut top_from: Option<usize> = None;
    let (mut kept_layers, mut kept_bytes) = (0, 0);
    trace::forward(|| Op::Embed(model.embed_tokens.id()));
    inputs.push(embedding.forward(&ids)?.detach());
    for (i, layer) in model.layers.iter().enumerate() {
        let x = inputs.last().expect("pushed above");
        let supported = layer_backward::supported(layer, x);
        let probe = plan.keep_top_bytes > 0 && top_from.is_none();
        let in_top = top_from.is_some_and(|t| i >= t);
        // With a shared prompt, its row goes through the layer's products with the rows.
        let pinp = prompt.as_ref().map(PromptPart::inp);
        let xp = prompt
            .as_ref()
            .map(|pp| pp.inputs.last().expect("pushed above"));
        let input = LayerInput {
            x,
            inp: &inp,
            prompt: xp.zip(pinp.as_ref()),
        };
        let (y, yp) = if supported && (budget > 0 || probe || in_top) {
            let (y, yp, k) = layer_backward::layer_forward_keep(layer, &input, products)?;
            let top = *top_from.get_or_insert(n - (plan.keep_top_bytes / k.bytes().max(1)).min(n));
            let fits = k.bytes() <= budget;
            budget = if fits { budget - k.bytes() } else { 0 };
            let keep = fits || i >= top;
            if keep {
                kept_layers += 1;
                kept_bytes += k.bytes();
            }
            kept.push(keep.then_some(k));
            (y, yp)
        } else if supported {
            kept.push(None);
            layer_backward::layer_forward(layer, &input, products)?
        } else if dt != ComputeDtype::F32 {
            candle_core::bail!(
                "trainer.compute_dtype {dt} needs f32 weights on the CPU (this model has {:?} \
                 weights on {:?}); set `compute_dtype: f32` or `agents.dtype: f32`",
                model.dtype(),
                model.device().location()
            )
        } else {
            kept.push(None);
            (
                layer.forward(x, &model.rope, &inp, None, &Mode::Train)?,
                None,
            )
        };
        if let (Some(pp), Some(yp)) = (prompt.as_mut(), yp) {
            pp.inputs.push(yp.detach());
        }
        inputs.push(y.detach());
    }

    Ok(Layers {
        layout,
        products,
        cos,
        sin,
        mask,
        inputs,
        kept,
        prompt,
        p,
        kept_layers,
        kept_bytes,
    })
}

/// The first half of a recomputed pass: the forward without a graph (keeping layer inputs and,
/// within `plan.keep_bytes`, layers' activations), then the LM head's loss and gradients with
/// the prepared `head` (its weight gradient added into `acc`) and the final norm's backward.
/// The layers' products take their weights from `packed` where it has them.
#[allow(clippy::too_many_arguments)]
pub fn forward_and_head<'a>(
    model: &CausalLm,
    layout: &'a ScoreLayout,
    coef: &[f32],
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
    head: &Prepared,
    packed: Option<&'a PackedWeights>,
) -> Result<Pending<'a>> {
    forward_and_head_with(
        model, layout, coef, None, None, None, vars, acc, plan, head, packed,
    )
}

/// [`forward_and_head`] with each token's weight from `tokens` when given: the rows'
/// log-probs are scored at the head first (one more pass of the head's logits, no gradient),
/// and the pass's loss is the value `tokens` gives. With `entropy` (one weight per position,
/// rows × completion width) each position's entropy joins the loss with that weight, its
/// gradient seeded in the same fused head backward (`head_backward`), its value added to the
/// pass's loss. With `value` a value head reads the same final hidden state at one column per
/// row (the stats' `values`) and its loss's gradient d loss / d h, from the seeds `value` makes
/// of those values, is added to the LM head's before the final norm's backward: one backward
/// through the norm and the layers for both losses, the head's own gradients into `acc`.
#[allow(clippy::too_many_arguments)]
pub fn forward_and_head_with<'a>(
    model: &CausalLm,
    layout: &'a ScoreLayout,
    coef: &[f32],
    tokens: Option<&dyn TokenWeights>,
    entropy: Option<&[f32]>,
    value: Option<&ValueTop>,
    vars: &[Var],
    acc: &mut [Option<Tensor>],
    plan: PassPlan,
    head: &Prepared,
    packed: Option<&'a PackedWeights>,
) -> Result<Pending<'a>> {
    let dt = plan.dtype;
    let start = std::time::Instant::now();
    let (b, _) = layout.ids.dims2()?;
    if coef.len() != b {
        candle_core::bail!("{} coefficients for {b} rows", coef.len());
    }
    if let Some(e) = entropy.filter(|e| e.len() != b * layout.completion_width) {
        candle_core::bail!(
            "{} entropy weights for {b} rows of {} positions",
            e.len(),
            layout.completion_width
        );
    }
    let Layers {
        products,
        cos,
        sin,
        mask,
        mut inputs,
        kept,
        mut prompt,
        p,
        kept_layers,
        kept_bytes,
        ..
    } = forward_layers(model, layout, plan, packed)?;

    // Head: final norm, then the LM head and log-probs in row chunks (see `head_backward`); the
    // norm's backward gives the gradient w.r.t. the last hidden state.
    if let Some(pp) = prompt.as_mut() {
        // The top layer's prompt output reaches no logit: only its keys and values were read.
        pp.inputs.pop();
    }
    let top = Var::from_tensor(&inputs.pop().expect("one per layer + 1"))?;
    trace::forward(|| model.norm.op());
    let hidden = model.norm.forward(top.as_tensor())?;
    // Column T − 1 + j predicts completion token j (T − 1 − P in the rows after a prompt part).
    let h = hidden.narrow(1, layout.prompt_width - 1 - p, layout.completion_width)?;
    // Logits at temperature T: (h / T) · Wᵀ, so d W and d h (through this product) follow.
    let h = if plan.logit_scale == 1.0 {
        h
    } else {
        h.affine(plan.logit_scale, 0.0)?
    };
    let (_, c, hd) = h.dims3()?;
    let reduce = crate::model::decoder::forward::reduce_dtype(model.dtype());
    let rows = h.reshape((b * c, hd))?;
    let targets = layout.targets.flatten_all()?;
    let mask_vals = layout
        .target_mask
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    let (weights, token_loss) = match tokens {
        None => {
            let c_row = Tensor::from_vec(coef.to_vec(), (b, 1), model.device())?;
            let weights = layout
                .target_mask
                .broadcast_mul(&c_row.to_dtype(layout.target_mask.dtype())?)?
                .flatten_all()?
                .to_dtype(reduce)?;
            (weights, None)
        }
        Some(tw) => {
            let (lp, entropy) = head_logprobs(&rows, head, &targets, dt)?;
            let (w, loss) = tw.weights_with_entropy(&lp, &entropy, &mask_vals, c);
            if w.len() != b * c {
                candle_core::bail!("{} token weights for {} positions", w.len(), b * c);
            }
            let weights = Tensor::from_vec(w, b * c, model.device())?.to_dtype(reduce)?;
            (weights, Some(loss))
        }
    };
    let head_slot = vars
        .iter()
        .position(|v| v.as_tensor().id() == model.lm_head.id());
    trace::forward(|| Op::Head(model.lm_head.id()));
    let mut hg = head_backward(
        &rows,
        head,
        &targets,
        &weights,
        entropy,
        head_slot.map(|i| &mut acc[i]),
        dt,
    )?;
    if let Some(loss) = token_loss {
        hg.loss = loss;
    }
    if entropy.is_some() {
        hg.loss += hg.entropy_term;
    }
    let (mut entropy_sum, mut entropy_tokens) = (0f64, 0f64);
    for (&e, &m) in hg.entropy.iter().zip(&mask_vals) {
        if m != 0.0 {
            entropy_sum += e as f64;
            entropy_tokens += 1.0;
        }
    }
    trace::backward(|| Op::Head(model.lm_head.id()));
    let forward_s = start.elapsed().as_secs_f64();
    let start = std::time::Instant::now();
    let (value_term, values) = match value {
        Some(top) => value_top(model, top, layout, &hidden, p, vars, acc)?,
        None => (None, Vec::new()),
    };
    trace::backward(|| model.norm.op());
    let surrogate = (h * hg.dh.reshape((b, c, hd))?)?.sum_all()?;
    // The value's gradient joins the log-probs' at the final hidden state: one norm backward.
    let surrogate = match value_term {
        Some(v) => (surrogate + v)?,
        None => surrogate,
    };
    let mut grads = surrogate.backward()?;
    drop(surrogate);
    let g = grads
        .remove(top.as_tensor())
        .ok_or_else(|| candle_core::Error::Msg("no gradient reached the last layer".into()))?;
    take_grads(&mut grads, vars, acc)?;
    Ok(Pending {
        layout,
        products,
        cos,
        sin,
        mask,
        inputs,
        kept,
        g,
        prompt,
        stats: PassStats {
            loss: hg.loss,
            forward_s,
            backward_s: start.elapsed().as_secs_f64(),
            kept_layers,
            kept_bytes,
            entropy_sum,
            entropy_tokens,
            values,
        },
    })
}

/// A [`ValueTop`] on a pass's final-normed hidden state `hidden` (b, S, hidden; S the columns
/// after a shared prompt part of `p`): the values at each row's column, the head's backward
/// from `top`'s seeds (its gradients into `acc`), and Σ (h_v · d loss / d h_v) over the value
/// rows, the term whose backward carries the value loss through the final norm.
fn value_top(
    model: &CausalLm,
    top: &ValueTop,
    layout: &ScoreLayout,
    hidden: &Tensor,
    p: usize,
    vars: &[Var],
    acc: &mut [Option<Tensor>],
) -> Result<(Option<Tensor>, Vec<f32>)> {
    let (b, s, hd) = hidden.dims3()?;
    let cols = value_columns(layout, top.at)?;
    let idx = Tensor::new(flat_rows(&cols, s, p)?, model.device())?;
    // RMSNorm normalises each row alone: these are the rows a value pass would norm.
    let h = hidden.reshape((b * s, hd))?.index_select(&idx, 0)?;
    let values: Vec<f32> = top
        .head
        .forward(&h.detach())?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1()?;
    let seeds = top.seeds.seeds(&values);
    if seeds.len() != values.len() {
        candle_core::bail!("{} value seeds for {} values", seeds.len(), values.len());
    }
    let dv = Tensor::new(seeds, model.device())?;
    let dh = value_head_backward(top.head, &h, &dv, &GradSlots::new(vars), acc)?;
    Ok((Some((h * dh)?.sum_all()?), values))
}

/// A critic's recomputed pass whose forward has run: the values at the chosen rows, and what
/// the backward needs once the caller's loss has turned them into seeds d loss / d v.
pub struct ValuePass<'a> {
    layers: Layers<'a>,
    /// The top layer's output (b, S, hidden), the one `Var` of the top's small graph.
    top: Var,
    /// (N, hidden): the chosen rows of `top`, final-normed, in a graph from `top`.
    h: Tensor,
    /// (N) the values read from `h`.
    values: Tensor,
    forward_s: f64,
}

/// The forward of a critic's pass (as [`forward_and_head`]'s, under the same `plan`): the
/// final-normed hidden state of each row of `layout` at its column `cols[r]` (see
/// `value::value_columns`), and the values `head` reads from it. Only the chosen rows go
/// through the final norm (it normalises each row alone).
pub fn value_forward<'a>(
    model: &CausalLm,
    head: &ValueHead,
    layout: &'a ScoreLayout,
    cols: &[usize],
    plan: PassPlan,
    packed: Option<&'a PackedWeights>,
) -> Result<ValuePass<'a>> {
    let start = std::time::Instant::now();
    let (b, _) = layout.ids.dims2()?;
    if cols.len() != b {
        candle_core::bail!("{} value columns for {b} rows", cols.len());
    }
    let mut layers = forward_layers(model, layout, plan, packed)?;
    if let Some(pp) = layers.prompt.as_mut() {
        // The prompt part's columns end before the last prompt token: no value reads them.
        pp.inputs.pop();
    }
    let top = Var::from_tensor(&layers.inputs.pop().expect("one per layer + 1"))?;
    let (_, s, hd) = top.dims3()?;
    let idx = Tensor::new(flat_rows(cols, s, layers.p)?, model.device())?;
    let rows = top
        .as_tensor()
        .reshape((b * s, hd))?
        .index_select(&idx, 0)?;
    trace::forward(|| model.norm.op());
    let h = model.norm.forward(&rows)?;
    let values = head.forward(&h.detach())?;
    Ok(ValuePass {
        layers,
        top,
        h,
        values,
        forward_s: start.elapsed().as_secs_f64(),
    })
}

impl ValuePass<'_> {
    /// (N) the values, one per row.
    pub fn values(&self) -> &Tensor {
        &self.values
    }

    /// The backward from seeds `dv` (N) = d loss / d v: the value head's (by hand,
    /// `value_backward`), the final norm's, then the layers' as for log-probs; the gradient of
    /// every tensor of `vars` (the backbone's and the head's, any subset) added into `acc`.
    /// The stats' `loss` is 0: the caller's loss made the seeds.
    pub fn backward(
        self,
        model: &CausalLm,
        head: &ValueHead,
        dv: &Tensor,
        vars: &[Var],
        acc: &mut [Option<Tensor>],
    ) -> Result<PassStats> {
        let start = std::time::Instant::now();
        let ValuePass {
            layers,
            top,
            h,
            values,
            forward_s,
        } = self;
        if dv.elem_count() != values.elem_count() {
            candle_core::bail!(
                "{} value seeds for {} values",
                dv.elem_count(),
                values.elem_count()
            );
        }
        let slots = GradSlots::new(vars);
        let dh = value_head_backward(head, &h, dv, &slots, acc)?;
        trace::backward(|| model.norm.op());
        let surrogate = (h * dh)?.sum_all()?;
        let mut grads = surrogate.backward()?;
        drop(surrogate);
        let g = grads
            .remove(top.as_tensor())
            .ok_or_else(|| candle_core::Error::Msg("no gradient reached the last layer".into()))?;
        take_grads(&mut grads, vars, acc)?;
        let Layers {
            layout,
            products,
            cos,
            sin,
            mask,
            inputs,
            kept,
            prompt,
            kept_layers,
            kept_bytes,
            ..
        } = layers;
        let pending = Pending {
            layout,
            products,
            cos,
            sin,
            mask,
            inputs,
            kept,
            g,
            prompt,
            stats: PassStats {
                loss: 0.0,
                forward_s,
                backward_s: start.elapsed().as_secs_f64(),
                kept_layers,
                kept_bytes,
                ..Default::default()
            },
        };
        pending.backward(model, vars, acc)
    }
}
