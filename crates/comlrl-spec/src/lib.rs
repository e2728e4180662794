//! The plain specs that the scenario loader (`comlrl-scenario`) writes and the reward runtime
//! (`comlrl-reward`) reads: reward terms with their weights and params, the processor chain and
//! the multi-turn transition. Serde data only, so that neither crate links the other.
mod processor;
mod reward;
mod transition;

pub use processor::{ExpScaleSpec, ProcessorSpec};
pub use reward::{OnError, RewardSpec, DEFAULT_ISOLATE, ISOLATED_BUDGET_MS};
pub use transition::{CodeSource, TransitionPlan};
