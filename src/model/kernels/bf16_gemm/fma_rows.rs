//! Decode-shaped products (a few rows of x against a packed bf16 weight) with AVX-512F FMAs
//! instead of `vdpbf16ps`: each VNNI pair of the B panel is widened to two f32 vectors (its
//! even elements by a shift, its odd ones by a mask) and multiplied by x's pair, broadcast from
//! a widened copy of x. Intel's cores without AMX issue `vdpbf16ps` once per two cycles against
//! two FMAs per cycle, so there 32 FMAs and 2 widening instructions per k-pair of 16 rows beat
//! 16 `vdpbf16ps`.
//!
//! The arithmetic is `vdpbf16ps`'s: per pair the odd product is added first, then the even one,
//! each with one rounding (a bf16 product is exact in f32), and K is cut into the GEMM driver's
//! chunks, each summed from zero and added to the total in order. The sums are therefore the
//! AVX-512 BF16 backend's bit for bit, except where `vdpbf16ps` flushes denormals to zero.
use super::super::panel_tasks::{par_panel_tasks, Columns};
use super::driver::KC;
use super::layout::{round_bf16, KSTEP, PANEL};
use super::pack::Packed;

/// Rows of x per register block (one accumulator each).
const MB: usize = 16;
/// k-pairs per K chunk (the driver's `KC` k-steps of 32).
const CHUNK_PAIRS: usize = KC * KSTEP / 2;
/// Panels (of 16 columns) per parallel task.
const TASK_PANELS: usize = 4;

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

/// y (m, n) = bf16(x) (m, k) · B for `b` packed as a right operand (k, n). Needs AVX-512F
/// ([`usable`]).
pub(super) fn matmul_rows(b: &Packed, x: &[f32], m: usize) -> Vec<f32> {
    assert!(usable(), "fma_rows needs AVX-512F");
    let (k, n) = (b.k, b.len);
    assert_eq!(x.len(), m * k, "fma_rows: x does not match (m, k)");
    let pairs = b.steps * KSTEP / 2;
    let xw = widen(x, m, k, pairs);
    let ps = b.panel_elems();
    let panels = n.div_ceil(PANEL);
    let task = |t: usize, out: &Columns| {
        let (first, last) = (t * TASK_PANELS, ((t + 1) * TASK_PANELS).min(panels));
        let mut acc = [[0f32; MB * PANEL]; TASK_PANELS];
        let mut total = [[0f32; MB * PANEL]; TASK_PANELS];
        for (blk, xb) in xw.chunks_exact(pairs * MB * 2).enumerate() {
            let rows = (m - blk * MB).min(MB);
            // The driver's K chunks, each summed from zero, then added to the total in order.
            for c0 in (0..pairs).step_by(CHUNK_PAIRS) {
                let span = (c0, (c0 + CHUNK_PAIRS).min(pairs));
                // Panel after panel: each one streams from memory in order, which the prefetcher
                // follows (interleaving the panels over shorter spans of k would keep x in L1
                // but break the streams).
                for (a, panel) in acc.iter_mut().zip(first..last) {
                    let bp = &b.data[panel * ps..(panel + 1) * ps];
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `usable()` holds (asserted above); `bp` is one panel of `pairs`
                    // k-pairs × 32 elements and `xb` one block of `pairs` × 16 rows × 2 values
                    // (lengths from `b.steps` and `widen`); span.1 <= pairs.
                    unsafe {
                        avx512::pairs(bp, xb, span, rows, a)
                    };
                }
                for (t, a) in total.iter_mut().zip(&acc).take(last - first) {
                    for (t, a) in t.iter_mut().zip(a) {
                        *t = if c0 == 0 { *a } else { *t + *a };
                    }
                }
            }
            for (t, panel) in total.iter().zip(first..last) {
                let cols = (n - panel * PANEL).min(PANEL);
                for r in 0..rows {
                    // SAFETY: columns panel·16 .. + cols are this task's panels; no other task
                    // writes them.
                    unsafe {
                        out.write((blk * MB + r) * n + panel * PANEL, &t[r * PANEL..][..cols])
                    };
                }
            }
        }
    };
    par_panel_tasks(m, n, k, panels.div_ceil(TASK_PANELS), task)
}

