//! The plain specs that the scenario loader (`comlrl-scenario`) writes and the reward runtime
//! (`comlrl-reward`) reads: reward terms with their weights and params, the processor chain and
//! the multi-turn transition. Serde data only, so that neither crate links the other.
mod reward;

pub use reward::*;
