//! MAGRPO training: advantages, joint actions, rollouts, the policy-gradient loss, the optimizer,
//! checkpoints, metrics and the training loop.
pub mod algorithms;
pub mod optim;
pub mod report;
pub mod rollout;
pub mod run;
pub mod setup;
pub(crate) mod trainer;
pub(crate) mod world;

pub use trainer::{Observer, RunSummary, Trainer};
