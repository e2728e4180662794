//! `acc += aᵀ · b` straight into the accumulator's buffer with gemm's accumulate mode: the LM
//! head's weight gradient (vocabulary × hidden) without a product buffer of that size.
use super::cpu_slices::{f32s, f32s_mut};
use candle_core::{CpuStorage, InplaceOp3, Layout, Result, Tensor};

struct AddMatmulTn;

impl InplaceOp3 for AddMatmulTn {
    fn name(&self) -> &'static str {
        "add-matmul-tn"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let (m, n) = l1.shape().dims2()?;
        let (k, m2) = l2.shape().dims2()?;
        let (k2, n2) = l3.shape().dims2()?;
        if (m, n, k) != (m2, n2, k2) {
            candle_core::bail!("add-matmul-tn: ({m}, {n}) += ({k}, {m2})ᵀ · ({k2}, {n2})")
        }
        let d = f32s_mut(s1, l1, self.name())?;
        let a = f32s(s2, l2, self.name())?;
        let b = f32s(s3, l3, self.name())?;
        // The slices' lengths are exactly m·n, k·m and k·n: contiguous layouts of those shapes.
        let parallelism = super::matmul_no_fill::parallelism();
        // SAFETY: d, a and b are live, non-overlapping slices (d is borrowed mutably) holding
        // row-major (m, n), (k, m) and (k, n) matrices, checked above; the strides below stay
        // inside them: dst[i, j] = d[i·n + j], lhs = aᵀ so lhs[i, p] = a[p·m + i],
        // rhs[p, j] = b[p·n + j].
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                d.as_mut_ptr(),
                1,
                n as isize,
                true,
                a.as_ptr(),
                m as isize,
                1,
                b.as_ptr(),
                1,
                n as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        Ok(())
    }
}

/// `acc += aᵀ · b` in place: acc (m, n) contiguous f32 owning its storage, a (k, m), b (k, n).
/// Other dtypes take the product and add it.
pub fn add_matmul_tn(acc: &Tensor, a: &Tensor, b: &Tensor) -> Result<()> {
    if acc.dtype() == candle_core::DType::F32
        && a.dtype() == acc.dtype()
        && b.dtype() == acc.dtype()
    {
        acc.inplace_op3(&a.contiguous()?, &b.contiguous()?, &AddMatmulTn)
    } else {
        super::add_in_place::add_into(acc, &a.t()?.matmul(b)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn adds_the_product_into_the_accumulator() -> Result<()> {
        let dev = Device::Cpu;
        let a = Tensor::randn(0f32, 1.0, (37, 70), &dev)?;
        let b = Tensor::randn(0f32, 1.0, (37, 9), &dev)?;
        let acc = Tensor::randn(0f32, 1.0, (70, 9), &dev)?.contiguous()?;
        let want = (&acc + a.t()?.matmul(&b)?)?;
        add_matmul_tn(&acc, &a, &b)?;
        let diff = (acc - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-4, "differs by {diff}");
        assert!(add_matmul_tn(
            &Tensor::zeros((3, 3), candle_core::DType::F32, &dev)?,
            &a,
            &b
        )
        .is_err());
        Ok(())
    }
}
