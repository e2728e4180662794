//! A linear layer `y = x·Wᵀ (+ b)` over any leading dims, with W stored as in the checkpoint (out, in),
//! plus a low-rank adapter's s·(x·Aᵀ)·Bᵀ where it carries one (`lora`).
use super::forward::{Mode, WeightProducts};
use super::lora::Lora;
use super::trace::{self, Op};
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
    /// Reads `weight` (and `bias` when asked) from `vb`.
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get((out_dim, in_dim), "weight")?;
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
        let y = match &self.lora {
            Some(l) => l.add_to(&x2, &y)?,
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
