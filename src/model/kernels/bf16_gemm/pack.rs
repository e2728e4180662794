//! Packing f32 or bf16 operands into the bf16 layouts every microkernel reads: rounding f32
//! (nearest even) and re-ordering in one pass over any 2-D strides, zero-padded to whole tiles.
//! A bf16 operand (a frozen bf16 base's weight) is re-ordered as it is, never widened to f32:
//! the same panels as packing its exact f32 widening, bit for bit.
//!
//! Both operands are cut into panels of 16 rows of A (16 columns of B) over the whole padded K,
//! each panel a run of 1 KiB k-steps of 32 k:
//! - A panel, k-step s: `[16 rows][32 k]` (row-major, k contiguous: an AMX A tile);
//! - B panel, k-step s: `[16 k-pairs][16 columns][2]` (VNNI pairs `b[2p, j], b[2p+1, j]`: an AMX
//!   B tile, and for `vdpbf16ps` one zmm of 16 columns per k-pair).
//!
//! Rows (columns) are padded to a multiple of 32 and K to a multiple of 32, so a 32 × 32 block
//! and every k-step exist in full; padding is zero and adds nothing.
use super::layout::{Elem, View, BLOCK, KSTEP, PANEL, STEP_ELEMS};
use rayon::prelude::*;

/// Below this many packed elements, packing stays on the calling thread.
const PAR_ELEMS: usize = 1 << 16;

/// A packed operand: `panels` panels of 16 rows (A) or 16 columns (B), `steps` k-steps each.
#[derive(Debug, Clone)]
pub struct Packed {
    /// bf16 bits, panel after panel.
    pub data: Vec<u16>,
    /// Logical rows of A (columns of B).
    pub len: usize,
    /// Logical K.
    pub k: usize,
    /// k-steps per panel (`k` padded to 32, over 32).
    pub steps: usize,
    /// Whether `data` goes back to the scratch pool when dropped (a product's operand) or is
    /// freed (a long-lived copy, which never took a pooled buffer either).
    pooled: bool,
}

impl Packed {
    /// Elements per panel.
    pub fn panel_elems(&self) -> usize {
        self.steps * STEP_ELEMS
    }
}

fn padded(len: usize, to: usize) -> usize {
    len.div_ceil(to).max(1) * to
}

/// Where a packed operand's buffer comes from.
pub enum Buffer {
    /// The scratch pool (and back to it when dropped): a product's operand.
    Pool,
    /// This buffer (resized as needed; freed when dropped): a long-lived copy, e.g. a weight
    /// packed once for many products or re-packed in place after it changed.
    Own(Vec<u16>),
}

impl Buffer {
    /// An operand's packed buffer: zeroed unless `overwrite` (for a packer that writes every
    /// element, padding included, a reused buffer keeps its old contents instead of being
    /// cleared first).
    fn packed(self, len: usize, k: usize, overwrite: bool) -> Packed {
        let steps = padded(k, KSTEP) / KSTEP;
        let panels = padded(len, BLOCK) / PANEL;
        let elems = panels * steps * STEP_ELEMS;
        let (data, pooled) = match self {
            Buffer::Pool if overwrite => (super::scratch::take_for_overwrite(elems), true),
            Buffer::Pool => (super::scratch::take(elems), true),
            Buffer::Own(mut v) => {
                if !overwrite {
                    v.clear();
                }
                v.resize(elems, 0);
                (v, false)
            }
        };
        Packed {
            data,
            len,
            k,
            steps,
            pooled,
        }
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        if self.pooled {
            super::scratch::give(std::mem::take(&mut self.data));
        }
    }
}

/// Runs `f(panel index, panel)` over the panels, in parallel for large operands.
fn for_panels(p: &mut Packed, f: impl Fn(usize, &mut [u16]) + Sync + Send) {
    let pe = p.panel_elems();
    if p.data.len() >= PAR_ELEMS {
        p.data
            .par_chunks_mut(pe)
            .enumerate()
            .for_each(|(i, d)| f(i, d));
    } else {
        p.data.chunks_mut(pe).enumerate().for_each(|(i, d)| f(i, d));
    }
}

/// Index in an A panel of (row r < 16, k p).
#[inline(always)]
fn a_index(r: usize, p: usize) -> usize {
    (p / KSTEP) * STEP_ELEMS + r * KSTEP + p % KSTEP
}

