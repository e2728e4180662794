//! f32 sampling products `y = x · Wᵀ` for a few rows of x against a copy of W packed in
//! panels: 16 output rows of W side by side, k after k (`[k][16]`, one 64-byte line a k), so
//! a panel streams from memory in order and each line feeds 16 FMAs per row of x, x's value
//! broadcast, with no lane reductions: it streams the weights faster than `f32_decode`'s row
//! tiles, which reduce across lanes (`comlrl bench matmul --decode` compares them). Each
//! output is one running sum over k in order, whatever the other rows: a row samples the same
//! tokens alone or batched with other prompts' rows.
use super::panel_tasks::{par_panel_tasks, Columns};
use rayon::prelude::*;

/// Output rows of W per panel (one AVX-512 vector of f32).
const PANEL: usize = 16;
/// Rows of x per register block (one accumulator each).
const MB: usize = 16;
/// Panels per parallel task.
const TASK_PANELS: usize = 4;

/// Whether this CPU runs the fast kernel: AVX-512F, as `f32_decode`'s; elsewhere a plain loop
/// gives the same sums, slowly.
pub use super::f32_decode::usable;

/// W (rows = out, cols = in) in panels of [`PANEL`] rows (the last zero-padded).
#[derive(Debug)]
pub struct F32Panels {
    data: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl F32Panels {
    /// Packs the row-major `w` (rows × cols).
    pub fn from_f32(w: &[f32], rows: usize, cols: usize) -> Self {
        let mut p = Self {
            data: vec![0f32; rows.div_ceil(PANEL) * PANEL * cols],
            rows,
            cols,
        };
        p.pack(w);
        p
    }

    /// Repacks new values of the same shape in place (after an optimizer step); false (and
    /// nothing changed) when the shape differs.
    pub fn refill(&mut self, w: &[f32], rows: usize, cols: usize) -> bool {
        if (rows, cols) != (self.rows, self.cols) {
            return false;
        }
        self.pack(w);
        true
    }

    /// Output features (W's rows).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (W's columns).
    pub fn cols(&self) -> usize {
        self.cols
    }

    fn pack(&mut self, w: &[f32]) {
        let (rows, cols) = (self.rows, self.cols);
        assert_eq!(
            w.len(),
            rows * cols,
            "f32 panels: W does not match its shape"
        );
        self.data
            .par_chunks_mut(PANEL * cols.max(1))
            .enumerate()
            .for_each(|(p, panel)| {
                for (j, src) in w
                    .chunks(cols.max(1))
                    .skip(p * PANEL)
                    .take(PANEL)
                    .enumerate()
                {
                    for (k, &v) in src.iter().enumerate() {
                        panel[k * PANEL + j] = v;
                    }
                }
            });
    }

    /// y (m, rows) = x (m, cols) · Wᵀ, row-major.
    pub fn matmul_t(&self, x: &[f32], m: usize) -> Vec<f32> {
        let (n, k) = (self.rows, self.cols);
        assert_eq!(x.len(), m * k, "f32 panels: x does not match (m, k)");
        let panels = n.div_ceil(PANEL);
        // x by blocks of 16 rows, transposed: [k][row], zero rows past m.
        let blocks: Vec<Vec<f32>> = x
            .chunks(MB * k.max(1))
            .map(|b| {
                let mut xt = vec![0f32; k * MB];
                for (r, row) in b.chunks(k.max(1)).enumerate() {
                    for (kk, &v) in row.iter().enumerate() {
                        xt[kk * MB + r] = v;
                    }
                }
                xt
            })
            .collect();
        let fast = usable();
        let task = |t: usize, out: &Columns| {
            let mut sums = [0f32; MB * PANEL];
            for (blk, xt) in blocks.iter().enumerate() {
                let rows = (m - blk * MB).min(MB);
                for p in t * TASK_PANELS..((t + 1) * TASK_PANELS).min(panels) {
                    let w = &self.data[p * PANEL * k..(p + 1) * PANEL * k];
                    if fast {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: AVX-512F is present (`usable`); `w` holds k × 16 values and
                        // `xt` k × 16 (built above).
                        unsafe {
                            avx512::panel(w, xt, k, &mut sums)
                        };
                    } else {
                        portable(w, xt, k, &mut sums);
                    }
                    let cols = (n - p * PANEL).min(PANEL);
                    for r in 0..rows {
                        // SAFETY: columns p·16 .. + cols are this task's panels; no other task
                        // writes them.
                        unsafe {
                            out.write((blk * MB + r) * n + p * PANEL, &sums[r * PANEL..][..cols])
                        };
                    }
                }
            }
        };
        par_panel_tasks(m, n, k, panels.div_ceil(TASK_PANELS), task)
    }
}

/// `sums[r * 16 + j]` = Σ_k xt[k][r] · w[k][j], k in order (the AVX-512 kernel's sums).
fn portable(w: &[f32], xt: &[f32], k: usize, sums: &mut [f32; MB * PANEL]) {
    sums.fill(0.0);
    for kk in 0..k {
        for r in 0..MB {
            let xv = xt[kk * MB + r];
            for j in 0..PANEL {
                sums[r * PANEL + j] = xv.mul_add(w[kk * PANEL + j], sums[r * PANEL + j]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MB, PANEL};
    use std::arch::x86_64::*;

    /// k-steps (64-byte lines of the panel) prefetched ahead of the one being read: far enough
    /// to cover the memory latency of a cold stream. Prefetched into L2 (`T1`), not L1, where
    /// the lines would evict the x rows in use.
    const AHEAD: usize = 64;

    /// `sums[r * 16 + j]` = Σ_k xt[k][r] · w[k][j] for the 16 rows of the block.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `w` and `xt` hold at least k × 16 values each.
    #[target_feature(enable = "avx512f")]
    // Indexed loops over a const-size register array: unrolled, the accumulators stay in zmm.
    #[allow(clippy::needless_range_loop)]
    pub(super) unsafe fn panel(w: &[f32], xt: &[f32], k: usize, sums: &mut [f32; MB * PANEL]) {
        debug_assert!(w.len() >= k * PANEL && xt.len() >= k * MB);
        let mut acc = [_mm512_setzero_ps(); MB];
        for kk in 0..k {
            // SAFETY: kk < k: the 16 values at kk · 16 lie inside `w` and `xt` (the caller's
            // lengths); the load is unaligned and a prefetch past the end reads nothing.
            unsafe {
                _mm_prefetch::<_MM_HINT_T1>(w.as_ptr().wrapping_add((kk + AHEAD) * PANEL).cast());
                let wv = _mm512_loadu_ps(w.as_ptr().add(kk * PANEL));
                let xp = xt.as_ptr().add(kk * MB);
                for r in 0..MB {
                    acc[r] = _mm512_fmadd_ps(wv, _mm512_set1_ps(*xp.add(r)), acc[r]);
                }
            }
        }
        for r in 0..MB {
            // SAFETY: r < 16: the 16 values at r · 16 lie inside `sums` (256 values).
            unsafe { _mm512_storeu_ps(sums.as_mut_ptr().add(r * PANEL), acc[r]) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(w: &[f32], x: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
        let mut y = vec![0f64; m * n];
        for r in 0..m {
            for j in 0..n {
                y[r * n + j] = (0..k)
                    .map(|kk| x[r * k + kk] as f64 * w[j * k + kk] as f64)
                    .sum();
            }
        }
        y
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104729) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// The product against an f64 reference, on shapes with partial panels and partial row
    /// blocks, both kernels; each row's result is the same alone as in the batch.
    #[test]
    fn products_match_the_reference_and_rows_do_not_depend_on_the_batch() {
        for (m, n, k) in [
            (16, 64, 96),
            (7, 45, 70),
            (33, 130, 17),
            (1, 16, 1),
            (3, 5, 0),
        ] {
            let (w, x) = (values(n * k, 1), values(m * k, 2));
            let p = F32Panels::from_f32(&w, n, k);
            let y = p.matmul_t(&x, m);
            for (got, want) in y.iter().zip(reference(&w, &x, m, n, k)) {
                assert!(
                    (*got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "({m}, {n}, {k})"
                );
            }
            if m > 1 && k > 0 {
                let alone = p.matmul_t(&x[k..2 * k], 1);
                assert_eq!(alone, y[n..2 * n].to_vec(), "row 1 alone, ({m}, {n}, {k})");
            }
            let mut sums = [0f32; MB * PANEL];
            let xt: Vec<f32> = (0..k * MB).map(|i| x[(i % MB % m) * k + i / MB]).collect();
            portable(&p.data[..PANEL * k], &xt, k, &mut sums);
            if usable() {
                let mut fast = [0f32; MB * PANEL];
                // SAFETY: AVX-512F is present; both buffers hold k × 16 values.
                unsafe { avx512::panel(&p.data[..PANEL * k], &xt, k, &mut fast) };
                assert_eq!(fast, sums, "kernels agree bit for bit, ({m}, {n}, {k})");
            }
        }
    }

    /// A refill of the same shape repacks in place; another shape is refused.
    #[test]
    fn refill_repacks_in_place() {
        let (n, k) = (20, 9);
        let mut p = F32Panels::from_f32(&values(n * k, 1), n, k);
        let ptr = p.data.as_ptr();
        let w2 = values(n * k, 3);
        assert!(p.refill(&w2, n, k));
        assert_eq!(p.data.as_ptr(), ptr);
        assert_eq!(
            p.matmul_t(&values(k, 4), 1),
            F32Panels::from_f32(&w2, n, k).matmul_t(&values(k, 4), 1)
        );
        assert!(!p.refill(&w2, k, n));
    }
}
