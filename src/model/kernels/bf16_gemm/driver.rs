//! The blocked loop over packed operands: C (m, n) += A · B, cut into tasks of up to 128 rows ×
//! 256 columns (run in parallel over rayon's pool for large products), each walking K in
//! chunks of up to 2048 and, inside, 32 × 32 blocks handed to the chosen microkernel; each
//! block's result is added into C (or, for a new C, stored by the first K chunk).
use super::layout::{BLOCK, PANEL, STEP_ELEMS};
use super::pack::Packed;
use super::Backend;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Rows per task (A block: up to 128 × 2048 bf16 = 512 KiB, resident in L2).
const MC: usize = 128;
/// Columns per task.
const NC: usize = 256;
/// k-steps (of 32) per K chunk.
pub(super) const KC: usize = 64;
/// Below this many multiply-adds, the product stays on the calling thread.
const PAR_MACS: usize = 1 << 21;

/// C's elements, written by parallel tasks through disjoint rectangles.
struct Out(*mut f32);
// SAFETY: the pointer is only dereferenced inside `gemm`, while the `&mut [f32]` it came
// from is borrowed, and each task writes only its own rectangle of C (disjoint rows × columns).
unsafe impl Send for Out {}
// SAFETY: as for `Send`.
unsafe impl Sync for Out {}

/// `c` (row-major m × n, m = `a.len`, n = `b.len`) += A · B with `backend`, which must be
/// usable on this CPU (checked by the caller).
pub(super) fn gemm(backend: Backend, a: &Packed, b: &Packed, c: &mut [f32]) {
    assert_eq!(c.len(), a.len * b.len, "bf16_gemm: C does not match (m, n)");
    run(backend, a, b, Out(c.as_mut_ptr()), false);
}

/// `c` = A · B into uninitialised memory, every element written: the `vdpbf16ps` kernel stores
/// its first K chunk instead of adding it to zeros (C is neither zero-filled first nor read
/// back, two passes over it saved); the other backends zero C, then add.
pub(super) fn gemm_fresh(backend: Backend, a: &Packed, b: &Packed, c: &mut [MaybeUninit<f32>]) {
    assert_eq!(c.len(), a.len * b.len, "bf16_gemm: C does not match (m, n)");
    let stores = backend == Backend::Avx512Bf16;
    if !stores {
        c.fill(MaybeUninit::new(0.0));
    }
    run(backend, a, b, Out(c.as_mut_ptr().cast()), stores);
}

/// The tasks of one product; with `fresh`, C's elements are uninitialised and the first K chunk
/// stores (only the AVX-512 BF16 kernel is asked to).
fn run(backend: Backend, a: &Packed, b: &Packed, out: Out, fresh: bool) {
    let (m, n) = (a.len, b.len);
    assert!(
        a.steps == b.steps && a.k == b.k,
        "bf16_gemm: packed K differs"
    );
    if m == 0 || n == 0 {
        return;
    }
    let (mp, np) = (m.div_ceil(BLOCK) * BLOCK, n.div_ceil(BLOCK) * BLOCK);
    let (ti, tj) = (mp.div_ceil(MC), np.div_ceil(NC));
    let task = |t: usize| {
        let (i0, j0) = ((t / tj) * MC, (t % tj) * NC);
        run_task(
            backend,
            a,
            b,
            &out,
            (i0, (i0 + MC).min(mp)),
            (j0, (j0 + NC).min(np)),
            fresh,
        );
    };
    if m * n * a.k.max(1) >= PAR_MACS && ti * tj > 1 {
        (0..ti * tj).into_par_iter().for_each(task);
    } else {
        (0..ti * tj).for_each(task);
    }
}

