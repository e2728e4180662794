//! The machinery every algorithm's update round uses: a mini-batch's gradients for a loss that
//! weighs sequence log-probabilities (`passes`, into [`LossGrads`]), how those passes run
//! (`plan`), and the memory housekeeping the loop does around a round (`housekeeping`).
//!
//! Files, lowest first: `grads`, `plan`, `passes`, `housekeeping`. Imports no other folder of
//! `train`.
pub mod grads;
pub mod housekeeping;
pub mod passes;
pub mod plan;

pub use grads::{LossGrads, Share};
