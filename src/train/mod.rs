//! MAGRPO training: advantages, joint actions, rollouts, the policy-gradient loss, the optimizer,
//! checkpoints, metrics and the training loop.
mod adamw_chunk;
pub mod advantage;
pub mod checkpoint;
pub mod exchange;
pub(crate) mod joint;
pub mod loss;
pub(crate) mod magrpo;
pub mod manifest;
pub mod memory;
pub(crate) mod moment_io;
pub mod moments;
pub mod optim;
pub(crate) mod plot;
pub(crate) mod presample;
pub mod prompt;
pub mod rollout;
pub mod rundir;
pub(crate) mod schedule;
pub mod setup;
pub(crate) mod timing;
pub(crate) mod verify;
pub(crate) mod window;

pub use magrpo::{Observer, RunSummary, Trainer};
