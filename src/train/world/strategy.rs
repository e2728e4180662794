//! What the loop asks of this process's part in the run, beside the rollout's exchanges.
use super::replicas::Replicas;
use crate::dist::{Placement, World};
use crate::error::Result;
use crate::train::report::window::Window;
use crate::train::rollout::RolloutExchange;
use crate::train::run::dir::RunLock;
use comlrl_scenario::Scenario;
use std::sync::Arc;

/// What every strategy holds.
pub struct Part {
    /// The run's processes (a world of one for a process alone).
    pub world: Arc<dyn World>,
    /// Which rank holds which agent.
    pub placement: Placement,
    /// Each replicated agent's group of replicas.
    pub replicas: Replicas,
}

/// This process's part in the run: the rollout's exchanges ([`RolloutExchange`]) and the
/// loop's. Every method but `part`, `world`, `placement`, `replicas`, `recorded_ranks` and
/// `writes_alone` is a collective under MPI: every rank calls it at the same point.
pub trait Strategy: RolloutExchange + Send {
    /// The world, placement and replicas this process runs with.
    fn part(&self) -> &Part;

    /// The run's processes (barriers and rank 0's duties when writing files).
    fn world(&self) -> &dyn World {
        self.part().world.as_ref()
    }

    /// Which rank holds which agent.
    fn placement(&self) -> &Placement {
        &self.part().placement
    }

    /// Each replicated agent's group of replicas.
    fn replicas(&self) -> &Replicas {
        &self.part().replicas
    }

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

    /// Refuses what `scenario` asks that this part of a run cannot do, naming the key and the
    /// way out (a process alone can do everything).
    fn supports(&self, _scenario: &Scenario) -> Result<()> {
        Ok(())
    }
}
