//! The machine's achievable f32 matmul rate: a large square product through the same candle +
//! gemm path the model uses, as the reference for the training step's GFLOP/s.
use crate::error::Result;
use crate::model::ComputeDtype;
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
    square(size, repeats, |a, b| a.matmul(b))
}

/// [`run`] through the bf16 GEMM the bf16 update uses (`trainer.compute_dtype: bf16`): bf16
/// operands rounded and packed on every call, f32 sums.
pub fn run_bf16(size: usize, repeats: usize) -> Result<MatmulReport> {
    square(size, repeats, crate::model::kernels::bf16_gemm::matmul)
}

fn square(
    size: usize,
    repeats: usize,
    product: impl Fn(&Tensor, &Tensor) -> candle_core::Result<Tensor>,
) -> Result<MatmulReport> {
    let a = Tensor::randn(0f32, 1.0, (size, size), &Device::Cpu)?;
    let b = Tensor::randn(0f32, 1.0, (size, size), &Device::Cpu)?;
    product(&a, &b)?.to_dtype(DType::F32)?;
    let mut secs: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            let c = product(&a, &b)?;
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

/// One decode-shaped product (x (m, k) · Wᵀ, W (n, k)) timed three ways.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeReport {
    /// Rows of x (sampling rows per decode step).
    pub m: usize,
    /// Input features.
    pub k: usize,
    /// Output features.
    pub n: usize,
    /// f32 x · Wᵀ as the f32 sampling path runs it on the checkpoint-layout W (`f32_decode`
    /// where it applies, else gemm): GFLOP/s and GB/s of weights.
    pub f32_gflops_per_s: f64,
    /// Weight bytes streamed per second by the f32 product.
    pub f32_weight_gb_per_s: f64,
    /// The f32 sampling path with W streamed from memory, as `bf16_kernel_cold_gflops_per_s`.
    pub f32_cold_gflops_per_s: f64,
    /// W · xᵀ through candle + gemm (the f32 sampling path before `f32_decode`).
    pub f32_gemm_gflops_per_s: f64,
    /// The f32 panel kernel (`f32_panels`, large models' MLP copies) with W streamed from
    /// memory, as `f32_cold_gflops_per_s`.
    pub f32_panels_cold_gflops_per_s: f64,
    /// candle's own bf16 matmul (bf16 x and W).
    pub candle_bf16_gflops_per_s: f64,
    /// The bf16 sampling kernel (`vdpbf16ps` where the CPU has it).
    pub bf16_kernel_gflops_per_s: f64,
    /// Weight bytes streamed per second by the bf16 kernel.
    pub bf16_kernel_weight_gb_per_s: f64,
    /// The bf16 kernel with W streamed from memory as in a decode step (the rate above reuses
    /// one W, which stays in cache when it is small): the product over distinct copies of W
    /// totalling at least 256 MiB, in turn.
    pub bf16_kernel_cold_gflops_per_s: f64,
    /// Which bf16 kernel ran.
    pub bf16_kernel: String,
    /// The bf16 copy's layout (`Rows` or `Panels`).
    pub bf16_layout: String,
    /// The AVX-512 BF16 (`vdpbf16ps`) kernel alone, for comparison where AMX ran above.
    pub vdpbf16ps_gflops_per_s: f64,
    /// A frozen bf16 base's decode (`bf16_weight`: each W row widened into a buffer), W
    /// streamed from memory as `bf16_kernel_cold_gflops_per_s`.
    pub bf16_base_cold_gflops_per_s: f64,
    /// A frozen bf16 base read in place by the bf16 sampling kernel (`Bf16Matrix::in_place`,
    /// `agents.sampling_dtype: bf16`), W streamed from memory; NaN where `in` is not a multiple
    /// of 32.
    pub bf16_base_in_place_cold_gflops_per_s: f64,
    /// A Q8_0 base's fused decode (`q8_weight`, `Decode::Fused`), W streamed from memory.
    pub q8_0_fused_cold_gflops_per_s: f64,
    /// A Q8_0 base's decode through a dequantized row buffer (`Decode::Dequantize`), W
    /// streamed from memory.
    pub q8_0_dequantize_cold_gflops_per_s: f64,
}

