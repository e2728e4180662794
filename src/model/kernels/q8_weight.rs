//! Products with a weight held as GGUF Q8_0 blocks: a frozen base under `agents.base_dtype:
//! q8_0`. Each row of W (out, in) is `in / 32` blocks of [`BLOCK_BYTES`] bytes, llama.cpp's
//! `block_q8_0`: the scale as little-endian f16, then 32 int8 values; a weight is `q · scale`.
//! The matrix is a U8 tensor (out, in / 32 · 34) holding those bytes row by row, the layout a
//! GGUF file stores, so a Q8_0 GGUF's tensors are kept bit for bit and 32 weights cost 34 bytes.
//!
//! x·Wᵀ and dy·W dequantize W exactly (q · scale in f32, no rounding) into a bounded panel of
//! W rows (at most [`BLOCK_ELEMS`] values, dropped after its product) and multiply it with the
//! rows as they are: f32 (or bf16 operands under `trainer.compute_dtype: bf16`, whose GEMM
//! rounds W's panel as it rounds any f32 weight); the activations are never quantized. So the
//! result is the f32 product with the dequantized W. Decode-shaped products (at most
//! [`DECODE_ROWS`] rows, sampling's token steps, bound by reading W) run fused instead: per
//! output, Σ over blocks of scale · Σ q·x, the int8 values widened to f32 in registers
//! (AVX-512 where the CPU has it, else a portable loop of the same arithmetic), so W's bytes
//! are read once and nothing is written back; the scale is applied per block rather than per
//! weight, a rounding away from the dequantized product. Each output row is summed the same
//! way whatever the other rows, so a row samples alike alone or batched. `agents.sampling_dtype:
//! bf16` does not change this decode (a bf16 base is read by the bf16 kernel instead,
//! `bf16_matmul::Bf16Matrix::in_place`): the bf16 kernel would need a bf16 copy of W, about
//! twice its Q8_0 bytes, the memory this base is chosen to save.
use super::bf16_weight::dot;
use super::compute_dtype::{add_matmul_tn, matmul, ComputeDtype};
use super::cpu_slices::slice;
use super::row_blocking::par_row_tasks;
use candle_core::{DType, Device, Result, Storage, Tensor};
use half::f16;

/// Weights per block.
pub const BLOCK: usize = 32;

/// Bytes per block: the f16 scale and 32 int8 values.
pub const BLOCK_BYTES: usize = 34;

/// The dtype of a Q8_0 matrix's tensor: its blocks' raw bytes. No float weight is ever U8, so
/// a U8 matrix in a projection's place is a Q8_0 one.
pub const HELD: DType = DType::U8;

/// Values of W dequantized per panel (4 MiB of f32), as `bf16_weight` widens its blocks.
const BLOCK_ELEMS: usize = 1 << 20;

/// Rows of x up to which x·Wᵀ streams W row by row instead of through gemm.
pub(crate) const DECODE_ROWS: usize = 32;

/// Whether `w` is a Q8_0 matrix these products take (a 2-D U8 CPU tensor).
pub fn is_q8_weight(w: &Tensor) -> bool {
    w.dtype() == HELD && w.device().is_cpu() && w.rank() == 2
}

/// (out, in) of the Q8_0 matrix `w`.
pub fn dims(w: &Tensor) -> Result<(usize, usize)> {
    let (out, bytes) = w.dims2()?;
    if !bytes.is_multiple_of(BLOCK_BYTES) {
        candle_core::bail!(
            "Q8_0 matrix: a row of {bytes} bytes is not a whole number of {BLOCK_BYTES}-byte blocks"
        )
    }
    Ok((out, bytes / BLOCK_BYTES * BLOCK))
}

/// The logical (out, in) of a projection's weight, held dense or as Q8_0 blocks.
pub fn logical_dims(w: &Tensor) -> Result<(usize, usize)> {
    match is_q8_weight(w) {
        true => dims(w),
        false => w.dims2(),
    }
}

/// Q8_0 blocks of one row of values (a multiple of 32), appended to `out`: llama.cpp's
/// `quantize_row_q8_0_ref`: scale d = max|x| / 127, q = round(x · (1/d)) (half away from
/// zero), d stored as f16; an all-zero block has d = 0 and q = 0.
pub fn quantize_row(xs: &[f32], out: &mut Vec<u8>) {
    for b in xs.chunks_exact(BLOCK) {
        let amax = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(b.iter().map(|x| ((x * id).round() as i8) as u8));
    }
}

