//! The SwiGLU feed-forward block: down(silu(gate(x)) · up(x)), no biases.
use super::linear::Linear;
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

#[derive(Debug, Clone)]
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    pub fn new(hidden: usize, intermediate: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            gate_proj: Linear::new(hidden, intermediate, false, vb.pp("gate_proj"))?,
            up_proj: Linear::new(hidden, intermediate, false, vb.pp("up_proj"))?,
            down_proj: Linear::new(intermediate, hidden, false, vb.pp("down_proj"))?,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?.silu()?;
        let up = self.up_proj.forward(x)?;
        self.down_proj.forward(&(gate * up)?)
    }
}
