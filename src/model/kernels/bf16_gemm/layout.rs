//! The bf16 panel layout the packers and the microkernels share: its sizes, the rounding to
//! bf16, and the strided view of f32 or bf16 elements packing reads from (`pack` writes the
//! panels).
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

/// An element type packing reads: f32 (rounded to bf16) or bf16 (taken as it is: a frozen
/// bf16 base's weight, which an f32 copy would only widen for the packer to narrow back).
pub trait Elem: Copy + Send + Sync + 'static {
    /// The element's packed bf16 bits: exactly `round_bf16` of its f32 value.
    fn bf16_bits(self) -> u16;

    /// The element's f32 value (exact for bf16).
    fn to_f32(self) -> f32;

    /// The view as the source the SIMD packers dispatch on.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn source(v: View<'_, Self>) -> Source<'_>;
}

/// A view by its element type.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub enum Source<'a> {
    /// f32 elements, rounded while packed.
    F32(View<'a, f32>),
    /// bf16 elements, copied as they are (NaNs quieted, as rounding their f32 value would).
    Bf16(View<'a, half::bf16>),
}

impl Elem for f32 {
    #[inline(always)]
    fn bf16_bits(self) -> u16 {
        round_bf16(self)
    }

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    fn source(v: View<'_, Self>) -> Source<'_> {
        Source::F32(v)
    }
}

impl Elem for half::bf16 {
    /// A bf16 value widened to f32 is exact, and rounding an f32 that is already a bf16 value
    /// returns its bits; only a NaN changes: rounding quiets it (sets the mantissa's top bit).
    #[inline(always)]
    fn bf16_bits(self) -> u16 {
        let b = self.to_bits();
        if b & 0x7fff > 0x7f80 {
            b | 0x40
        } else {
            b
        }
    }

    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }

    fn source(v: View<'_, Self>) -> Source<'_> {
        Source::Bf16(v)
    }
}

/// A read-only 2-D view of f32 or bf16 elements: element (i, j) is
/// `data[off + i * rs + j * cs]`.
#[derive(Debug)]
pub struct View<'a, T = f32> {
    /// The backing elements.
    pub data: &'a [T],
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

// Derived `Clone`/`Copy` would ask the same of `T`; the view only borrows its elements.
impl<T> Clone for View<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for View<'_, T> {}

impl<'a, T> View<'a, T> {
    /// A view, checked to stay inside `data`.
    pub fn new(
        data: &'a [T],
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
