//! A bf16-operand, f32-accumulate matrix product for the CPU: both operands rounded to bf16
//! (nearest even) while they are packed (a bf16 operand, such as a frozen bf16 base's weight,
//! is packed from its bf16 values as they are), every product exact in f32, every sum in f32.
//! For the training update's large products under `trainer.compute_dtype: bf16`.
//!
//! Backends, chosen once at run time ([`backend`]), all over the same packed layout
//! ([`pack`]): AMX tiles (`tdpbf16ps`, via `asm!`) where the CPU and OS allow them, else
//! AVX-512 BF16 (`vdpbf16ps`), else a portable f32 loop. They differ only in the order of the
//! f32 sums (and AMX/AVX-512 BF16 flush denormal inputs and results to zero).
#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod driver;
mod fma_rows;
mod layout;
pub mod pack;
#[cfg(target_arch = "x86_64")]
mod pack_avx512;
mod portable;
mod scratch;

use candle_core::{bail, CpuStorage, DType, Device, InplaceOp1, Layout, Result, Storage, Tensor};
use layout::View;
use pack::{pack_a, pack_b_in, Buffer, Packed};
use std::sync::OnceLock;

/// Which microkernel runs the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// AMX tiles (`tdpbf16ps`): Sapphire Rapids and later, with the OS's permission.
    Amx,
    /// AVX-512 BF16 (`vdpbf16ps`).
    Avx512Bf16,
    /// Plain f32 arithmetic over the same bf16 operands: every CPU.
    Portable,
}

impl Backend {
    /// Every backend, fastest first.
    pub const ALL: [Backend; 3] = [Backend::Amx, Backend::Avx512Bf16, Backend::Portable];

    /// The fastest backend this machine runs (detected once).
    pub fn detect() -> Self {
        static B: OnceLock<Backend> = OnceLock::new();
        *B.get_or_init(|| {
            Self::ALL
                .into_iter()
                .find(|b| b.usable())
                .unwrap_or(Backend::Portable)
        })
    }

    /// Whether this CPU (and OS) can run the backend.
    pub fn usable(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Backend::Amx => amx::usable(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Bf16 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
            Backend::Portable => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// `self` where this machine runs it, else the next one down (AMX → AVX-512 BF16 →
    /// portable).
    pub fn or_fallback(self) -> Self {
        let from = Self::ALL.iter().position(|&b| b == self).unwrap_or(0);
        Self::ALL[from..]
            .iter()
            .copied()
            .find(|b| b.usable())
            .unwrap_or(Backend::Portable)
    }

    /// The backend's name: "amx", "avx512bf16" or "portable".
    pub fn name(self) -> &'static str {
        match self {
            Backend::Amx => "amx",
            Backend::Avx512Bf16 => "avx512bf16",
            Backend::Portable => "portable",
        }
    }
}

/// Whether `vdpbf16ps` issues at less than the FMA's rate in flops, taken to hold on every
/// Intel CPU: Intel's cores without AMX take two cycles for it where two FMAs issue per cycle,
/// while AMD's Zen 4 runs it at twice the f32 GEMM's rate (docs/performance.md). A wrong guess
/// costs speed only: the FMA sampling kernel gives the same sums.
pub fn vdpbf16ps_is_slow() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 0: the vendor string in EBX, EDX, ECX.
        let id = std::arch::x86_64::__cpuid(0);
        let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat();
        vendor == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the bf16 GEMM is slower than f32 on this machine: its backend is `vdpbf16ps` where
/// that runs at half the f32 FMA's flops ([`vdpbf16ps_is_slow`]; `comlrl bench matmul --dtype
/// bf16` measures both).
pub fn slower_than_f32() -> bool {
    Backend::detect() == Backend::Avx512Bf16 && vdpbf16ps_is_slow()
}

/// The name of the backend [`matmul`] and [`add_matmul_tn`] use on this machine.
pub fn backend() -> &'static str {
    Backend::detect().name()
}

