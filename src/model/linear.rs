//! A linear layer `y = x·Wᵀ (+ b)` over any leading dims, with W stored as in the checkpoint (out, in).
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get((out_dim, in_dim), "weight")?;
        let bias = if bias {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims();
        let in_dim = dims[dims.len() - 1];
        let rows = x.elem_count() / in_dim.max(1);
        let y = x.reshape((rows, in_dim))?.matmul(&self.weight.t()?)?;
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        let mut out = dims.to_vec();
        *out.last_mut().expect("rank >= 1") = y.dim(1)?;
        y.reshape(out)
    }
}