fn median_secs(repeats: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut secs = (0..repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect::<Result<Vec<f64>>>()?;
    secs.sort_by(f64::total_cmp);
    Ok(secs[secs.len() / 2])
}

/// Times x (m, k) · Wᵀ with W (n, k): f32 as the sampling path runs it on the checkpoint
/// layout (warm and cold), from f32 panels (cold) and through gemm, candle's bf16 matmul, and
/// the bf16 sampling kernel.
pub fn run_decode(m: usize, k: usize, n: usize, repeats: usize) -> Result<DecodeReport> {
    use crate::model::kernels::bf16_matmul::{Bf16Matrix, Kernel};
    let dev = Device::Cpu;
    let w = Tensor::randn(0f32, 1.0, (n, k), &dev)?;
    let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
    let flops = 2.0 * (m * k * n) as f64;
    let f32_path = |w: &Tensor| -> Result<Tensor> {
        match crate::model::kernels::f32_decode::x_wt(&x, w)? {
            Some(y) => Ok(y),
            None => Ok(w.matmul(&x.t()?)?.t()?.contiguous()?),
        }
    };
    let f32_s = median_secs(repeats, || {
        std::hint::black_box(f32_path(&w)?);
        Ok(())
    })?;
    let f32_copies = (256usize << 20).div_ceil(n * k * 4).max(1);
    let ws = (0..f32_copies)
        .map(|_| w.copy())
        .collect::<candle_core::Result<Vec<_>>>()?;
    let f32_cold_s = median_secs(repeats, || {
        for w in &ws {
            std::hint::black_box(f32_path(w)?);
        }
        Ok(())
    })? / f32_copies as f64;
    drop(ws);
    let wv = w.flatten_all()?.to_vec1::<f32>()?;
    let xv = x.flatten_all()?.to_vec1::<f32>()?;
    let panels: Vec<_> = (0..f32_copies)
        .map(|_| crate::model::kernels::f32_panels::F32Panels::from_f32(&wv, n, k))
        .collect();
    let panels_cold_s = median_secs(repeats, || {
        for p in &panels {
            std::hint::black_box(p.matmul_t(&xv, m));
        }
        Ok(())
    })? / f32_copies as f64;
    drop(panels);
    let gemm_s = median_secs(repeats, || {
        w.matmul(&x.t()?)?.t()?.contiguous()?;
        Ok(())
    })?;
    let (wb, xb) = (w.to_dtype(DType::BF16)?, x.to_dtype(DType::BF16)?);
    let wbt = wb.t()?.contiguous()?;
    let candle_s = median_secs(repeats, || {
        xb.matmul(&wbt)?;
        Ok(())
    })?;
    let mat = Bf16Matrix::from_f32(&wv, n, k);
    let kern_s = median_secs(repeats, || {
        std::hint::black_box(mat.matmul_t(&xv, m)?);
        Ok(())
    })?;
    let copies = (256usize << 20).div_ceil(n * k * 2).max(1);
    let mats = vec![mat.clone(); copies];
    let cold_s = median_secs(repeats, || {
        for m2 in &mats {
            std::hint::black_box(m2.matmul_t(&xv, m)?);
        }
        Ok(())
    })? / copies as f64;
    drop(mats);
    let avx_s = median_secs(repeats, || {
        std::hint::black_box(mat.matmul_t_with(Kernel::Avx512Bf16, &xv, m)?);
        Ok(())
    })?;
    // The frozen bases' decode products, each over distinct copies of W totalling 256 MiB.
    let cold = |bytes: usize, held: &Tensor, f: &dyn Fn(&Tensor) -> Result<()>| -> Result<f64> {
        let copies = (256usize << 20).div_ceil(bytes).max(1);
        let ws = (0..copies)
            .map(|_| held.copy())
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(median_secs(repeats, || {
            for w in &ws {
                f(w)?;
            }
            Ok(())
        })? / copies as f64)
    };
    use crate::model::kernels::q8_weight::{self, Decode};
    let bf16_base_s = cold(n * k * 2, &wb, &|w| {
        std::hint::black_box(crate::model::kernels::bf16_weight::x_wt(&x, w)?);
        Ok(())
    })?;
    // The same base read in place by the bf16 copies' kernel (sampling_dtype: bf16); NaN
    // where `in` is not a multiple of 32 (that base keeps the widening decode).
    let bf16_in_place_s = match Bf16Matrix::in_place(&wb) {
        Some(_) => cold(n * k * 2, &wb, &|w| {
            if let Some(mat) = Bf16Matrix::in_place(w) {
                std::hint::black_box(mat.matmul_t(&xv, m)?);
            }
            Ok(())
        })?,
        None => f64::NAN,
    };
    let (q8_fused_s, q8_deq_s) = match k % q8_weight::BLOCK {
        0 => {
            let wq = q8_weight::quantize(&w)?;
            let bytes = wq.elem_count();
            let run = |how| {
                cold(bytes, &wq, &|w| {
                    std::hint::black_box(q8_weight::decode_x_wt(&x, w, how)?);
                    Ok(())
                })
            };
            (run(Decode::Fused)?, run(Decode::Dequantize)?)
        }
        _ => (f64::NAN, f64::NAN),
    };
    Ok(DecodeReport {
        m,
        k,
        n,
        f32_gflops_per_s: flops / f32_s / 1e9,
        f32_weight_gb_per_s: (n * k * 4) as f64 / f32_s / 1e9,
        f32_cold_gflops_per_s: flops / f32_cold_s / 1e9,
        f32_gemm_gflops_per_s: flops / gemm_s / 1e9,
        f32_panels_cold_gflops_per_s: flops / panels_cold_s / 1e9,
        candle_bf16_gflops_per_s: flops / candle_s / 1e9,
        bf16_kernel_gflops_per_s: flops / kern_s / 1e9,
        bf16_kernel_weight_gb_per_s: (n * k * 2) as f64 / kern_s / 1e9,
        bf16_kernel_cold_gflops_per_s: flops / cold_s / 1e9,
        bf16_kernel: format!("{:?}", Kernel::detect()),
        bf16_layout: format!("{:?}", mat.layout()),
        vdpbf16ps_gflops_per_s: flops / avx_s / 1e9,
        bf16_base_cold_gflops_per_s: flops / bf16_base_s / 1e9,
        bf16_base_in_place_cold_gflops_per_s: flops / bf16_in_place_s / 1e9,
        q8_0_fused_cold_gflops_per_s: flops / q8_fused_s / 1e9,
        q8_0_dequantize_cold_gflops_per_s: flops / q8_deq_s / 1e9,
    })
}

/// How a timed product's operands are laid out (the training update's three kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmLayout {
    /// a (m, k) · b (k, n), both contiguous (e.g. dy · W).
    Nn,
    /// a (m, k) · wᵀ with w (n, k) contiguous (e.g. x · Wᵀ).
    Nt,
    /// acc (m, n) += aᵀ · b with a (k, m), b (k, n) contiguous (e.g. dWᵀ += dyᵀ · x).
    Tn,
}

