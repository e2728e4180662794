//! MAGRPO training: advantages, joint actions, rollouts, the policy-gradient loss, the optimizer,
//! checkpoints, metrics and the training loop.
pub mod advantage;
pub mod checkpoint;
pub mod joint;
pub mod loss;
pub mod magrpo;
pub mod manifest;
pub mod optim;
pub mod plot;
pub mod presample;
pub mod prompt;
pub mod rollout;
pub mod rundir;
pub mod schedule;
pub mod setup;
pub mod timing;
pub mod verify;
pub mod window;

pub use magrpo::{Observer, RunSummary, Trainer};
