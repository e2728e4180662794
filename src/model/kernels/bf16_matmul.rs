//! The bf16 sampling product `y = x · Wᵀ` with W held as bf16 and f32 accumulation: decode
//! steps stream every weight once per token, so halving the bytes per weight halves their
//! floor. x is rounded to bf16 as well (both operands bf16, products exact in f32, sums in f32:
//! what `vdpbf16ps` computes). Two layouts, chosen by the CPU ([`Layout::detect`]): W's rows
//! (padded to 32) for the AMX row kernel and the portable loop, or the bf16 GEMM's packed panels
//! of Wᵀ where the CPU has AVX-512 without AMX (see [`Layout`] for the measurements), read by
//! `vdpbf16ps` or, where that is slow, by FMAs over the widened pairs ([`Kernel`]).
//! A frozen base already held in bf16 (`agents.base_dtype: bf16`) is read in place
//! ([`Bf16Matrix::in_place`]): its (out, in) storage is the rows layout when `in` is a multiple
//! of 32, so nothing is copied.
use super::amx;
use super::bf16_gemm::{Backend, PackedB};
use super::cpu_slices::slice;
use super::row_blocking;
use candle_core::{DType, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

/// Elements of K handled per `vdpbf16ps` (32 bf16 = 16 pairs).
const KB: usize = 32;

/// A weight matrix (out, in) in bf16, in one of the [`Layout`]s.
#[derive(Debug, Clone)]
pub struct Bf16Matrix {
    rows: usize,
    cols: usize,
    stored: Stored,
}

/// How a [`Bf16Matrix`] lays out its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// W's rows, each zero-padded to a multiple of 32: one `vdpbf16ps` dot product per (W row,
    /// x row) pair, reduced across lanes at the end; AMX tiles of 16 rows.
    Rows,
    /// The bf16 GEMM's panels of Wᵀ (16 output columns of VNNI pairs, k-step after k-step): x's
    /// pairs broadcast against whole columns, no lane reductions, and each panel one
    /// contiguous stream (`comlrl bench matmul --decode` compares the two layouts).
    Panels,
}

impl Layout {
    /// Panels where the CPU has AVX-512 without AMX (the FMA kernel reads only panels, and
    /// the panels avoid the lane reductions); rows with AMX (its tiles take W's rows) and on
    /// CPUs without AVX-512.
    pub fn detect() -> Self {
        match Kernel::detect() {
            Kernel::Avx512Bf16 | Kernel::Avx512Fma => Layout::Panels,
            Kernel::Amx | Kernel::Portable => Layout::Rows,
        }
    }
}

#[derive(Debug, Clone)]
enum Stored {
    Rows {
        data: Vec<bf16>,
        stride: usize,
    },
    Panels(PackedB),
    /// The rows layout in a bf16 tensor's own storage (row stride = `cols`, a multiple of 32):
    /// the tensor keeps the storage alive; nothing is copied.
    InPlace(Tensor),
}

/// Which implementation [`Bf16Matrix::matmul_t`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AMX tiles (`tdpbf16ps`) for whole blocks of 16 W rows, `vdpbf16ps` for the rest;
    /// chosen at run time where the CPU and the OS allow it.
    Amx,
    /// AVX-512 BF16 (`vdpbf16ps`), chosen at run time where the CPU has it and issues it at
    /// the FMA's rate.
    Avx512Bf16,
    /// AVX-512F FMAs over the panels' pairs widened to f32 (`bf16_gemm::fma_rows`): the
    /// `vdpbf16ps` kernel's sums bit for bit (but for its flushed denormals), for CPUs that
    /// issue `vdpbf16ps` at half the FMA's rate (Intel's cores without AMX) and AVX-512 CPUs
    /// without BF16. Over the rows layout it is the `vdpbf16ps` kernel.
    Avx512Fma,
    /// Portable f32 loop over the same bf16 operands.
    Portable,
}

