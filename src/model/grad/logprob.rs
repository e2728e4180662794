//! Per-token log-probabilities of completions given prompts, in one batched forward over
//! left-padded prompt ⊕ right-padded completion; differentiable w.r.t. every weight in
//! `Mode::Train`. Logits are computed only at the positions that predict completion tokens.
use crate::model::decoder::batch::{causal_mask, position_ids};
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::WeightProducts;
use crate::model::decoder::lora_dropout::LoraDropout;
use candle_core::{Result, Tensor};

/// A prompt/completion batch laid out for scoring.
#[derive(Debug, Clone)]
pub struct ScoreLayout {
    /// (b, T + C) u32: left-padded prompts then right-padded completions.
    pub ids: Tensor,
    /// (b, T + C) position ids (counting real tokens only).
    pub pos: Tensor,
    /// Additive causal mask that also hides the padding.
    pub mask: Tensor,
    /// (b, C) u32 completion ids (pads = 0) and (b, C) f32 mask (1 = real token).
    pub targets: Tensor,
    /// See `targets`.
    pub target_mask: Tensor,
    /// T: the longest prompt.
    pub prompt_width: usize,
    /// C: the longest completion (at least 1).
    pub completion_width: usize,
    /// Every row continues the same prompt (a node sample's completions): the update may
    /// compute the prompt once (see `recompute`).
    pub shared_prompt: bool,
    /// An update pass's LoRA dropout masks over these rows (PEFT's train mode; see
    /// `decoder::lora_dropout`): read by the recomputed pass; `None` (scoring) drops nothing.
    pub dropout: Option<LoraDropout>,
}

impl ScoreLayout {
    /// Lays out `prompts` (none empty) and their `completions`, padded with `pad_id`.
    pub fn new(
        model: &CausalLm,
        prompts: &[&[u32]],
        completions: &[&[u32]],
        pad_id: u32,
    ) -> Result<Self> {
        let dev = model.device();
        let b = prompts.len();
        if completions.len() != b {
            candle_core::bail!("{} prompts but {} completions", b, completions.len());
        }
        let t = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        let c = completions
            .iter()
            .map(|p| p.len())
            .max()
            .unwrap_or(0)
            .max(1);
        if prompts.iter().any(|p| p.is_empty()) {
            candle_core::bail!(
                "an empty prompt cannot be scored: a completion needs at least one prompt token"
            );
        }
        let mut ids = Vec::with_capacity(b * (t + c));
        let mut valid = Vec::with_capacity(b);
        let mut targets = Vec::with_capacity(b * c);
        let mut tmask = Vec::with_capacity(b * c);
        for (p, comp) in prompts.iter().zip(completions) {
            let mut row_valid = vec![false; t - p.len()];
            ids.extend(std::iter::repeat_n(pad_id, t - p.len()));
            ids.extend_from_slice(p);
            row_valid.extend(std::iter::repeat_n(true, p.len()));
            ids.extend_from_slice(comp);
            ids.extend(std::iter::repeat_n(pad_id, c - comp.len()));
            row_valid.extend(std::iter::repeat_n(true, comp.len()));
            row_valid.extend(std::iter::repeat_n(false, c - comp.len()));
            targets.extend_from_slice(comp);
            targets.extend(std::iter::repeat_n(0u32, c - comp.len()));
            tmask.extend(std::iter::repeat_n(1f32, comp.len()));
            tmask.extend(std::iter::repeat_n(0f32, c - comp.len()));
            valid.push(row_valid);
        }
        if t + c > model.max_positions() {
            candle_core::bail!(
                "sequence of {} tokens exceeds the model's {} positions",
                t + c,
                model.max_positions()
            );
        }
        Ok(Self {
            ids: Tensor::from_vec(ids, (b, t + c), dev)?,
            pos: position_ids(&valid, t + c, dev)?,
            mask: causal_mask(&valid, t + c, dev)?,
            targets: Tensor::from_vec(targets, (b, c), dev)?,
            target_mask: Tensor::from_vec(tmask, (b, c), dev)?,
            prompt_width: t,
            completion_width: c,
            shared_prompt: prompts.windows(2).all(|w| w[0] == w[1]),
            dropout: None,
        })
    }
}

/// (b, C) log π(y_t | prompt, y_<t), exactly 0 where the completion is padding. The layers'
/// products as `products` computes them (`Mode::Train` to differentiate), the LM head's always
/// on the weights themselves.
pub fn completion_logprobs(
    model: &CausalLm,
    layout: &ScoreLayout,
    products: impl WeightProducts,
) -> Result<Tensor> {
    completion_logprobs_scaled(model, layout, products, 1.0)
}

