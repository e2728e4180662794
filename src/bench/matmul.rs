//! The machine's achievable f32 matmul rate: a large square product through the same candle +
//! gemm path the model uses, as the reference for the training step's GFLOP/s.
use crate::error::Result;
use candle_core::{DType, Device, Tensor};
use serde::Serialize;
use std::time::Instant;

/// The JSON report of the matmul benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct MatmulReport {
    /// Side of the square matrices.
    pub size: usize,
    /// Timed products.
    pub repeats: usize,
    /// Median seconds of one `size`³ product.
    pub seconds: f64,
    /// GFLOP/s at the median time.
    pub gflops_per_s: f64,
    /// The best of the repeats (the closest to the hardware's peak).
    pub best_gflops_per_s: f64,
}

/// Times `repeats` products of two random `size` × `size` f32 matrices (after one warm-up).
pub fn run(size: usize, repeats: usize) -> Result<MatmulReport> {
    let a = Tensor::randn(0f32, 1.0, (size, size), &Device::Cpu)?;
    let b = Tensor::randn(0f32, 1.0, (size, size), &Device::Cpu)?;
    a.matmul(&b)?.to_dtype(DType::F32)?;
    let mut secs: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            let c = a.matmul(&b)?;
            let s = t.elapsed().as_secs_f64();
            drop(c);
            Ok(s)
        })
        .collect::<Result<_>>()?;
    secs.sort_by(f64::total_cmp);
    let flops = 2.0 * (size as f64).powi(3);
    let median = secs[secs.len() / 2];
    Ok(MatmulReport {
        size,
        repeats: secs.len(),
        seconds: median,
        gflops_per_s: flops / median / 1e9,
        best_gflops_per_s: flops / secs[0] / 1e9,
    })
}
