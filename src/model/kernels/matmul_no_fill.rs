//! `a · b` for 2-D f32 CPU operands into a fresh buffer that gemm writes without reading it.
//! candle's CPU matmul zero-fills its output before gemm overwrites it: a single-threaded
//! memset of every product's result, run while the other cores wait. Here the output is left
//! uninitialised instead and the gemm call is candle's own (same strides, `read_dst` false,
//! same parallelism), so the bits are candle's. Other ranks, dtypes and devices go to
//! `Tensor::matmul`.
use candle_core::{CpuStorage, CustomOp2, DType, Device, Layout, Result, Shape, Tensor};

/// `a (m, k) · b (k, n)`, exactly `a.matmul(b)`.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let fits = a.rank() == 2
        && b.rank() == 2
        && a.dtype() == DType::F32
        && b.dtype() == DType::F32
        && matches!(a.device(), Device::Cpu)
        && matches!(b.device(), Device::Cpu);
    if fits {
        a.apply_op2_no_bwd(b, &NoZeroFill)
    } else {
        a.matmul(b)
    }
}

struct NoZeroFill;

/// A 2-D operand as gemm reads it: its first element's offset and its row and column strides.
struct Operand<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Operand<'a> {
    fn new(s: &'a CpuStorage, l: &Layout) -> Result<Self> {
        let CpuStorage::F32(v) = s else {
            candle_core::bail!("matmul-no-zero-fill: only f32 operands")
        };
        let (rows, cols) = l.shape().dims2()?;
        let (rs, cs) = (l.stride()[0], l.stride()[1]);
        let start = l.start_offset();
        // The last element gemm may touch, checked rather than trusted.
        let last = start + rows.saturating_sub(1) * rs + cols.saturating_sub(1) * cs;
        if rows > 0 && cols > 0 && last >= v.len() {
            candle_core::bail!("matmul-no-zero-fill: layout reaches past its storage")
        }
        Ok(Self {
            data: &v[start.min(v.len())..],
            rows,
            cols,
            rs,
            cs,
        })
    }
}

impl CustomOp2 for NoZeroFill {
    fn name(&self) -> &'static str {
        "matmul-no-zero-fill"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let a = Operand::new(s1, l1)?;
        let b = Operand::new(s2, l2)?;
        if a.cols != b.rows {
            candle_core::bail!(
                "matmul-no-zero-fill: ({}, {}) · ({}, {})",
                a.rows,
                a.cols,
                b.rows,
                b.cols
            )
        }
        let (m, n) = (a.rows, b.cols);
        let mut dst: Vec<f32> = Vec::with_capacity(m * n);
        product_into(dst.spare_capacity_mut(), &a, &b);
        // SAFETY: `product_into` wrote all m·n elements (gemm with `read_dst` false writes every
        // element of dst, k = 0 included, and reads none; the test below fills dst with NaN first
        // to check that no element is read or skipped).
        unsafe { dst.set_len(m * n) };
        Ok((CpuStorage::F32(dst), Shape::from((m, n))))
    }
}

/// The threads gemm splits a product over: candle's choice for its own matmul.
pub(super) fn parallelism() -> gemm::Parallelism {
    match candle_core::utils::get_num_threads() {
        0 | 1 => gemm::Parallelism::None,
        threads => gemm::Parallelism::Rayon(threads),
    }
}

/// dst (m, n) row-major = a · b, overwriting dst without reading it.
fn product_into(dst: &mut [std::mem::MaybeUninit<f32>], a: &Operand, b: &Operand) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(dst.len() >= m * n && a.cols == b.rows);
    let parallelism = parallelism();
    // SAFETY: dst holds m·n elements (asserted), written at i·n + j; a's and b's elements are
    // read at start + i·rs + p·cs, inside their slices (checked in `Operand::new`); dst is a
    // fresh buffer that overlaps neither. `read_dst` false: gemm never reads dst.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr() as *mut f32,
            1,
            n as isize,
            false,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Every element's bits, for tests that ask for results equal to the bit.
    pub(in crate::model) fn bits(t: &Tensor) -> Result<Vec<u32>> {
        Ok(t.flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .map(|x| x.to_bits())
            .collect())
    }

    /// candle's bits on contiguous, transposed and offset views, k = 0 included; other
    /// ranks and dtypes fall back.
    #[test]
    fn gives_candles_bits() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (67, 130), &dev)?;
        let w = Tensor::randn(0f32, 1.0, (45, 130), &dev)?;
        let big = Tensor::randn(0f32, 1.0, (50, 140), &dev)?;
        let view = big.narrow(0, 3, 45)?.narrow(1, 7, 130)?;
        let cases = [
            (x.clone(), w.t()?),
            (w.clone(), x.t()?),
            (x.t()?.contiguous()?.t()?, view.t()?),
            (x.narrow(1, 0, 0)?, w.narrow(1, 0, 0)?.t()?),
            (x.narrow(0, 0, 1)?, w.t()?),
        ];
        for (a, b) in cases {
            let got = matmul(&a, &b)?;
            assert_eq!(got.dims(), [a.dim(0)?, b.dim(1)?]);
            assert_eq!(bits(&got)?, bits(&a.matmul(&b)?)?);
        }
        let a3 = x.reshape((1, 67, 130))?;
        let b3 = w.t()?.reshape((1, 130, 45))?;
        assert_eq!(bits(&matmul(&a3, &b3)?)?, bits(&a3.matmul(&b3)?)?);
        assert!(matmul(&x, &w).is_err(), "mismatched inner dimensions");
        Ok(())
    }

    /// gemm overwrites every element without reading: a NaN-filled dst comes out clean.
    #[test]
    fn writes_every_element_and_reads_none() -> Result<()> {
        let dev = Device::Cpu;
        for (m, k, n) in [(37, 70, 9), (1, 5, 300), (130, 1, 17), (4, 0, 6)] {
            let a = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let b = Tensor::randn(0f32, 1.0, (k, n), &dev)?;
            let (sa, la) = a.storage_and_layout();
            let (sb, lb) = b.storage_and_layout();
            let (candle_core::Storage::Cpu(sa), candle_core::Storage::Cpu(sb)) = (&*sa, &*sb)
            else {
                unreachable!("cpu tensors")
            };
            let (oa, ob) = (Operand::new(sa, la)?, Operand::new(sb, lb)?);
            let mut dst = vec![std::mem::MaybeUninit::new(f32::NAN); m * n];
            product_into(&mut dst, &oa, &ob);
            // SAFETY: every element was initialised (to NaN) before the product.
            let got: Vec<f32> = dst.iter().map(|x| unsafe { x.assume_init() }).collect();
            let want = a.matmul(&b)?.flatten_all()?.to_vec1::<f32>()?;
            assert_eq!(got, want, "({m}, {k}) · ({k}, {n})");
        }
        Ok(())
    }
}
