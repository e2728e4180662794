//! AdamW with torch's semantics (`adamw`, the per-chunk arithmetic in `adamw_chunk`), its
//! moments in f32 or bf16 with stochastic rounding (`moments`), their form in checkpoint files
//! (`moment_io`), and the learning-rate schedule (`schedule`).
//!
//! Files, lowest first: `moments`, `adamw_chunk`, `adamw`, `moment_io`, `schedule`. Imports no
//! other folder of `train`.
pub mod adamw;
mod adamw_chunk;
pub mod moment_io;
pub mod moments;
pub mod schedule;

pub use adamw::{AdamW, AdamWConfig};
