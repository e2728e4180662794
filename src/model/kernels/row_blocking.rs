//! The blocking the two row kernels share (`bf16_matmul`'s rows layout and `f32_decode`):
//! y (m, n) = x · Wᵀ for W's rows, in parallel tasks of whole W rows, each task in register
//! tiles of up to 4 W rows × 4 x rows (the W block stays in cache while every x row passes).
//! The tile's product is the caller's; here only the loops and the writes.
use rayon::prelude::*;

/// W rows and x rows per register tile (16 accumulators + 8 operands of the 32 registers).
pub const NR: usize = 4;
pub const MR: usize = 4;
/// W rows per parallel task.
const TASK_ROWS: usize = 64;

/// One tile's sums: `acc[jj][ii]` = Σ_k W[j + jj][k] · x[i + ii][k].
pub type Acc = [[f32; MR]; NR];

/// Below this many multiply-adds a product's tasks run on the calling thread: waking the pool
/// costs more than such a product.
pub const PAR_MACS: usize = 1 << 21;

/// y (m, n), row-major, for W rows of `k`: tasks of whole W rows run `task(r0, nr, out)`, which
/// fills `out` (nr × m, W row major: out[j · m + i] = y[i][r0 + j]); each block lands in its own
/// columns.
pub fn par_row_tasks(
    n: usize,
    m: usize,
    k: usize,
    task: impl Fn(usize, usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut y = vec![0f32; m * n];
    let cols = Columns(y.as_mut_ptr());
    let run = |t: usize| {
        let r0 = t * TASK_ROWS;
        let nr = TASK_ROWS.min(n - r0);
        let mut out = vec![0f32; nr * m];
        task(r0, nr, &mut out);
        // SAFETY: this task alone writes columns r0..r0 + nr of y (tasks cover disjoint W-row
        // ranges), y holds m·n values and outlives the parallel loop.
        unsafe { cols.write_transposed(&out, r0, nr, m, n) };
    };
    let tasks = 0..n.div_ceil(TASK_ROWS);
    if n * m * k < PAR_MACS {
        tasks.for_each(run);
    } else {
        tasks.into_par_iter().for_each(run);
    }
    y
}

/// out[j · m + i] for `nr` W rows and `m` x rows, tile by tile: `tile(nb, mb, j, i, acc)` sums
/// W rows j..j + nb (nb ≤ [`NR`]) against x rows i..i + mb (mb ≤ [`MR`]) into `acc`.
pub fn by_tiles(
    nr: usize,
    m: usize,
    out: &mut [f32],
    mut tile: impl FnMut(usize, usize, usize, usize, &mut Acc),
) {
    let mut j = 0;
    while j < nr {
        let nb = (nr - j).min(NR);
        let mut i = 0;
        while i < m {
            let mb = (m - i).min(MR);
            let mut acc = [[0f32; MR]; NR];
            tile(nb, mb, j, i, &mut acc);
            for (jj, row) in acc.iter().enumerate().take(nb) {
                for (ii, v) in row.iter().enumerate().take(mb) {
                    out[(j + jj) * m + i + ii] = *v;
                }
            }
            i += mb;
        }
        j += nb;
    }
}

/// y's buffer, shared by tasks that each write their own columns.
#[derive(Clone, Copy)]
struct Columns(*mut f32);

// SAFETY: `Columns` is only used by `par_row_tasks`'s tasks, which write disjoint column ranges
// of a buffer that outlives them: no element is touched by two threads.
unsafe impl Send for Columns {}
// SAFETY: as above; shared references only hand out the pointer for disjoint writes.
unsafe impl Sync for Columns {}

impl Columns {
    /// y[i·n + r0 + j] = block[j·m + i] for j < nr, i < m.
    ///
    /// # Safety
    /// The buffer holds m·n values, r0 + nr ≤ n, and no other thread writes these columns.
    unsafe fn write_transposed(self, block: &[f32], r0: usize, nr: usize, m: usize, n: usize) {
        for i in 0..m {
            // SAFETY: row i's columns r0..r0 + nr lie inside the m·n buffer (caller's bounds)
            // and belong to this task alone.
            let row = unsafe { std::slice::from_raw_parts_mut(self.0.add(i * n + r0), nr) };
            for (j, v) in row.iter_mut().enumerate() {
                *v = block[j * m + i];
            }
        }
    }
}