/// Dequantizes one row's blocks into `ys` (q · scale, exact in f32).
pub fn dequantize_row(blocks: &[u8], ys: &mut [f32]) {
    for (b, y) in blocks
        .chunks_exact(BLOCK_BYTES)
        .zip(ys.chunks_exact_mut(BLOCK))
    {
        let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
        for (o, &q) in y.iter_mut().zip(&b[2..]) {
            *o = (q as i8) as f32 * d;
        }
    }
}

/// `t` (out, in) of any float dtype quantized to a Q8_0 matrix, row by row (one row in f32 at
/// a time). Fails, saying so, where `in` is not a multiple of 32 (Q8_0 has no partial block).
pub fn quantize(t: &Tensor) -> Result<Tensor> {
    let (out, k) = t.dims2()?;
    if !k.is_multiple_of(BLOCK) {
        candle_core::bail!(
            "Q8_0: a row of {k} values is not a whole number of {BLOCK}-value blocks; \
             hold this base in bf16 or f32 instead"
        )
    }
    let mut bytes = Vec::with_capacity(out * k / BLOCK * BLOCK_BYTES);
    let rows = (BLOCK_ELEMS / k.max(1)).max(1);
    let mut r0 = 0;
    while r0 < out {
        let n = rows.min(out - r0);
        let panel = t.narrow(0, r0, n)?.to_dtype(DType::F32)?.contiguous()?;
        let vals = panel.flatten_all()?.to_vec1::<f32>()?;
        for row in vals.chunks_exact(k.max(1)) {
            quantize_row(row, &mut bytes);
        }
        r0 += n;
    }
    from_blocks(bytes, out, k, t.device())
}

/// A Q8_0 matrix (out, in) from its blocks' bytes, row by row as GGUF stores them.
pub fn from_blocks(bytes: Vec<u8>, out: usize, k: usize, dev: &Device) -> Result<Tensor> {
    if !k.is_multiple_of(BLOCK) || bytes.len() != out * (k / BLOCK) * BLOCK_BYTES {
        candle_core::bail!(
            "Q8_0 matrix ({out}, {k}): {} bytes, but it takes {} ({BLOCK_BYTES} per {BLOCK} values)",
            bytes.len(),
            out * (k / BLOCK) * BLOCK_BYTES
        )
    }
    Tensor::from_vec(bytes, (out, k / BLOCK * BLOCK_BYTES), dev)
}

/// Rows r0..r0+n of the Q8_0 `w` dequantized to a contiguous f32 (n, in) tensor.
pub fn dequantize_rows(w: &Tensor, r0: usize, n: usize) -> Result<Tensor> {
    let (_, k) = dims(w)?;
    let part = w.narrow(0, r0, n)?.contiguous()?;
    let bytes = part.flatten_all()?.to_vec1::<u8>()?;
    let row_bytes = k / BLOCK * BLOCK_BYTES;
    let mut ys = vec![0f32; n * k];
    if k > 0 {
        for (b, y) in bytes.chunks_exact(row_bytes).zip(ys.chunks_exact_mut(k)) {
            dequantize_row(b, y);
        }
    }
    Tensor::from_vec(ys, (n, k), w.device())
}

/// The whole Q8_0 `w` dequantized to f32 (out, in): for exports and the autograd path, which
/// keep it only for one matrix's product.
pub fn dequantize(w: &Tensor) -> Result<Tensor> {
    let (out, _) = dims(w)?;
    dequantize_rows(w, 0, out)
}

/// W rows per dequantized panel for rows of `k` values.
fn block_rows(k: usize) -> usize {
    (BLOCK_ELEMS / k.max(1)).max(16)
}

/// x (m, in) · Wᵀ for a Q8_0 W (out, in): (m, out) f32, with operands in `dt`.
pub fn x_wt(x: &Tensor, w: &Tensor, dt: ComputeDtype) -> Result<Tensor> {
    let (out, k) = dims(w)?;
    let (m, xk) = x.dims2()?;
    if xk != k {
        candle_core::bail!("Q8_0 weight product: x is ({m}, {xk}) but W is ({out}, {k})")
    }
    let x = x.to_dtype(DType::F32)?;
    if m <= DECODE_ROWS && dt == ComputeDtype::F32 {
        return decode_x_wt(&x, w, Decode::Fused);
    }
    let br = block_rows(k);
    let mut cols = Vec::with_capacity(out.div_ceil(br));
    let mut r0 = 0;
    while r0 < out {
        let n = br.min(out - r0);
        cols.push(matmul(&x, &dequantize_rows(w, r0, n)?.t()?, dt)?);
        r0 += n;
    }
    match cols.len() {
        0 => Tensor::zeros((m, 0), DType::F32, x.device()),
        1 => Ok(cols.remove(0)),
        _ => Tensor::cat(&cols, 1),
    }
}

