//! Rollouts and joint actions: what each agent is prompted with (`prompt`), how its K
//! completions are sampled (`generate`, ahead for a whole buffer where it can), how the agents'
//! completions form joint actions (`joint`), and the rollout tree of a prompt, scored by the
//! reward stack, with next-turn prompts from the transition and the reference KL (`tree`,
//! `kl`), the preference pairs of a scored node's candidates (`pairs`), and CoMLRL's centralized
//! protocol (`centralized`: one policy's tagged prompt for every agent, its answers split). What leaves a rollout is [`Node`]; what the buffer keeps is [`NodeSample`].
//!
//! Files, lowest first: `centralized`, `samples`, `pairs`, `joint`, `prompt`, `exchange`, `spec`, `generate`, `kl`,
//! `tree`. Imports `train::report` only (for phase timings).
pub mod centralized;
pub mod exchange;
pub mod generate;
pub mod joint;
pub mod kl;
pub mod pairs;
pub mod prompt;
pub mod samples;
pub mod spec;
pub mod tree;

pub use exchange::RolloutExchange;
pub use samples::{AgentRollout, NodeSample};
pub use spec::RolloutSpec;
pub use tree::{rollout, Node, RowInput};
