//! A linear layer `y = x·Wᵀ (+ b)` over any leading dims, with W stored as in the checkpoint (out, in).
use super::mode::Mode;
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use std::sync::{Arc, RwLock};

/// A dense layer y = x · Wᵀ (+ b), with W in the checkpoint's (out, in) layout.
#[derive(Debug, Clone)]
pub struct Linear {
    pub(super) weight: Tensor,
    pub(super) bias: Option<Tensor>,
    /// A contiguous (in, out) copy of W for sampling, where the small-M products against a
    /// transposed view are dominated by packing; refreshed after every weight update.
    rollout: Arc<RwLock<Option<Tensor>>>,
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
            rollout: Arc::new(RwLock::new(None)),
        })
    }

    /// Rebuilds (or drops, with `enabled = false`) the sampling copy of W.
    pub fn refresh_rollout(&self, enabled: bool) -> Result<()> {
        let copy = if enabled {
            Some(self.weight.detach().t()?.contiguous()?)
        } else {
            None
        };
        if let Ok(mut slot) = self.rollout.write() {
            *slot = copy;
        }
        Ok(())
    }

    /// `forward` that uses the sampling copy in `Mode::Infer` when one exists.
    pub fn forward_mode(&self, x: &Tensor, mode: Mode) -> Result<Tensor> {
        if mode == Mode::Infer {
            if let Ok(slot) = self.rollout.read() {
                if let Some(wt) = slot.as_ref() {
                    return self.apply(x, wt);
                }
            }
        }
        if mode == Mode::Infer {
            return self.apply_swapped(x);
        }
        self.apply(x, &self.weight.t()?)
    }

    /// y = (W · xᵀ)ᵀ (+ b): the same product with the contiguous (out, in) weight on the left,
    /// which gemm runs without packing it; for sampling without the transposed copies.
    fn apply_swapped(&self, x: &Tensor) -> Result<Tensor> {
        self.rows_apply(x, |x2| {
            self.weight
                .matmul(&x2.contiguous()?.t()?)?
                .t()?
                .contiguous()
        })
    }

    /// y = x · wt (+ b) with wt of shape (in, out), over any leading dims of x.
    fn apply(&self, x: &Tensor, wt: &Tensor) -> Result<Tensor> {
        self.rows_apply(x, |x2| x2.matmul(wt))
    }

    /// `x` flattened to (rows, in), `product` of it (rows, out), the bias added, and the
    /// leading dims of `x` restored.
    fn rows_apply(
        &self,
        x: &Tensor,
        product: impl Fn(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let dims = x.dims();
        let Some(&in_dim) = dims.last() else {
            candle_core::bail!("linear: a scalar input has no feature dimension")
        };
        let rows = x.elem_count() / in_dim.max(1);
        let y = product(&x.reshape((rows, in_dim))?)?;
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
        self.forward_mode(x, Mode::Train)
    }
}
