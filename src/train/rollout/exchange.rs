//! What a rollout needs from the run's other processes: every agent's completions where only
//! some are sampled here, rank 0's rewards and next-turn prompts (scripts and plugins run in one
//! place), and every agent's reference KL. `train::world` implements it: a process alone
//! performs each exchange as the identity, the ranks of an MPI run as collectives.
use super::samples::AgentRollout;
use crate::error::Result;
use comlrl_reward::{RewardError, Scored};

/// The exchanges of a rollout. Every rank calls each method at the same point of the same
/// rollout (they are collectives under MPI). `work` receives the seconds of the call's own work
/// (scoring, the transition), `comm` the seconds spent waiting for other ranks.
pub trait RolloutExchange: Sync {
    /// Every agent's rollout, in agent order: `mine[j]` is agent `local[j]`'s, sampled here
    /// from prompt `prompts[local[j]]`; the other agents' rollouts and prompts come from the
    /// ranks that sampled them (`prompts` is filled in for them).
    fn rollouts(
        &self,
        local: &[usize],
        mine: Vec<AgentRollout>,
        prompts: &mut [String],
        comm: &mut f64,
    ) -> Result<Vec<AgentRollout>>;

    /// The joint actions' rewards: `score` runs on rank 0 only, and every rank returns its
    /// outcome (the same rewards, or the same error: a `skip_step` failure stays one, so the
    /// step is skipped everywhere).
    fn scores(
        &self,
        score: &mut dyn FnMut() -> std::result::Result<Vec<Scored>, RewardError>,
        work: &mut f64,
        comm: &mut f64,
    ) -> Result<Vec<Scored>>;

    /// The next turn's prompts of one joint action: `next` (the external transition) runs on
    /// rank 0 only, and every rank returns its outcome.
    fn next_prompts(
        &self,
        next: &mut dyn FnMut() -> Result<Vec<String>>,
        work: &mut f64,
        comm: &mut f64,
    ) -> Result<Vec<String>>;

    /// Fills in the reference KL of the agents sampled elsewhere (`local` are those whose KL
    /// was computed here).
    fn kl(&self, agents: &mut [AgentRollout], local: &[usize], comm: &mut f64) -> Result<()>;
}
