//! The SwiGLU feed-forward block: down(silu(gate(x)) · up(x)), biases only where the config
//! asks for them (Llama's `mlp_bias`).
use super::forward::Mode;
use super::linear::Linear;
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

/// The gate, up and down projections of one layer's feed-forward block.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub(crate) gate_proj: Linear,
    pub(crate) up_proj: Linear,
    pub(crate) down_proj: Linear,
}

impl Mlp {
    /// Reads `gate_proj`, `up_proj` and `down_proj` from `vb`.
    pub fn new(hidden: usize, intermediate: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            gate_proj: Linear::new(hidden, intermediate, bias, vb.pp("gate_proj"))?,
            up_proj: Linear::new(hidden, intermediate, bias, vb.pp("up_proj"))?,
            down_proj: Linear::new(intermediate, hidden, bias, vb.pp("down_proj"))?,
        })
    }
}

impl Mlp {
    /// down(silu(gate(x)) · up(x)) in `mode`.
    pub fn forward_mode(&self, x: &Tensor, mode: Mode) -> Result<Tensor> {
        let gate = self.gate_proj.forward_mode(x, mode)?;
        let up = self.up_proj.forward_mode(x, mode)?;
        let h = crate::model::kernels::swiglu::swiglu(&gate, &up)?;
        self.down_proj.forward_mode(&h, mode)
    }

    /// Rebuilds (or drops) the projections' sampling copies.
    pub fn refresh_rollout(
        &self,
        kind: crate::model::sample::copies::SamplingWeights,
    ) -> Result<()> {
        for l in [&self.gate_proj, &self.up_proj, &self.down_proj] {
            l.refresh_rollout(kind)?;
        }
        Ok(())
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_mode(x, Mode::Train)
    }
}
