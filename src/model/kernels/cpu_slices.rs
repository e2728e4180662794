//! Contiguous views of a kernel's CPU operands: the one check every in-place and custom op
//! here makes before it touches raw storage.
use candle_core::{CpuStorage, Layout, Result};

/// The elements `l` covers in `s`, which must be contiguous.
pub fn slice<'a, T>(s: &'a [T], l: &Layout, op: &str) -> Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s[a..b]),
        None => candle_core::bail!("{op}: operands must be contiguous"),
    }
}

/// [`slice`], mutable.
pub fn slice_mut<'a, T>(s: &'a mut [T], l: &Layout, op: &str) -> Result<&'a mut [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&mut s[a..b]),
        None => candle_core::bail!("{op}: operands must be contiguous"),
    }
}

/// The f32 elements `l` covers in `s`.
pub fn f32s<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    match s {
        CpuStorage::F32(v) => slice(v, l, op),
        _ => candle_core::bail!("{op}: only f32 tensors"),
    }
}

/// [`f32s`], mutable.
pub fn f32s_mut<'a>(s: &'a mut CpuStorage, l: &Layout, op: &str) -> Result<&'a mut [f32]> {
    match s {
        CpuStorage::F32(v) => slice_mut(v, l, op),
        _ => candle_core::bail!("{op}: only f32 tensors"),
    }
}