/// `a · b` for a (m, k) and b (k, n), f32 (or bf16) CPU tensors with any 2-D strides: a new
/// contiguous f32 (m, n) = bf16(a) · bf16(b), summed in f32.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    matmul_with(Backend::detect(), a, b)
}

/// [`matmul`] with a chosen backend; an error if this machine cannot run it.
pub fn matmul_with(backend: Backend, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    check_usable(backend)?;
    let (m, k) = a.dims2()?;
    let (k2, n) = b.dims2()?;
    if k != k2 {
        bail!("bf16_gemm::matmul: a is ({m}, {k}) but b is ({k2}, {n}): inner sizes differ")
    }
    let pa = with_view(a, "a", |v| v.pack_a())?;
    let pb = with_view(b, "b", |v| v.pack_b(Buffer::Pool))?;
    Tensor::from_vec(product(backend, &pa, &pb), (m, n), &Device::Cpu)
}

/// A right operand (k, n) rounded and packed once, for many products with it
/// ([`matmul_packed`]): a weight that stays fixed over an update, so its packing (a pass over
/// all its f32 elements) is not paid per product.
#[derive(Debug, Clone)]
pub struct PackedB(Packed);

impl PackedB {
    /// Rows of the operand (the products' inner size).
    pub fn k(&self) -> usize {
        self.0.k
    }

    /// Columns of the operand (the products' output columns).
    pub fn n(&self) -> usize {
        self.0.len
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.0.data.len() * 2
    }

    /// A weight W (out, in), row-major f32, packed for `x · Wᵀ` like [`pack_weight`], but in a
    /// buffer of its own rather than the scratch pool's: a copy that outlives many products
    /// (the bf16 sampling weights).
    pub fn weight_rows(w: &[f32], shape: (usize, usize)) -> Self {
        PackedB(pack_weight_rows(w, shape, Buffer::Own(Vec::new())))
    }

    /// Packs a new W of the same shape over this one, in place (a refresh after a weight
    /// update: no fresh pages).
    pub fn refill_weight_rows(&mut self, w: &[f32], shape: (usize, usize)) {
        let buf = Buffer::Own(std::mem::take(&mut self.0.data));
        self.0 = pack_weight_rows(w, shape, buf);
    }

    /// x (m, k) row-major f32 · this operand: a new row-major (m, n), with `backend` (or the
    /// next one down where this machine does not run it).
    pub fn matmul_rows(&self, backend: Backend, x: &[f32], m: usize) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k(), "PackedB: x does not match (m, k)");
        let pa = pack_a(View::new(x, 0, (m, self.k()), (self.k(), 1)).expect("len checked above"));
        product(backend.or_fallback(), &pa, &self.0)
    }

    /// [`PackedB::matmul_rows`] with AVX-512F FMAs over the widened pairs (`fma_rows`): the
    /// AVX-512 BF16 backend's sums bit for bit (but for its flushed denormals), for CPUs whose
    /// `vdpbf16ps` is slower than two FMAs, and for AVX-512 CPUs without BF16; `None` where
    /// the CPU lacks AVX-512F.
    pub fn matmul_rows_fma(&self, x: &[f32], m: usize) -> Option<Vec<f32>> {
        assert_eq!(x.len(), m * self.k(), "PackedB: x does not match (m, k)");
        fma_rows::usable().then(|| fma_rows::matmul_rows(&self.0, x, m))
    }
}

/// Packs `b` (k, n), any 2-D strides, f32 or bf16, as the right operand of [`matmul_packed`].
pub fn pack_rhs(b: &Tensor) -> Result<PackedB> {
    b.dims2()?;
    Ok(PackedB(with_view(b, "b", |v| v.pack_b(Buffer::Pool))?))
}

/// Packs a weight `w` (out, in) for `x · wᵀ` ([`matmul_packed`]): [`pack_rhs`] of `w.t()`.
pub fn pack_weight(w: &Tensor) -> Result<PackedB> {
    pack_rhs(&w.t()?)
}

