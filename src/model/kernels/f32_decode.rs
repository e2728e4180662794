//! The f32 sampling product `y = x · Wᵀ` for rows of x against W (out, in) exactly as the
//! checkpoint stores it: the sampling path of models too large for transposed copies, where a
//! decode step of a few rows streams every weight once and is bound by memory. The gemm crate,
//! given W · xᵀ with so few columns, stays far below the FMA peak; here blocks of 4 W rows × 4 x
//! rows keep 16 accumulators in registers, W is read from memory once (each 4-row block stays
//! in L1/L2 while every x row passes, the next block prefetched a share per x tile) and nothing
//! is packed or copied. Plain f32 products and sums (another order than gemm's, as any
//! kernel).
use super::row_blocking;
use candle_core::{DType, Result, Storage, Tensor};

/// Whether this CPU runs the kernel (AVX-512F).
pub fn usable() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// x (m, in) · Wᵀ for W (out, in), both f32 CPU tensors, as a new (m, out) tensor; `None` where
/// the kernel does not apply (another dtype or device, a CPU without AVX-512F), so that the
/// caller takes its general product. Each output is summed the same way whatever the other
/// rows: a row samples the same tokens alone or batched with other prompts' rows.
pub fn x_wt(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    let (m, k) = x.dims2()?;
    let (n, k2) = w.dims2()?;
    let f32_cpu = |t: &Tensor| t.dtype() == DType::F32 && t.device().is_cpu();
    if k != k2 || !f32_cpu(x) || !f32_cpu(w) || !usable() {
        return Ok(None);
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let y = {
        let (xs, xl) = x.storage_and_layout();
        let (ws, wl) = w.storage_and_layout();
        let (Storage::Cpu(xc), Storage::Cpu(wc)) = (&*xs, &*ws) else {
            return Ok(None);
        };
        let xv = &xc.as_slice::<f32>()?[xl.start_offset()..][..m * k];
        let wv = &wc.as_slice::<f32>()?[wl.start_offset()..][..n * k];
        matmul_t(wv, n, k, xv, m)
    };
    Ok(Some(Tensor::from_vec(y, (m, n), x.device())?))
}

/// y (m, n) = x (m, k) · Wᵀ for row-major W (n, k) and x (m, k). Needs AVX-512F ([`usable`]).
pub fn matmul_t(w: &[f32], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    assert!(usable(), "f32_decode needs AVX-512F");
    assert_eq!(w.len(), n * k, "f32_decode: W does not match (n, k)");
    assert_eq!(x.len(), m * k, "f32_decode: x does not match (m, k)");
    row_blocking::par_row_tasks(n, m, k, |r0, nr, out| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `usable()` (asserted above) found AVX-512F; rows r0..r0 + nr of w and all m
        // rows of x are k long (lengths asserted above).
        unsafe {
            avx512::block_rows(&w[r0 * k..(r0 + nr) * k], x, k, nr, m, out)
        };
    })
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::row_blocking::{by_tiles, Acc, MR};
    use std::arch::x86_64::*;

    /// Which of the next W block's rows this x tile prefetches: the block's rows shared out
    /// over the x tiles, so that the memory reads spread over the whole time the block is in
    /// use; prefetching all of them during the first x tile would leave the memory idle for
    /// the rest. With more than 4 x tiles (over 16 rows) the later tiles prefetch nothing.
    #[derive(Clone, Copy)]
    struct Share {
        tile: usize,
        tiles: usize,
    }

    impl Share {
        fn takes(self, row: usize) -> bool {
            row % self.tiles == self.tile
        }
    }

    /// out[j · m + i] = Σ_k w[j][k] · x[i][k] for the `nr` rows of `w`, in blocks of up to 4 W
    /// rows × 4 x rows, the W block staying in cache while every x row passes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block_rows(
        w: &[f32],
        x: &[f32],
        k: usize,
        nr: usize,
        m: usize,
        out: &mut [f32],
    ) {
        debug_assert!(w.len() >= nr * k && x.len() >= m * k && out.len() >= nr * m);
        by_tiles(nr, m, out, |nb, mb, j, i, acc| {
            // SAFETY: rows j..j + nb of w and i..i + mb of x exist, each k long; the CPU has
            // AVX-512F (this function's own contract).
            unsafe {
                let pf = Share {
                    tile: i / MR,
                    tiles: m.div_ceil(MR),
                };
                match nb {
                    4 => tile_m::<4>(mb, w, x, k, j, i, pf, acc),
                    3 => tile_m::<3>(mb, w, x, k, j, i, pf, acc),
                    2 => tile_m::<2>(mb, w, x, k, j, i, pf, acc),
                    _ => tile_m::<1>(mb, w, x, k, j, i, pf, acc),
                }
            }
        })
    }

    /// [`tile`] with N W rows and `mb` (1–4) x rows.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_m<const N: usize>(
        mb: usize,
        w: &[f32],
        x: &[f32],
        k: usize,
        j: usize,
        i: usize,
        pf: Share,
        acc: &mut Acc,
    ) {
        // SAFETY: forwarded from `block_rows`'s bounds.
        unsafe {
            match mb {
                4 => tile::<N, 4>(w, x, k, j, i, pf, acc),
                3 => tile::<N, 3>(w, x, k, j, i, pf, acc),
                2 => tile::<N, 2>(w, x, k, j, i, pf, acc),
                _ => tile::<N, 1>(w, x, k, j, i, pf, acc),
            }
        }
    }

    /// acc[jj][ii] = Σ_k w[j + jj][k] · x[i + ii][k] for jj < N, ii < M: 16 lanes of k at a
    /// time, the last partial 16 under a mask.
    #[target_feature(enable = "avx512f")]
    // Indexed loops over const-size register arrays: unrolled, the accumulators stay in zmm
    // registers.
    #[allow(clippy::needless_range_loop)]
    unsafe fn tile<const N: usize, const M: usize>(
        w: &[f32],
        x: &[f32],
        k: usize,
        j: usize,
        i: usize,
        pf: Share,
        acc: &mut Acc,
    ) {
        debug_assert!((j + N) * k <= w.len() && (i + M) * k <= x.len());
        let mut s = [[_mm512_setzero_ps(); M]; N];
        let full = k / 16 * 16;
        let tail: __mmask16 = ((1u32 << (k - full)) - 1) as __mmask16;
        // SAFETY: the caller guarantees rows j..j + N of w and i..i + M of x, each k long:
        // full loads stay below `full` ≤ k, the masked load reads only lanes below k.
        unsafe {
            let wp = w.as_ptr().add(j * k);
            let xp = x.as_ptr().add(i * k);
            let mut p = 0;
            while p < full {
                let mut wv = [_mm512_setzero_ps(); N];
                for (jj, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(wp.add(jj * k + p));
                }
                // The next block's rows, while this one is in cache: a hint, never a load
                // (wrapping arithmetic, as it may point past the slice). Into L2, not L1:
                // there they do not evict the block and x rows in use.
                for jj in 0..N {
                    if pf.takes(jj) {
                        _mm_prefetch::<_MM_HINT_T1>(wp.wrapping_add((N + jj) * k + p) as *const i8);
                    }
                }
                for ii in 0..M {
                    let xv = _mm512_loadu_ps(xp.add(ii * k + p));
                    for jj in 0..N {
                        s[jj][ii] = _mm512_fmadd_ps(wv[jj], xv, s[jj][ii]);
                    }
                }
                p += 16;
            }
            if tail != 0 {
                for ii in 0..M {
                    let xv = _mm512_maskz_loadu_ps(tail, xp.add(ii * k + p));
                    for jj in 0..N {
                        let wv = _mm512_maskz_loadu_ps(tail, wp.add(jj * k + p));
                        s[jj][ii] = _mm512_fmadd_ps(wv, xv, s[jj][ii]);
                    }
                }
            }
        }
        for jj in 0..N {
            for ii in 0..M {
                acc[jj][ii] = _mm512_reduce_add_ps(s[jj][ii]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Against an f64 reference on odd shapes (k with and without a partial 16, rows that are
    /// not multiples of the blocks or the tasks), each row the same bits alone as in a batch,
    /// and `None` where the kernel does not apply.
    #[test]
    fn matches_an_f64_product_on_odd_shapes() -> Result<()> {
        if !usable() {
            eprintln!("skipped: this CPU has no AVX-512F");
            return Ok(());
        }
        let dev = Device::Cpu;
        for (m, k, n) in [
            (1, 16, 1),
            (3, 37, 5),
            (16, 896, 133),
            (7, 100, 64),
            (32, 33, 70),
        ] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev)?;
            let got = x_wt(&x, &w)?.expect("applies");
            let want = x
                .to_dtype(DType::F64)?
                .matmul(&w.to_dtype(DType::F64)?.t()?)?
                .to_dtype(DType::F32)?;
            let err = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(
                err < 1e-4 * (k as f32).sqrt(),
                "({m}, {k}, {n}): differs by {err}"
            );
        }
        let w = Tensor::zeros((4, 8), DType::F32, &dev)?;
        let x16 = Tensor::zeros((2, 8), DType::BF16, &dev)?;
        assert!(x_wt(&x16, &w)?.is_none(), "bf16");
        Ok(())
    }
}
