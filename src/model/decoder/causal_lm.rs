//! The decoder-only causal LM of every supported architecture (Qwen2, Llama, Qwen3; see `arch`):
//! embeddings, decoder layers, final norm and (tied or untied) LM head, switched by the config's
//! [`Features`]. Built from a `VarBuilder` whose paths are the HF checkpoint's tensor names, so
//! the same weights train (through `Mode::Train`) and sample (through `Mode::Infer`).
use super::arch::Features;
use super::attention::{Attention, AttnInputs};
use super::config::ModelConfig;
use super::forward::Mode;
use super::linear::Linear;
use super::mlp::Mlp;
use super::norm::RmsNorm;
use super::rope::Rope;
use crate::model::sample::kv_cache::KvCache;
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::VarBuilder;

#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    pub(crate) self_attn: Attention,
    pub(crate) mlp: Mlp,
    pub(crate) input_layernorm: RmsNorm,
    pub(crate) post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    pub(crate) fn new(cfg: &ModelConfig, f: &Features, vb: VarBuilder) -> Result<Self> {
        let h = cfg.hidden_size;
        Ok(Self {
            self_attn: Attention::new(cfg, f, vb.pp("self_attn"))?,
            mlp: Mlp::new(h, cfg.intermediate_size, f.mlp_bias, vb.pp("mlp"))?,
            input_layernorm: RmsNorm::new(h, cfg.rms_norm_eps, vb.pp("input_layernorm"))?,
            post_attention_layernorm: RmsNorm::new(
                h,
                cfg.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
        })
    }

    /// The layer's projections: attention's q, k, v, o, then the MLP's gate, up, down.
    pub(crate) fn linears(&self) -> [&Linear; 7] {
        let (a, m) = (&self.self_attn, &self.mlp);
        [
            &a.q_proj,
            &a.k_proj,
            &a.v_proj,
            &a.o_proj,
            &m.gate_proj,
            &m.up_proj,
            &m.down_proj,
        ]
    }

    pub(crate) fn forward(
        &self,
        x: &Tensor,
        rope: &Rope,
        inp: &AttnInputs,
        cache: Option<(&mut KvCache, usize)>,
        mode: Mode,
    ) -> Result<Tensor> {
        let h = self.input_layernorm.forward(x)?;
        let x = (x + self.self_attn.forward(&h, rope, inp, cache, mode)?)?;
        let h = self.post_attention_layernorm.forward(&x)?;
        x + self.mlp.forward_mode(&h, mode)?
    }
}

/// A decoder-only language model: embeddings, decoder layers, final norm and LM head.
#[derive(Debug, Clone)]
pub struct CausalLm {
    pub(crate) embed_tokens: Tensor,
    pub(crate) layers: Vec<DecoderLayer>,
    pub(crate) norm: RmsNorm,
    /// (vocab, hidden); the embedding matrix itself when embeddings are tied.
    pub(crate) lm_head: Tensor,
    /// Contiguous (hidden, vocab) copy of the head for sampling (see `Linear`).
    lm_head_rollout: crate::model::sample::copies::SamplingSlot,
    pub(crate) rope: Rope,
    pub(crate) cfg: ModelConfig,
}

impl CausalLm {
    /// The model `cfg` describes; fails (naming the key) for a config `validate` refuses.
    pub fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        let f = cfg.features().map_err(candle_core::Error::Msg)?;
        let vbm = vb.pp("model");
        let embed_tokens = vbm
            .pp("embed_tokens")
            .get((cfg.vocab_size, cfg.hidden_size), "weight")?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::new(cfg, &f, vbm.pp("layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vbm.pp("norm"))?;
        let lm_head = if cfg.tie_word_embeddings {
            embed_tokens.clone()
        } else {
            vb.pp("lm_head")
                .get((cfg.vocab_size, cfg.hidden_size), "weight")?
        };
        let rope = Rope::from_spec(
            &f.rope,
            cfg.head_dim(),
            cfg.max_position_embeddings,
            vb.dtype(),
            vb.device(),
        )?;
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
            lm_head_rollout: Default::default(),
            rope,
            cfg: cfg.clone(),
        })
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The LM head's weight (vocab, hidden): the embedding's tensor itself when tied.
    pub fn lm_head(&self) -> &Tensor {
        &self.lm_head
    }

