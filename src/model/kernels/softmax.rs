//! The attention's softmax(scale · x + mask) over the last dim as one op. x is (b, …, s, n) with
//! its rows grouped per batch row; the additive mask (b, 1, s, n) is broadcast over the middle
//! dims, as attention heads share it. Forward: one pass per row (write, max, exp, normalise);
//! backward: dx = scale · y · (dy − Σ dy·y) in one pass. The op-by-op version is a scale, a
//! broadcast add, max, sub, exp, sum, div, and their backward passes.
use super::vector_exp::{dot, exp, max as vmax, sum};
use super::{fusable, par_rows};
use crate::model::kernels::cpu_slices::f32s;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor, D};
use multiversion::multiversion;

const OP: &str = "masked-softmax";

/// softmax(scale · x + mask) over the last dim: x (b, h…, s, n), mask (b, 1, s, n).
pub fn masked_softmax(x: &Tensor, mask: &Tensor, scale: f64) -> Result<Tensor> {
    let (b, _, s, n) = mask.dims4()?;
    let xd = x.dims();
    let rows = x.elem_count() / n.max(1);
    if x.rank() < 3 || xd[0] != b || xd[xd.len() - 1] != n || !rows.is_multiple_of((b * s).max(1)) {
        candle_core::bail!("{OP}: scores {xd:?} do not fit the mask {:?}", mask.dims())
    }
    if !fusable(&[x, mask]) {
        // The same math op by op: (b, heads, s, n) + (b, 1, s, n).
        let z = (x.reshape((b, rows / (b * s).max(1), s, n))? * scale)?
            .broadcast_add(&mask.to_dtype(x.dtype())?)?;
        return candle_nn::ops::softmax(&z, D::Minus1)?.reshape(x.shape());
    }
    let op = Forward {
        scale: scale as f32,
        per_batch: rows / b.max(1),
        s,
        n,
    };
    x.contiguous()?.apply_op2(&mask.contiguous()?, op)
}

/// d x of [`masked_softmax`] from its output `y` and output gradient `dy` (f32, no graph).
pub fn masked_softmax_backward(y: &Tensor, dy: &Tensor, scale: f64) -> Result<Tensor> {
    let op = Backward {
        scale: scale as f32,
        n: y.dim(D::Minus1)?,
    };
    y.contiguous()?.apply_op2_no_bwd(&dy.contiguous()?, &op)
}

struct Forward {
    scale: f32,
    /// Score rows per batch row (heads × s).
    per_batch: usize,
    s: usize,
    n: usize,
}

struct Backward {
    scale: f32,
    n: usize,
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn forward_row(x: &[f32], m: &[f32], scale: f32, y: &mut [f32]) {
    for ((y, &x), &m) in y.iter_mut().zip(x).zip(m) {
        *y = x * scale + m;
    }
    let max = vmax(y);
    for y in y.iter_mut() {
        *y = exp(*y - max);
    }
    let inv = 1.0 / sum(y);
    for y in y.iter_mut() {
        *y *= inv;
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn backward_row(y: &[f32], dy: &[f32], scale: f32, dx: &mut [f32]) {
    let dot = dot(y, dy);
    for ((dx, &y), &dy) in dx.iter_mut().zip(y).zip(dy) {
        *dx = scale * y * (dy - dot);
    }
}

impl CustomOp2 for Forward {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, m) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?);
        let n = self.n;
        let mut y = vec![0f32; x.len()];
        par_rows(&mut y, n, |first, y| {
            for (j, y) in y.chunks_mut(n).enumerate() {
                let r = first + j;
                let mr = (r / self.per_batch) * self.s + r % self.s;
                forward_row(
                    &x[r * n..(r + 1) * n],
                    &m[mr * n..(mr + 1) * n],
                    self.scale,
                    y,
                );
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _mask: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dx = masked_softmax_backward(y, dy, self.scale as f64)?;
        Ok((Some(dx), None))
    }
}

impl CustomOp2 for Backward {
    fn name(&self) -> &'static str {
        "masked-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (y, dy) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?);
        let n = self.n;
        let mut dx = vec![0f32; y.len()];
        par_rows(&mut dx, n, |first, dx| {
            let r = first * n..first * n + dx.len();
            for ((dx, y), dy) in dx
                .chunks_mut(n)
                .zip(y[r.clone()].chunks(n))
                .zip(dy[r].chunks(n))
            {
                backward_row(y, dy, self.scale, dx);
            }
        });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernels::max_diff;
    use candle_core::{DType, Device, Var};

    #[test]
    fn matches_the_op_by_op_version_in_value_and_gradient() -> Result<()> {
        let dev = Device::Cpu;
        let (b, kv, g, s, n) = (2, 3, 2, 5, 7);
        let x = Var::from_tensor(&Tensor::randn(0f32, 2.0, (b, kv, g * s, n), &dev)?)?;
        // A causal-style mask with a fully masked row (finite minimum, as batch.rs builds).
        let mut m = vec![0f32; b * s * n];
        for (i, v) in m.iter_mut().enumerate() {
            let (row, col) = ((i / n) % s, i % n);
            if col > row + 2 || (i / (s * n) == 1 && row == 0) {
                *v = f32::MIN;
            }
        }
        let mask = Tensor::from_vec(m, (b, 1, s, n), &dev)?;
        let w = Tensor::randn(0f32, 1.0, (b, kv, g * s, n), &dev)?;
        let scale = 0.37;
        let fused = masked_softmax(x.as_tensor(), &mask, scale)?;
        let x64 = Var::from_tensor(&x.to_dtype(DType::F64)?)?;
        let z = (x64.as_tensor().reshape((b, kv, g, s, n))? * scale)?
            .broadcast_add(&mask.to_dtype(DType::F64)?.unsqueeze(1)?)?;
        let plain = candle_nn::ops::softmax(&z, D::Minus1)?.reshape((b, kv, g * s, n))?;
        assert!(max_diff(&fused, &plain)? < 1e-6);
        let gf = (fused * &w)?.sum_all()?.backward()?;
        let gp = (plain * w.to_dtype(DType::F64)?)?.sum_all()?.backward()?;
        let d = max_diff(gf.get(&x).unwrap(), gp.get(&x64).unwrap())?;
        assert!(d < 1e-6, "gradients differ by {d}");
        Ok(())
    }
}