/// dy (m, out) · W for a Q8_0 W (out, in): (m, in) f32, summed over panels of W rows, with
/// operands in `dt`.
pub fn dy_w(dy: &Tensor, w: &Tensor, dt: ComputeDtype) -> Result<Tensor> {
    let (out, k) = dims(w)?;
    let (m, dout) = dy.dims2()?;
    if dout != out {
        candle_core::bail!("Q8_0 weight product: dy is ({m}, {dout}) but W is ({out}, {k})")
    }
    let dy = dy.to_dtype(DType::F32)?;
    let br = block_rows(k);
    if br >= out {
        return matmul(&dy, &dequantize(w)?, dt);
    }
    // dyᵀ (out, m) contiguous, so each panel's rows of it are a contiguous (n, m) operand.
    let dyt = dy.t()?.contiguous()?;
    let acc = Tensor::zeros((m, k), DType::F32, dy.device())?;
    let mut r0 = 0;
    while r0 < out {
        let n = br.min(out - r0);
        add_matmul_tn(
            &acc,
            &dyt.narrow(0, r0, n)?,
            &dequantize_rows(w, r0, n)?,
            dt,
        )?;
        r0 += n;
    }
    Ok(acc)
}

/// How [`decode_x_wt`] reads W's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// Each W row dequantized into a buffer, then dotted with every row of x.
    Dequantize,
    /// Blocks widened in registers, scale · Σ q·x per block (`fused`).
    Fused,
}

/// Rows of x one pass of the fused kernel takes: one 16-lane accumulator each.
const FUSED_ROWS: usize = 16;

/// [`x_wt`] for a few f32 rows: tasks of W rows, each read once for all rows of x, as `how`
/// says.
pub fn decode_x_wt(x: &Tensor, w: &Tensor, how: Decode) -> Result<Tensor> {
    let (out, k) = dims(w)?;
    let (m, xk) = x.dims2()?;
    if xk != k {
        candle_core::bail!("Q8_0 weight product: x is ({m}, {xk}) but W is ({out}, {k})")
    }
    let x = x.to_dtype(DType::F32)?.contiguous()?;
    let w = w.contiguous()?;
    let row_bytes = k / BLOCK * BLOCK_BYTES;
    let (xs, xl) = x.storage_and_layout();
    let (ws, wl) = w.storage_and_layout();
    let (Storage::Cpu(xc), Storage::Cpu(wc)) = (&*xs, &*ws) else {
        candle_core::bail!("Q8_0 weight product: operands must be CPU tensors")
    };
    let xv = slice(xc.as_slice::<f32>()?, xl, "Q8_0 weight product")?;
    let wv = slice(wc.as_slice::<u8>()?, wl, "Q8_0 weight product")?;
    let avx512 = fused::avx512();
    let y = par_row_tasks(out, m, k, |r0, nr, o| {
        let mut row = match how {
            Decode::Dequantize => vec![0f32; k],
            Decode::Fused => Vec::new(),
        };
        for j in 0..nr {
            let r = r0 + j;
            let blocks = &wv[r * row_bytes..(r + 1) * row_bytes];
            let oj = &mut o[j * m..(j + 1) * m];
            match how {
                Decode::Dequantize => {
                    dequantize_row(blocks, &mut row);
                    for (i, y) in oj.iter_mut().enumerate() {
                        *y = dot(&row, &xv[i * k..(i + 1) * k]);
                    }
                }
                Decode::Fused => {
                    for (i0, ys) in (0..m).step_by(FUSED_ROWS).zip(oj.chunks_mut(FUSED_ROWS)) {
                        let xs = &xv[i0 * k..(i0 + ys.len()) * k];
                        fused::row(blocks, xs, k, ys, avx512);
                    }
                }
            }
        }
    });
    Tensor::from_vec(y, (m, out), x.device())
}

/// The fused decode product of one W row (its blocks) with up to [`FUSED_ROWS`] rows of x.
mod fused {
    use super::{BLOCK, BLOCK_BYTES, FUSED_ROWS};
    use half::f16;