    /// The device holding the weights.
    pub fn device(&self) -> &Device {
        self.embed_tokens.device()
    }

    /// The weights' numeric type.
    pub fn dtype(&self) -> DType {
        self.embed_tokens.dtype()
    }

    /// A cache for `batch` rows and up to `capacity` positions.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        KvCache::new(
            self.cfg.num_hidden_layers,
            batch,
            self.cfg.kv_heads(),
            capacity,
            self.cfg.head_dim(),
            self.dtype(),
            self.device(),
        )
    }

    /// Final-normed hidden states (b, s, hidden) for token ids (b, s) u32 at positions `pos`
    /// (b, s) u32 under the additive `mask` (b, 1, s, past + s). With a cache, the new keys and
    /// values are appended and the cache advances by s.
    pub fn hidden(
        &self,
        ids: &Tensor,
        pos: &Tensor,
        mask: &Tensor,
        mut cache: Option<&mut KvCache>,
        mode: Mode,
    ) -> Result<Tensor> {
        let (_, s) = ids.dims2()?;
        let (cos, sin) = self.rope.tables(pos)?;
        let mask = mask.to_dtype(self.dtype())?;
        let inp = AttnInputs {
            cos: &cos,
            sin: &sin,
            mask: &mask,
        };
        let mut x = candle_nn::Embedding::new(self.embed_tokens.clone(), self.cfg.hidden_size)
            .forward(ids)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let c = cache.as_deref_mut().map(|c| (c, i));
            x = layer.forward(&x, &self.rope, &inp, c, mode)?;
        }
        if let Some(c) = cache {
            c.advance(s);
        }
        self.norm.forward(&x)
    }

    /// Rebuilds (call after every weight update) or drops the weight copies that sampling
    /// uses: contiguous transposed ones (M = batch products against a transposed view spend
    /// most of their time packing; one extra copy of the weights) or bf16 ones (half the bytes
    /// per decode step; half a copy), or none.
    pub fn refresh_rollout_weights(
        &self,
        kind: crate::model::sample::copies::SamplingWeights,
    ) -> Result<()> {
        // Panels are for the MLP only; the rest decodes from the checkpoint layout.
        let rest = match kind {
            crate::model::sample::copies::SamplingWeights::MlpPanels => {
                crate::model::sample::copies::SamplingWeights::Checkpoint
            }
            other => other,
        };
        for l in &self.layers {
            l.self_attn.refresh_rollout(rest)?;
            l.mlp.refresh_rollout(kind)?;
        }
        self.lm_head_rollout.refresh(&self.lm_head, rest)
    }

    /// Logits (.., vocab) of hidden states (.., hidden).
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        self.logits_mode(hidden, Mode::Train)
    }

    /// [`CausalLm::logits`], using the sampling copy of the head in `Mode::Infer` when present.
    pub fn logits_mode(&self, hidden: &Tensor, mode: Mode) -> Result<Tensor> {
        let dims = hidden.dims().to_vec();
        let h = self.cfg.hidden_size;
        let rows = hidden.elem_count() / h;
        use crate::model::sample::copies::SamplingCopy;
        let h2 = hidden.reshape((rows, h))?;
        let y = match (mode, self.lm_head_rollout.get()) {
            (Mode::Train, _) => h2.matmul(&self.lm_head.t()?)?,
            (_, Some(SamplingCopy::Transposed(wt))) => h2.matmul(&wt)?,
            (Mode::Sample, Some(SamplingCopy::Bf16(w))) => {
                crate::model::sample::copies::matmul_bf16(&h2.contiguous()?, &w)?
            }
            // Without the copy: sampling through `f32_decode`, else (W · hᵀ)ᵀ, which keeps
            // the contiguous head on the left (no packing).
            _ => match (mode == Mode::Sample)
                .then(|| crate::model::kernels::f32_decode::x_wt(&h2, &self.lm_head))
                .transpose()?
                .flatten()
            {
                Some(y) => y,
                None => self
                    .lm_head
                    .matmul(&h2.contiguous()?.t()?)?
                    .t()?
                    .contiguous()?,
            },
        };
        let mut out = dims;
        let last = out.len() - 1;
        out[last] = self.cfg.vocab_size;
        y.reshape(out)
    }

    /// Largest position id the RoPE tables cover, plus one.
    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }
}
