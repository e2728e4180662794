//! Joint rewards for comlrl: one interface ([`RewardFn`]) over Rhai scripts and native
//! plugins, and the [`RewardStack`] that combines weighted terms and runs the processor chain.
//!
//! ```no_run
//! use comlrl_reward::{JointSample, RewardStack, spec::{RewardSpec, ProcessorSpec}};
//! # fn main() -> Result<(), comlrl_reward::RewardError> {
//! let specs: Vec<RewardSpec> = vec![/* from the scenario */];
//! let stack = RewardStack::build(&specs, &[ProcessorSpec::Scale(100.0)], std::path::Path::new("."))?;
//! let batch = vec![JointSample::new("prompt", vec!["a".into(), "bb".into()])];
//! let scored = stack.score(&batch)?; // one `Scored` per joint sample, in order
//! # Ok(()) }
//! ```
pub mod bench;
mod budget;
mod convert;
pub mod error;
mod guard;
pub mod isolate;
mod locate;
pub mod native;
pub mod native_transition;
mod plugin_file;
pub mod plugin_path;
pub mod processor;
pub mod reference;
pub mod sandbox;
pub mod script;
/// The reward section's plain data, shared with the scenario loader (the `comlrl-spec` crate).
pub use comlrl_spec as spec;

/// The rewards guide, docs/rewards.md: its Rust examples compile as this crate's doctests
/// (`cargo test --doc -p comlrl-reward`), its Rhai examples in `tests/reward/guide_examples.rs`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rewards.md")]
pub struct RewardsGuide;
pub mod stack;
pub mod transition;

pub use error::{PluginFailure, PluginRole, Pos, RewardError, ScriptFailure, TRANSITION_TERM};
pub use isolate::{serve_plugin_host, HostCommand, IsolatedReward, IsolatedTransition};
pub use native::NativeReward;
pub use native_transition::NativeTransition;
pub use processor::Processor;
pub use sandbox::SandboxLimits;
pub use script::RhaiReward;
pub use stack::{RewardStack, Scored};
pub use transition::{load_transition, RhaiTransition, TransitionFn, TransitionInput};

/// One joint action: the prompt, one completion per agent (agent 0 first), and the dataset
/// row's other fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JointSample {
    /// The prompt the agents answered.
    pub prompt: String,
    /// One completion per agent, in agent order.
    pub completions: Vec<String>,
    /// The dataset row's fields other than the prompt (handed to rewards as `ctx.fields`).
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl JointSample {
    /// A sample without extra fields.
    pub fn new(prompt: impl Into<String>, completions: Vec<String>) -> Self {
        JointSample {
            prompt: prompt.into(),
            completions,
            fields: serde_json::Map::new(),
        }
    }
}

/// A reward over joint samples, scored a batch at a time.
///
/// `score` returns exactly one finite value per sample, in the order of `batch`; an
/// implementation may parallelise internally but must stay deterministic.
pub trait RewardFn: Send + Sync {
    /// Name used in logs and metrics.
    fn name(&self) -> &str;
    /// Score every joint sample of the batch.
    fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError>;
}
