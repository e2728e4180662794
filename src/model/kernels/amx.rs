//! Intel AMX (the tile unit's `tdpbf16ps`) for the bf16 sampling product: detection (CPUID
//! plus Linux's permission request for the tile-data state) and the block kernel
//! out (n, m) = W (n, k) · xᵀ, where W's bf16 rows load straight into the A tiles (W keeps its
//! checkpoint layout) and x, small at decode, is repacked into the B tiles' pair layout.
//! One `tdpbf16ps` multiplies a 16 × 32 by a 32 × 16 bf16 block into 16 × 16 f32 sums, an
//! order of magnitude more per cycle than f32 FMAs, so decode is left with the weights' memory
//! traffic. Rust has no stable AMX intrinsics: the instructions are `asm!`.
use half::bf16;
use std::sync::OnceLock;

/// K elements per tile row (64 bytes of bf16).
pub const TILE_K: usize = 32;
/// Rows per tile (W rows per A tile, x rows per B tile's columns).
pub const TILE_ROWS: usize = 16;
/// C tiles kept at once (tmm0–tmm3), each a block of 16 W rows.
const GROUP: usize = 4;

/// Whether this process can run AMX bf16 tiles (CPU has AMX-TILE and AMX-BF16, and the
/// kernel granted the tile-data state). Decided once.
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_ulong = 18;
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    let tile = leaf7.edx & (1 << 24) != 0;
    let bf16 = leaf7.edx & (1 << 22) != 0;
    if !(tile && bf16) {
        return false;
    }
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) takes two integers and only
    // asks the kernel to let this process use the tile-data register state; it returns -1
    // (and touches no memory of ours) where the kernel refuses or does not know the request.
    let granted = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    granted == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// x (m, sd) bf16 rows regrouped for B tiles: for each chunk of up to 16 x rows and each
/// k-block of 32, 16 rows of k-pairs, each holding the chunk's (x[i][2p], x[i][2p+1]) pairs.
pub struct PackedX {
    data: Vec<u32>,
    m: usize,
    kblocks: usize,
}

impl PackedX {
    /// Packs `m` rows of `x` (row stride `sd`, a multiple of 32).
    pub fn new(x: &[bf16], m: usize, sd: usize) -> Self {
        debug_assert!(sd.is_multiple_of(TILE_K) && x.len() >= m * sd);
        let kblocks = sd / TILE_K;
        let mut data = vec![0u32; m.div_ceil(TILE_ROWS) * kblocks * TILE_ROWS * TILE_ROWS];
        for i0 in (0..m).step_by(TILE_ROWS) {
            let mc = (m - i0).min(TILE_ROWS);
            let base = chunk_offset(i0, kblocks);
            for kb in 0..kblocks {
                for p in 0..TILE_K / 2 {
                    let row = base + (kb * TILE_ROWS + p) * mc;
                    for i in 0..mc {
                        let k = (i0 + i) * sd + kb * TILE_K + 2 * p;
                        data[row + i] =
                            u32::from(x[k].to_bits()) | (u32::from(x[k + 1].to_bits()) << 16);
                    }
                }
            }
        }
        Self { data, m, kblocks }
    }
}

/// Where the chunk of x rows starting at `i0` begins in [`PackedX::data`].
fn chunk_offset(i0: usize, kblocks: usize) -> usize {
    i0 * kblocks * TILE_ROWS
}

/// The 64-byte tile configuration (palette 1): C tiles tmm0–3 (16 rows × `mc` f32), A tiles
/// tmm4–5 (16 rows × 32 bf16), the B tile tmm6 (16 pair rows × `mc` pairs).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn new(mc: usize) -> Self {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut set = |t: usize, rows: usize, bytes: usize| {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(bytes as u16).to_le_bytes());
            c[48 + t] = rows as u8;
        };
        for t in 0..GROUP {
            set(t, TILE_ROWS, mc * 4);
        }
        set(4, TILE_ROWS, 64);
        set(5, TILE_ROWS, 64);
        set(6, TILE_ROWS, mc * 4);
        Self(c)
    }
}

