//! Packing with AVX-512 BF16: each k-step of a panel (16 rows or columns × 32 k) is gathered
//! into an f32 block, then rounded 32 values per `vcvtne2ps2bf16` (nearest even, as
//! [`super::pack::round_bf16`], except that f32 denormals become zero, as the AMX and
//! `vdpbf16ps` products treat them anyway) and, for B, interleaved into k-pairs with one
//! `vpermw`.
use super::pack::{View, KSTEP, PANEL, STEP_ELEMS};
use std::arch::x86_64::*;

/// Whether this CPU runs these packers.
pub(super) fn usable() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// `blk[r * RO + kk * PO]` = v(r0 + r, p0 + kk) for r < 16, kk < 32, zero outside `v` (a
/// block wholly inside `v` is overwritten without being cleared first).
fn gather<const RO: usize, const PO: usize>(
    v: View<'_>,
    r0: usize,
    p0: usize,
    blk: &mut [f32; STEP_ELEMS],
) {
    let nr = v.rows.saturating_sub(r0).min(PANEL);
    let np = v.cols.saturating_sub(p0).min(KSTEP);
    if nr < PANEL || np < KSTEP {
        blk.fill(0.0);
    }
    if nr == 0 || np == 0 {
        return;
    }
    if v.cs == 1 {
        for r in 0..nr {
            let b = v.off + (r0 + r) * v.rs + p0;
            for (kk, &x) in v.data[b..b + np].iter().enumerate() {
                blk[r * RO + kk * PO] = x;
            }
        }
    } else if v.rs == 1 {
        for kk in 0..np {
            let b = v.off + (p0 + kk) * v.cs + r0;
            for (r, &x) in v.data[b..b + nr].iter().enumerate() {
                blk[r * RO + kk * PO] = x;
            }
        }
    } else {
        for r in 0..nr {
            for kk in 0..np {
                blk[r * RO + kk * PO] = v.data[v.off + (r0 + r) * v.rs + (p0 + kk) * v.cs];
            }
        }
    }
}

/// One k-step `s` of an A panel: rows `r0..r0 + 16` of `v` (rows × K), k `32s..32s + 32`,
/// into `out` (512 elements: `[16 rows][32 k]`), gathered through `blk` (any contents).
///
/// # Safety
/// [`usable`] must have returned true.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn step_a(
    v: View<'_>,
    r0: usize,
    s: usize,
    out: &mut [u16],
    blk: &mut [f32; STEP_ELEMS],
) {
    gather::<KSTEP, 1>(v, r0, s * KSTEP, blk);
    for (row, o) in blk.chunks_exact(KSTEP).zip(out.chunks_exact_mut(KSTEP)) {
        // SAFETY: `row` holds 32 f32 and `o` 32 u16: two 64-byte loads, one 64-byte store,
        // all unaligned-tolerant. The transmute reinterprets 32 bf16 as 512 bits.
        unsafe {
            let lo = _mm512_loadu_ps(row.as_ptr());
            let hi = _mm512_loadu_ps(row.as_ptr().add(16));
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), v);
        }
    }
}

/// One k-step `s` of a B panel: columns `c0..c0 + 16` of b, given as `bt` (columns × K), into
/// `out` (512 elements: `[16 k-pairs][16 columns][2]`), gathered through `blk` (any contents).
///
/// # Safety
/// [`usable`] must have returned true.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn step_b(
    bt: View<'_>,
    c0: usize,
    s: usize,
    out: &mut [u16],
    blk: &mut [f32; STEP_ELEMS],
) {
    // Output lane 2c takes column c of k 2q (input lane c), lane 2c + 1 that of k 2q + 1
    // (input lane 16 + c).
    let mut idx = [0i16; 32];
    for c in 0..16 {
        idx[2 * c] = c as i16;
        idx[2 * c + 1] = 16 + c as i16;
    }
    // SAFETY: `idx` is 64 bytes.
    let idx = unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) };
    gather::<1, PANEL>(bt, c0, s * KSTEP, blk);
    for (pair, o) in blk
        .chunks_exact(2 * PANEL)
        .zip(out.chunks_exact_mut(2 * PANEL))
    {
        // SAFETY: `pair` holds 32 f32 (k 2q's 16 columns, then k 2q + 1's) and `o` 32 u16:
        // two 64-byte loads, one 64-byte store. The transmute reinterprets 32 bf16 as 512 bits.
        unsafe {
            let lo = _mm512_loadu_ps(pair.as_ptr());
            let hi = _mm512_loadu_ps(pair.as_ptr().add(16));
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), _mm512_permutexvar_epi16(idx, v));
        }
    }
}
