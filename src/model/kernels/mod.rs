//! The CPU kernels the model runs on, the bottom room of `model` (they know no model):
//! - fused f32 ops for the decoder's elementwise work, each a candle custom op with its own
//!   backward: SwiGLU, the attention's scaled+masked softmax, RMSNorm, RoPE and the token
//!   log-prob. The op-by-op versions make many passes over memory per op (plus candle's
//!   zero-then-add gradient accumulation) and call libm's scalar `expf`; these make one or two
//!   passes, vectorised with runtime CPU dispatch (`multiversion`), split over rayon's pool.
//!   Every op takes the fused path only for contiguous-able f32 CPU tensors ([`fusable`]);
//!   callers keep the op-by-op version for other dtypes (bf16, and the f64 finite-difference
//!   tests);
//! - products: f32 without candle's zero-fill (`matmul_no_fill`), added in place into an
//!   accumulator (`add_matmul_tn`), in the update's compute dtype (`compute_dtype`), the bf16
//!   GEMM (`bf16_gemm`) and the decode-shaped sampling products (`f32_decode`, `f32_panels`,
//!   `bf16_matmul`, `amx`), and those with a frozen weight held in bf16 (`bf16_weight`) or as
//!   GGUF Q8_0 blocks (`q8_weight`, with its fused decode);
//! - in-place adds (`add_in_place`) and the checked views of CPU storage they all use
//!   (`cpu_slices`).
pub(crate) mod add_in_place;
pub(crate) mod add_matmul_tn;
pub(crate) mod amx;
pub mod bf16_gemm;
pub mod bf16_matmul;
pub(crate) mod bf16_weight;
pub mod compute_dtype;
pub(crate) mod cpu_slices;
pub mod f32_decode;
pub(crate) mod f32_panels;
pub(crate) mod matmul_no_fill;
mod panel_tasks;
pub mod q8_weight;
pub(crate) mod rms_norm;
pub(crate) mod rope;
pub(crate) mod row_blocking;
pub(crate) mod softmax;
pub(crate) mod swiglu;
pub(crate) mod token_logprob;
pub(crate) mod transpose;
pub(crate) mod vector_exp;

use candle_core::{DType, Tensor};
use rayon::prelude::*;

/// Whether every tensor can take the fused f32 CPU path.
pub fn fusable(ts: &[&Tensor]) -> bool {
    ts.iter()
        .all(|t| t.dtype() == DType::F32 && t.device().is_cpu())
}

/// Elements per parallel task: below this, splitting costs more than it saves.
const TASK_ELEMS: usize = 1 << 14;

/// Rows per task for rows of `row_len` elements.
pub(crate) fn rows_per_task(row_len: usize) -> usize {
    (TASK_ELEMS / row_len.max(1)).max(1)
}

/// Runs `f(first_row, out_rows)` over `out` split into tasks of whole rows of `row_len`.
pub(crate) fn par_rows<F>(out: &mut [f32], row_len: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    let rows = rows_per_task(row_len);
    out.par_chunks_mut(rows * row_len.max(1))
        .enumerate()
        .for_each(|(i, o)| f(i * rows, o));
}

/// The largest |a − b| with a converted to f64 (b is the f64 reference): the tests' yardstick.
#[cfg(test)]
pub(crate) fn max_diff(a: &Tensor, b: &Tensor) -> candle_core::Result<f64> {
    (a.to_dtype(DType::F64)? - b)?
        .abs()?
        .max_all()?
        .to_scalar::<f64>()
}
