//! RMSNorm (`model.layers.{i}.{input,post_attention}_layernorm`, `model.norm`): w · x / sqrt(mean(x²) + eps).
use super::forward::reduce_dtype;
use super::trace::Op;
use candle_core::{Result, Tensor, D};
use candle_nn::VarBuilder;

/// An RMSNorm's weight and ε.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    pub(crate) weight: Tensor,
    pub(crate) eps: f64,
}

impl RmsNorm {
    /// Reads `weight` ([size]) from `vb`.
    pub fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb.get(size, "weight")?,
            eps,
        })
    }

    /// The op this norm is in a trace, over whole rows.
    pub(crate) fn op(&self) -> Op {
        Op::Norm(self.weight.id())
    }

    /// The op this norm is in a trace, over each head of q or k.
    pub(crate) fn head_op(&self) -> Op {
        Op::HeadNorm(self.weight.id())
    }

    /// Normalises over the last dimension, in at least f32 precision. The same (differentiable)
    /// op trains and samples: f32 takes the fused kernel.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        if crate::model::kernels::fusable(&[x, &self.weight]) {
            return crate::model::kernels::rms_norm::rms_norm(x, &self.weight, self.eps);
        }
        // Other dtypes: normalise in f32, then scale in the model dtype, as transformers does.
        let xf = x.to_dtype(reduce_dtype(dtype))?;
        let ms = xf.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = xf
            .broadcast_div(&(ms + self.eps)?.sqrt()?)?
            .to_dtype(dtype)?;
        normed.broadcast_mul(&self.weight)
    }
}
