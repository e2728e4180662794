//! Packing with AVX-512 BF16, one k-step of a panel (16 rows or columns × 32 k) at a time,
//! rounded 32 values per `vcvtne2ps2bf16` (nearest even, as [`super::layout::round_bf16`],
//! except that f32 denormals become zero, as the AMX and `vdpbf16ps` products treat them
//! anyway). A whole step is read with vector loads: straight along a row-major source, and
//! through 16 × 16 register transposes where the source runs across the panel (A from a
//! transposed view such as dyᵀ, B from a row-major weight W for x · Wᵀ); B's k-pairs are
//! interleaved with one `vpermw` or fall out of the transpose. Only a partial step (the
//! operand's edge) is gathered element by element into an f32 block first: gathering every
//! step made packing a large share of a bf16 update.
//!
//! A bf16 source (a frozen bf16 base's W, `agents.base_dtype: bf16`) is packed by the same
//! moves on 16-bit lanes, with no rounding and no f32 copy: its bits are what rounding their
//! exact f32 widening gives, except for NaNs and denormals, which [`as_rounded`] treats as
//! `vcvtne2ps2bf16` does, so the panels equal the widened operand's bit for bit.
use super::layout::{Elem, View, KSTEP, PANEL, STEP_ELEMS};
use half::bf16;
use std::arch::x86_64::*;

/// Whether this CPU runs these packers.
pub(super) fn usable() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// `blk[r * RO + kk * PO]` = v(r0 + r, p0 + kk) as f32 for r < 16, kk < 32, zero outside `v`
/// (a block wholly inside `v` is overwritten without being cleared first).
fn gather<T: Elem, const RO: usize, const PO: usize>(
    v: View<'_, T>,
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
                blk[r * RO + kk * PO] = x.to_f32();
            }
        }
    } else if v.rs == 1 {
        for kk in 0..np {
            let b = v.off + (p0 + kk) * v.cs + r0;
            for (r, &x) in v.data[b..b + nr].iter().enumerate() {
                blk[r * RO + kk * PO] = x.to_f32();
            }
        }
    } else {
        for r in 0..nr {
            for kk in 0..np {
                blk[r * RO + kk * PO] = v.data[v.off + (r0 + r) * v.rs + (p0 + kk) * v.cs].to_f32();
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
    if full_step(v, r0, s) {
        if v.cs == 1 {
            // SAFETY: the CPU has avx512f and avx512bf16 (caller); the step lies inside `v`.
            unsafe { step_a_rows(v, r0, s, out) };
            return;
        }
        if v.rs == 1 {
            // SAFETY: as above.
            unsafe { step_a_transposing(v, r0, s, out) };
            return;
        }
    }
    // SAFETY: as above.
    unsafe { partial_a(v, r0, s, out, blk) }
}

/// [`step_a`] for any step, through an f32 block: the operand's edge.
///
/// # Safety
/// avx512f and avx512bf16.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn partial_a<T: Elem>(
    v: View<'_, T>,
    r0: usize,
    s: usize,
    out: &mut [u16],
    blk: &mut [f32; STEP_ELEMS],
) {
    gather::<T, KSTEP, 1>(v, r0, s * KSTEP, blk);
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
    // SAFETY: `PAIR_IDX` is 64 bytes.
    let idx = unsafe { _mm512_loadu_si512(PAIR_IDX.as_ptr().cast()) };
    if full_step(bt, c0, s) {
        if bt.cs == 1 {
            // SAFETY: the CPU has avx512f and avx512bf16 (caller); the step lies inside `bt`.
            unsafe { step_b_transposing(bt, c0, s, out) };
            return;
        }
        if bt.rs == 1 {
            // SAFETY: as above.
            unsafe { step_b_pairs(bt, c0, s, out, idx) };
            return;
        }
    }
    // SAFETY: as above.
    unsafe { partial_b(bt, c0, s, out, blk, idx) }
}

/// [`step_b`] for any step, through an f32 block: the operand's edge.
///
/// # Safety
/// avx512f, avx512bw and avx512bf16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn partial_b<T: Elem>(
    bt: View<'_, T>,
    c0: usize,
    s: usize,
    out: &mut [u16],
    blk: &mut [f32; STEP_ELEMS],
    idx: __m512i,
) {
    gather::<T, 1, PANEL>(bt, c0, s * KSTEP, blk);
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

/// `vpermw` indices interleaving a register of 16 columns at k 2q (lanes 0..16) and 16 at
/// k 2q + 1 (lanes 16..32) into pairs: output lane 2c takes input lane c, lane 2c + 1 lane
/// 16 + c.
const PAIR_IDX: [i16; 32] = {
    let mut idx = [0i16; 32];
    let mut c = 0;
    while c < 16 {
        idx[2 * c] = c as i16;
        idx[2 * c + 1] = 16 + c as i16;
        c += 1;
    }
    idx
};

/// Whether rows `r0..r0 + 16` × k `32s..32s + 32` all lie inside `v`.
fn full_step<T>(v: View<'_, T>, r0: usize, s: usize) -> bool {
    r0 + PANEL <= v.rows && (s + 1) * KSTEP <= v.cols
}

/// [`step_a`] for a whole step of a row-major source (`v.cs == 1`): each row's 32 k loaded,
/// rounded and stored.
///
/// # Safety
/// avx512f and avx512bf16; `v.cs == 1` and [`full_step`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn step_a_rows(v: View<'_>, r0: usize, s: usize, out: &mut [u16]) {
    debug_assert!(v.cs == 1 && full_step(v, r0, s) && out.len() >= STEP_ELEMS);
    for (r, o) in out.chunks_exact_mut(KSTEP).take(PANEL).enumerate() {
        let b = v.off + (r0 + r) * v.rs + s * KSTEP;
        let ks = &v.data[b..b + KSTEP];
        // SAFETY: `ks` holds 32 f32 and `o` 32 u16 (bounds-checked slices): two unaligned
        // 64-byte loads, one store. The transmute reinterprets 32 bf16 as 512 bits.
        unsafe {
            let x: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(
                _mm512_loadu_ps(ks.as_ptr().add(16)),
                _mm512_loadu_ps(ks.as_ptr()),
            ));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), x);
        }
    }
}

