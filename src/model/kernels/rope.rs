//! Rotary embedding ("rotate_half", per-row positions) as one op: y₁ = x₁c − x₂s,
//! y₂ = x₂c + x₁s on each head row. It is a rotation, so its backward is the same op with
//! the sine negated. The op-by-op version is two cats, a narrow, neg, cat, two broadcast
//! muls and an add, each a pass over q or k, plus their backward passes.
use super::{fusable, par_rows};
use crate::model::kernels::cpu_slices::f32s;
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use multiversion::multiversion;

const OP: &str = "rope";

/// Rotates x (b, heads, s, d) by cos/sin (b, s, d/2). `None` when the tensors cannot take the
/// fused path (the caller then uses the op-by-op version).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Option<Tensor>> {
    if !fusable(&[x, cos, sin]) {
        return Ok(None);
    }
    let (b, h, s, d) = x.dims4()?;
    if cos.dims() != [b, s, d / 2] || sin.dims() != cos.dims() || !d.is_multiple_of(2) {
        candle_core::bail!(
            "{OP}: x {:?} with tables {:?}/{:?}",
            x.dims(),
            cos.dims(),
            sin.dims()
        )
    }
    let op = Rotate {
        heads: h,
        s,
        d,
        inverse: false,
    };
    let y = x
        .contiguous()?
        .apply_op3(&cos.contiguous()?, &sin.contiguous()?, op)?;
    Ok(Some(y))
}

/// x rotated by −angle (the backward of [`rope`]): x (b, heads, s, d) f32, no graph.
pub fn rope_inverse(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (_, h, s, d) = x.dims4()?;
    let op = Rotate {
        heads: h,
        s,
        d,
        inverse: true,
    };
    x.contiguous()?
        .apply_op3_no_bwd(&cos.contiguous()?, &sin.contiguous()?, &op)
}

struct Rotate {
    heads: usize,
    s: usize,
    d: usize,
    /// Rotate by −angle (the backward).
    inverse: bool,
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn rotate_row(x: &[f32], c: &[f32], s: &[f32], sign: f32, y: &mut [f32]) {
    let half = c.len();
    let (x1, x2) = x.split_at(half);
    let (y1, y2) = y.split_at_mut(half);
    for i in 0..half {
        let sn = sign * s[i];
        y1[i] = x1[i] * c[i] - x2[i] * sn;
        y2[i] = x2[i] * c[i] + x1[i] * sn;
    }
}

impl CustomOp3 for Rotate {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, cos, sin) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?, f32s(s3, l3, OP)?);
        let (d, half) = (self.d, self.d / 2);
        let sign = if self.inverse { -1.0 } else { 1.0 };
        let mut y = vec![0f32; x.len()];
        par_rows(&mut y, d, |first, y| {
            for (j, y) in y.chunks_mut(d).enumerate() {
                let r = first + j;
                // Row r is (batch, head, position); the tables are indexed by (batch, position).
                let t = (r / (self.heads * self.s)) * self.s + r % self.s;
                let tab = t * half..(t + 1) * half;
                rotate_row(
                    &x[r * d..(r + 1) * d],
                    &cos[tab.clone()],
                    &sin[tab],
                    sign,
                    y,
                );
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let op = Rotate {
            inverse: !self.inverse,
            ..*self
        };
        let dx = dy.contiguous()?.apply_op3_no_bwd(cos, sin, &op)?;
        Ok((Some(dx), None, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::forward::Mode;
    use crate::model::decoder::rope::Rope;
    use crate::model::kernels::max_diff;
    use candle_core::{DType, Device, Var};

    #[test]
    fn matches_the_op_by_op_version_in_value_and_gradient() -> Result<()> {
        let dev = Device::Cpu;
        let (b, h, s, d) = (2, 3, 5, 8);
        let table = Rope::new(d, 10_000.0, 32, DType::F64, &dev)?;
        let pos = Tensor::new(&[[0u32, 1, 2, 3, 4], [0, 0, 0, 1, 2]], &dev)?;
        let (c64, s64) = table.tables(&pos)?;
        let (c32, s32) = (c64.to_dtype(DType::F32)?, s64.to_dtype(DType::F32)?);
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (b, h, s, d), &dev)?)?;
        let probe = Tensor::randn(0f32, 1.0, (b, h, s, d), &dev)?;
        let fused = rope(x.as_tensor(), &c32, &s32)?.expect("f32 takes the fused path");
        let x64 = Var::from_tensor(&x.to_dtype(DType::F64)?)?;
        let plain = table.apply(x64.as_tensor(), &c64, &s64, Mode::Train)?;
        assert!(max_diff(&fused, &plain)? < 1e-6);
        let gf = (fused * &probe)?.sum_all()?.backward()?;
        let gp = (plain * probe.to_dtype(DType::F64)?)?
            .sum_all()?
            .backward()?;
        let dx = max_diff(gf.get(&x).unwrap(), gp.get(&x64).unwrap())?;
        assert!(dx < 1e-6, "gradients differ by {dx}");
        Ok(())
    }
}
