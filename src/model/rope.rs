//! Rotary position embeddings, non-interleaved ("rotate_half") as in transformers' Qwen2, Llama
//! and Qwen3, with per-row absolute positions so left-padded batches get HF's positions. The
//! inverse frequencies come from a [`RopeSpec`] (base and scaling).
use super::mode::Mode;
use super::rope_scaling::RopeSpec;
use candle_core::{DType, Device, Result, Tensor, D};

/// Precomputed RoPE cosine and sine tables.
#[derive(Debug, Clone)]
pub struct Rope {
    /// (max_positions, head_dim / 2), model dtype.
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// Unscaled tables with base `theta` for positions 0..max_positions (for the kernels' tests).
    #[cfg(test)]
    pub fn new(
        head_dim: usize,
        theta: f64,
        max_positions: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        let spec = RopeSpec {
            theta,
            scaling: super::rope_scaling::RopeScaling::None,
        };
        Self::from_spec(&spec, head_dim, max_positions, dtype, dev)
    }

    /// Tables for positions 0..max_positions, angles computed in f32 as transformers does.
    pub fn from_spec(
        spec: &RopeSpec,
        head_dim: usize,
        max_positions: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        let inv = spec.inv_freq(head_dim);
        let half = inv.len();
        let inv = Tensor::from_vec(inv, (1, half), dev)?;
        let pos = Tensor::arange(0u32, max_positions as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((max_positions, 1))?;
        let angles = pos.matmul(&inv)?;
        Ok(Self {
            cos: angles.cos()?.to_dtype(dtype)?,
            sin: angles.sin()?.to_dtype(dtype)?,
        })
    }

    /// Positions the tables cover.
    pub fn max_positions(&self) -> usize {
        self.cos.dims()[0]
    }

    /// Gathers (b, s, head_dim/2) cos and sin for the position ids `pos` (b, s) u32.
    pub fn tables(&self, pos: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, s) = pos.dims2()?;
        let idx = pos.flatten_all()?;
        let half = self.cos.dim(1)?;
        let cos = self.cos.index_select(&idx, 0)?.reshape((b, s, half))?;
        let sin = self.sin.index_select(&idx, 0)?.reshape((b, s, half))?;
        Ok((cos, sin))
    }

    /// Rotates x (b, heads, s, head_dim) with tables from [`Rope::tables`].
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, mode: Mode) -> Result<Tensor> {
        match mode {
            Mode::Infer | Mode::Sample => candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin),
            Mode::Train => {
                if let Some(y) = super::kernels::rope::rope(x, cos, sin)? {
                    return Ok(y);
                }
                let cos = Tensor::cat(&[cos, cos], D::Minus1)?.unsqueeze(1)?;
                let sin = Tensor::cat(&[sin, sin], D::Minus1)?.unsqueeze(1)?;
                x.broadcast_mul(&cos)? + rotate_half(x)?.broadcast_mul(&sin)?
            }
        }
    }
}

fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d - d / 2)?;
    Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)
}
