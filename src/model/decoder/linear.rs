//! A linear layer `y = x·Wᵀ (+ b)` over any leading dims, with W stored as in the checkpoint (out, in).
use super::forward::Mode;
use crate::model::kernels::f32_decode;
use crate::model::sample::copies::{
    matmul_bf16, matmul_panels, SamplingCopy, SamplingSlot, SamplingWeights,
};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

/// The most rows of x a decode product takes through the f32 panels (each block of 16 rows
/// streams W again); a prompt's prefill (more rows) runs on the checkpoint-layout weight.
const PANEL_ROWS: usize = 32;

/// A dense layer y = x · Wᵀ (+ b), with W in the checkpoint's (out, in) layout.
#[derive(Debug, Clone)]
pub struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
    /// A copy of W for sampling (contiguous (in, out), where the small-M products against a
    /// transposed view are dominated by packing; or bf16); refreshed after every weight update.
    rollout: SamplingSlot,
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
            rollout: SamplingSlot::default(),
        })
    }

    /// Rebuilds (or drops, with `SamplingWeights::Checkpoint`) the sampling copy of W.
    pub fn refresh_rollout(&self, kind: SamplingWeights) -> Result<()> {
        self.rollout.refresh(&self.weight, kind)
    }

    /// `forward` that uses the sampling copy when one exists: the transposed copy in
    /// `Mode::Infer` and `Mode::Sample`, the bf16 copy and the f32 panels (for up to
    /// [`PANEL_ROWS`] rows) in `Mode::Sample` only.
    pub fn forward_mode(&self, x: &Tensor, mode: Mode) -> Result<Tensor> {
        if !mode.no_grad() {
            return self.apply(x, &self.weight.t()?);
        }
        match self.rollout.get() {
            Some(SamplingCopy::Transposed(wt)) => self.apply(x, &wt),
            Some(SamplingCopy::Bf16(w)) if mode == Mode::Sample => {
                self.with_rows(x, |x2| matmul_bf16(&x2.contiguous()?, &w))
            }
            Some(SamplingCopy::Panels(w))
                if mode == Mode::Sample && x.elem_count() <= PANEL_ROWS * w.cols() =>
            {
                self.with_rows(x, |x2| matmul_panels(x2, &w))
            }
            _ => self.apply_swapped(x, mode),
        }
    }

    /// f applied to x as (rows, in), then the bias, reshaped back to x's leading dims.
    fn with_rows(&self, x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let dims = x.dims();
        let Some(&in_dim) = dims.last() else {
            candle_core::bail!("linear: a scalar input has no feature dimension")
        };
        let rows = x.elem_count() / in_dim.max(1);
        let y = f(&x.reshape((rows, in_dim))?)?;
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out = dims.to_vec();
        let last = out.len() - 1;
        out[last] = y.dim(1)?;
        y.reshape(out)
    }

    /// y = x · Wᵀ (+ b) on the checkpoint-layout weight, without the transposed copies: in
    /// `Mode::Sample` through `f32_decode` (W read once, nothing packed; a row's result does
    /// not depend on the batch), else (W · xᵀ)ᵀ, the contiguous (out, in) weight on the left,
    /// which gemm runs without packing it (scoring's many rows).
    fn apply_swapped(&self, x: &Tensor, mode: Mode) -> Result<Tensor> {
        self.with_rows(x, |x2| {
            if mode == Mode::Sample {
                if let Some(y) = f32_decode::x_wt(x2, &self.weight)? {
                    return Ok(y);
                }
            }
            self.weight
                .matmul(&x2.contiguous()?.t()?)?
                .t()?
                .contiguous()
        })
    }

    /// y = x · wt (+ b) with wt of shape (in, out), over any leading dims of x.
    fn apply(&self, x: &Tensor, wt: &Tensor) -> Result<Tensor> {
        self.with_rows(x, |x2| x2.matmul(wt))
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_mode(x, Mode::Train)
    }
}
