//! W (out, in) as a contiguous (in, out) copy, by a tiled transpose for f32 CPU tensors:
//! sampling's transposed copies and the update's mini-batch copies of Wᵀ.
use crate::model::kernels::cpu_slices::f32s;
use candle_core::{DType, Result, Storage, Tensor};

/// W (out, in) as a contiguous (in, out) tensor; f32 CPU weights go through a tiled transpose
/// (candle's strided copy took as long as the optimizer step itself at tiny sizes).
pub fn transposed(weight: &Tensor) -> Result<Tensor> {
    let w = weight.detach();
    if w.dtype() != DType::F32 || !w.device().is_cpu() || w.rank() != 2 {
        return w.t()?.contiguous();
    }
    let (rows, cols) = w.dims2()?;
    let w = w.contiguous()?;
    let (st, l) = w.storage_and_layout();
    let Storage::Cpu(cs) = &*st else {
        candle_core::bail!("transposed copy: not a CPU tensor")
    };
    let src = f32s(cs, l, "transposed copy")?;
    let mut out = vec![0f32; rows * cols];
    const TILE: usize = 32;
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
    drop(st);
    Tensor::from_vec(out, (cols, rows), weight.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The tiled transpose equals candle's, on shapes that are not multiples of the tile.
    #[test]
    fn the_transposed_copy_is_the_transpose() -> Result<()> {
        let w = Tensor::randn(0f32, 1.0, (45, 70), &Device::Cpu)?;
        let want = w.t()?.contiguous()?.to_vec2::<f32>()?;
        assert_eq!(transposed(&w)?.to_vec2::<f32>()?, want);
        Ok(())
    }
}
