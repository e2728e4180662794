//! Grouped-query self-attention with q/k/v biases, RoPE, an additive causal+padding mask and an
//! optional KV cache. Query heads are grouped per KV head by reshaping, so K and V are never
//! repeated in memory (head j·g … j·g+g−1 read KV head j, as `repeat_interleave` does).
use super::kernels::softmax::masked_softmax;
use super::kv_cache::KvCache;
use super::linear::Linear;
use super::mode::{reduce_dtype, Mode};
use super::rope::Rope;
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

#[derive(Debug, Clone)]
pub struct Attention {
    pub(super) q_proj: Linear,
    pub(super) k_proj: Linear,
    pub(super) v_proj: Linear,
    pub(super) o_proj: Linear,
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    pub(super) head_dim: usize,
}

/// Per-forward inputs shared by every layer.
pub struct AttnInputs<'a> {
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    /// Additive mask (b, 1, s, past + s): 0 where visible, a large negative value elsewhere.
    pub mask: &'a Tensor,
}

impl Attention {
    pub fn new(
        hidden: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        Ok(Self {
            q_proj: Linear::new(hidden, heads * head_dim, true, vb.pp("q_proj"))?,
            k_proj: Linear::new(hidden, kv_heads * head_dim, true, vb.pp("k_proj"))?,
            v_proj: Linear::new(hidden, kv_heads * head_dim, true, vb.pp("v_proj"))?,
            o_proj: Linear::new(heads * head_dim, hidden, false, vb.pp("o_proj"))?,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// Rebuilds (or drops) the projections' sampling copies.
    pub fn refresh_rollout(&self, enabled: bool) -> Result<()> {
        for l in [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj] {
            l.refresh_rollout(enabled)?;
        }
        Ok(())
    }

    pub fn forward(
        &self,
        x: &Tensor,
        rope: &Rope,
        inp: &AttnInputs,
        cache: Option<(&mut KvCache, usize)>,
        mode: Mode,
    ) -> Result<Tensor> {
        let (b, s, _) = x.dims3()?;
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let g = nh / nkv;
        let q = self
            .q_proj
            .forward_mode(x, mode)?
            .reshape((b, s, nh, hd))?
            .transpose(1, 2)?;
        let k = self
            .k_proj
            .forward_mode(x, mode)?
            .reshape((b, s, nkv, hd))?
            .transpose(1, 2)?;
        let v = self
            .v_proj
            .forward_mode(x, mode)?
            .reshape((b, s, nkv, hd))?
            .transpose(1, 2)?;
        let q = rope.apply(&q.contiguous()?, inp.cos, inp.sin, mode)?;
        let k = rope.apply(&k.contiguous()?, inp.cos, inp.sin, mode)?;
        let (k, v) = match cache {
            Some((c, layer)) => c.append(layer, &k, &v)?,
            None => (k, v.contiguous()?),
        };
        // (b, nh, s, hd) -> (b, nkv, g*s, hd): heads of one group are adjacent.
        let q = q.reshape((b, nkv, g * s, hd))?;
        let scale = 1.0 / (hd as f64).sqrt();
        let att = q.matmul(&k.t()?)?; // (b, nkv, g*s, n)
                                      // Softmax in at least f32, as transformers' eager attention does (fused for f32).
        let dtype = att.dtype();
        let rd = reduce_dtype(dtype);
        let att =
            masked_softmax(&att.to_dtype(rd)?, &inp.mask.to_dtype(rd)?, scale)?.to_dtype(dtype)?;
        let y = att.matmul(&v)?; // (b, nkv, g*s, hd)
        let y = y
            .reshape((b, nh, s, hd))?
            .transpose(1, 2)?
            .reshape((b, s, nh * hd))?;
        self.o_proj.forward_mode(&y, mode)
    }
}