impl Kernel {
    /// Every kernel, each one's fallback after it.
    const ALL: [Kernel; 4] = [
        Kernel::Amx,
        Kernel::Avx512Bf16,
        Kernel::Avx512Fma,
        Kernel::Portable,
    ];

    /// The fastest kernel this CPU runs (detected once).
    pub fn detect() -> Self {
        static K: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *K.get_or_init(|| {
            if Kernel::Amx.usable() {
                Kernel::Amx
            } else if Kernel::Avx512Bf16.usable() && !super::bf16_gemm::vdpbf16ps_is_slow() {
                Kernel::Avx512Bf16
            } else if Kernel::Avx512Fma.usable() {
                Kernel::Avx512Fma
            } else {
                Kernel::Portable
            }
        })
    }

    /// Whether this CPU (and OS) runs the kernel.
    pub fn usable(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = std::arch::is_x86_feature_detected!("avx512f");
            let bf16 = avx512 && std::arch::is_x86_feature_detected!("avx512bf16");
            match self {
                Kernel::Amx => bf16 && amx::available(),
                Kernel::Avx512Bf16 => bf16,
                Kernel::Avx512Fma => avx512,
                Kernel::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Kernel::Portable
        }
    }

    /// `self` where this CPU runs it, else the next one down (AMX → AVX-512 BF16 → AVX-512
    /// FMA → portable).
    fn or_fallback(self) -> Self {
        let from = Self::ALL.iter().position(|&k| k == self).unwrap_or(0);
        Self::ALL[from..]
            .iter()
            .copied()
            .find(|k| k.usable())
            .unwrap_or(Kernel::Portable)
    }
}

fn padded(cols: usize) -> usize {
    cols.div_ceil(KB) * KB
}

/// `src` rounded to bf16 (nearest even) into `dst`, the rest of `dst` zero.
fn round_row(src: &[f32], dst: &mut [bf16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16::from_f32(s);
    }
    dst[src.len()..].fill(bf16::ZERO);
}

impl Bf16Matrix {
    /// Rounds a row-major (rows, cols) f32 matrix to bf16, in this CPU's [`Layout`].
    pub fn from_f32(w: &[f32], rows: usize, cols: usize) -> Self {
        Self::from_f32_in(Layout::detect(), w, rows, cols)
    }

