//! A critic's forward: the final (normed) hidden state at one chosen column per row, without
//! the LM head (a critic never needs logits), and the values a [`ValueHead`] reads from it.
//! CoMLRL 1.4.3 reads a V critic at the last prompt token (`_value_on_prompt_only`:
//! `values[:, prompt_len - 1]`) and a Q critic at the last token of prompt + response
//! (`_value_on_full_sequence`: `values[:, -1]` of the unpadded sequence). On a
//! [`ScoreLayout`] (left-padded prompts, right-padded completions) those are column T − 1 and
//! column T − 1 + (the row's completion length). The causal mask makes the first the same
//! whether or not the completions are laid out after the prompts.
use super::logprob::ScoreLayout;
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::WeightProducts;
use crate::model::decoder::value_head::ValueHead;
use candle_core::{Result, Tensor};

/// Which token's hidden state a value reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueAt {
    /// The last prompt token: V(h), the state before the action (CoMLRL `critic_type: v`).
    PromptEnd,
    /// The last token of prompt + completion: Q(h, a) (CoMLRL `critic_type: q`).
    SequenceEnd,
}

/// d loss / d v of the values a pass reads, from the values themselves: a value loss seeded in
/// the pass that reads it ([`ValueTop`]). Each seed may depend only on its own row's value (a
/// mean over a mini-batch of passes divides by a count the caller knows).
pub trait ValueSeeds {
    /// One seed per value, in the pass's row order.
    fn seeds(&self, values: &[f32]) -> Vec<f32>;
}

/// A value head read on top of a log-prob pass (a value head on the actor's own backbone):
/// the pass's final hidden state is computed once, the head reads it at the column `at` gives
/// each row, and its gradient joins the LM head's at the final hidden state, before the final
/// norm's backward, so one backward through the layers serves both losses
/// (`recompute::forward_and_head_with`). Every value row must lie inside the pass's rows: V's
/// last prompt token always does; Q's last token does where the pass's completion is the one
/// the value reads.
pub struct ValueTop<'a> {
    /// The value head.
    pub head: &'a ValueHead,
    /// Which token of each row it reads.
    pub at: ValueAt,
    /// The value loss's seeds.
    pub seeds: Box<dyn ValueSeeds + 'a>,
}

/// The column of each row of `layout` that a value `at` reads.
pub fn value_columns(layout: &ScoreLayout, at: ValueAt) -> Result<Vec<usize>> {
    let (b, _) = layout.ids.dims2()?;
    let last_prompt = layout.prompt_width - 1;
    Ok(match at {
        ValueAt::PromptEnd => vec![last_prompt; b],
        ValueAt::SequenceEnd => layout
            .target_mask
            .to_dtype(candle_core::DType::F32)?
            .to_vec2::<f32>()?
            .iter()
            .map(|m| last_prompt + m.iter().filter(|&&x| x > 0.0).count())
            .collect(),
    })
}

/// Flat row indices r · `width` + `cols[r]` into a (b · width, …) view, checked.
pub(crate) fn flat_rows(cols: &[usize], width: usize, offset: usize) -> Result<Vec<u32>> {
    cols.iter()
        .enumerate()
        .map(|(r, &c)| {
            if c < offset || c - offset >= width {
                candle_core::bail!(
                    "value column {c} of row {r} outside {offset}..{}",
                    offset + width
                );
            }
            u32::try_from(r * width + c - offset)
                .map_err(|_| candle_core::Error::Msg("value row index overflows u32".into()))
        })
        .collect()
}

/// (b, hidden): the final-normed hidden state of each row of `layout` at its column `cols[r]`,
/// the layers' products as `products` computes them (`Mode::Train` to differentiate).
pub fn hidden_at(
    model: &CausalLm,
    layout: &ScoreLayout,
    cols: &[usize],
    products: impl WeightProducts,
) -> Result<Tensor> {
    let (b, s) = layout.ids.dims2()?;
    if cols.len() != b {
        candle_core::bail!("{} value columns for {b} rows", cols.len());
    }
    let hidden = model.hidden(&layout.ids, &layout.pos, &layout.mask, None, products)?;
    let hd = hidden.dim(2)?;
    let idx = Tensor::new(flat_rows(cols, s, 0)?, hidden.device())?;
    hidden.reshape((b * s, hd))?.index_select(&idx, 0)
}

/// (b) values `head` reads at `cols` (see [`hidden_at`]).
pub fn values(
    model: &CausalLm,
    head: &ValueHead,
    layout: &ScoreLayout,
    cols: &[usize],
    products: impl WeightProducts,
) -> Result<Tensor> {
    head.forward(&hidden_at(model, layout, cols, products)?)
}
