//! silu(g) · u, the SwiGLU gate, as one op: one pass forward, one pass backward (writing both
//! gradients), instead of candle's silu + mul and their many backward passes with three
//! `exp`s.
use super::vector_exp::sigmoid;
use super::{fusable, par_rows};
use crate::model::kernels::cpu_slices::f32s;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use multiversion::multiversion;

const OP: &str = "swiglu";

/// silu(g) · u elementwise; g and u of one shape. Fused for f32 on the CPU.
pub fn swiglu(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    if !fusable(&[g, u]) {
        return g.silu()? * u;
    }
    if g.shape() != u.shape() {
        candle_core::bail!("{OP}: gate {:?} and up {:?} differ", g.shape(), u.shape())
    }
    g.contiguous()?.apply_op2(&u.contiguous()?, Forward)
}

/// (d g, d u) of [`swiglu`] for the output gradient `dy` (f32, no graph).
pub fn swiglu_backward(g: &Tensor, u: &Tensor, dy: &Tensor) -> Result<(Tensor, Tensor)> {
    let both = g
        .contiguous()?
        .apply_op3_no_bwd(&u.contiguous()?, &dy.contiguous()?, &Backward)?;
    Ok((
        both.get(0)?.reshape(g.shape())?,
        both.get(1)?.reshape(g.shape())?,
    ))
}

struct Forward;
struct Backward;

#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn forward_run(g: &[f32], u: &[f32], y: &mut [f32]) {
    for ((y, &g), &u) in y.iter_mut().zip(g).zip(u) {
        *y = g * sigmoid(g) * u;
    }
}

/// d holds dg then du, each `g.len()` long.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn backward_run(g: &[f32], u: &[f32], dy: &[f32], dg: &mut [f32], du: &mut [f32]) {
    for ((((dg, du), &g), &u), &dy) in dg.iter_mut().zip(du.iter_mut()).zip(g).zip(u).zip(dy) {
        let s = sigmoid(g);
        let silu = g * s;
        *du = dy * silu;
        *dg = dy * u * (s + silu * (1.0 - s));
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
        let (g, u) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?);
        let mut y = vec![0f32; g.len()];
        par_rows(&mut y, 1, |i, y| {
            forward_run(&g[i..i + y.len()], &u[i..i + y.len()], y)
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        g: &Tensor,
        u: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dg, du) = swiglu_backward(g, u, dy)?;
        Ok((Some(dg), Some(du)))
    }
}

impl CustomOp3 for Backward {
    fn name(&self) -> &'static str {
        "swiglu-backward"
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
        let (g, u, dy) = (f32s(s1, l1, OP)?, f32s(s2, l2, OP)?, f32s(s3, l3, OP)?);
        let n = g.len();
        let mut d = vec![0f32; 2 * n];
        let (dg, du) = d.split_at_mut(n);
        let step = super::rows_per_task(1);
        use rayon::prelude::*;
        dg.par_chunks_mut(step)
            .zip(du.par_chunks_mut(step))
            .enumerate()
            .for_each(|(c, (dg, du))| {
                let r = c * step..c * step + dg.len();
                backward_run(&g[r.clone()], &u[r.clone()], &dy[r], dg, du)
            });
        Ok((CpuStorage::F32(d), Shape::from((2, n))))
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
        let g = Var::from_tensor(&(Tensor::randn(0f32, 3.0, (3, 37, 50), &dev)?))?;
        let u = Var::from_tensor(&(Tensor::randn(0f32, 1.0, (3, 37, 50), &dev)?))?;
        let w = Tensor::randn(0f32, 1.0, (3, 37, 50), &dev)?;
        let fused = swiglu(g.as_tensor(), u.as_tensor())?;
        // Reference in f64 through candle's differentiable ops.
        let (g64, u64) = (g.to_dtype(DType::F64)?, u.to_dtype(DType::F64)?);
        let (g64, u64) = (Var::from_tensor(&g64)?, Var::from_tensor(&u64)?);
        let plain = (g64.as_tensor().silu()? * u64.as_tensor())?;
        assert!(max_diff(&fused, &plain)? < 1e-5);
        let gf = (fused * &w)?.sum_all()?.backward()?;
        let gp = (plain * w.to_dtype(DType::F64)?)?.sum_all()?.backward()?;
        let dg = max_diff(gf.get(&g).unwrap(), gp.get(&g64).unwrap())?;
        let du = max_diff(gf.get(&u).unwrap(), gp.get(&u64).unwrap())?;
        assert!(dg < 1e-5 && du < 1e-5, "dg {dg} du {du}");
        Ok(())
    }
}
