//! AdamW and its state.
pub mod adamw;
mod adamw_chunk;
pub(crate) mod moment_io;
pub mod moments;
pub(crate) mod schedule;