    /// [`Bf16Matrix::from_f32`] in a chosen layout.
    pub fn from_f32_in(layout: Layout, w: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            w.len(),
            rows * cols,
            "Bf16Matrix: data does not match its shape"
        );
        let stored = match layout {
            Layout::Rows => {
                let stride = padded(cols);
                let mut data = vec![bf16::ZERO; rows * stride];
                round_rows(w, cols, &mut data, stride);
                Stored::Rows { data, stride }
            }
            Layout::Panels => Stored::Panels(PackedB::weight_rows(w, (rows, cols))),
        };
        Self { rows, cols, stored }
    }

    /// The rows layout over `w`'s own bf16 storage, without a copy: a frozen base's weight
    /// (out, in), never written while it is read. `None` where `w` is not a contiguous 2-D bf16
    /// CPU tensor or `in` is not a multiple of 32 (rows padded to 32 would need a copy; the
    /// caller keeps its own product there). Whatever [`Layout::detect`] prefers: on CPUs that
    /// prefer panels (AVX-512 without AMX) the rows kernels run (`vdpbf16ps`, or the portable
    /// loop without AVX-512 BF16), since panels would be a second copy of the base.
    pub fn in_place(w: &Tensor) -> Option<Self> {
        let (rows, cols) = w.dims2().ok()?;
        let usable = w.dtype() == DType::BF16
            && w.device().is_cpu()
            && cols.is_multiple_of(KB)
            && w.layout().contiguous_offsets().is_some();
        usable.then(|| Self {
            rows,
            cols,
            stored: Stored::InPlace(w.clone()),
        })
    }

    /// Overwrites the values with a new (rows, cols) f32 matrix of the same shape (after a
    /// weight update); false, untouched, when the shape differs or the values are a frozen
    /// tensor's, read in place.
    pub fn refill(&mut self, w: &[f32], rows: usize, cols: usize) -> bool {
        if (rows, cols) != (self.rows, self.cols) || w.len() != rows * cols {
            return false;
        }
        match &mut self.stored {
            Stored::Rows { data, stride } => round_rows(w, cols, data, *stride),
            Stored::Panels(p) => p.refill_weight_rows(w, (rows, cols)),
            Stored::InPlace(_) => return false,
        }
        true
    }

    /// Output features (rows of W).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (columns of W).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The layout the values are held in (a frozen tensor read in place is in rows).
    pub fn layout(&self) -> Layout {
        match self.stored {
            Stored::Rows { .. } | Stored::InPlace(_) => Layout::Rows,
            Stored::Panels(_) => Layout::Panels,
        }
    }

    /// Bytes this matrix allocated for its values: none for a tensor read in place
    /// ([`Bf16Matrix::in_place`]), whose storage is the tensor's.
    pub fn owned_bytes(&self) -> usize {
        match &self.stored {
            Stored::Rows { data, .. } => data.len() * 2,
            Stored::Panels(p) => p.bytes(),
            Stored::InPlace(_) => 0,
        }
    }

    /// Whether the values are a tensor's storage read in place ([`Bf16Matrix::in_place`]).
    pub fn is_in_place(&self) -> bool {
        matches!(self.stored, Stored::InPlace(_))
    }

    /// Whether the values are `w`'s own bf16 storage, read in place (the same memory, not an
    /// equal copy).
    pub fn reads_in_place(&self, w: &Tensor) -> bool {
        match &self.stored {
            Stored::InPlace(t) => first_value(t).is_some() && first_value(t) == first_value(w),
            _ => false,
        }
    }

    /// y (m, rows) = x (m, cols) · Wᵀ, with the CPU's fastest kernel.
    pub fn matmul_t(&self, x: &[f32], m: usize) -> candle_core::Result<Vec<f32>> {
        self.matmul_t_with(Kernel::detect(), x, m)
    }

    /// [`Bf16Matrix::matmul_t`] with a chosen kernel ([`Kernel::Avx512Bf16`] falls back to the
    /// portable one on CPUs without it); over panels, the bf16 GEMM backend of the same name.
    /// Fails where x does not hold m rows of `cols`.
    pub fn matmul_t_with(
        &self,
        kernel: Kernel,
        x: &[f32],
        m: usize,
    ) -> candle_core::Result<Vec<f32>> {
        if x.len() != m * self.cols {
            candle_core::bail!(
                "bf16 product: x has {} values, not {m} rows of {}",
                x.len(),
                self.cols
            )
        }
        Ok(match &self.stored {
            Stored::Rows { data, stride } => self.rows_matmul_t(kernel, data, *stride, x, m),
            Stored::InPlace(w) => {
                let (st, l) = w.storage_and_layout();
                let Storage::Cpu(c) = &*st else {
                    candle_core::bail!(
                        "bf16 product: a frozen base read in place must be on the CPU"
                    )
                };
                let data = slice(c.as_slice::<bf16>()?, l, "bf16 product")?;
                self.rows_matmul_t(kernel, data, self.cols, x, m)
            }
            Stored::Panels(p) => {
                let backend = match kernel {
                    Kernel::Amx => Backend::Amx,
                    Kernel::Avx512Bf16 => Backend::Avx512Bf16,
                    Kernel::Avx512Fma => match p.matmul_rows_fma(x, m) {
                        Some(y) => return Ok(y),
                        None => Backend::Portable,
                    },
                    Kernel::Portable => Backend::Portable,
                };
                p.matmul_rows(backend, x, m)
            }
        })
    }

    /// [`Bf16Matrix::matmul_t_with`] over the rows layout (`data`, row stride `sd`).
    fn rows_matmul_t(
        &self,
        kernel: Kernel,
        data: &[bf16],
        sd: usize,
        x: &[f32],
        m: usize,
    ) -> Vec<f32> {
        let kernel = match kernel {
            Kernel::Avx512Fma => Kernel::Avx512Bf16,
            k => k,
        }
        .or_fallback();
        let n = self.rows;
        let mut xb = vec![bf16::ZERO; m * sd];
        xb.chunks_mut(sd)
            .zip(x.chunks(self.cols.max(1)))
            .for_each(|(d, s)| round_row(s, d));
        let packed = (kernel == Kernel::Amx).then(|| amx::PackedX::new(&xb, m, sd));
        // Tasks of whole W rows: each computes its block of yᵀ (rows, m) locally and writes it
        // transposed into its own columns of y (m, n).
        row_blocking::par_row_tasks(n, m, sd, |r0, nr, out| {
            let w = &data[r0 * sd..(r0 + nr) * sd];
            match (kernel, &packed) {
                #[cfg(target_arch = "x86_64")]
                (Kernel::Amx, Some(px)) => {
                    let tiled = nr / amx::TILE_ROWS * amx::TILE_ROWS;
                    let (head, tail) = out.split_at_mut(tiled * m);
                    // SAFETY: `Amx` survives `or_fallback` only where `amx::available()`
                    // and the avx512f/avx512bf16 features hold; w has `nr` rows of `sd`
                    // (a multiple of 32) and `head` tiled·m values; x was packed with `sd`.
                    unsafe {
                        amx::rows_xt(w, px, sd, tiled, head);
                        avx512::block_rows(&w[tiled * sd..], &xb, sd, nr - tiled, m, tail)
                    }
                }
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Avx512Bf16` is only used after `Kernel::detect` found the
                // avx512f and avx512bf16 features on this CPU (checked just above).
                (Kernel::Avx512Bf16, _) => unsafe { avx512::block_rows(w, &xb, sd, nr, m, out) },
                _ => portable_rows(w, &xb, sd, nr, m, out),
            }
        })
    }
}

/// The address of a contiguous bf16 CPU tensor's first value (which storage it reads).
fn first_value(t: &Tensor) -> Option<*const bf16> {
    let (st, l) = t.storage_and_layout();
    let Storage::Cpu(c) = &*st else { return None };
    let v = slice(c.as_slice::<bf16>().ok()?, l, "bf16 storage").ok()?;
    Some(v.as_ptr())
}

/// The rows of a row-major f32 matrix with `cols` columns, rounded to bf16 into rows of `stride`
/// (zero-padded).
fn round_rows(src: &[f32], cols: usize, dst: &mut [bf16], stride: usize) {
    dst.par_chunks_mut(stride)
        .zip(src.par_chunks(cols.max(1)))
        .for_each(|(d, s)| round_row(s, d));
}

/// out[j * m + i] = Σ_k w[j][k] · x[i][k] for the `nr` rows of `w` (stride `sd`), each W row
/// widened once and summed in eight lanes (`bf16_weight::dot`, which vectorises): a frozen bf16
/// base read in place runs this on CPUs without AVX-512 BF16, and must not be slower there than
/// the widening decode it replaces.
fn portable_rows(w: &[bf16], x: &[bf16], sd: usize, nr: usize, m: usize, out: &mut [f32]) {
    let mut wf = vec![0f32; sd];
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    for j in 0..nr {
        for (d, s) in wf.iter_mut().zip(&w[j * sd..(j + 1) * sd]) {
            *d = s.to_f32();
        }
        for i in 0..m {
            let xr = &xf[i * sd..(i + 1) * sd];
            out[j * m + i] = super::bf16_weight::dot(&wf, xr);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(test)]
mod tests {
    use super::*;

    /// f64 reference of x · Wᵀ over the bf16-rounded operands.
    fn reference(w: &[f32], x: &[f32], n: usize, k: usize, m: usize) -> Vec<f64> {
        let r = |v: f32| bf16::from_f32(v).to_f32() as f64;
        let mut y = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                y[i * n + j] = (0..k).map(|p| r(x[i * k + p]) * r(w[j * k + p])).sum();
            }
        }
        y
    }

    fn data(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2654435761).wrapping_add(seed * 97);
                ((h >> 8) % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn check(layout: Layout, kernel: Kernel, n: usize, k: usize, m: usize) {
        let (w, x) = (data(n * k, 1), data(m * k, 2));
        let mat = Bf16Matrix::from_f32_in(layout, &w, n, k);
        let y = mat.matmul_t_with(kernel, &x, m).unwrap();
        let want = reference(&w, &x, n, k, m);
        for (a, b) in y.iter().zip(&want) {
            // Exact products, f32 sums of ≤ k terms of magnitude ≤ 1.
            assert!(
                (*a as f64 - b).abs() <= 1e-6 * k as f64,
                "{layout:?} {kernel:?} n={n} k={k} m={m}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn kernels_match_the_reference_on_odd_shapes() {
        for layout in [Layout::Rows, Layout::Panels] {
            for kernel in Kernel::ALL {
                if kernel.or_fallback() != kernel {
                    println!("skipped {kernel:?}: this CPU (or OS) does not run it");
                    continue;
                }
                for (n, k, m) in [
                    (16, 32, 1),
                    (64, 64, 16),
                    (80, 96, 17),
                    (200, 130, 40),
                    (1, 1, 1),
                    (7, 33, 5),
                    (5, 31, 9),
                    (130, 96, 3),
                    (67, 65, 17),
                    (4, 32, 4),
                    (9, 200, 2),
                ] {
                    check(layout, kernel, n, k, m);
                }
            }
        }
    }

    #[test]
    fn fast_and_portable_kernels_agree() {
        let (n, k, m) = (300, 896, 16);
        let (w, x) = (data(n * k, 3), data(m * k, 4));
        let rows = Bf16Matrix::from_f32_in(Layout::Rows, &w, n, k);
        let b = rows.matmul_t_with(Kernel::Portable, &x, m).unwrap();
        for layout in [Layout::Rows, Layout::Panels] {
            let mat = Bf16Matrix::from_f32_in(layout, &w, n, k);
            for kernel in [Kernel::Amx, Kernel::Avx512Bf16, Kernel::Avx512Fma] {
                let a = mat.matmul_t_with(kernel, &x, m).unwrap();
                let worst = a
                    .iter()
                    .zip(&b)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-3, "{layout:?} {kernel:?}: {worst}");
            }
        }
        // Half the f32 bytes (rows padded to 32 elements of K, panels to 32 rows of W).
        assert_eq!(rows.owned_bytes(), n * 896 * 2);
        let panels = Bf16Matrix::from_f32_in(Layout::Panels, &w, n, k);
        assert_eq!(panels.owned_bytes(), n.div_ceil(32) * 32 * 896 * 2);
    }

    /// The FMA kernel adds what `vdpbf16ps` adds, in its order: the same sums bit for bit, over
    /// several row blocks and K chunks (k > 2048).
    #[test]
    fn fma_and_vdpbf16ps_kernels_give_the_same_bits() {
        if !Kernel::Avx512Bf16.usable() {
            println!("skipped: this CPU has no AVX-512 BF16 to compare with");
            return;
        }
        for (n, k, m) in [
            (48, 4864, 16),
            (67, 96, 17),
            (130, 2100, 40),
            (33, 70, 1),
            (20, 33, 3),
        ] {
            let (w, x) = (data(n * k, 8), data(m * k, 9));
            let mat = Bf16Matrix::from_f32_in(Layout::Panels, &w, n, k);
            let a = mat.matmul_t_with(Kernel::Avx512Fma, &x, m).unwrap();
            let b = mat.matmul_t_with(Kernel::Avx512Bf16, &x, m).unwrap();
            let differ = a
                .iter()
                .zip(&b)
                .filter(|(p, q)| p.to_bits() != q.to_bits())
                .count();
            assert_eq!(
                differ,
                0,
                "n={n} k={k} m={m}: {differ} of {} sums differ",
                a.len()
            );
        }
    }

    /// A refill after a weight update gives the new weights' product, in either layout, and
    /// refuses another shape.
    #[test]
    fn a_refill_replaces_the_values() {
        let (n, k, m) = (70, 100, 3);
        let (w0, w1, x) = (data(n * k, 5), data(n * k, 6), data(m * k, 7));
        for layout in [Layout::Rows, Layout::Panels] {
            let mut mat = Bf16Matrix::from_f32_in(layout, &w0, n, k);
            assert!(mat.refill(&w1, n, k));
            let fresh = Bf16Matrix::from_f32_in(layout, &w1, n, k);
            assert_eq!(
                mat.matmul_t(&x, m).unwrap(),
                fresh.matmul_t(&x, m).unwrap(),
                "{layout:?}"
            );
            assert!(!mat.refill(&w1[..k], 1, k), "{layout:?}");
            assert_eq!(mat.layout(), layout);
        }
    }

    /// A bf16 tensor read in place gives the bits of a rows-layout copy of the same values,
    /// kernel for kernel, at every decode row count 1..=32 and a prefill's 40, with no bytes of
    /// its own; also from a view that starts inside its storage. Where `in` is not a multiple of
    /// 32 it is refused (the caller keeps its widening product).
    #[test]
    fn a_tensor_read_in_place_equals_its_rows_copy() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        for (n, k) in [(48, 32), (70, 96), (130, 896), (17, 160)] {
            let w =
                Tensor::from_vec(data((n + 1) * k, 11), (n + 1, k), &dev)?.to_dtype(DType::BF16)?;
            // A view from row 1: contiguous, its first value inside the storage.
            let view = w.narrow(0, 1, n)?;
            for t in [w.narrow(0, 0, n)?, view] {
                let Some(mat) = Bf16Matrix::in_place(&t) else {
                    panic!("{n}x{k}: not read in place")
                };
                assert!(mat.reads_in_place(&t) && mat.owned_bytes() == 0);
                assert_eq!((mat.rows(), mat.cols(), mat.layout()), (n, k, Layout::Rows));
                let wf = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                let copy = Bf16Matrix::from_f32_in(Layout::Rows, &wf, n, k);
                assert!(!copy.reads_in_place(&t));
                for kernel in [Kernel::detect(), Kernel::Portable] {
                    for m in (1..=32).chain([40]) {
                        let x = data(m * k, m as u32);
                        let (a, b) = (
                            mat.matmul_t_with(kernel, &x, m)?,
                            copy.matmul_t_with(kernel, &x, m)?,
                        );
                        let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
                        assert!(same, "{kernel:?} n={n} k={k} m={m}");
                    }
                }
            }
        }
        for (n, k) in [(16, 40), (5, 31), (9, 200)] {
            let w = Tensor::from_vec(data(n * k, 12), (n, k), &dev)?.to_dtype(DType::BF16)?;
            assert!(Bf16Matrix::in_place(&w).is_none(), "{n}x{k}");
        }
        // Not bf16, or not contiguous: refused too.
        let w = Tensor::from_vec(data(64 * 32, 13), (64, 32), &dev)?;
        assert!(Bf16Matrix::in_place(&w).is_none());
        assert!(Bf16Matrix::in_place(&w.to_dtype(DType::BF16)?.t()?).is_none());
        Ok(())
    }
}
