//! Grouped-query self-attention with optional projection biases, optional per-head q/k RMSNorm
//! (Qwen3), RoPE, an additive causal+padding mask and an optional store of earlier positions'
//! keys and values ([`KvStore`]). Query heads are grouped per KV head by reshaping, so K and V
//! are never repeated in memory (head j·g … j·g+g−1 read KV head j, as `repeat_interleave`
//! does).
use super::arch::Features;
use super::config::ModelConfig;
use super::forward::{reduce_dtype, KvStore, WeightProducts};
use super::linear::Linear;
use super::norm::RmsNorm;
use super::rope::Rope;
use super::trace::{self, Op};
use crate::model::kernels::softmax::masked_softmax;
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// Grouped-query self-attention of one decoder layer.
#[derive(Debug, Clone)]
pub struct Attention {
    pub(crate) q_proj: Linear,
    pub(crate) k_proj: Linear,
    pub(crate) v_proj: Linear,
    pub(crate) o_proj: Linear,
    /// RMSNorm over each head of q and of k before RoPE (`q_norm` / `k_norm`, Qwen3).
    pub(crate) q_norm: Option<RmsNorm>,
    pub(crate) k_norm: Option<RmsNorm>,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
}

/// Per-forward inputs shared by every layer.
pub struct AttnInputs<'a> {
    /// RoPE cosines of the positions in this forward.
    pub cos: &'a Tensor,
    /// RoPE sines of the positions in this forward.
    pub sin: &'a Tensor,
    /// Additive mask (b, 1, s, past + s): 0 where visible, a large negative value elsewhere.
    pub mask: &'a Tensor,
}

impl Attention {
    /// Builds the projections (and q/k norms) from `vb`, shaped by `cfg` and `f`.
    pub fn new(cfg: &ModelConfig, f: &Features, vb: VarBuilder) -> Result<Self> {
        let (hidden, heads, kv_heads, head_dim) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.kv_heads(),
            cfg.head_dim(),
        );
        let (q, kv) = (heads * head_dim, kv_heads * head_dim);
        let head_norm = |name: &str| -> Result<Option<RmsNorm>> {
            f.qk_norm
                .then(|| RmsNorm::new(head_dim, cfg.rms_norm_eps, vb.pp(name)))
                .transpose()
        };
        Ok(Self {
            q_proj: Linear::new(hidden, q, f.qkv_bias, vb.pp("q_proj"))?,
            k_proj: Linear::new(hidden, kv, f.qkv_bias, vb.pp("k_proj"))?,
            v_proj: Linear::new(hidden, kv, f.qkv_bias, vb.pp("v_proj"))?,
            o_proj: Linear::new(q, hidden, f.o_bias, vb.pp("o_proj"))?,
            q_norm: head_norm("q_norm")?,
            k_norm: head_norm("k_norm")?,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// The projections: q, k, v, o.
    pub fn linears(&self) -> [&Linear; 4] {
        [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj]
    }

    /// Attends `x` (b, s, hidden) over the stored past and itself; appends k/v to `cache`
    /// (layer `.1` of the store), the products as `products` computes them.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: &Rope,
        inp: &AttnInputs,
        cache: Option<(&mut dyn KvStore, usize)>,
        products: &dyn WeightProducts,
    ) -> Result<Tensor> {
        let mode = products.mode();
        let (b, s, _) = x.dims3()?;
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let g = nh / nkv;
        let per_head = |t: Tensor, norm: &Option<RmsNorm>| match norm {
            Some(n) => {
                trace::forward(|| n.head_op());
                n.forward(&t)
            }
            None => Ok(t),
        };
        let q = self
            .q_proj
            .forward_with(x, products)?
            .reshape((b, s, nh, hd))?;
        let q = per_head(q, &self.q_norm)?.transpose(1, 2)?;
        let k = self
            .k_proj
            .forward_with(x, products)?
            .reshape((b, s, nkv, hd))?;
        let k = per_head(k, &self.k_norm)?.transpose(1, 2)?;
        let v = self
            .v_proj
            .forward_with(x, products)?
            .reshape((b, s, nkv, hd))?
            .transpose(1, 2)?;
        trace::forward(|| Op::Attention);
        let q = rope.apply(&q.contiguous()?, inp.cos, inp.sin, mode)?;
        let k = rope.apply(&k.contiguous()?, inp.cos, inp.sin, mode)?;
        // One group of rows' attention over its keys and values (b rows, their own mask).
        let attend = |q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor| -> Result<Tensor> {
            let b = q.dim(0)?;
            // (b, nh, s, hd) -> (b, nkv, g*s, hd): heads of one group are adjacent.
            let q = q.reshape((b, nkv, g * s, hd))?;
            let scale = 1.0 / (hd as f64).sqrt();
            let att = q.matmul(&k.t()?)?; // (b, nkv, g*s, n)
                                          // Softmax in at least f32, as transformers' eager attention does (fused for f32).
            let dtype = att.dtype();
            let rd = reduce_dtype(dtype);
            let att =
                masked_softmax(&att.to_dtype(rd)?, &mask.to_dtype(rd)?, scale)?.to_dtype(dtype)?;
            let y = att.matmul(v)?; // (b, nkv, g*s, hd)
            y.reshape((b, nh, s, hd))?
                .transpose(1, 2)?
                .reshape((b, s, nh * hd))
        };
        let y = match cache {
            Some((c, layer)) => c.attend(layer, &q, &k, &v, inp.mask, &attend)?,
            None => attend(&q, &k, &v.contiguous()?, inp.mask)?,
        };
        self.o_proj.forward_with(&y, products)
    }
}
