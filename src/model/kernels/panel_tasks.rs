//! The parallel frame the two panel kernels share (`bf16_gemm::fma_rows`, `f32_panels`):
//! y (m, n), row-major, filled by tasks that each own a range of W's output columns and write
//! only those; small products run on the calling thread.
use super::row_blocking::PAR_MACS;
use rayon::prelude::*;

/// y's buffer as the tasks see it: each writes its own columns.
pub struct Columns {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `Columns` is only handed to `par_panel_tasks`'s tasks, which write disjoint column
// ranges (the contract of `write`) of a buffer that outlives them: no element is touched by
// two threads.
unsafe impl Send for Columns {}
// SAFETY: as above; shared references only allow writes under `write`'s contract.
unsafe impl Sync for Columns {}

impl Columns {
    /// y[at..at + v.len()] = v.
    ///
    /// # Safety
    /// No other task writes this range (each task writes only its own columns).
    pub unsafe fn write(&self, at: usize, v: &[f32]) {
        assert!(at + v.len() <= self.len, "panel write past the product");
        // SAFETY: inside the buffer (asserted); the caller's exclusivity; `v` is a separate
        // array, so the copy does not overlap.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), self.ptr.add(at), v.len()) };
    }
}

/// y (m, n) from `tasks` tasks, `task(t, y)` filling task t's own columns; in parallel unless
/// the product (m · n · k multiply-adds) is below [`PAR_MACS`].
pub fn par_panel_tasks(
    m: usize,
    n: usize,
    k: usize,
    tasks: usize,
    task: impl Fn(usize, &Columns) + Sync,
) -> Vec<f32> {
    let mut y = vec![0f32; m * n];
    let out = Columns {
        ptr: y.as_mut_ptr(),
        len: y.len(),
    };
    if m * n * k < PAR_MACS {
        (0..tasks).for_each(|t| task(t, &out));
    } else {
        (0..tasks).into_par_iter().for_each(|t| task(t, &out));
    }
    y
}