/// [`step_b`] for a whole step of `bt` whose columns are contiguous (`bt.rs == 1`, e.g. a
/// row-major b): per k-pair, the 16 columns at k 2q and at 2q + 1 loaded, rounded and
/// interleaved with `idx` (as in [`step_b`]).
///
/// # Safety
/// avx512f, avx512bw and avx512bf16; `bt.rs == 1` and [`full_step`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn step_b_pairs(bt: View<'_>, c0: usize, s: usize, out: &mut [u16], idx: __m512i) {
    debug_assert!(bt.rs == 1 && full_step(bt, c0, s) && out.len() >= STEP_ELEMS);
    for (q, o) in out.chunks_exact_mut(2 * PANEL).take(KSTEP / 2).enumerate() {
        let even = bt.off + (s * KSTEP + 2 * q) * bt.cs + c0;
        let odd = even + bt.cs;
        let (e, d) = (&bt.data[even..even + PANEL], &bt.data[odd..odd + PANEL]);
        // SAFETY: `e` and `d` hold 16 f32 and `o` 32 u16 (bounds-checked slices): two
        // unaligned 64-byte loads, one store. The transmute reinterprets 32 bf16 as 512 bits.
        unsafe {
            let x: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(
                _mm512_loadu_ps(d.as_ptr()),
                _mm512_loadu_ps(e.as_ptr()),
            ));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), _mm512_permutexvar_epi16(idx, x));
        }
    }
}

/// [`step_a`] for a whole step of a source whose rows are contiguous (`v.rs == 1`): 32 loads
/// of 16 rows at one k, two 16 × 16 transposes, then each row's 32 k rounded and stored.
///
/// # Safety
/// avx512f and avx512bf16; `v.rs == 1` and [`full_step`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn step_a_transposing(v: View<'_>, r0: usize, s: usize, out: &mut [u16]) {
    debug_assert!(v.rs == 1 && full_step(v, r0, s) && out.len() >= STEP_ELEMS);
    let mut lo = [_mm512_setzero_si512(); 16];
    let mut hi = [_mm512_setzero_si512(); 16];
    for kk in 0..KSTEP {
        let b = v.off + (s * KSTEP + kk) * v.cs + r0;
        let col = &v.data[b..b + PANEL];
        // SAFETY: `col` holds 16 f32 (bounds-checked slice): one unaligned 64-byte load.
        let x = unsafe { _mm512_loadu_si512(col.as_ptr().cast()) };
        if kk < 16 {
            lo[kk] = x;
        } else {
            hi[kk - 16] = x;
        }
    }
    transpose16(&mut lo);
    transpose16(&mut hi);
    for r in 0..PANEL {
        let o = &mut out[r * KSTEP..(r + 1) * KSTEP];
        // SAFETY: `o` holds 32 u16: one unaligned 64-byte store. The casts reinterpret
        // 16 f32 and 32 bf16 as 512 bits.
        unsafe {
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(
                _mm512_castsi512_ps(hi[r]),
                _mm512_castsi512_ps(lo[r]),
            ));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), v);
        }
    }
}

