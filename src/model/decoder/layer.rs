//! One decoder layer: pre-norm self-attention and a pre-norm SwiGLU MLP, each added to the
//! residual stream. The one definition of the layer every architecture shares (its switches are
//! in the attention and the projections); the hand-written backward (`model::grad`) is checked
//! against it op by op (`trace`).
use super::arch::Features;
use super::attention::{Attention, AttnInputs};
use super::config::ModelConfig;
use super::forward::{KvStore, WeightProducts};
use super::linear::Linear;
use super::mlp::Mlp;
use super::norm::RmsNorm;
use super::rope::Rope;
use super::trace::{self, Op};
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

/// A decoder layer's weights.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
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
        cache: Option<(&mut dyn KvStore, usize)>,
        products: &dyn WeightProducts,
    ) -> Result<Tensor> {
        trace::forward(|| self.input_layernorm.op());
        let h = self.input_layernorm.forward(x)?;
        let a = self.self_attn.forward(&h, rope, inp, cache, products)?;
        trace::forward(|| Op::Residual);
        let x = (x + a)?;
        trace::forward(|| self.post_attention_layernorm.op());
        let h = self.post_attention_layernorm.forward(&x)?;
        let m = self.mlp.forward_with(&h, products)?;
        trace::forward(|| Op::Residual);
        x + m
    }
}