/// [`completion_logprobs`] with the logits multiplied by `logit_scale` first (1 / T: the
/// log-probs at temperature T); 1 is [`completion_logprobs`] exactly.
pub fn completion_logprobs_scaled(
    model: &CausalLm,
    layout: &ScoreLayout,
    products: impl WeightProducts,
    logit_scale: f64,
) -> Result<Tensor> {
    let logits = completion_logits(model, layout, products, logit_scale)?;
    let lp = token_logprobs(&logits, &layout.targets)?;
    let mask = layout.target_mask.to_dtype(lp.dtype())?;
    lp * mask
}

/// (b, C, V) logits at the positions that predict completion tokens, multiplied by
/// `logit_scale`, through the LM head's graph.
fn completion_logits(
    model: &CausalLm,
    layout: &ScoreLayout,
    products: impl WeightProducts,
    logit_scale: f64,
) -> Result<Tensor> {
    let hidden = model.hidden(&layout.ids, &layout.pos, &layout.mask, None, products)?;
    // Position T-1+j predicts completion token j.
    let h = hidden.narrow(1, layout.prompt_width - 1, layout.completion_width)?;
    let logits = model.logits(&h)?;
    match logit_scale == 1.0 {
        true => Ok(logits),
        false => logits.affine(logit_scale, 0.0),
    }
}

/// [`completion_logprobs_scaled`] and, in the same graph from the same logits, the entropy
/// −Σ_j p_j·log p_j of each position's next-token distribution ((b, C), 0 at padding): what an
/// entropy bonus differentiates on the path without recompute. The entropy holds the
/// vocabulary-wide log-softmax in the graph (the recomputed path seeds it in the fused head
/// backward instead); the log-probs are [`completion_logprobs_scaled`]'s bits.
pub fn completion_logprobs_entropy_scaled(
    model: &CausalLm,
    layout: &ScoreLayout,
    products: impl WeightProducts,
    logit_scale: f64,
) -> Result<(Tensor, Tensor)> {
    let logits = completion_logits(model, layout, products, logit_scale)?;
    let lp = token_logprobs(&logits, &layout.targets)?;
    let mask = layout.target_mask.to_dtype(lp.dtype())?;
    let wide = logits.to_dtype(crate::model::decoder::forward::reduce_dtype(logits.dtype()))?;
    let logp = candle_nn::ops::log_softmax(&wide, candle_core::D::Minus1)?;
    let ent = (logp.exp()? * &logp)?
        .sum(candle_core::D::Minus1)?
        .neg()?
        .to_dtype(lp.dtype())?;
    Ok(((lp * &mask)?, (ent * mask)?))
}

/// log softmax(logits)[target] for every position: logits (b, s, V), targets (b, s) u32 → (b, s).
/// Computed in at least f32 by one fused op (see `kernels::token_logprob`), never materialising the
/// vocabulary-wide log-probs.
pub fn token_logprobs(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logits = logits.to_dtype(crate::model::decoder::forward::reduce_dtype(logits.dtype()))?;
    let (b, s, v) = logits.dims3()?;
    let rows = crate::model::kernels::token_logprob::token_logprob_rows(
        &logits.reshape((b * s, v))?,
        &targets.flatten_all()?,
    )?;
    rows.reshape((b, s))
}

/// (b × C) log π(y_t | …) and the entropy of each position's next-token distribution, row-major
/// (values at padding mean nothing), without a gradient: the layers as `products` computes them
/// (`Mode::Infer` to score), the logits multiplied by `logit_scale` (1 / T) first, one pass of
/// the head whose softmax gives both.
pub fn completion_logprobs_entropies(
    model: &CausalLm,
    layout: &ScoreLayout,
    products: impl WeightProducts + Copy,
    logit_scale: f64,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let hidden = model.hidden(&layout.ids, &layout.pos, &layout.mask, None, products)?;
    let h = hidden.narrow(1, layout.prompt_width - 1, layout.completion_width)?;
    let logits = model.logits_mode(&h, products)?;
    let logits = if logit_scale == 1.0 {
        logits
    } else {
        logits.affine(logit_scale, 0.0)?
    };
    let logits = logits.to_dtype(crate::model::decoder::forward::reduce_dtype(logits.dtype()))?;
    let (b, s, v) = logits.dims3()?;
    crate::model::kernels::token_logprob::logprob_entropy_rows(
        &logits.reshape((b * s, v))?,
        &layout.targets.flatten_all()?,
    )
}