/// [`step_b`] for a whole step of `bt` with contiguous k (`bt.cs == 1`, e.g. a row-major
/// weight W for x · Wᵀ): each column's 32 k rounded into one register of 16 k-pairs, then one
/// 16 × 16 transpose of the 32-bit pairs gives the `[k-pair][column][2]` rows directly.
///
/// # Safety
/// avx512f and avx512bf16; `bt.cs == 1` and [`full_step`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn step_b_transposing(bt: View<'_>, c0: usize, s: usize, out: &mut [u16]) {
    debug_assert!(bt.cs == 1 && full_step(bt, c0, s) && out.len() >= STEP_ELEMS);
    let mut cols = [_mm512_setzero_si512(); 16];
    for (c, reg) in cols.iter_mut().enumerate() {
        let b = bt.off + (c0 + c) * bt.rs + s * KSTEP;
        let ks = &bt.data[b..b + KSTEP];
        // SAFETY: `ks` holds 32 f32 (bounds-checked slice): two unaligned 64-byte loads. The
        // transmute reinterprets 32 bf16 as 512 bits.
        *reg = unsafe {
            std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(
                _mm512_loadu_ps(ks.as_ptr().add(16)),
                _mm512_loadu_ps(ks.as_ptr()),
            ))
        };
    }
    transpose16(&mut cols);
    for (q, reg) in cols.iter().enumerate() {
        let o = &mut out[q * 2 * PANEL..(q + 1) * 2 * PANEL];
        // SAFETY: `o` holds 32 u16: one unaligned 64-byte store.
        unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), *reg) };
    }
}

/// Transposes 16 registers of 16 32-bit lanes in place (`r[i]` lane j ↔ `r[j]` lane i):
/// pairs of 32-bit lanes, then of 64-bit lanes, then two rounds of 128-bit lanes.
#[target_feature(enable = "avx512f")]
fn transpose16(r: &mut [__m512i; 16]) {
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4i + j], 128-bit lane l: rows 4i..4i + 4 of column 4l + j.
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for j in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x88>(u[j], u[4 + j]);
        let v1 = _mm512_shuffle_i32x4::<0xdd>(u[j], u[4 + j]);
        let w0 = _mm512_shuffle_i32x4::<0x88>(u[8 + j], u[12 + j]);
        let w1 = _mm512_shuffle_i32x4::<0xdd>(u[8 + j], u[12 + j]);
        r[j] = _mm512_shuffle_i32x4::<0x88>(v0, w0);
        r[4 + j] = _mm512_shuffle_i32x4::<0x88>(v1, w1);
        r[8 + j] = _mm512_shuffle_i32x4::<0xdd>(v0, w0);
        r[12 + j] = _mm512_shuffle_i32x4::<0xdd>(v1, w1);
    }
}

/// [`step_a`] for a bf16 source.
///
/// # Safety
/// [`usable`] must have returned true.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn step_a_bf16(
    v: View<'_, bf16>,
    r0: usize,
    s: usize,
    out: &mut [u16],
    blk: &mut [f32; STEP_ELEMS],
) {
    if full_step(v, r0, s) {
        if v.cs == 1 {
            debug_assert!(out.len() >= STEP_ELEMS);
            for (r, o) in out.chunks_exact_mut(KSTEP).take(PANEL).enumerate() {
                let b = v.off + (r0 + r) * v.rs + s * KSTEP;
                let ks = &v.data[b..b + KSTEP];
                // SAFETY: `ks` and `o` hold 32 16-bit values each (bounds-checked slices):
                // one unaligned 64-byte load and one store.
                unsafe {
                    let x = as_rounded(_mm512_loadu_si512(ks.as_ptr().cast()));
                    _mm512_storeu_si512(o.as_mut_ptr().cast(), x);
                }
            }
            return;
        }
        if v.rs == 1 {
            // SAFETY: the CPU has the features (caller); the step lies inside `v`.
            unsafe { step_a_transposing_bf16(v, r0, s, out) };
            return;
        }
    }
    // SAFETY: as above.
    unsafe { partial_a(v, r0, s, out, blk) }
}

