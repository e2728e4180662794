//! Re-runnable benchmarks that write JSON: model sampling and training throughput.
pub mod matmul;
pub mod model;
pub mod sys;
pub mod train;
