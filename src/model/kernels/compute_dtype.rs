//! Which numeric type the update's big products run in (`trainer.compute_dtype`): `F32` is the
//! exact f32 path; `Bf16` rounds both operands to bf16 (round-to-nearest-even) and sums the
//! products in f32, the autocast TRL users get with `bf16=True`. Weights, gradients and the
//! optimizer state stay f32 either way; only the operands of the matmuls routed through here
//! (every Linear's x·Wᵀ, dy·W and dyᵀ·x, the LM head's h·Wᵀ, G·W and Gᵀ·h) are rounded.
use super::{add_matmul_tn, matmul_no_fill};
use crate::model::kernels::bf16_gemm::{
    self, add_matmul_tn as bf16_add_matmul_tn, matmul as bf16_matmul, PackedB,
};
use crate::model::kernels::transpose::transposed;
use candle_core::{Result, Tensor};

/// The operand type of the update's products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeDtype {
    /// f32 operands and sums: the exact path.
    #[default]
    F32,
    /// bf16 operands, f32 sums.
    Bf16,
}

impl std::fmt::Display for ComputeDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ComputeDtype::F32 => "f32",
            ComputeDtype::Bf16 => "bf16",
        })
    }
}

/// a (m, k) · b (k, n) as f32 (m, n); `F32` is exactly `a.matmul(b)` (through
/// [`matmul_no_fill`], which skips candle's zero-fill of the output).
pub fn matmul(a: &Tensor, b: &Tensor, dt: ComputeDtype) -> Result<Tensor> {
    match dt {
        ComputeDtype::F32 => matmul_no_fill::matmul(a, b),
        ComputeDtype::Bf16 => bf16_matmul(a, b),
    }
}

/// acc (m, n) += aᵀ · b for a (k, m), b (k, n), in place; `F32` is exactly
/// `add_matmul_tn::add_matmul_tn`.
pub fn add_matmul_tn(acc: &Tensor, a: &Tensor, b: &Tensor, dt: ComputeDtype) -> Result<()> {
    match dt {
        ComputeDtype::F32 => add_matmul_tn::add_matmul_tn(acc, a, b),
        ComputeDtype::Bf16 => bf16_add_matmul_tn(acc, a, b),
    }
}

/// aᵀ · b (m, n) for a (k, m), b (k, n) as a fresh tensor: exactly what [`add_matmul_tn`] adds
/// into zeros, without zeroing a buffer first: a gradient's first contribution, which would
/// otherwise start from a single-threaded memset of every weight's accumulator.
pub fn matmul_tn(a: &Tensor, b: &Tensor, dt: ComputeDtype) -> Result<Tensor> {
    match dt {
        // The same gemm call as `add_matmul_tn::add_matmul_tn` (aᵀ as a strided view), writing
        // instead of adding: 0 + s = s.
        ComputeDtype::F32 => matmul_no_fill::matmul(&a.t()?, b),
        ComputeDtype::Bf16 => {
            let acc = Tensor::zeros((a.dim(1)?, b.dim(1)?), a.dtype(), a.device())?;
            bf16_add_matmul_tn(&acc, a, b)?;
            Ok(acc)
        }
    }
}

/// A weight W (out, in) made ready for repeated x·Wᵀ and dy·W products in one dtype: in bf16,
/// W is packed once for each product (bf16, the kernel's panel layout) instead of once per
/// call. The LM head is multiplied once per chunk of a few positions at a large vocabulary:
/// packing all of it for every chunk would cost more than the bf16 products save. The packed
/// copies own their buffers: dropped, their memory goes back to the allocator (the layers'
/// gradients take it) rather than idling in the GEMM's scratch pool.
pub struct Prepared {
    w: Tensor,
    copies: Copies,
}

/// What a [`Prepared`] weight multiplies with besides W itself.
enum Copies {
    /// Nothing: f32 products read W (and Wᵀ as a strided view of it).
    None,
    /// f32: Wᵀ (in, out) contiguous, for x·Wᵀ (see [`Prepared::kept`]).
    Transposed(Tensor),
    /// bf16: (Wᵀ for x·Wᵀ, W for dy·W), packed.
    Bf16(PackedB, PackedB),
}

impl Prepared {
    /// Prepares `w` for the products of one pass in `dt` (f32: nothing to do).
    pub fn new(w: &Tensor, dt: ComputeDtype) -> Result<Self> {
        let copies = match dt {
            ComputeDtype::F32 => Copies::None,
            ComputeDtype::Bf16 => Copies::Bf16(
                bf16_gemm::pack_weight_owned(w)?,
                bf16_gemm::pack_rhs_owned(w)?,
            ),
        };
        Ok(Self {
            w: w.detach(),
            copies,
        })
    }

    /// Prepares `w` for the products of many passes (a mini-batch's): bf16 as [`Prepared::new`];
    /// f32 keeps a contiguous copy of Wᵀ (4 bytes a parameter). gemm reads Wᵀ as a strided
    /// view otherwise, which costs where the rows are few and W is out of the core's cache
    /// (docs/performance.md). Same products bit for bit ([`Prepared::x_wt`]).
    pub fn kept(w: &Tensor, dt: ComputeDtype) -> Result<Self> {
        match dt {
            ComputeDtype::F32 => Ok(Self {
                w: w.detach(),
                copies: Copies::Transposed(transposed(w)?),
            }),
            ComputeDtype::Bf16 => Self::new(w, dt),
        }
    }

    /// The weight W (out, in), detached.
    pub fn weight(&self) -> &Tensor {
        &self.w
    }