/// One task: rows `i0..i1` × columns `j0..j1` of padded C (multiples of 32), all of K.
fn run_task(
    backend: Backend,
    a: &Packed,
    b: &Packed,
    out: &Out,
    (i0, i1): (usize, usize),
    (j0, j1): (usize, usize),
    fresh: bool,
) {
    let (m, n) = (a.len, b.len);
    let ps = a.panel_elems();
    debug_assert_eq!(ps, b.panel_elems());
    let mut tile = [0f32; BLOCK * BLOCK];
    #[cfg(target_arch = "x86_64")]
    if backend == Backend::Amx {
        // A task of at most 16 rows (a product of few rows) configures its A and C tiles
        // with just those rows.
        let rows = if m - i0 <= PANEL { m - i0 } else { PANEL };
        // SAFETY: `Backend::Amx` is only chosen after `amx::usable()` returned true; the
        // configuration is per thread, and this task runs start to end on this thread.
        unsafe { super::amx::configure(rows) };
    }
    let mut s0 = 0;
    while s0 < a.steps {
        let steps = (a.steps - s0).min(KC);
        for j in (j0..j1).step_by(BLOCK) {
            // Two panels of B: columns j..j + 32 (they exist: n is padded to 32).
            let bp = &b.data[(j / PANEL) * ps..(j / PANEL + 2) * ps];
            let nr = (n - j).min(BLOCK);
            for i in (i0..i1).step_by(BLOCK) {
                let ap = &a.data[(i / PANEL) * ps..(i / PANEL + 2) * ps];
                let mr = (m - i).min(BLOCK);
                debug_assert!((s0 + steps) * STEP_ELEMS <= ps);
                #[cfg(target_arch = "x86_64")]
                if backend == Backend::Amx && mr == BLOCK && nr == BLOCK {
                    assert!(ap.len() == 2 * ps && bp.len() == 2 * ps);
                    // SAFETY: AMX is usable and configured on this thread (above); `ap` and `bp`
                    // hold two panels of `ps` elements with the k-steps inside (asserted, and
                    // s0 + steps <= a.steps). C's rows i..i + 32 × columns j..j + 32 lie inside
                    // C (i + 32 <= m, j + 32 <= n), belong to this task alone, and C is
                    // borrowed for the whole of `gemm`.
                    unsafe {
                        let c = out.0.add(i * n + j);
                        super::amx::block(
                            ap.as_ptr(),
                            bp.as_ptr(),
                            ps,
                            (s0, steps),
                            super::amx::Dest::C(c, n),
                        );
                    }
                    continue;
                }
                #[cfg(target_arch = "x86_64")]
                if backend == Backend::Avx512Bf16 {
                    assert!(ap.len() == 2 * ps && bp.len() == 2 * ps);
                    // SAFETY: `Backend::Avx512Bf16` is only chosen where the CPU has avx512f
                    // and avx512bf16; `ap` and `bp` hold two panels of `ps` elements with the
                    // k-steps inside (asserted, and s0 + steps <= a.steps). C's rows i..i + mr
                    // × columns j..j + nr lie inside C, belong to this task alone, and C is
                    // borrowed for the whole of `gemm`; with `fresh` they are stored in the
                    // first K chunk (s0 = 0) before any later chunk reads them.
                    unsafe {
                        super::avx512::block(
                            ap.as_ptr(),
                            bp.as_ptr(),
                            ps,
                            (s0, steps),
                            (out.0.add(i * n + j), n),
                            (mr, nr),
                            fresh && s0 == 0,
                        );
                    }
                    continue;
                }
                block(backend, ap, bp, ps, (s0, steps), &mut tile, mr);
                for r in 0..mr {
                    // SAFETY: i + r < m and j + nr <= n, so the row segment lies inside C
                    // (m × n, alive for the whole of `gemm`); this task alone writes rows
                    // i0..i1 × columns j0..j1 of C, and no other reference to it exists now.
                    let crow =
                        unsafe { std::slice::from_raw_parts_mut(out.0.add((i + r) * n + j), nr) };
                    for (cv, tv) in crow.iter_mut().zip(&tile[r * BLOCK..r * BLOCK + nr]) {
                        *cv += tv;
                    }
                }
            }
        }
        s0 += steps;
    }
    #[cfg(target_arch = "x86_64")]
    if backend == Backend::Amx {
        // SAFETY: configured above on this thread.
        unsafe { super::amx::release() };
    }
}

/// One 32 × 32 block of A · B over k-steps `s0..s0 + steps` into `tile` (rows < `rows` valid).
/// `ap` and `bp` are exactly two panels of `ps` elements each.
fn block(
    backend: Backend,
    ap: &[u16],
    bp: &[u16],
    ps: usize,
    ks: (usize, usize),
    tile: &mut [f32; BLOCK * BLOCK],
    rows: usize,
) {
    assert!(ap.len() == 2 * ps && bp.len() == 2 * ps && (ks.0 + ks.1) * STEP_ELEMS <= ps);
    match backend {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Backend::Amx` implies `amx::usable()` and `run_task` configured the tiles on
        // this thread; `ap` and `bp` hold two panels of `ps` elements with the k-steps inside;
        // `tile` is a 32 × 32 f32 buffer borrowed mutably here.
        // With rows <= 16, `run_task` configured tiles 0, 1 and 4 with at least `rows` rows.
        Backend::Amx => unsafe {
            if rows <= PANEL {
                super::amx::block_rows(ap.as_ptr(), bp.as_ptr(), ps, ks, tile)
            } else {
                let dest = super::amx::Dest::Tile(tile.as_mut_ptr());
                super::amx::block(ap.as_ptr(), bp.as_ptr(), ps, ks, dest)
            }
        },
        _ => super::portable::block(ap, bp, ps, ks, tile, rows),
    }
}