    /// Whether this CPU runs the AVX-512 kernel.
    pub fn avx512() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// ys[i] = Σ_b d_b · Σ_j q_bj · x_i[32b + j] for the rows x_i of `xs` (each `k` long, as many
    /// as `ys` has, at most [`FUSED_ROWS`]); `avx512` from [`avx512`].
    pub fn row(blocks: &[u8], xs: &[f32], k: usize, ys: &mut [f32], avx512: bool) {
        let nb = k / BLOCK;
        let n = ys.len().min(FUSED_ROWS);
        if blocks.len() < nb * BLOCK_BYTES || xs.len() < n * k {
            // Unreachable from `decode_x_wt`, which slices both to these sizes.
            ys.fill(f32::NAN);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if avx512 {
            // SAFETY: the CPU has AVX-512F (`avx512`), and the sizes were checked above.
            unsafe { row_avx512(blocks, xs, k, &mut ys[..n]) };
            return;
        }
        let _ = avx512;
        row_portable(blocks, xs, k, &mut ys[..n]);
    }

    /// [`row`] without SIMD intrinsics: the same sums, per block and row, in 16 lanes.
    fn row_portable(blocks: &[u8], xs: &[f32], k: usize, ys: &mut [f32]) {
        let mut acc = [[0f32; 16]; FUSED_ROWS];
        for (b, blk) in blocks.chunks_exact(BLOCK_BYTES).take(k / BLOCK).enumerate() {
            let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            let q: [f32; BLOCK] = std::array::from_fn(|j| (blk[2 + j] as i8) as f32);
            for (i, a) in acc.iter_mut().enumerate().take(ys.len()) {
                let x = &xs[i * k + b * BLOCK..i * k + (b + 1) * BLOCK];
                for l in 0..16 {
                    let t = q[l] * x[l] + q[16 + l] * x[16 + l];
                    a[l] += d * t;
                }
            }
        }
        for (y, a) in ys.iter_mut().zip(&acc) {
            *y = a.iter().sum();
        }
    }

    /// [`row`] with AVX-512F: each block's 32 int8 values widened once to two f32 vectors,
    /// multiplied with every row's 32 values, scaled and added into that row's accumulator.
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `blocks` must hold `k / 32` blocks and `xs` `ys.len()` rows
    /// of `k`, with `ys.len()` ≤ [`FUSED_ROWS`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn row_avx512(blocks: &[u8], xs: &[f32], k: usize, ys: &mut [f32]) {
        use std::arch::x86_64::*;
        let n = ys.len();
        let mut acc = [_mm512_setzero_ps(); FUSED_ROWS];
        let (bp, xp) = (blocks.as_ptr(), xs.as_ptr());
        for b in 0..k / BLOCK {
            // SAFETY: block b lies within `blocks`, and row i's values 32b..32b+32 within `xs`
            // (the caller's sizes).
            unsafe {
                let p = bp.add(b * BLOCK_BYTES);
                let d = _mm512_set1_ps(f16::from_le_bytes([*p, *p.add(1)]).to_f32());
                let q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                    p.add(2) as *const __m128i
                )));
                let q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                    p.add(18) as *const __m128i
                )));
                for (i, a) in acc.iter_mut().enumerate().take(n) {
                    let x = xp.add(i * k + b * BLOCK);
                    let t = _mm512_fmadd_ps(
                        q1,
                        _mm512_loadu_ps(x.add(16)),
                        _mm512_mul_ps(q0, _mm512_loadu_ps(x)),
                    );
                    *a = _mm512_fmadd_ps(d, t, *a);
                }
            }
        }
        for (y, a) in ys.iter_mut().zip(&acc) {
            *y = _mm512_reduce_add_ps(*a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape path (decode rows, one panel, several panels, a last partial panel) equals
    /// the f64 product with the dequantized W, within f32 summation error; the bf16 operands'
    /// path stays within bf16's rounding of both operands.
    #[test]
    fn products_equal_the_dequantized_weight() -> Result<()> {
        let dev = Device::Cpu;
        for (m, k, out) in [(1, 64, 7), (5, 64, 300), (33, 96, 50), (40, 8192, 300)] {
            let w = quantize(&Tensor::randn(0f32, 1.0, (out, k), &dev)?)?;
            assert_eq!(w.dims2()?, (out, k / 32 * 34));
            let w64 = dequantize(&w)?.to_dtype(DType::F64)?;
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let want = x.to_dtype(DType::F64)?.matmul(&w64.t()?)?;
            let tol = 1e-5 * (k as f64).sqrt() * 4.0;
            let got = x_wt(&x, &w, ComputeDtype::F32)?;
            assert!(
                super::super::max_diff(&got, &want)? < tol,
                "x·Wᵀ {m}×{k}×{out}"
            );
            let got = x_wt(&x, &w, ComputeDtype::Bf16)?;
            assert!(
                super::super::max_diff(&got, &want)? < 0.02 * (k as f64).sqrt(),
                "bf16 x·Wᵀ {m}×{k}×{out}"
            );
            let dy = Tensor::randn(0f32, 1.0, (m, out), &dev)?;
            let want = dy.to_dtype(DType::F64)?.matmul(&w64)?;
            let tol = 1e-5 * (out as f64).sqrt() * 4.0;
            assert!(
                super::super::max_diff(&dy_w(&dy, &w, ComputeDtype::F32)?, &want)? < tol,
                "dy·W {m}×{k}×{out}"
            );
        }
        Ok(())
    }

    /// The fused decode (AVX-512 where the CPU has it, and the portable loop) equals the f64
    /// product with the dequantized W within f32 rounding (it applies the scale per block, not
    /// per weight), for 1..=33 rows (several passes of 16), and a row's result does not depend
    /// on the other rows.
    #[test]
    fn the_fused_decode_equals_the_dequantized_product() -> Result<()> {
        let dev = Device::Cpu;
        let (k, out) = (4864, 96);
        let w = quantize(&Tensor::randn(0f32, 1.0, (out, k), &dev)?)?;
        let w64 = dequantize(&w)?.to_dtype(DType::F64)?;
        let x = Tensor::randn(0f32, 1.0, (33, k), &dev)?;
        let tol = 1e-5 * (k as f64).sqrt() * 4.0;
        let alone = decode_x_wt(&x.narrow(0, 3, 1)?, &w, Decode::Fused)?;
        for m in [1, 5, 16, 17, 33] {
            let xm = x.narrow(0, 0, m)?;
            let want = xm.to_dtype(DType::F64)?.matmul(&w64.t()?)?;
            for how in [Decode::Fused, Decode::Dequantize] {
                let got = decode_x_wt(&xm, &w, how)?;
                assert!(super::super::max_diff(&got, &want)? < tol, "{how:?} {m}");
            }
            if m > 3 {
                let row = decode_x_wt(&xm, &w, Decode::Fused)?.narrow(0, 3, 1)?;
                assert_eq!(row.to_vec2::<f32>()?, alone.to_vec2::<f32>()?, "{m}");
            }
        }
        // The portable loop on its own (where the CPU would take AVX-512 above).
        let xs = x.narrow(0, 0, 5)?.flatten_all()?.to_vec1::<f32>()?;
        let wb = w.narrow(0, 0, 1)?.flatten_all()?.to_vec1::<u8>()?;
        let mut ys = [0f32; 5];
        fused::row(&wb, &xs, k, &mut ys, false);
        let want = x
            .narrow(0, 0, 5)?
            .to_dtype(DType::F64)?
            .matmul(&w64.narrow(0, 0, 1)?.t()?)?;
        let got = Tensor::from_vec(ys.to_vec(), (5, 1), &dev)?;
        assert!(super::super::max_diff(&got, &want)? < tol, "portable");
        Ok(())
    }

    /// A block's values round half away from zero at 1/d, its largest magnitude maps to ±127,
    /// an all-zero block has a zero scale, and dequantizing returns q · f16(d).
    #[test]
    fn quantize_follows_the_reference_rounding() {
        let mut xs: Vec<f32> = (0..32).map(|i| i as f32 - 12.7).collect();
        xs[5] = -25.4;
        let mut out = Vec::new();
        quantize_row(&xs, &mut out);
        quantize_row(&[0.0; 32], &mut out);
        assert_eq!(out.len(), 68);
        let d = 25.4f32 / 127.0;
        assert_eq!(f16::from_le_bytes([out[0], out[1]]), f16::from_f32(d));
        assert_eq!(out[2 + 5] as i8, -127);
        for (i, &x) in xs.iter().enumerate() {
            assert_eq!(out[2 + i] as i8, (x * (1.0 / d)).round() as i8, "{i}");
        }
        assert!(out[34..].iter().all(|&b| b == 0));
        let mut ys = [0f32; 64];
        dequantize_row(&out, &mut ys);
        let dq = f16::from_f32(d).to_f32();
        assert_eq!(ys[5], -127.0 * dq);
        assert!(ys[32..].iter().all(|&y| y == 0.0));
    }
}