/// [`step_b`] for a bf16 source.
///
/// # Safety
/// [`usable`] must have returned true.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn step_b_bf16(
    bt: View<'_, bf16>,
    c0: usize,
    s: usize,
    out: &mut [u16],
    blk: &mut [f32; STEP_ELEMS],
) {
    // SAFETY: `PAIR_IDX` is 64 bytes.
    let idx = unsafe { _mm512_loadu_si512(PAIR_IDX.as_ptr().cast()) };
    if full_step(bt, c0, s) {
        if bt.cs == 1 {
            // A row-major W for x · Wᵀ: each column's 32 k are one 64-byte load, already
            // the 16 k-pairs of its register in `step_b_transposing`.
            let mut cols = [_mm512_setzero_si512(); 16];
            for (c, reg) in cols.iter_mut().enumerate() {
                let b = bt.off + (c0 + c) * bt.rs + s * KSTEP;
                let ks = &bt.data[b..b + KSTEP];
                // SAFETY: `ks` holds 32 16-bit values (bounds-checked slice): one unaligned
                // 64-byte load.
                *reg = unsafe { as_rounded(_mm512_loadu_si512(ks.as_ptr().cast())) };
            }
            transpose16(&mut cols);
            for (q, reg) in cols.iter().enumerate() {
                let o = &mut out[q * 2 * PANEL..(q + 1) * 2 * PANEL];
                // SAFETY: `o` holds 32 u16: one unaligned 64-byte store.
                unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), *reg) };
            }
            return;
        }
        if bt.rs == 1 {
            // A row-major b (W for dy · W): the 16 columns at k 2q and at 2q + 1, side by
            // side, interleaved into pairs.
            for (q, o) in out.chunks_exact_mut(2 * PANEL).take(KSTEP / 2).enumerate() {
                let even = bt.off + (s * KSTEP + 2 * q) * bt.cs + c0;
                let odd = even + bt.cs;
                let (e, d) = (&bt.data[even..even + PANEL], &bt.data[odd..odd + PANEL]);
                // SAFETY: `e` and `d` hold 16 16-bit values and `o` 32 (bounds-checked
                // slices): two unaligned 32-byte loads, one 64-byte store.
                unsafe {
                    let e = _mm256_loadu_si256(e.as_ptr().cast());
                    let d = _mm256_loadu_si256(d.as_ptr().cast());
                    let x = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(e), d);
                    let x = as_rounded(_mm512_permutexvar_epi16(idx, x));
                    _mm512_storeu_si512(o.as_mut_ptr().cast(), x);
                }
            }
            return;
        }
    }
    // SAFETY: as above.
    unsafe { partial_b(bt, c0, s, out, blk, idx) }
}

/// [`step_a_transposing`] for a bf16 source: 32 loads of 16 rows at one k, each widened in
/// its register to the exact f32 values (the bits shifted up), then the same transposes and
/// `vcvtne2ps2bf16`, which gives the bits back (NaNs and denormals as for the widened operand).
///
/// # Safety
/// avx512f and avx512bf16; `v.rs == 1` and [`full_step`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn step_a_transposing_bf16(v: View<'_, bf16>, r0: usize, s: usize, out: &mut [u16]) {
    debug_assert!(v.rs == 1 && full_step(v, r0, s) && out.len() >= STEP_ELEMS);
    let mut lo = [_mm512_setzero_si512(); 16];
    let mut hi = [_mm512_setzero_si512(); 16];
    for kk in 0..KSTEP {
        let b = v.off + (s * KSTEP + kk) * v.cs + r0;
        let col = &v.data[b..b + PANEL];
        // SAFETY: `col` holds 16 16-bit values (bounds-checked slice): one unaligned 32-byte
        // load.
        let x = unsafe { _mm256_loadu_si256(col.as_ptr().cast()) };
        let x = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(x));
        if kk < 16 {
            lo[kk] = x;
        } else {
            hi[kk - 16] = x;
        }
    }
    transpose16(&mut lo);
    transpose16(&mut hi);
    for r in 0..PANEL {
        let o = &mut out[r * KSTEP..(r + 1) * KSTEP];
        // SAFETY: `o` holds 32 u16: one unaligned 64-byte store. The casts reinterpret
        // 16 f32 and 32 bf16 as 512 bits.
        unsafe {
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(
                _mm512_castsi512_ps(hi[r]),
                _mm512_castsi512_ps(lo[r]),
            ));
            _mm512_storeu_si512(o.as_mut_ptr().cast(), v);
        }
    }
}

/// 32 bf16 values as `vcvtne2ps2bf16` returns their exact f32 widening: a NaN quieted (the
/// mantissa's top bit set) and a denormal flushed to a zero of its sign; every other value
/// unchanged.
#[target_feature(enable = "avx512f,avx512bw")]
fn as_rounded(x: __m512i) -> __m512i {
    let mag = _mm512_and_si512(x, _mm512_set1_epi16(0x7fff));
    let nan = _mm512_cmpgt_epu16_mask(mag, _mm512_set1_epi16(0x7f80));
    let tiny = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(0x0080));
    let x = _mm512_mask_mov_epi16(x, nan, _mm512_or_si512(x, _mm512_set1_epi16(0x40)));
    _mm512_mask_mov_epi16(x, tiny, _mm512_and_si512(x, _mm512_set1_epi16(i16::MIN)))
}
