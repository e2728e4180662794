//! Forward modes: a training-safe path made only of differentiable ops, and an inference path
//! that may use candle's fused kernels (which have no backward and silently drop gradients).

/// Which kernels a forward pass may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only ops with a backward: use for any forward whose result is differentiated.
    Train,
    /// May use kernels without a backward (candle's rope, the decode-shaped linear products):
    /// sampling and scoring only. RMSNorm, SwiGLU and the attention softmax are the same
    /// differentiable fused kernels in both modes (`model::kernels`).
    Infer,
    /// `Infer` for decoding: may also use the bf16 sampling copies of the weights
    /// (`agents.sampling_dtype: bf16`). Scoring (KL, `comlrl score`) uses `Infer`.
    Sample,
}

impl Mode {
    /// Whether kernels without a backward may run (`Infer` and `Sample`).
    pub fn no_grad(self) -> bool {
        self != Mode::Train
    }
}

/// The dtype reductions (norms, softmax, log-softmax) run in: f32 for half types, else unchanged
/// (so f64 models stay f64, which finite-difference checks rely on).
pub fn reduce_dtype(d: candle_core::DType) -> candle_core::DType {
    match d {
        candle_core::DType::BF16 | candle_core::DType::F16 => candle_core::DType::F32,
        other => other,
    }
}