/// Index in a B panel of (k p, column c < 16).
#[inline(always)]
fn b_index(p: usize, c: usize) -> usize {
    (p / 2) * (2 * PANEL) + c * 2 + p % 2
}

/// Packs `a` (m, k) as the left operand: panels of 16 rows.
pub fn pack_a<T: Elem>(a: View<'_, T>) -> Packed {
    pack_a_with(a, simd())
}

/// Whether packing takes the AVX-512 BF16 path (detected once).
fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *S.get_or_init(super::pack_avx512::usable)
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`pack_a`], the AVX-512 BF16 packer if `simd` (and the CPU has it), else the scalar one.
pub(super) fn pack_a_with<T: Elem>(a: View<'_, T>, simd: bool) -> Packed {
    #[cfg(target_arch = "x86_64")]
    if simd && self::simd() {
        use super::layout::Source;
        use super::pack_avx512::{step_a, step_a_bf16};
        let mut p = Buffer::Pool.packed(a.rows, a.cols, true);
        match T::source(a) {
            Source::F32(a) => by_steps(&mut p, |panel, s, out, blk| {
                // SAFETY: `simd()` checked the CPU's features.
                unsafe { step_a(a, panel * PANEL, s, out, blk) }
            }),
            Source::Bf16(a) => by_steps(&mut p, |panel, s, out, blk| {
                // SAFETY: `simd()` checked the CPU's features.
                unsafe { step_a_bf16(a, panel * PANEL, s, out, blk) }
            }),
        }
        return p;
    }
    let _ = simd;
    let mut p = Buffer::Pool.packed(a.rows, a.cols, false);
    for_panels(&mut p, |panel, d| {
        pack_panel(a, panel * PANEL, d, a_index);
    });
    p
}

/// Panels packed side by side, k-step by k-step: a group's 8 panels read 128 neighbouring
/// rows (columns) of the source at each k, so a source laid out along them is read in runs.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const GROUP: usize = 8;

/// Runs `f(panel, step, out, blk)` for every k-step of every panel (`out`: that step's 512
/// elements, every one of which `f` writes; `blk`: a scratch block of the group's), groups of
/// panels in parallel for large operands, steps outer within a group.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn by_steps(
    p: &mut Packed,
    f: impl Fn(usize, usize, &mut [u16], &mut [f32; STEP_ELEMS]) + Sync + Send,
) {
    let (pe, steps) = (p.panel_elems(), p.steps);
    let group = |gi: usize, d: &mut [u16]| {
        let mut blk = [0f32; STEP_ELEMS];
        for s in 0..steps {
            for (g, panel) in d.chunks_exact_mut(pe).enumerate() {
                f(
                    gi * GROUP + g,
                    s,
                    &mut panel[s * STEP_ELEMS..(s + 1) * STEP_ELEMS],
                    &mut blk,
                );
            }
        }
    };
    if p.data.len() >= PAR_ELEMS {
        p.data
            .par_chunks_mut(pe * GROUP)
            .enumerate()
            .for_each(|(i, d)| group(i, d));
    } else {
        p.data
            .chunks_mut(pe * GROUP)
            .enumerate()
            .for_each(|(i, d)| group(i, d));
    }
}

/// Packs `b` (k, n) as the right operand: panels of 16 columns in VNNI pairs.
pub fn pack_b<T: Elem>(b: View<'_, T>) -> Packed {
    pack_b_in(b, simd(), Buffer::Pool)
}

/// [`pack_b`] into `buf`, the AVX-512 BF16 packer if `simd` (and the CPU has it), else the
/// scalar one.
pub(super) fn pack_b_in<T: Elem>(b: View<'_, T>, simd: bool, buf: Buffer) -> Packed {
    let bt = b.t();
    #[cfg(target_arch = "x86_64")]
    if simd && self::simd() {
        use super::layout::Source;
        use super::pack_avx512::{step_b, step_b_bf16};
        let mut p = buf.packed(b.cols, b.rows, true);
        match T::source(bt) {
            Source::F32(bt) => by_steps(&mut p, |panel, s, out, blk| {
                // SAFETY: `simd()` checked the CPU's features.
                unsafe { step_b(bt, panel * PANEL, s, out, blk) }
            }),
            Source::Bf16(bt) => by_steps(&mut p, |panel, s, out, blk| {
                // SAFETY: `simd()` checked the CPU's features.
                unsafe { step_b_bf16(bt, panel * PANEL, s, out, blk) }
            }),
        }
        return p;
    }
    let _ = simd;
    let mut p = buf.packed(b.cols, b.rows, false);
    for_panels(&mut p, |panel, d| {
        pack_panel(bt, panel * PANEL, d, |c, k| b_index(k, c));
    });
    p
}

