//! The AMX microkernel: one 32 × 32 block of C as four 16 × 16 f32 tiles (tmm0–3), fed per
//! k-step by two A tiles (tmm4–5, 16 rows × 32 bf16) and two B tiles (tmm6–7, 16 k-pairs × 16
//! columns' VNNI pairs) straight from the packed panels, with `tdpbf16ps`. Rust has no stable
//! AMX intrinsics: the instructions are written with `asm!` (the compiler never allocates tmm
//! registers, so tile state persists between blocks). Also the one-time detection and the
//! per-process permission request the Linux kernel requires before a thread may use tiles.
use super::layout::{PANEL, STEP_ELEMS};
use std::arch::asm;

/// Bytes per tile row (32 bf16, 16 f32).
const ROW_BYTES: usize = 64;

/// Whether this CPU and OS run AMX BF16 (one detection for every AMX user:
/// [`crate::model::kernels::amx::available`]).
pub(super) fn usable() -> bool {
    super::super::amx::available()
}

/// Loads the tile configuration on this thread: palette 1, tiles 0–7 each 16 rows × 64 bytes,
/// except that tiles 0, 1 and 4 (the first A tile and its two C tiles) have `rows` (1–16)
/// rows: fewer rows, fewer cycles per `tdpbf16ps`, for products of few rows ([`block_rows`]).
/// Call on the thread that then runs [`block`] or [`block_rows`], before its first block.
///
/// # Safety
/// [`usable`] must have returned true.
pub(super) unsafe fn configure(rows: usize) {
    assert!((1..=PANEL).contains(&rows), "amx: 1-16 rows per tile");
    let mut cfg = [0u8; 64];
    cfg[0] = 1;
    for t in 0..8 {
        cfg[16 + 2 * t..18 + 2 * t].copy_from_slice(&(ROW_BYTES as u16).to_le_bytes());
        cfg[48 + t] = if matches!(t, 0 | 1 | 4) { rows } else { PANEL } as u8;
    }
    // SAFETY: AMX is usable (the caller's contract); `cfg` is a valid 64-byte palette-1
    // configuration that ldtilecfg only reads.
    unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.as_ptr(), options(nostack, readonly)) };
}

/// Returns the tile state to its initial (unconfigured) state, so context switches save less.
///
/// # Safety
/// [`configure`] must have run on this thread.
pub(super) unsafe fn release() {
    // SAFETY: AMX is usable and configured on this thread (the caller's contract).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// Where a block's four tiles come from and go to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Dest {
    /// Start from zero and store into a 32 × 32 f32 buffer (row stride 32).
    Tile(*mut f32),
    /// Start from C's 32 × 32 block and store back into it: C += A · B in place, the block's
    /// first element at the pointer, rows `ldc` f32 apart.
    C(*mut f32, usize),
}

/// [`super::portable::block`] with `tdpbf16ps`, always all 32 rows and columns.
///
/// # Safety
/// [`configure`] must have run on this thread (and no [`release`] since). `a` and `b` must be
/// readable for two panels of `ps` elements each, with `(s0 + steps) * 512 <= ps`. The
/// destination must be writable (and, for [`Dest::C`], readable) for 32 rows of 32 f32 at its
/// row stride, and nothing else may access it meanwhile.
pub(super) unsafe fn block(
    a: *const u16,
    b: *const u16,
    ps: usize,
    (s0, steps): (usize, usize),
    dest: Dest,
) {
    let (c, ld) = match dest {
        Dest::Tile(p) => (p, 2 * PANEL),
        Dest::C(p, ld) => (p, ld),
    };
    // SAFETY: the tiles are configured (the caller's contract). Each tileloadd of A or B reads
    // 16 rows of 64 bytes at a 64-byte stride: one 1 KiB k-step of a panel, at offsets below
    // (s0 + steps) * 512 elements in panels 0 and 1 of `a` and `b` (the caller's contract).
    // The C tiles are 16 rows of 16 f32 at row stride `ld` f32, at element offsets 0, 16,
    // 16 · ld and 16 · ld + 16 of the 32 × 32 destination the caller guarantees.
    unsafe {
        let (c0, c1, c2, c3) = (
            c,
            c.add(PANEL),
            c.add(PANEL * ld),
            c.add(PANEL * ld + PANEL),
        );
        let st = ld * 4;
        match dest {
            Dest::Tile(_) => asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            ),
            Dest::C(..) => asm!(
                "tileloadd tmm0, [{c0} + {st}*1]",
                "tileloadd tmm1, [{c1} + {st}*1]",
                "tileloadd tmm2, [{c2} + {st}*1]",
                "tileloadd tmm3, [{c3} + {st}*1]",
                c0 = in(reg) c0,
                c1 = in(reg) c1,
                c2 = in(reg) c2,
                c3 = in(reg) c3,
                st = in(reg) st,
                options(nostack, readonly)
            ),
        }
        for s in s0..s0 + steps {
            let o = s * STEP_ELEMS;
            asm!(
                "tileloadd tmm4, [{a0} + {st}*1]",
                "tileloadd tmm6, [{b0} + {st}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {st}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a1} + {st}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a.add(o),
                a1 = in(reg) a.add(ps + o),
                b0 = in(reg) b.add(o),
                b1 = in(reg) b.add(ps + o),
                st = in(reg) ROW_BYTES,
                options(nostack, readonly)
            );
        }
        asm!(
            "tilestored [{c0} + {st}*1], tmm0",
            "tilestored [{c1} + {st}*1], tmm1",
            "tilestored [{c2} + {st}*1], tmm2",
            "tilestored [{c3} + {st}*1], tmm3",
            c0 = in(reg) c0,
            c1 = in(reg) c1,
            c2 = in(reg) c2,
            c3 = in(reg) c3,
            st = in(reg) st,
            options(nostack)
        );
    }
}

/// The first `r` rows of a 32 × 32 block (r ≤ 16, the rows [`configure`] gave tiles 0, 1 and
/// 4): one A tile against both B tiles per k-step, half the work of [`block`]. Stores rows
/// 0..r of the block into `out` (row stride 32); the rest of `out` is left as it is.
///
/// # Safety
/// As [`block`] with [`Dest::Tile`], with `out` a 32 × 32 f32 buffer.
pub(super) unsafe fn block_rows(
    a: *const u16,
    b: *const u16,
    ps: usize,
    (s0, steps): (usize, usize),
    out: &mut [f32; 1024],
) {
    // SAFETY: as in `block`: A tile 0 and both B tiles of each k-step lie inside the panels
    // the caller guarantees (tile 4 reads at most 16 rows of 64 bytes); the two C tiles are
    // stored at offsets 0 and 64 bytes of `out` with a 128-byte stride, at most 16 rows.
    unsafe {
        asm!("tilezero tmm0", "tilezero tmm1", options(nostack, nomem));
        for s in s0..s0 + steps {
            let o = s * STEP_ELEMS;
            asm!(
                "tileloadd tmm4, [{a0} + {st}*1]",
                "tileloadd tmm6, [{b0} + {st}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {st}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                a0 = in(reg) a.add(o),
                b0 = in(reg) b.add(o),
                b1 = in(reg) b.add(ps + o),
                st = in(reg) ROW_BYTES,
                options(nostack, readonly)
            );
        }
        let c = out.as_mut_ptr();
        asm!(
            "tilestored [{c0} + {st}*1], tmm0",
            "tilestored [{c1} + {st}*1], tmm1",
            c0 = in(reg) c,
            c1 = in(reg) c.add(PANEL),
            st = in(reg) 2 * ROW_BYTES,
            options(nostack)
        );
    }
}