/// Hands the idle packing buffers kept for reuse back to the allocator (see `scratch`).
pub fn release_scratch() {
    scratch::release();
}

/// [`pack_rhs`] into a buffer of its own rather than the scratch pool's: a copy that serves
/// many products and, once dropped, should leave its memory to the allocator (for the
/// gradients that follow) instead of waiting idle in the pool.
pub fn pack_rhs_owned(b: &Tensor) -> Result<PackedB> {
    b.dims2()?;
    Ok(PackedB(with_view(b, "b", |v| {
        v.pack_b(Buffer::Own(Vec::new()))
    })?))
}

/// [`pack_weight`] into a buffer of its own (see [`pack_rhs_owned`]).
pub fn pack_weight_owned(w: &Tensor) -> Result<PackedB> {
    pack_rhs_owned(&w.t()?)
}

/// W (out, in), row-major f32, packed as the right operand of `x · Wᵀ` into `buf`.
fn pack_weight_rows(w: &[f32], (out, inp): (usize, usize), buf: Buffer) -> Packed {
    assert_eq!(w.len(), out * inp, "PackedB: data does not match its shape");
    let view = View::new(w, 0, (out, inp), (inp, 1)).expect("length checked above");
    pack_b_in(view.t(), true, buf)
}

/// `a · b` with `b` packed beforehand ([`pack_rhs`], [`pack_weight`]): the same result as
/// [`matmul`] of the unpacked operand.
pub fn matmul_packed(a: &Tensor, b: &PackedB) -> Result<Tensor> {
    matmul_packed_with(Backend::detect(), a, b)
}

/// [`matmul_packed`] with a chosen backend; an error if this machine cannot run it.
pub fn matmul_packed_with(backend: Backend, a: &Tensor, b: &PackedB) -> Result<Tensor> {
    check_usable(backend)?;
    let (m, k) = a.dims2()?;
    if k != b.k() {
        bail!(
            "bf16_gemm::matmul_packed: a is ({m}, {k}) but the packed b is ({}, {}): inner sizes differ",
            b.k(),
            b.n()
        )
    }
    let pa = with_view(a, "a", |v| v.pack_a())?;
    Tensor::from_vec(product(backend, &pa, &b.0), (m, b.n()), &Device::Cpu)
}

/// `acc += aᵀ · b` in place, with bf16(a) and bf16(b) and f32 sums: acc (m, n) a contiguous
/// f32 CPU tensor, a (k, m) and b (k, n) with any 2-D strides.
pub fn add_matmul_tn(acc: &Tensor, a: &Tensor, b: &Tensor) -> Result<()> {
    add_matmul_tn_with(Backend::detect(), acc, a, b)
}

/// [`add_matmul_tn`] with a chosen backend; an error if this machine cannot run it.
pub fn add_matmul_tn_with(backend: Backend, acc: &Tensor, a: &Tensor, b: &Tensor) -> Result<()> {
    check_usable(backend)?;
    let (m, n) = acc.dims2()?;
    let (k, m2) = a.dims2()?;
    let (k2, n2) = b.dims2()?;
    if (m, n, k) != (m2, n2, k2) {
        bail!("bf16_gemm::add_matmul_tn: ({m}, {n}) += ({k}, {m2})ᵀ · ({k2}, {n2}): shapes differ")
    }
    if acc.dtype() != DType::F32 || !acc.device().is_cpu() {
        bail!(
            "bf16_gemm::add_matmul_tn: the accumulator must be an f32 CPU tensor, not {:?} on {:?}",
            acc.dtype(),
            acc.device()
        )
    }
    let a = with_view(a, "a", |v| v.t().pack_a())?;
    let b = with_view(b, "b", |v| v.pack_b(Buffer::Pool))?;
    acc.inplace_op1(&AddPacked { backend, a, b })
}

