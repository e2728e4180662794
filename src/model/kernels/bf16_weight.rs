//! Products with a weight held in bf16 and f32 rows: a frozen base under `agents.base_dtype:
//! bf16`, whose W (out, in) is stored once in bf16 and never as an f32 copy. x·Wᵀ and dy·W
//! read W's bf16 values widened exactly to f32 block by block (a block of W rows at a time,
//! at most [`BLOCK_ELEMS`] elements, dropped after its product); the rows, every product and
//! every sum stay f32. So the result is the f32 product with the bf16-rounded W, whatever the
//! CPU (the bf16 GEMM, used instead under `trainer.compute_dtype: bf16`, also rounds x).
//! Decode-shaped products (at most [`DECODE_ROWS`] rows: sampling's token steps) read each W
//! row once, widened into a row buffer, for all rows of x. Under `agents.sampling_dtype: bf16`
//! sampling does not come here: the bf16 copies' kernel reads W in place
//! (`bf16_matmul::Bf16Matrix::in_place`, x rounded to bf16), where `in` is a multiple of 32.
use super::cpu_slices::slice;
use super::matmul_no_fill;
use super::row_blocking::par_row_tasks;
use candle_core::{DType, Result, Storage, Tensor};
use half::bf16;

/// Elements of W widened per block (4 MiB of f32): large enough for gemm's blocking, small
/// next to any model's weight.
const BLOCK_ELEMS: usize = 1 << 20;

/// Rows of x up to which x·Wᵀ streams W row by row instead of through gemm.
pub(crate) const DECODE_ROWS: usize = 32;

/// Whether `w` is a bf16 weight these products take (a 2-D CPU tensor).
pub fn is_bf16_weight(w: &Tensor) -> bool {
    w.dtype() == DType::BF16 && w.device().is_cpu() && w.rank() == 2
}

/// W rows per widened block for rows of `k` elements.
fn block_rows(k: usize) -> usize {
    (BLOCK_ELEMS / k.max(1)).max(16)
}

/// Rows r0..r0+n of the bf16 W (out, in) widened to a contiguous f32 (n, in) tensor.
fn widened(w: &Tensor, r0: usize, n: usize) -> Result<Tensor> {
    w.narrow(0, r0, n)?.to_dtype(DType::F32)
}

/// x (m, in) f32 · Wᵀ for a bf16 W (out, in): (m, out) f32.
pub fn x_wt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (out, k) = w.dims2()?;
    let (m, xk) = x.dims2()?;
    if xk != k {
        candle_core::bail!("bf16 weight product: x is ({m}, {xk}) but W is ({out}, {k})")
    }
    if m <= DECODE_ROWS {
        return decode_x_wt(x, w);
    }
    let br = block_rows(k);
    let mut cols = Vec::with_capacity(out.div_ceil(br));
    let mut r0 = 0;
    while r0 < out {
        let n = br.min(out - r0);
        cols.push(matmul_no_fill::matmul(x, &widened(w, r0, n)?.t()?)?);
        r0 += n;
    }
    match cols.len() {
        1 => Ok(cols.remove(0)),
        _ => Tensor::cat(&cols, 1),
    }
}

/// dy (m, out) f32 · W for a bf16 W (out, in): (m, in) f32, summed over blocks of W rows.
pub fn dy_w(dy: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (out, k) = w.dims2()?;
    let (m, dout) = dy.dims2()?;
    if dout != out {
        candle_core::bail!("bf16 weight product: dy is ({m}, {dout}) but W is ({out}, {k})")
    }
    let br = block_rows(k);
    if br >= out {
        return matmul_no_fill::matmul(dy, &w.to_dtype(DType::F32)?);
    }
    // dyᵀ (out, m) contiguous, so each block's rows of it are a contiguous (n, m) operand.
    let dyt = dy.t()?.contiguous()?;
    let acc = Tensor::zeros((m, k), DType::F32, dy.device())?;
    let mut r0 = 0;
    while r0 < out {
        let n = br.min(out - r0);
        super::add_matmul_tn::add_matmul_tn(&acc, &dyt.narrow(0, r0, n)?, &widened(w, r0, n)?)?;
        r0 += n;
    }
    Ok(acc)
}

/// [`x_wt`] for a few rows: tasks of W rows, each row widened once into a buffer and dotted
/// with every row of x.
fn decode_x_wt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (out, k) = w.dims2()?;
    let m = x.dim(0)?;
    let x = x.to_dtype(DType::F32)?.contiguous()?;
    let w = w.contiguous()?;
    let (xs, xl) = x.storage_and_layout();
    let (ws, wl) = w.storage_and_layout();
    let (Storage::Cpu(xc), Storage::Cpu(wc)) = (&*xs, &*ws) else {
        candle_core::bail!("bf16 weight product: operands must be CPU tensors")
    };
    let xv = slice(xc.as_slice::<f32>()?, xl, "bf16 weight product")?;
    let wv = slice(wc.as_slice::<bf16>()?, wl, "bf16 weight product")?;
    let y = par_row_tasks(out, m, k, |r0, nr, o| {
        let mut row = vec![0f32; k];
        for j in 0..nr {
            for (d, s) in row.iter_mut().zip(&wv[(r0 + j) * k..(r0 + j + 1) * k]) {
                *d = s.to_f32();
            }
            for i in 0..m {
                o[j * m + i] = dot(&row, &xv[i * k..(i + 1) * k]);
            }
        }
    });
    Tensor::from_vec(y, (m, out), x.device())
}

/// Σ a·b in f32 with eight independent sums (so the compiler vectorises it). The Q8_0 base's
/// row-buffer products use it too, so both frozen bases sum a row in the same order.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(p, q)| p * q)
        .sum();
    for (p, q) in ac.zip(bc) {
        for l in 0..8 {
            s[l] += p[l] * q[l];
        }
    }
    s.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Every shape path (decode rows, one block, several blocks, a last partial block) equals
    /// the f64 product with the bf16 W widened, within f32 summation error.
    #[test]
    fn products_equal_the_widened_weight() -> Result<()> {
        let dev = Device::Cpu;
        for (m, k, out) in [(1, 40, 7), (5, 64, 300), (33, 96, 50), (40, 8192, 300)] {
            let w = Tensor::randn(0f32, 1.0, (out, k), &dev)?.to_dtype(DType::BF16)?;
            let w64 = w.to_dtype(DType::F64)?;
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let want = x.to_dtype(DType::F64)?.matmul(&w64.t()?)?;
            let got = x_wt(&x, &w)?;
            let tol = 1e-5 * (k as f64).sqrt() * 4.0;
            assert!(
                super::super::max_diff(&got, &want)? < tol,
                "x·Wᵀ {m}×{k}×{out}"
            );
            let dy = Tensor::randn(0f32, 1.0, (m, out), &dev)?;
            let want = dy.to_dtype(DType::F64)?.matmul(&w64)?;
            let tol = 1e-5 * (out as f64).sqrt() * 4.0;
            assert!(
                super::super::max_diff(&dy_w(&dy, &w)?, &want)? < tol,
                "dy·W {m}×{k}×{out}"
            );
        }
        Ok(())
    }
}
