//! A prompt that every row of an update pass shares (a node sample's K completions), computed
//! once: its first T − 1 tokens go through each layer as one row, packed into the same
//! products as the rows (the prompt's last token, whose logits predict the first completion
//! token, then their completions), which attend to that row's keys and values before their
//! own. In the backward the rows send the gradients of those keys and values back, summed over
//! the rows, into the prompt row's own attention backward. The same sums as K whole rows up
//! to float rounding, for (K − 1)·(T − 1) fewer positions in every product
//! (`trainer.share_prompt`; the passes run in `recompute`, the layers in `layer_backward`,
//! their attention in `attention_backward`).
use super::layer_backward;
use super::logprob::ScoreLayout;
use crate::model::decoder::attention::AttnInputs;
use crate::model::decoder::causal_lm::CausalLm;
use candle_core::{Module, Result, Tensor};

/// The shared prompt's part of a pass: its first P = T − 1 tokens as one row.
pub(crate) struct PromptPart {
    /// (1, P) token ids, RoPE tables and the (1, 1, P, P) causal mask.
    pub ids: Tensor,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
    /// Every layer's input (1, P, h), bottom first.
    pub inputs: Vec<Tensor>,
    /// d loss / d (the layer output above), (1, P, h).
    pub g: Tensor,
}

impl PromptPart {
    /// The first `p` columns of `layout`'s first row, embedded: the prompt part's input to the
    /// bottom layer, its gradient zero.
    pub fn new(
        model: &CausalLm,
        layout: &ScoreLayout,
        embedding: &candle_nn::Embedding,
        p: usize,
    ) -> Result<Self> {
        let first = |t: &Tensor| t.narrow(0, 0, 1)?.narrow(1, 0, p)?.contiguous();
        let ids = first(&layout.ids)?;
        let (cos, sin) = model.rope.tables(&first(&layout.pos)?)?;
        let mask = layout
            .mask
            .narrow(0, 0, 1)?
            .narrow(2, 0, p)?
            .narrow(3, 0, p)?
            .to_dtype(model.dtype())?
            .contiguous()?;
        let x = embedding.forward(&ids)?.detach();
        Ok(Self {
            g: x.zeros_like()?,
            inputs: vec![x],
            ids,
            cos,
            sin,
            mask,
        })
    }

    /// The prompt row's attention inputs.
    pub fn inp(&self) -> AttnInputs<'_> {
        AttnInputs {
            cos: &self.cos,
            sin: &self.sin,
            mask: &self.mask,
        }
    }
}

/// Whether `layout`'s rows are computed as a shared prompt and the rows after it: with
/// `share`, at least two rows continuing one prompt of two tokens or more, and every layer on
/// the hand-written path (f32 weights on the CPU). Returns the prompt part's length P = T − 1.
/// Packed into the rows' products, the prompt's row costs only two copies of the layer's
/// activations and a second small attention, so even short prompts gain.
pub fn prompt_part(model: &CausalLm, layout: &ScoreLayout, share: bool) -> Result<Option<usize>> {
    let (b, _) = layout.ids.dims2()?;
    // Under LoRA dropout each row draws its own masks over the prompt's positions too (as
    // K whole rows do in PEFT), so the rows' prompt activations differ: nothing to share.
    let dropped = layout.dropout.is_some()
        && model
            .layers
            .iter()
            .flat_map(|l| l.linears())
            .any(|l| l.lora.as_ref().is_some_and(|lo| lo.dropout > 0.0));
    if !share || !layout.shared_prompt || dropped || b < 2 || layout.prompt_width < 2 {
        return Ok(None);
    }
    let p = layout.prompt_width - 1;
    let probe = Tensor::zeros((1, 1, model.cfg.hidden_size), model.dtype(), model.device())?;
    let all = model
        .layers
        .iter()
        .all(|l| layer_backward::supported(l, &probe));
    Ok(all.then_some(p))
}
