//! RMSNorm w · x / sqrt(mean(x²) + eps) over the last dim as one op with a backward that writes
//! d x and d w in one pass over the rows (d w summed from per-task partials). The op-by-op
//! version is sqr, mean, add, sqrt, div, mul forward and about twice that backward.
use super::vector_exp::{dot, dot3};
use super::{fusable, rows_per_task};
use crate::model::kernels::cpu_slices::f32s;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, D};
use multiversion::multiversion;
use rayon::prelude::*;

const OP: &str = "rms-norm";

/// w · x / sqrt(mean(x²) + eps) over the last dim of x; w has that dim's size.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let h = x.dim(D::Minus1)?;
    if w.dims() != [h] {
        candle_core::bail!("{OP}: weight {:?} for rows of {h}", w.dims())
    }
    if !fusable(&[x, w]) {
        let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
        return x.broadcast_div(&(ms + eps)?.sqrt()?)?.broadcast_mul(w);
    }
    let op = Forward { eps: eps as f32, h };
    x.contiguous()?.apply_op2(&w.contiguous()?, op)
}

/// (d x, d w) of [`rms_norm`] for the output gradient `dy` (f32, no graph).
pub fn rms_norm_backward(
    x: &Tensor,
    w: &Tensor,
    dy: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let op = Backward {
        eps: eps as f32,
        h: x.dim(D::Minus1)?,
    };
    // (rows + 1, h): d x, then d w as the last row.
    let both = x
        .contiguous()?
        .apply_op3_no_bwd(&w.contiguous()?, &dy.contiguous()?, &op)?;
    let rows = both.dim(0)? - 1;
    let dx = both.narrow(0, 0, rows)?.reshape(x.shape())?;
    Ok((dx, both.get(rows)?))
}

struct Forward {
    eps: f32,
    h: usize,
}

struct Backward {
    eps: f32,
    h: usize,
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn forward_row(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let r = 1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt();
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = x * r * w;
    }
}

/// d x of one row into `dx`, its d w contribution added into `dw`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn backward_row(x: &[f32], w: &[f32], dy: &[f32], eps: f32, dx: &mut [f32], dw: &mut [f32]) {
    let h = x.len() as f32;
    let r = 1.0 / (dot(x, x) / h + eps).sqrt();
    let c = r * r * r * dot3(x, w, dy) / h;
    for ((((dx, dw), &x), &w), &dy) in dx.iter_mut().zip(dw.iter_mut()).zip(x).zip(w).zip(dy) {
        *dx = r * dy * w - x * c;
        *dw += dy * x * r;
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
        let (x, w) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?);
        let h = self.h;
        let mut y = vec![0f32; x.len()];
        super::par_rows(&mut y, h, |first, y| {
            let xs = &x[first * h..first * h + y.len()];
            for (y, x) in y.chunks_mut(h).zip(xs.chunks(h)) {
                forward_row(x, w, self.eps, y);
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw) = rms_norm_backward(x, w, dy, self.eps as f64)?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for Backward {
    fn name(&self) -> &'static str {
        "rms-norm-backward"
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
        let (x, w, dy) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?, f32s(s3, l3, OP)?);
        let h = self.h;
        let rows = x.len() / h.max(1);
        let mut out = vec![0f32; (rows + 1) * h];
        let (dx, dw) = out.split_at_mut(rows * h);
        let step = rows_per_task(h) * h;
        let partials: Vec<Vec<f32>> = dx
            .par_chunks_mut(step.max(1))
            .enumerate()
            .map(|(t, dx)| {
                let r = t * step..t * step + dx.len();
                let mut dw = vec![0f32; h];
                for ((dx, x), dy) in dx
                    .chunks_mut(h)
                    .zip(x[r.clone()].chunks(h))
                    .zip(dy[r].chunks(h))
                {
                    backward_row(x, w, dy, self.eps, dx, &mut dw);
                }
                dw
            })
            .collect();
        for p in partials {
            for (a, b) in dw.iter_mut().zip(p) {
                *a += b;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((rows + 1, h))))
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
        let x = Var::from_tensor(&Tensor::randn(0f32, 2.0, (3, 41, 64), &dev)?)?;
        let w = Var::from_tensor(&Tensor::randn(1f32, 0.3, 64, &dev)?)?;
        let probe = Tensor::randn(0f32, 1.0, (3, 41, 64), &dev)?;
        let fused = rms_norm(x.as_tensor(), w.as_tensor(), 1e-6)?;
        let x64 = Var::from_tensor(&x.to_dtype(DType::F64)?)?;
        let w64 = Var::from_tensor(&w.to_dtype(DType::F64)?)?;
        let plain = rms_norm(x64.as_tensor(), w64.as_tensor(), 1e-6)?;
        assert!(max_diff(&fused, &plain)? < 1e-5);
        let gf = (fused * &probe)?.sum_all()?.backward()?;
        let gp = (plain * probe.to_dtype(DType::F64)?)?
            .sum_all()?
            .backward()?;
        let dx = max_diff(gf.get(&x).unwrap(), gp.get(&x64).unwrap())?;
        let dw = max_diff(gf.get(&w).unwrap(), gp.get(&w64).unwrap())?;
        assert!(dx < 1e-5 && dw < 1e-4, "dx {dx} dw {dw}");
        Ok(())
    }
}
