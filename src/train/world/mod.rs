//! How this process takes part in its run, as a strategy rather than branches in the loop: a
//! process [`Alone`] performs every exchange as the identity; one of several MPI [`Ranks`]
//! performs them as collectives (all-gathering completions, broadcasting rank 0's rewards and
//! next-turn prompts, gathering the metrics window, agreeing on a stop, summing replicated
//! agents' gradients, sharing the per-agent numbers an update's losses read). See
//! `docs/distributed.md`.
//!
//! Files, lowest first: `rollouts`, `run` and `agent_values` (the collectives' byte formats), `replicas`,
//! `strategy` (the trait), `alone`, `ranks`, this file (which picks one). Imports
//! `train::report`, `train::rollout`, `train::update` and `train::run`.
pub mod agent_values;
pub mod alone;
pub mod ranks;
pub mod replicas;
pub mod rollouts;
pub mod run;
pub mod strategy;

pub use alone::Alone;
pub use ranks::Ranks;
pub use strategy::Strategy;

use crate::dist::{Placement, World};
use std::sync::Arc;

/// The strategy for `world`: alone in a world of one, else this rank of it with the agents
/// placed by `placement` (a collective, see [`Ranks::new`]).
pub fn strategy(world: Arc<dyn World>, placement: Placement) -> Box<dyn Strategy> {
    match world.size() {
        1 => Box::new(Alone::new(world, placement)),
        _ => Box::new(Ranks::new(world, placement)),
    }
}
