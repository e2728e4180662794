//! The portable microkernel: one 32 × 32 block of C from the packed bf16 panels with plain f32
//! arithmetic (every bf16 product is exact in f32; sums in f32). The reference the fast
//! kernels are tested against, and the path on CPUs without AVX-512 BF16 or AMX.
use super::layout::{KSTEP, PANEL, STEP_ELEMS};

#[inline(always)]
fn f(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// `out[r * 32 + c]` = Σ over k-steps `s0..s0 + steps` of A row r · B column c, for rows
/// `r < rows` (the rest of `out` is left as it is). `a` and `b` start at the block's first
/// panel and hold (at least) two panels of `ps` elements each.
pub(super) fn block(
    a: &[u16],
    b: &[u16],
    ps: usize,
    (s0, steps): (usize, usize),
    out: &mut [f32; 1024],
    rows: usize,
) {
    for (r, orow) in out.chunks_exact_mut(2 * PANEL).enumerate().take(rows) {
        let ap = &a[(r / PANEL) * ps + (r % PANEL) * KSTEP..];
        let mut acc = [0f32; 2 * PANEL];
        for s in s0..s0 + steps {
            let arow = &ap[s * STEP_ELEMS..s * STEP_ELEMS + KSTEP];
            for (q, pair) in arow.chunks_exact(2).enumerate() {
                let (a0, a1) = (f(pair[0]), f(pair[1]));
                for (h, acc) in acc.chunks_exact_mut(PANEL).enumerate() {
                    let o = h * ps + s * STEP_ELEMS + q * 2 * PANEL;
                    let bq = &b[o..o + 2 * PANEL];
                    for (v, bp) in acc.iter_mut().zip(bq.chunks_exact(2)) {
                        *v += a0 * f(bp[0]) + a1 * f(bp[1]);
                    }
                }
            }
        }
        orow.copy_from_slice(&acc);
    }
}