/// Fills one panel from rows `r0..r0 + 16` of `v` (rows × K), element (r, p) going to
/// `d[index(r - r0, p)]`; the loop order follows the smaller stride.
fn pack_panel<T: Elem>(
    v: View<'_, T>,
    r0: usize,
    d: &mut [u16],
    index: impl Fn(usize, usize) -> usize,
) {
    let nr = v.rows.saturating_sub(r0).min(PANEL);
    if nr == 0 {
        return;
    }
    if v.cs <= v.rs {
        for r in 0..nr {
            let base = v.off + (r0 + r) * v.rs;
            if v.cs == 1 {
                let row = &v.data[base..base + v.cols];
                for (p, &x) in row.iter().enumerate() {
                    d[index(r, p)] = x.bf16_bits();
                }
            } else {
                for p in 0..v.cols {
                    d[index(r, p)] = v.data[base + p * v.cs].bf16_bits();
                }
            }
        }
    } else {
        for p in 0..v.cols {
            let base = v.off + p * v.cs + r0 * v.rs;
            if v.rs == 1 {
                let col = &v.data[base..base + nr];
                for (r, &x) in col.iter().enumerate() {
                    d[index(r, p)] = x.bf16_bits();
                }
            } else {
                for r in 0..nr {
                    d[index(r, p)] = v.data[base + r * v.rs].bf16_bits();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::round_bf16;
    use super::*;

    #[test]
    fn rounding_matches_half() {
        let mut vals = vec![
            0.0f32,
            -0.0,
            1.0,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            f32::from_bits(0x3f80_8000), // a tie: stays even
            f32::from_bits(0x3f81_8000), // a tie: rounds up to even
            f32::from_bits(0x3f80_8001),
        ];
        let mut h = 12345u32;
        for _ in 0..10_000 {
            h = h.wrapping_mul(1_103_515_245).wrapping_add(12345);
            vals.push(f32::from_bits(h));
        }
        for x in vals {
            let want = half::bf16::from_f32(x);
            let got = round_bf16(x);
            if x.is_nan() {
                assert!(half::bf16::from_bits(got).is_nan(), "{x:?}");
            } else {
                assert_eq!(got, want.to_bits(), "{x:?} ({:#x})", x.to_bits());
            }
        }
    }

    #[test]
    fn packs_a_and_b_in_tile_order() {
        let (m, k) = (3usize, 35usize);
        let data: Vec<f32> = (0..m * k).map(|i| i as f32).collect();
        let a = View::new(&data, 0, (m, k), (k, 1)).unwrap();
        let pa = pack_a(a);
        assert_eq!(pa.steps, 2);
        assert_eq!(pa.data.len(), 2 * 2 * STEP_ELEMS);
        let get = |bits: u16| half::bf16::from_bits(bits).to_f32();
        // Row 2, k 33: second k-step, row 2, column 1.
        assert_eq!(
            get(pa.data[STEP_ELEMS + 2 * KSTEP + 1]),
            (2 * k + 33) as f32
        );
        // Padding is zero.
        assert_eq!(get(pa.data[STEP_ELEMS + 2 * KSTEP + 3]), 0.0);
        // The same matrix as B = aᵀ (k, m) through a transposed view.
        let pb = pack_b(a.t());
        // b[33, 2] = a[2, 33]: k-step 1, pair 0, column 2, second of the pair.
        assert_eq!(get(pb.data[STEP_ELEMS + 2 * 2 + 1]), (2 * k + 33) as f32);
        assert!(View::new(&data, 1, (m, k), (k, 1)).is_none());
    }

    #[test]
    fn simd_and_scalar_packing_agree() {
        if !simd() {
            eprintln!("skipping: no AVX-512 BF16 packer on this CPU");
            return;
        }
        let mut h = 7u32;
        let data: Vec<f32> = (0..70 * 90)
            .map(|_| {
                h = h.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (h >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect();
        // Row-major, transposed and a strided window, odd sizes on both sides.
        let views = [
            View::new(&data, 0, (70, 90), (90, 1)).unwrap(),
            View::new(&data, 0, (70, 90), (90, 1)).unwrap().t(),
            View::new(&data, 3, (33, 17), (180, 2)).unwrap(),
            // Whole steps with contiguous rows (A's transposing path) or contiguous k
            // (B's), at an offset, with a partial step and panel after them.
            View::new(&data, 5, (40, 70), (1, 90)).unwrap(),
            View::new(&data, 7, (40, 70), (1, 90)).unwrap().t(),
        ];
        for v in views {
            // The SIMD packers write every element: a reused buffer's old contents (here all
            // ones) must not show through, padding included.
            let a = pack_a_with(v, false);
            super::super::scratch::give(vec![0xffff; a.data.len()]);
            assert_eq!(pack_a_with(v, true).data, a.data);
            let b = pack_b_in(v, false, Buffer::Pool);
            super::super::scratch::give(vec![0xffff; b.data.len()]);
            assert_eq!(pack_b_in(v, true, Buffer::Pool).data, b.data);
            // An own buffer (a weight re-packed in place) with other contents and length.
            for simd in [false, true] {
                let old = vec![0xffff; b.data.len() + 5];
                assert_eq!(pack_b_in(v, simd, Buffer::Own(old)).data, b.data);
            }
        }
    }

    /// A bf16 source packs to the panels of its exact f32 widening, bit for bit, with the
    /// scalar packer and (where the CPU has it) the SIMD one: every layout the packers tell
    /// apart (row-major, transposed, strided windows at offsets, partial steps and panels, an
    /// operand large enough to pack in parallel), over bit patterns with NaNs (signalling
    /// too), infinities, denormals and signed zeros.
    #[test]
    fn bf16_sources_pack_like_their_f32_widening() {
        let (rows, cols) = (300usize, 400usize);
        let mut h = 99u32;
        let mut bits: Vec<u16> = (0..rows * cols)
            .map(|_| {
                h = h.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (h >> 16) as u16
            })
            .collect();
        let specials = [
            0x7fc1, 0x7f81, 0xff81, 0x7f80, 0xff80, 0x0001, 0x8001, 0x007f, 0x807f, 0x8000, 0x0000,
            0x0080, 0x8080,
        ];
        for (i, i0) in (0..bits.len()).step_by(37).enumerate() {
            bits[i0] = specials[i % specials.len()];
        }
        let b16: Vec<half::bf16> = bits.iter().map(|&b| half::bf16::from_bits(b)).collect();
        let wide: Vec<f32> = b16.iter().map(|x| x.to_f32()).collect();
        let views = |off, dims, strides| {
            (
                View::new(&b16, off, dims, strides).unwrap(),
                View::new(&wide, off, dims, strides).unwrap(),
            )
        };
        let mut cases = vec![
            views(0, (rows, cols), (cols, 1)),
            views(3, (33, 17), (2 * cols, 2)),
            views(5, (40, 70), (1, cols)),
            views(cols + 1, (130, 100), (cols, 1)),
            views(9, (1, 1), (1, 1)),
        ];
        let transposed: Vec<_> = cases.iter().map(|(a, b)| (a.t(), b.t())).collect();
        cases.extend(transposed);
        let modes: &[bool] = if simd() { &[false, true] } else { &[false] };
        for (v16, v32) in cases {
            for &simd in modes {
                let what = format!("{}x{} at {} simd {simd}", v16.rows, v16.cols, v16.off);
                let want = pack_a_with(v32, simd);
                // A reused buffer's old contents must not show through.
                super::super::scratch::give(vec![0xffff; want.data.len()]);
                assert!(pack_a_with(v16, simd).data == want.data, "A {what}");
                let want = pack_b_in(v32, simd, Buffer::Pool);
                super::super::scratch::give(vec![0xffff; want.data.len()]);
                let got = pack_b_in(v16, simd, Buffer::Pool);
                assert!(got.data == want.data, "B {what}");
                let old = vec![0xffff; want.data.len() + 3];
                assert!(
                    pack_b_in(v16, simd, Buffer::Own(old)).data == want.data,
                    "B own {what}"
                );
            }
        }
    }
}
