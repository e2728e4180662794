//! The bf16 panel layout the packers and the microkernels share: its sizes, the rounding to
//! bf16, and the strided f32 view packing reads from (`pack` writes the panels).
/// Elements of K per k-step (one AMX tile's depth).
pub const KSTEP: usize = 32;
/// Rows (columns) per panel.
pub const PANEL: usize = 16;
/// Elements in one panel's k-step (1 KiB of bf16).
pub const STEP_ELEMS: usize = KSTEP * PANEL;
/// Rows and columns are padded to a multiple of this (one microkernel block).
pub const BLOCK: usize = 32;
/// `x` rounded to bf16 (round to nearest, ties to even), as its bits; NaN stays a (quiet) NaN.
/// The same value as `half::bf16::from_f32`, written branch-light so packing loops vectorise.
#[inline(always)]
pub fn round_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        ((b >> 16) | 0x40) as u16
    } else {
        (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
    }
}

/// A read-only 2-D view of f32 elements: element (i, j) is `data[off + i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The backing elements.
    pub data: &'a [f32],
    /// Offset of element (0, 0).
    pub off: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Element stride between rows.
    pub rs: usize,
    /// Element stride between columns.
    pub cs: usize,
}

impl<'a> View<'a> {
    /// A view, checked to stay inside `data`.
    pub fn new(
        data: &'a [f32],
        off: usize,
        (rows, cols): (usize, usize),
        (rs, cs): (usize, usize),
    ) -> Option<Self> {
        if rows > 0 && cols > 0 {
            let last = off + (rows - 1) * rs + (cols - 1) * cs;
            if last >= data.len() {
                return None;
            }
        }
        Some(Self {
            data,
            off,
            rows,
            cols,
            rs,
            cs,
        })
    }

    /// The transposed view (no copy).
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}
