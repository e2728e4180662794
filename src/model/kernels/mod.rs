//! Fused f32 CPU kernels for the decoder's elementwise work, each a candle custom op with its
//! own backward: SwiGLU, the attention's scaled+masked softmax, RMSNorm and RoPE. The op-by-op
//! versions make 5–15 passes over memory per op (plus candle's zero-then-add gradient
//! accumulation) and call libm's scalar `expf`; these make one or two passes, vectorised with
//! runtime CPU dispatch (`multiversion`), split over rayon's pool.
//!
//! Every op takes the fused path only for contiguous-able f32 CPU tensors ([`fusable`]); callers
//! keep the op-by-op version for other dtypes (bf16, and the f64 finite-difference tests).
pub mod add_in_place;
pub mod add_matmul_tn;
pub(crate) mod amx;
pub mod bf16_gemm;
pub mod bf16_matmul;
pub mod compute_dtype;
pub mod cpu_slices;
pub mod f32_decode;
pub mod f32_panels;
pub mod matmul_no_fill;
mod panel_tasks;
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
