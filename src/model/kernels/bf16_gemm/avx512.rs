//! The AVX-512 BF16 microkernel: one 32 × 32 block of C from the packed panels with
//! `vdpbf16ps`, 8 rows × 32 columns (16 zmm accumulators) at a time: per k-pair, two zmm of 16
//! columns' VNNI pairs against each row's pair broadcast as one 32-bit value. The sums are
//! added straight into C (masked for a block's last rows and columns), not through a tile
//! that the caller adds afterwards, which would be one more pass over C.
use super::layout::{KSTEP, PANEL, STEP_ELEMS};
use std::arch::x86_64::*;

/// Rows per register block.
const RB: usize = 8;

/// C (row stride `ldc`) += the block's rows `< rows` × columns `< cols` (both ≤ 32) of A · B
/// over k-steps `s0..s0 + steps`, with `vdpbf16ps`, in register blocks of 8 rows; with `store`,
/// C = the sums instead (C's old values not read).
///
/// # Safety
/// The CPU must have avx512f and avx512bf16. `a` and `b` must be readable for two panels of
/// `ps` elements each, with `(s0 + steps) * 512 <= ps`; `c` must be valid for writes (and,
/// unless `store`, reads of initialised values) of `rows` rows of `cols` f32 at stride `ldc`,
/// and not accessed by anyone else meanwhile.
#[target_feature(enable = "avx512f,avx512bf16")]
// Indexed loops over const-size register arrays: unrolled, the accumulators stay in registers.
#[allow(clippy::needless_range_loop)]
pub(super) unsafe fn block(
    a: *const u16,
    b: *const u16,
    ps: usize,
    (s0, steps): (usize, usize),
    (c, ldc): (*mut f32, usize),
    (rows, cols): (usize, usize),
    store: bool,
) {
    // Lanes of C's two 16-column halves that exist.
    let half = |h: usize| -> __mmask16 {
        let n = cols.saturating_sub(h * PANEL).min(PANEL);
        ((1u32 << n) - 1) as __mmask16
    };
    let masks = [half(0), half(1)];
    let mut r0 = 0;
    while r0 < rows.min(2 * PANEL) {
        let mut acc = [[_mm512_setzero_ps(); 2]; RB];
        // SAFETY: rows r0..r0 + 8 lie in one panel (8 divides 16), at most the second of the
        // two the caller guarantees; every offset below stays below (s0 + steps) * 512 inside
        // its panel. The transmutes reinterpret 512 bits of bf16 pairs as `__m512bh`.
        unsafe {
            let ap = a.add((r0 / PANEL) * ps + (r0 % PANEL) * KSTEP);
            for s in s0..s0 + steps {
                let (asp, b0p, b1p) = (
                    ap.add(s * STEP_ELEMS),
                    b.add(s * STEP_ELEMS),
                    b.add(ps + s * STEP_ELEMS),
                );
                for q in 0..KSTEP / 2 {
                    let b0: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(b0p.add(q * 2 * PANEL).cast()));
                    let b1: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(b1p.add(q * 2 * PANEL).cast()));
                    for r in 0..RB {
                        let pair = asp.add(r * KSTEP + 2 * q).cast::<i32>().read_unaligned();
                        let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
                        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
                    }
                }
            }
        }
        for r in 0..RB.min(rows - r0) {
            for h in 0..2 {
                // SAFETY: row r0 + r < rows and the masked lanes are columns < cols: inside
                // the caller's rectangle of C; masked-off lanes are neither read nor written.
                unsafe {
                    let p = c.add((r0 + r) * ldc + h * PANEL);
                    let sum = if store {
                        acc[r][h]
                    } else {
                        _mm512_add_ps(_mm512_maskz_loadu_ps(masks[h], p), acc[r][h])
                    };
                    _mm512_mask_storeu_ps(p, masks[h], sum);
                }
            }
        }
        r0 += RB;
    }
}
