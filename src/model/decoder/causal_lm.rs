//! The decoder-only causal LM of every supported architecture (Qwen2, Llama, Qwen3; see `arch`):
//! embeddings, decoder layers, final norm and (tied or untied) LM head, switched by the config's
//! [`Features`]. Built from a `VarBuilder` whose paths are the HF checkpoint's tensor names, so
//! the same weights train (through `Mode::Train`) and sample (through `Mode::Infer`).
use super::attention::AttnInputs;
use super::config::ModelConfig;
use super::forward::{KvStore, Mode, WeightProducts};
use super::layer::DecoderLayer;
use super::norm::RmsNorm;
use super::rope::Rope;
use super::trace::{self, Op};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::VarBuilder;

/// A decoder-only language model: embeddings, decoder layers, final norm and LM head.
#[derive(Debug, Clone)]
pub struct CausalLm {
    pub(crate) embed_tokens: Tensor,
    pub(crate) layers: Vec<DecoderLayer>,
    pub(crate) norm: RmsNorm,
    /// (vocab, hidden); the embedding matrix itself when embeddings are tied.
    pub(crate) lm_head: Tensor,
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

    /// The decoder layers, bottom first.
    pub(crate) fn layers(&self) -> &[DecoderLayer] {
        &self.layers
    }

    /// Final-normed hidden states (b, s, hidden) for token ids (b, s) u32 at positions `pos`
    /// (b, s) u32 under the additive `mask` (b, 1, s, past + s), the products as `products`
    /// computes them. With a cache, the new keys and values are appended and the cache advances
    /// by s.
    pub fn hidden(
        &self,
        ids: &Tensor,
        pos: &Tensor,
        mask: &Tensor,
        mut cache: Option<&mut dyn KvStore>,
        products: impl WeightProducts,
    ) -> Result<Tensor> {
        let (_, s) = ids.dims2()?;
        let (cos, sin) = self.rope.tables(pos)?;
        let mask = mask.to_dtype(self.dtype())?;
        let inp = AttnInputs {
            cos: &cos,
            sin: &sin,
            mask: &mask,
        };
        // Without a gradient, each layer's output is detached: the weights are variables, so
        // an attached output would keep every intermediate tensor of the forward alive (the
        // graph a backward would walk) until the caller drops the result — for a scoring
        // forward of K completions, many times one layer's activations. What leaves a no-grad
        // forward carries no graph at all.
        let no_grad = products.mode().no_grad();
        let detach = |x: Tensor| if no_grad { x.detach() } else { x };
        trace::forward(|| Op::Embed(self.embed_tokens.id()));
        let mut x = detach(
            candle_nn::Embedding::new(self.embed_tokens.clone(), self.cfg.hidden_size)
                .forward(ids)?,
        );
        for (i, layer) in self.layers.iter().enumerate() {
            let c: Option<(&mut dyn KvStore, usize)> = match &mut cache {
                Some(c) => Some((&mut **c, i)),
                None => None,
            };
            x = detach(layer.forward(&x, &self.rope, &inp, c, &products)?);
        }
        if let Some(c) = cache {
            c.advance(s);
        }
        trace::forward(|| self.norm.op());
        Ok(detach(self.norm.forward(&x)?))
    }

    /// Logits (.., vocab) of hidden states (.., hidden).
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        self.logits_mode(hidden, Mode::Train)
    }

    /// [`CausalLm::logits`] with the head's product as `products` computes it.
    pub fn logits_mode(&self, hidden: &Tensor, products: impl WeightProducts) -> Result<Tensor> {
        let dims = hidden.dims().to_vec();
        let h = self.cfg.hidden_size;
        let rows = hidden.elem_count() / h;
        trace::forward(|| Op::Head(self.lm_head.id()));
        let y = products.x_wt(&hidden.reshape((rows, h))?, &self.lm_head)?;
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
