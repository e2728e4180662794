//! A linear layer `y = x·Wᵀ (+ b)` over any leading dims, with W stored as in the checkpoint (out, in).
use super::forward::{Mode, WeightProducts};
use super::trace::{self, Op};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

/// A dense layer y = x · Wᵀ (+ b), with W in the checkpoint's (out, in) layout.
#[derive(Debug, Clone)]
pub struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
}

impl Linear {
    /// Reads `weight` (and `bias` when asked) from `vb`.
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get((out_dim, in_dim), "weight")?;
        let bias = if bias {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    /// The weight W (out, in).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The op this projection is in a trace.
    pub(crate) fn op(&self) -> Op {
        Op::Linear {
            weight: self.weight.id(),
            bias: self.bias.as_ref().map(|b| b.id()),
        }
    }

    /// x · Wᵀ (+ b) with the product as `products` computes it, over x's leading dims.
    pub fn forward_with(&self, x: &Tensor, products: &dyn WeightProducts) -> Result<Tensor> {
        let dims = x.dims();
        let Some(&in_dim) = dims.last() else {
            candle_core::bail!("linear: a scalar input has no feature dimension")
        };
        let rows = x.elem_count() / in_dim.max(1);
        trace::forward(|| self.op());
        let y = products.x_wt(&x.reshape((rows, in_dim))?, &self.weight)?;
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
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
