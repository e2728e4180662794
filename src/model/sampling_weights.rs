//! The weight copies sampling decodes with, next to the trained weights: none (products
//! against the checkpoint-layout weight), a contiguous transposed f32 copy, or a bf16 copy
//! multiplied with f32 accumulation (`agents.sampling_dtype: bf16`). Rebuilt after every
//! weight update; only `Mode::Sample` reads the bf16 copy (scoring stays in the weights' dtype).
use super::kernels::bf16_matmul::Bf16Matrix;
use candle_core::{DType, Result, Tensor};
use std::sync::{Arc, RwLock};

/// Which copy of the weights sampling uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplingWeights {
    /// No copy: decode products run as W · xᵀ on the checkpoint-layout weights.
    #[default]
    Checkpoint,
    /// Contiguous (in, out) f32 copies: faster small-M products, one extra copy of the weights.
    Transposed,
    /// bf16 copies (half the bytes per decode step, half a copy of the weights), f32 sums.
    Bf16,
}

/// One weight's sampling copy.
#[derive(Debug, Clone)]
pub enum SamplingCopy {
    /// W transposed to (in, out), contiguous.
    Transposed(Tensor),
    /// W in bf16, (out, in).
    Bf16(Arc<Bf16Matrix>),
}

/// A shared, refreshable slot holding one weight's sampling copy.
#[derive(Debug, Clone, Default)]
pub struct SamplingSlot(Arc<RwLock<Option<SamplingCopy>>>);

impl SamplingSlot {
    /// Rebuilds the copy of `weight` (out, in) for `kind` (or drops it).
    pub fn refresh(&self, weight: &Tensor, kind: SamplingWeights) -> Result<()> {
        let copy = match kind {
            SamplingWeights::Checkpoint => None,
            SamplingWeights::Transposed => {
                Some(SamplingCopy::Transposed(weight.detach().t()?.contiguous()?))
            }
            SamplingWeights::Bf16 => {
                if !weight.device().is_cpu() {
                    candle_core::bail!("bf16 sampling weights run on the CPU only");
                }
                let (rows, cols) = weight.dims2()?;
                let w = weight.detach().to_dtype(DType::F32)?.flatten_all()?;
                let w = w.to_vec1::<f32>()?;
                Some(SamplingCopy::Bf16(Arc::new(Bf16Matrix::from_f32(
                    &w, rows, cols,
                ))))
            }
        };
        if let Ok(mut slot) = self.0.write() {
            *slot = copy;
        }
        Ok(())
    }

    /// The current copy, if any.
    pub fn get(&self) -> Option<SamplingCopy> {
        self.0.read().ok().and_then(|g| g.clone())
    }
}

/// x (rows, in) · Wᵀ with W's bf16 copy, as an f32 (rows, out) tensor in x's dtype.
pub fn matmul_bf16(x: &Tensor, w: &Bf16Matrix) -> Result<Tensor> {
    let (rows, cols) = x.dims2()?;
    if cols != w.cols() {
        candle_core::bail!(
            "bf16 product: x has {cols} features, W expects {}",
            w.cols()
        );
    }
    let xv = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let y = w.matmul_t(&xv, rows);
    Tensor::from_vec(y, (rows, w.rows()), x.device())?.to_dtype(x.dtype())
}
