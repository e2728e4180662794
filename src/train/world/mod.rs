//! How this process takes part in its run, as a strategy rather than branches in the loop: a
//! process [`Alone`] performs every exchange as the identity; one of several MPI [`Ranks`]
//! performs them as collectives (all-gathering completions, broadcasting rank 0's rewards and
//! next-turn prompts, gathering the metrics window, agreeing on a stop, summing replicated
//! agents' gradients). See `docs/distributed.md`.
//!
//! Files, lowest first: `rollouts` and `run` (the collectives' byte formats), `replicas`,
//! `alone`, `ranks`, this file. Imports `train::report`, `train::rollout`, `train::update` and
//! `train::run`.
pub mod alone;
pub mod ranks;
pub mod replicas;
pub mod rollouts;
pub mod run;

pub use alone::Alone;
pub use ranks::Ranks;

use crate::dist::{Placement, World};
use crate::error::Result;
use crate::train::report::window::Window;
use crate::train::rollout::RolloutExchange;
use crate::train::run::dir::RunLock;
use replicas::Replicas;
use std::sync::Arc;

/// This process's part in the run: the rollout's exchanges ([`RolloutExchange`]) and the
/// loop's. Every method but `world`, `placement`, `replicas`, `recorded_ranks` and
/// `writes_alone` is a collective under MPI: every rank calls it at the same point.
pub trait Strategy: RolloutExchange + Send {
    /// The run's processes (barriers and rank 0's duties when writing files).
    fn world(&self) -> &dyn World;

    /// Which rank holds which agent.
    fn placement(&self) -> &Placement;

    /// Each replicated agent's group of replicas.
    fn replicas(&self) -> &Replicas;

    /// The run id every rank uses and, on rank 0, the claim on the output directory itself.
    /// `claimed` is rank 0's claim (or the lock its caller took); its error reaches every rank.
    fn share_claim(&self, claimed: Option<Result<RunLock>>) -> Result<(String, Option<RunLock>)>;

    /// Whether any process's `flag` is set (a signal may reach the ranks at different steps).
    fn any(&self, flag: bool) -> bool;

    /// Completes rank 0's logging window with the update statistics only other ranks measured
    /// (their time waiting added to its `comm` phase).
    fn merge_window(&self, w: &mut Window) -> Result<()>;

    /// The agents' ranks as a checkpoint records them (empty: one process).
    fn recorded_ranks(&self) -> Vec<usize>;

    /// Whether this process may write the run's files on its own, outside a collective (after
    /// a collective write failed, say): a process alone may; a rank may not, as the others
    /// would not join it.
    fn writes_alone(&self) -> bool;
}

/// The strategy for `world`: alone in a world of one, else this rank of it with the agents
/// placed by `placement` (a collective, see [`Ranks::new`]).
pub fn strategy(world: Arc<dyn World>, placement: Placement) -> Box<dyn Strategy> {
    match world.size() {
        1 => Box::new(Alone::new(world, placement)),
        _ => Box::new(Ranks::new(world, placement)),
    }
}
