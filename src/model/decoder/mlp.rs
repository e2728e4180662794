//! The SwiGLU feed-forward block: down(silu(gate(x)) · up(x)), biases only where the config
//! asks for them (Llama's `mlp_bias`).
use super::forward::{Mode, WeightProducts};
use super::linear::Linear;
use super::trace::{self, Op};
use crate::model::kernels::swiglu::swiglu;
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

    /// The projections: gate, up, down.
    pub fn linears(&self) -> [&Linear; 3] {
        [&self.gate_proj, &self.up_proj, &self.down_proj]
    }

    /// down(silu(gate(x)) · up(x)), the products as `products` computes them.
    pub fn forward_with(&self, x: &Tensor, products: &dyn WeightProducts) -> Result<Tensor> {
        let gate = self.gate_proj.forward_with(x, products)?;
        let up = self.up_proj.forward_with(x, products)?;
        trace::forward(|| Op::SwiGlu);
        let h = swiglu(&gate, &up)?;
        self.down_proj.forward_with(&h, products)
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, &Mode::Train)
    }
}
