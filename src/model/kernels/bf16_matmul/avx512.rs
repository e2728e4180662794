//! The bf16 row kernel's AVX-512 BF16 body: `vdpbf16ps` over blocks of W rows × x rows.
use super::super::row_blocking::{by_tiles, Acc};
use super::{bf16, KB};
use std::arch::x86_64::*;

/// [`super::portable_rows`] with `vdpbf16ps`: blocks of up to 4 W rows × 4 x rows, the W
/// block staying in L1 while every x row passes.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn block_rows(
    w: &[bf16],
    x: &[bf16],
    sd: usize,
    nr: usize,
    m: usize,
    out: &mut [f32],
) {
    by_tiles(nr, m, out, |nb, mb, j, i, acc| {
        // SAFETY: rows j..j+nb of w and i..i+mb of x exist, each `sd` long, and `sd` is a
        // multiple of 32 (the padded stride): every 64-byte load is in bounds; the CPU has
        // avx512f and avx512bf16 (this function's own contract).
        unsafe {
            match nb {
                4 => tile_m::<4>(mb, w, x, sd, j, i, acc),
                3 => tile_m::<3>(mb, w, x, sd, j, i, acc),
                2 => tile_m::<2>(mb, w, x, sd, j, i, acc),
                _ => tile_m::<1>(mb, w, x, sd, j, i, acc),
            }
        }
    })
}

/// [`tile`] with N W rows and `mb` (1–4) x rows.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_m<const N: usize>(
    mb: usize,
    w: &[bf16],
    x: &[bf16],
    sd: usize,
    j: usize,
    i: usize,
    acc: &mut Acc,
) {
    // SAFETY: forwarded from `block_rows`'s bounds.
    unsafe {
        match mb {
            4 => tile::<N, 4>(w, x, sd, j, i, acc),
            3 => tile::<N, 3>(w, x, sd, j, i, acc),
            2 => tile::<N, 2>(w, x, sd, j, i, acc),
            _ => tile::<N, 1>(w, x, sd, j, i, acc),
        }
    }
}

/// acc[jj][ii] = Σ_k w[j + jj][k] · x[i + ii][k] for jj < N, ii < M.
#[target_feature(enable = "avx512f,avx512bf16")]
// Indexed loops over const-size register arrays: unrolled, the accumulators stay in zmm
// registers (checked in the disassembly).
#[allow(clippy::needless_range_loop)]
unsafe fn tile<const N: usize, const M: usize>(
    w: &[bf16],
    x: &[bf16],
    sd: usize,
    j: usize,
    i: usize,
    acc: &mut Acc,
) {
    debug_assert!((j + N) * sd <= w.len() && (i + M) * sd <= x.len() && sd.is_multiple_of(KB));
    let mut s = [[_mm512_setzero_ps(); M]; N];
    // SAFETY: the caller guarantees rows j..j+N of w and i..i+M of x, each `sd` (a multiple
    // of 32) long: every 32-element (64-byte) load at k < sd is in bounds. The transmutes
    // reinterpret 512 bits of bf16 as `__m512bh`, the same bits.
    unsafe {
        let wp = w.as_ptr().add(j * sd) as *const u16;
        let xp = x.as_ptr().add(i * sd) as *const u16;
        let mut k = 0;
        while k < sd {
            let mut wv = [_mm512_setzero_si512(); N];
            for (jj, v) in wv.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(wp.add(jj * sd + k) as *const _);
            }
            for ii in 0..M {
                let xv: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(xp.add(ii * sd + k) as *const _));
                for jj in 0..N {
                    let wb: __m512bh = std::mem::transmute(wv[jj]);
                    s[jj][ii] = _mm512_dpbf16_ps(s[jj][ii], wb, xv);
                }
            }
            k += KB;
        }
    }
    for jj in 0..N {
        for ii in 0..M {
            acc[jj][ii] = _mm512_reduce_add_ps(s[jj][ii]);
        }
    }
}
