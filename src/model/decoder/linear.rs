//! A linear layer `y = x·Wᵀ (+ b)` over any leading dims, with W stored as in the checkpoint (out, in),
//! plus a low-rank adapter's s·(x·Aᵀ)·Bᵀ where it carries one (`lora`). A frozen base's W may be
//! held in bf16 or as Q8_0 blocks (`agents.base_dtype`; `kernels::{bf16_weight, q8_weight}`).
use super::forward::{Mode, WeightProducts};
use super::lora::Lora;
use super::trace::{self, Op};
use crate::model::kernels::q8_weight;
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

/// A dense layer y = x · Wᵀ (+ b) (+ s·(x·Aᵀ)·Bᵀ), with W in the checkpoint's (out, in) layout.
#[derive(Debug, Clone)]
pub struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
    /// A low-rank adapter on the frozen W (`adapted::attach`).
    pub(crate) lora: Option<Lora>,
}

impl Linear {
    /// Reads `weight` (and `bias` when asked) from `vb`: (out, in), or a Q8_0 matrix of those
    /// dims (its blocks' bytes, (out, in / 32 · 34) U8).
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = match vb.get((out_dim, in_dim), "weight") {
            Ok(w) => w,
            // Not the dense shape: the only other form a loaded W takes is Q8_0's (asking for
            // it cannot create a variable: the dense request above would have).
            Err(dense) if in_dim.is_multiple_of(q8_weight::BLOCK) => {
                let bytes = in_dim / q8_weight::BLOCK * q8_weight::BLOCK_BYTES;
                match vb.get((out_dim, bytes), "weight") {
                    Ok(w) if q8_weight::is_q8_weight(&w) => w,
                    _ => return Err(dense),
                }
            }
            Err(dense) => return Err(dense),
        };
        let bias = if bias {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Ok(Self {
            weight,
            bias,
            lora: None,
        })
    }

    /// The weight W (out, in).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// (out, in) of W, whichever form it is held in.
    pub fn dims(&self) -> Result<(usize, usize)> {
        q8_weight::logical_dims(&self.weight)
    }

    /// The op this projection is in a trace.
    pub(crate) fn op(&self) -> Op {
        Op::Linear {
            weight: self.weight.id(),
            bias: self.bias.as_ref().map(|b| b.id()),
        }
    }

    /// x · Wᵀ (+ b) (+ the adapter's term) with the product by W as `products` computes it,
    /// over x's leading dims.
    pub fn forward_with(&self, x: &Tensor, products: &dyn WeightProducts) -> Result<Tensor> {
        let dims = x.dims();
        let Some(&in_dim) = dims.last() else {
            candle_core::bail!("linear: a scalar input has no feature dimension")
        };
        let rows = x.elem_count() / in_dim.max(1);
        trace::forward(|| self.op());
        let x2 = x.reshape((rows, in_dim))?;
        let y = products.x_wt(&x2, &self.weight)?;
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        // Rows of several adapted models on this (shared, frozen) W: each group takes its own
        // model's adapter, and this model's own is not read.
        let y = match (products.group_adapters(&self.weight), &self.lora) {
            (Some(groups), _) => groups.add_to(&x2, &y)?,
            (None, Some(l)) => l.add_to(&x2, &y, products.lora_dropout())?,
            (None, None) => y,
        };
        let mut out = dims.to_vec();
        let last = out.len() - 1;
        out[last] = y.dim(1)?;
        y.reshape(out)
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, &Mode::Train)
    }
}
