//! The bf16 sampling product `y = x · Wᵀ` with W held as bf16 and f32 accumulation: decode
//! steps stream every weight once per token, so halving the bytes per weight halves their
//! floor. x is rounded to bf16 as well (both operands bf16, products exact in f32, sums in f32:
//! what `vdpbf16ps` computes). Two layouts, chosen by the CPU ([`Layout::detect`]): W's rows
//! (padded to 32) for the AMX row kernel and the portable loop, or the bf16 GEMM's packed panels
//! of Wᵀ where the CPU has AVX-512 without AMX (see [`Layout`] for the measurements), read by
//! `vdpbf16ps` or, where that is slow, by FMAs over the widened pairs ([`Kernel`]).
use super::amx;
use super::bf16_gemm::{Backend, PackedB};
use super::row_blocking;
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
    Rows { data: Vec<bf16>, stride: usize },
    Panels(PackedB),
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

    /// Overwrites the values with a new (rows, cols) f32 matrix of the same shape (after a
    /// weight update); false, untouched, when the shape differs.
    pub fn refill(&mut self, w: &[f32], rows: usize, cols: usize) -> bool {
        if (rows, cols) != (self.rows, self.cols) || w.len() != rows * cols {
            return false;
        }
        match &mut self.stored {
            Stored::Rows { data, stride } => round_rows(w, cols, data, *stride),
            Stored::Panels(p) => p.refill_weight_rows(w, (rows, cols)),
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

    /// The layout the values are held in.
    pub fn layout(&self) -> Layout {
        match self.stored {
            Stored::Rows { .. } => Layout::Rows,
            Stored::Panels(_) => Layout::Panels,
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        match &self.stored {
            Stored::Rows { data, .. } => data.len() * 2,
            Stored::Panels(p) => p.bytes(),
        }
    }

    /// y (m, rows) = x (m, cols) · Wᵀ, with the CPU's fastest kernel.
    pub fn matmul_t(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_t_with(Kernel::detect(), x, m)
    }

    /// [`Bf16Matrix::matmul_t`] with a chosen kernel ([`Kernel::Avx512Bf16`] falls back to the
    /// portable one on CPUs without it); over panels, the bf16 GEMM backend of the same name.
    pub fn matmul_t_with(&self, kernel: Kernel, x: &[f32], m: usize) -> Vec<f32> {
        assert_eq!(
            x.len(),
            m * self.cols,
            "Bf16Matrix: x does not match (m, cols)"
        );
        match &self.stored {
            Stored::Rows { data, stride } => self.rows_matmul_t(kernel, data, *stride, x, m),
            Stored::Panels(p) => {
                let backend = match kernel {
                    Kernel::Amx => Backend::Amx,
                    Kernel::Avx512Bf16 => Backend::Avx512Bf16,
                    Kernel::Avx512Fma => match p.matmul_rows_fma(x, m) {
                        Some(y) => return y,
                        None => Backend::Portable,
                    },
                    Kernel::Portable => Backend::Portable,
                };
                p.matmul_rows(backend, x, m)
            }
        }
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

/// The rows of a row-major f32 matrix with `cols` columns, rounded to bf16 into rows of `stride`
/// (zero-padded).
fn round_rows(src: &[f32], cols: usize, dst: &mut [bf16], stride: usize) {
    dst.par_chunks_mut(stride)
        .zip(src.par_chunks(cols.max(1)))
        .for_each(|(d, s)| round_row(s, d));
}

/// out[j * m + i] = Σ_k w[j][k] · x[i][k] for the `nr` rows of `w` (stride `sd`).
fn portable_rows(w: &[bf16], x: &[bf16], sd: usize, nr: usize, m: usize, out: &mut [f32]) {
    let mut wf = vec![0f32; sd];
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    for j in 0..nr {
        for (d, s) in wf.iter_mut().zip(&w[j * sd..(j + 1) * sd]) {
            *d = s.to_f32();
        }
        for i in 0..m {
            let xr = &xf[i * sd..(i + 1) * sd];
            out[j * m + i] = wf.iter().zip(xr).map(|(a, b)| a * b).sum();
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
        let y = mat.matmul_t_with(kernel, &x, m);
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
        let b = rows.matmul_t_with(Kernel::Portable, &x, m);
        for layout in [Layout::Rows, Layout::Panels] {
            let mat = Bf16Matrix::from_f32_in(layout, &w, n, k);
            for kernel in [Kernel::Amx, Kernel::Avx512Bf16, Kernel::Avx512Fma] {
                let a = mat.matmul_t_with(kernel, &x, m);
                let worst = a
                    .iter()
                    .zip(&b)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-3, "{layout:?} {kernel:?}: {worst}");
            }
        }
        // Half the f32 bytes (rows padded to 32 elements of K, panels to 32 rows of W).
        assert_eq!(rows.bytes(), n * 896 * 2);
        let panels = Bf16Matrix::from_f32_in(Layout::Panels, &w, n, k);
        assert_eq!(panels.bytes(), n.div_ceil(32) * 32 * 896 * 2);
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
            let a = mat.matmul_t_with(Kernel::Avx512Fma, &x, m);
            let b = mat.matmul_t_with(Kernel::Avx512Bf16, &x, m);
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
            assert_eq!(mat.matmul_t(&x, m), fresh.matmul_t(&x, m), "{layout:?}");
            assert!(!mat.refill(&w1[..k], 1, k), "{layout:?}");
            assert_eq!(mat.layout(), layout);
        }
    }
}