    /// x (m, in) · Wᵀ: (m, out); f32 is exactly `x.matmul(&w.t())`.
    pub fn x_wt(&self, x: &Tensor) -> Result<Tensor> {
        match &self.copies {
            Copies::Transposed(wt) if blocked_either_way(x, wt)? => matmul_no_fill::matmul(x, wt),
            Copies::None | Copies::Transposed(_) => matmul_no_fill::matmul(x, &self.w.t()?),
            Copies::Bf16(wt, _) => bf16_gemm::matmul_packed(x, wt),
        }
    }

    /// dy (m, out) · W: (m, in); f32 is exactly `dy.matmul(&w)`.
    pub fn dy_w(&self, dy: &Tensor) -> Result<Tensor> {
        match &self.copies {
            Copies::None | Copies::Transposed(_) => matmul_no_fill::matmul(dy, &self.w),
            Copies::Bf16(_, w) => bf16_gemm::matmul_packed(dy, w),
        }
    }
}

/// Whether gemm takes its blocked path for x · Wᵀ both with Wᵀ contiguous and as a strided
/// view of W, so that the two give the same bits. It would not for products of at most
/// 16 × 16 outputs (a kernel of dot products, which only the strided view's unit row stride
/// selects), a single row or column (matrix-vector kernels picked by the strides) or k ≤ 2.
fn blocked_either_way(x: &Tensor, wt: &Tensor) -> Result<bool> {
    let ((m, k), n) = (x.dims2()?, wt.dim(1)?);
    Ok(m >= 2 && n >= 2 && k > 2 && m * n > 16 * 16)
}

#[cfg(test)]
mod tests {
    use super::super::matmul_no_fill::tests::bits;
    use super::*;
    use candle_core::{DType, Device};

    fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
        (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
    }

    /// A mini-batch's f32 copy of Wᵀ gives `x.matmul(&w.t())` bit for bit at every shape,
    /// those where gemm picks its kernel by the operands' strides included (few outputs, one
    /// row or column, k ≤ 2), and dy·W is untouched.
    #[test]
    fn kept_f32_transpose_is_exact() -> Result<()> {
        let dev = Device::Cpu;
        for (m, k, n) in [
            (1, 64, 96),
            (2, 40, 3),
            (3, 1, 90),
            (4, 2, 70),
            (5, 33, 51),
            (16, 16, 16),
            (17, 16, 16),
            (2, 200, 129),
            (64, 130, 300),
            (129, 513, 96),
            (200, 64, 1),
            (1, 1, 1),
        ] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev)?;
            let kept = Prepared::kept(&w, ComputeDtype::F32)?;
            let want = x.matmul(&w.t()?)?;
            assert_eq!(bits(&kept.x_wt(&x)?)?, bits(&want)?, "x·Wᵀ ({m}, {k}, {n})");
            let dy = Tensor::randn(0f32, 1.0, (m, n), &dev)?;
            assert_eq!(bits(&kept.dy_w(&dy)?)?, bits(&dy.matmul(&w)?)?, "dy·W");
        }
        Ok(())
    }

    /// f32 is the plain product bit for bit; bf16 equals the product of rounded operands and
    /// differs from the f32 one.
    #[test]
    fn f32_is_exact_and_bf16_rounds_the_operands() -> Result<()> {
        let dev = Device::Cpu;
        let a = Tensor::randn(0f32, 1.0, (9, 40), &dev)?;
        let w = Tensor::randn(0f32, 1.0, (13, 40), &dev)?;
        let exact = a.matmul(&w.t()?)?;
        assert_eq!(
            max_diff(&matmul(&a, &w.t()?, ComputeDtype::F32)?, &exact)?,
            0.0
        );
        let got = matmul(&a, &w.t()?, ComputeDtype::Bf16)?;
        let (a16, w16) = (
            a.to_dtype(DType::BF16)?.to_dtype(DType::F64)?,
            w.to_dtype(DType::BF16)?.to_dtype(DType::F64)?,
        );
        let want = a16.matmul(&w16.t()?)?.to_dtype(DType::F32)?;
        assert!(max_diff(&got, &want)? < 1e-4);
        assert!(max_diff(&got, &exact)? > 1e-4, "bf16 must round");

        let acc0 = Tensor::randn(0f32, 1.0, (40, 13), &dev)?;
        let dy = Tensor::randn(0f32, 1.0, (9, 13), &dev)?;
        let (acc32, acc16) = (acc0.copy()?, acc0.copy()?);
        add_matmul_tn(&acc32, &a, &dy, ComputeDtype::F32)?;
        let plain = acc0.copy()?;
        add_matmul_tn::add_matmul_tn(&plain, &a, &dy)?;
        assert_eq!(max_diff(&acc32, &plain)?, 0.0);
        add_matmul_tn(&acc16, &a, &dy, ComputeDtype::Bf16)?;
        let dy16 = dy.to_dtype(DType::BF16)?.to_dtype(DType::F64)?;
        let want = (acc0.to_dtype(DType::F64)? + a16.t()?.matmul(&dy16)?)?;
        assert!(max_diff(&acc16, &want.to_dtype(DType::F32)?)? < 1e-4);
        assert!(max_diff(&acc16, &acc32)? > 1e-4, "bf16 must round");

        // The first contribution, written: the bits of adding into zeros.
        for dt in [ComputeDtype::F32, ComputeDtype::Bf16] {
            let zeros = Tensor::zeros((40, 13), DType::F32, &dev)?;
            add_matmul_tn(&zeros, &a, &dy, dt)?;
            let fresh = matmul_tn(&a, &dy, dt)?;
            assert!(fresh.is_contiguous());
            assert_eq!(bits(&fresh)?, bits(&zeros)?, "{dt}");
        }
        Ok(())
    }
}