impl std::str::FromStr for GemmLayout {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "nn" => Ok(Self::Nn),
            "nt" => Ok(Self::Nt),
            "tn" => Ok(Self::Tn),
            _ => Err(format!("unknown layout {s:?}: expected nn, nt or tn")),
        }
    }
}

/// One bf16 backend's rate on a product.
#[derive(Debug, Clone, Serialize)]
pub struct BackendRate {
    /// "amx", "avx512bf16" or "portable".
    pub backend: String,
    /// GFLOP/s at the median time, rounding and packing both operands included.
    pub gflops_per_s: f64,
    /// GFLOP/s with the right operand packed beforehand (`matmul_packed`; not for `tn`).
    pub prepacked_gflops_per_s: Option<f64>,
}

/// One product shape timed through the f32 path and every bf16 backend this machine runs.
#[derive(Debug, Clone, Serialize)]
pub struct GemmReport {
    /// Output rows, inner size, output columns.
    pub m: usize,
    /// Inner size.
    pub k: usize,
    /// Output columns.
    pub n: usize,
    /// Operand layout.
    pub layout: GemmLayout,
    /// Whether the bf16 GEMM's right operand is held in bf16 (a frozen bf16 base's W, under
    /// `agents.base_dtype: bf16`) rather than f32; the f32 product reads its f32 values.
    pub b_bf16: bool,
    /// f32 through gemm as the update runs it (`model::kernels::compute_dtype`: candle's gemm call without the
    /// output's zero-fill; `tn`: gemm's accumulate mode).
    pub f32_gflops_per_s: f64,
    /// The bf16 GEMM, per backend (fastest first; the first is the one `matmul` picks).
    pub bf16: Vec<BackendRate>,
}