/// out[j·m + i] = Σ_k w[j][k] · x[i][k] for j < `nr` (a multiple of 16) and i < x's m, with
/// `w`'s rows `sd` apart (a multiple of 32, zero-padded like x's).
///
/// # Safety
/// [`available`] must have returned true; `w` must hold `nr` rows of `sd`, `out` `nr · m`
/// values, and `x` must have been packed with the same `sd`.
#[cfg(target_arch = "x86_64")]
// Kept out of line: inlined into its caller's parallel loop, the same code decodes slower
// (the compiler's register allocation around the `asm!` blocks suffers).
#[inline(never)]
pub unsafe fn rows_xt(w: &[bf16], x: &PackedX, sd: usize, nr: usize, out: &mut [f32]) {
    use std::arch::asm;
    let m = x.m;
    debug_assert!(nr.is_multiple_of(TILE_ROWS) && w.len() >= nr * sd && out.len() >= nr * m);
    debug_assert_eq!(sd / TILE_K, x.kblocks);
    let w_stride = sd * 2;
    let out_stride = m * 4;
    for i0 in (0..m).step_by(TILE_ROWS) {
        let mc = (m - i0).min(TILE_ROWS);
        let cfg = TileConfig::new(mc);
        let xb = x.data[chunk_offset(i0, x.kblocks)..].as_ptr();
        // SAFETY: the caller checked `available()`: the CPU has AMX and the kernel granted
        // the tile state; the config is a valid palette-1 layout, aligned to 64 bytes.
        unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack)) };
        for j0 in (0..nr).step_by(TILE_ROWS * GROUP) {
            let g = ((nr - j0) / TILE_ROWS).min(GROUP);
            // SAFETY: tiles were configured above; each A load reads 16 rows of 64 bytes at
            // w[(j0 + 16c + r)·sd + 32kb ..], inside w's nr rows of sd (32kb + 32 ≤ sd); each B
            // load 16 rows of mc·4 bytes inside this chunk's packed block; each C store 16 rows
            // of mc f32 at out[(j0 + 16c + r)·m + i0 ..], inside out's nr·m values.
            unsafe {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3"
                );
                for kb in 0..x.kblocks {
                    let b = xb.add(kb * TILE_ROWS * mc);
                    asm!("tileloadd tmm6, [{p} + {s}*1]", p = in(reg) b, s = in(reg) mc * 4,
                        options(nostack, readonly));
                    let a = w.as_ptr().add(j0 * sd + kb * TILE_K);
                    let row_block = TILE_ROWS * sd;
                    asm!("tileloadd tmm4, [{p} + {s}*1]", "tdpbf16ps tmm0, tmm4, tmm6",
                        p = in(reg) a, s = in(reg) w_stride, options(nostack, readonly));
                    if g > 1 {
                        asm!("tileloadd tmm5, [{p} + {s}*1]", "tdpbf16ps tmm1, tmm5, tmm6",
                            p = in(reg) a.add(row_block), s = in(reg) w_stride,
                            options(nostack, readonly));
                    }
                    if g > 2 {
                        asm!("tileloadd tmm4, [{p} + {s}*1]", "tdpbf16ps tmm2, tmm4, tmm6",
                            p = in(reg) a.add(2 * row_block), s = in(reg) w_stride,
                            options(nostack, readonly));
                    }
                    if g > 3 {
                        asm!("tileloadd tmm5, [{p} + {s}*1]", "tdpbf16ps tmm3, tmm5, tmm6",
                            p = in(reg) a.add(3 * row_block), s = in(reg) w_stride,
                            options(nostack, readonly));
                    }
                }
                let c = out.as_mut_ptr().add(j0 * m + i0);
                let row_block = TILE_ROWS * m;
                asm!("tilestored [{p} + {s}*1], tmm0", p = in(reg) c, s = in(reg) out_stride,
                    options(nostack));
                if g > 1 {
                    asm!("tilestored [{p} + {s}*1], tmm1", p = in(reg) c.add(row_block),
                        s = in(reg) out_stride, options(nostack));
                }
                if g > 2 {
                    asm!("tilestored [{p} + {s}*1], tmm2", p = in(reg) c.add(2 * row_block),
                        s = in(reg) out_stride, options(nostack));
                }
                if g > 3 {
                    asm!("tilestored [{p} + {s}*1], tmm3", p = in(reg) c.add(3 * row_block),
                        s = in(reg) out_stride, options(nostack));
                }
            }
        }
        // SAFETY: tiles are in use (configured above); releasing returns them to the init
        // state, so the thread's saved context stays small between products.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}