/// x rounded to bf16 and widened back to f32, in blocks of 16 rows, each `[k-pair][row][2]`
/// (zero rows and zero k past the ends): the broadcasts' operands, one pointer a k-pair.
fn widen(x: &[f32], m: usize, k: usize, pairs: usize) -> Vec<f32> {
    let widened = |v: f32| f32::from_bits((round_bf16(v) as u32) << 16);
    let mut xw = vec![0f32; m.div_ceil(MB) * pairs * MB * 2];
    for (i, row) in x.chunks_exact(k.max(1)).enumerate().take(m) {
        let block = &mut xw[(i / MB) * pairs * MB * 2..][..pairs * MB * 2];
        // Row i's pair p lands at p · 32 + (i mod 16) · 2.
        for (dst, src) in block[(i % MB) * 2..].chunks_mut(MB * 2).zip(row.chunks(2)) {
            dst[0] = widened(src[0]);
            if let Some(&odd) = src.get(1) {
                dst[1] = widened(odd);
            }
        }
    }
    xw
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MB, PANEL};
    use std::arch::x86_64::*;

    /// k-pairs (64-byte lines of the panel) prefetched ahead of the one being read.
    const AHEAD: usize = 128;

    /// `sums[r * 16 + c]` = Σ over k-pairs `p0..p1` of x row r · column c of the panel, for
    /// `rows` (≤ 16) rows.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `bp` holds at least `p1` × 32 elements, `xb` `p1` × 32 values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pairs(
        bp: &[u16],
        xb: &[f32],
        (p0, p1): (usize, usize),
        rows: usize,
        sums: &mut [f32; MB * PANEL],
    ) {
        debug_assert!(bp.len() >= p1 * 2 * PANEL && xb.len() >= p1 * MB * 2);
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match rows {
                9.. => rows_of::<16>(bp, xb, (p0, p1), sums),
                5..=8 => rows_of::<8>(bp, xb, (p0, p1), sums),
                3 | 4 => rows_of::<4>(bp, xb, (p0, p1), sums),
                2 => rows_of::<2>(bp, xb, (p0, p1), sums),
                _ => rows_of::<1>(bp, xb, (p0, p1), sums),
            }
        }
    }

    /// [`pairs`] for the first R rows of the block (R ≤ 16; the rows past the caller's are
    /// zero in `xb` and their sums unused).
    #[target_feature(enable = "avx512f")]
    // Indexed loops over const-size register arrays: unrolled, the accumulators stay in zmm.
    #[allow(clippy::needless_range_loop)]
    unsafe fn rows_of<const R: usize>(
        bp: &[u16],
        xb: &[f32],
        (p0, p1): (usize, usize),
        sums: &mut [f32; MB * PANEL],
    ) {
        let odd_mask = _mm512_set1_epi32(0xffff_0000_u32 as i32);
        let mut acc = [_mm512_setzero_ps(); R];
        for p in p0..p1 {
            // SAFETY: p < p1: the 32 elements at p · 32 lie inside `bp`, and the 32 values at
            // p · 32 inside `xb` (the caller's lengths); loads are unaligned, and a prefetch
            // past the end reads nothing.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(
                    bp.as_ptr().wrapping_add((p + AHEAD) * 2 * PANEL).cast(),
                );
                let w = _mm512_loadu_si512(bp.as_ptr().add(p * 2 * PANEL).cast());
                let even = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w));
                let odd = _mm512_castsi512_ps(_mm512_and_si512(w, odd_mask));
                let xp = xb.as_ptr().add(p * MB * 2);
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(odd, _mm512_set1_ps(*xp.add(2 * r + 1)), acc[r]);
                    acc[r] = _mm512_fmadd_ps(even, _mm512_set1_ps(*xp.add(2 * r)), acc[r]);
                }
            }
        }
        for r in 0..R {
            // SAFETY: r < R ≤ 16: the 16 values at r · 16 lie inside `sums` (256 values).
            unsafe { _mm512_storeu_ps(sums.as_mut_ptr().add(r * PANEL), acc[r]) };
        }
    }
}