/// Times an (m, k, n) product laid out as `layout`: f32 and each usable bf16 backend, median
/// of `repeats` after a warm-up; with `b_bf16` the bf16 GEMM's right operand is held in bf16
/// (the same values, bf16-rounded; its layout kept). The portable backend is skipped above
/// 2^30 multiply-adds (minutes per product).
pub fn run_gemm(
    m: usize,
    k: usize,
    n: usize,
    layout: GemmLayout,
    b_bf16: bool,
    repeats: usize,
) -> Result<GemmReport> {
    use crate::model::kernels::bf16_gemm::{self as g, Backend};
    let dev = Device::Cpu;
    let r = |rows, cols| Tensor::randn(0f32, 1.0, (rows, cols), &dev);
    let (a, b) = match layout {
        GemmLayout::Nn => (r(m, k)?, r(k, n)?),
        GemmLayout::Nt => (r(m, k)?, r(n, k)?.t()?),
        GemmLayout::Tn => (r(k, m)?, r(k, n)?),
    };
    // A bf16 b keeps b's layout (w.t() stays a transposed view of a row-major bf16 w).
    let b16 = match (b_bf16, layout) {
        (false, _) => b.clone(),
        (true, GemmLayout::Nt) => b.t()?.to_dtype(DType::BF16)?.t()?,
        (true, _) => b.to_dtype(DType::BF16)?,
    };
    let acc = Tensor::zeros((m, n), DType::F32, &dev)?;
    let flops = 2.0 * (m * k * n) as f64;
    let f32_s = median_secs(repeats, || {
        match layout {
            GemmLayout::Tn => crate::model::kernels::add_matmul_tn::add_matmul_tn(&acc, &a, &b)?,
            _ => drop(crate::model::kernels::compute_dtype::matmul(
                &a,
                &b,
                ComputeDtype::F32,
            )?),
        }
        Ok(())
    })?;
    let mut bf16 = vec![];
    for backend in Backend::ALL.into_iter().filter(|b| b.usable()) {
        if backend == Backend::Portable && m * k * n > 1 << 30 {
            continue;
        }
        let s = median_secs(repeats, || {
            match layout {
                GemmLayout::Tn => g::add_matmul_tn_with(backend, &acc, &a, &b16)?,
                _ => drop(g::matmul_with(backend, &a, &b16)?),
            }
            Ok(())
        })?;
        let prepacked = match layout {
            GemmLayout::Tn => None,
            _ => {
                let pb = g::pack_rhs(&b16)?;
                let s = median_secs(repeats, || {
                    drop(g::matmul_packed_with(backend, &a, &pb)?);
                    Ok(())
                })?;
                Some(flops / s / 1e9)
            }
        };
        bf16.push(BackendRate {
            backend: backend.name().to_string(),
            gflops_per_s: flops / s / 1e9,
            prepacked_gflops_per_s: prepacked,
        });
    }
    Ok(GemmReport {
        m,
        k,
        n,
        layout,
        b_bf16,
        f32_gflops_per_s: flops / f32_s / 1e9,
        bf16,
    })
}