/// A · B as a new row-major (m, n): written in place by the product (no zero-filled buffer
/// first, which also faulted each fresh page in with a write instead of a read-then-write:
/// `vec![0.0; n]` maps fresh pages to the kernel's shared zero page on the first read and
/// copies them on the first write, a TLB shootdown per page).
fn product(backend: Backend, a: &Packed, b: &Packed) -> Vec<f32> {
    let n = a.len * b.len;
    let mut c = Vec::with_capacity(n);
    driver::gemm_fresh(backend, a, b, &mut c.spare_capacity_mut()[..n]);
    // SAFETY: `gemm_fresh` wrote all n elements.
    unsafe { c.set_len(n) };
    c
}

fn check_usable(backend: Backend) -> Result<()> {
    if !backend.usable() {
        bail!(
            "bf16_gemm: the {} backend does not run on this machine (detected: {})",
            backend.name(),
            Backend::detect().name()
        )
    }
    Ok(())
}

/// A 2-D CPU operand's strided view, of its f32 or bf16 elements as stored.
#[derive(Clone, Copy)]
enum Operand<'a> {
    F32(View<'a, f32>),
    Bf16(View<'a, half::bf16>),
}

impl Operand<'_> {
    /// The transposed view (no copy).
    fn t(self) -> Self {
        match self {
            Operand::F32(v) => Operand::F32(v.t()),
            Operand::Bf16(v) => Operand::Bf16(v.t()),
        }
    }

    /// Packed as the left operand ([`pack_a`]).
    fn pack_a(self) -> Packed {
        match self {
            Operand::F32(v) => pack_a(v),
            Operand::Bf16(v) => pack_a(v),
        }
    }

    /// Packed as the right operand into `buf` ([`pack_b_in`]).
    fn pack_b(self, buf: Buffer) -> Packed {
        match self {
            Operand::F32(v) => pack_b_in(v, true, buf),
            Operand::Bf16(v) => pack_b_in(v, true, buf),
        }
    }
}

/// Runs `f` on a strided view of `t`'s elements as stored: a bf16 operand (a frozen bf16
/// base's weight, multiplied for every pass of an update) is packed from its bf16 values
/// directly, which gives the panels its exact f32 widening would, with no f32 copy.
fn with_view<R>(t: &Tensor, what: &str, f: impl FnOnce(Operand<'_>) -> R) -> Result<R> {
    if !t.device().is_cpu() {
        bail!(
            "bf16_gemm: {what} must be a CPU tensor, not on {:?}",
            t.device()
        )
    }
    let (st, l) = t.storage_and_layout();
    let Storage::Cpu(cs) = &*st else {
        bail!("bf16_gemm: {what} must be a CPU tensor")
    };
    let dims = l.shape().dims2()?;
    let (s, off) = (l.stride(), l.start_offset());
    let op = match t.dtype() {
        DType::F32 => View::new(cs.as_slice::<f32>()?, off, dims, (s[0], s[1])).map(Operand::F32),
        DType::BF16 => {
            View::new(cs.as_slice::<half::bf16>()?, off, dims, (s[0], s[1])).map(Operand::Bf16)
        }
        d => bail!("bf16_gemm: {what} must be f32 or bf16, not {d:?}"),
    };
    let Some(op) = op else {
        bail!("bf16_gemm: {what}'s layout {l:?} reaches past its storage")
    };
    Ok(f(op))
}

/// `acc += A · B` from packed operands, as an in-place op on the accumulator's storage.
struct AddPacked {
    backend: Backend,
    a: Packed,
    b: Packed,
}

impl InplaceOp1 for AddPacked {
    fn name(&self) -> &'static str {
        "bf16-add-matmul-tn"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        let c = crate::model::kernels::cpu_slices::f32s_mut(s, l, self.name())?;
        driver::gemm(self.backend, &self.a, &self.b, c);
        Ok(())
    }
}
