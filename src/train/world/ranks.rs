//! One rank of an MPI run: it samples and trains the agents placed on it, and the exchanges are
//! collectives over the run's world (`rollouts` and `run` hold their byte formats).
use super::replicas::Replicas;
use super::strategy::{Part, Strategy};
use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::train::report::timing::since;
use crate::train::report::window::Window;
use crate::train::rollout::{AgentRollout, RolloutExchange};
use crate::train::run::dir::RunLock;
use comlrl_reward::{RewardError, Scored};
use comlrl_scenario::{ComparatorPolicy, Scenario};
use std::sync::Arc;
use std::time::Instant;

/// One of several processes of a run.
pub struct Ranks {
    part: Part,
}

impl Ranks {
    /// This rank of `world`, with the agents placed as `placement` says. A collective: splits
    /// the world into each replicated agent's group.
    pub fn new(world: Arc<dyn World>, placement: Placement) -> Self {
        let replicas = Replicas::new(&placement, world.as_ref());
        Ranks {
            part: Part {
                world,
                placement,
                replicas,
            },
        }
    }
}

impl RolloutExchange for Ranks {
    fn rollouts(
        &self,
        local: &[usize],
        mine: Vec<AgentRollout>,
        prompts: &mut [String],
        comm: &mut f64,
    ) -> Result<Vec<AgentRollout>> {
        let t = Instant::now();
        let all = super::rollouts::share_rollouts(self.part.world.as_ref(), local, mine, prompts);
        *comm += since(t);
        all
    }

    fn scores(
        &self,
        score: &mut dyn FnMut() -> std::result::Result<Vec<Scored>, RewardError>,
        work: &mut f64,
        comm: &mut f64,
    ) -> Result<Vec<Scored>> {
        let t = Instant::now();
        let mut secs = 0.0;
        let s = super::rollouts::root_scores(self.part.world.as_ref(), || {
            let t = Instant::now();
            let s = score();
            secs = since(t);
            s
        });
        *work += secs;
        *comm += since(t) - secs;
        s
    }

    fn next_prompts(
        &self,
        next: &mut dyn FnMut() -> Result<Vec<String>>,
        work: &mut f64,
        comm: &mut f64,
    ) -> Result<Vec<String>> {
        let t = Instant::now();
        let mut secs = 0.0;
        let n = super::rollouts::root_prompts(self.part.world.as_ref(), || {
            let t = Instant::now();
            let n = next();
            secs = since(t);
            n
        });
        *work += secs;
        *comm += since(t) - secs;
        n
    }

    fn kl(&self, agents: &mut [AgentRollout], local: &[usize], comm: &mut f64) -> Result<()> {
        let t = Instant::now();
        let r = super::rollouts::share_kl(self.part.world.as_ref(), agents, local);
        *comm += since(t);
        r
    }
}

impl Strategy for Ranks {
    fn part(&self) -> &Part {
        &self.part
    }

    fn share_claim(&self, claimed: Option<Result<RunLock>>) -> Result<(String, Option<RunLock>)> {
        super::run::share_claim(self.part.world.as_ref(), claimed)
    }

    fn any(&self, flag: bool) -> bool {
        super::run::any(self.part.world.as_ref(), flag)
    }

    fn merge_window(&self, w: &mut Window) -> Result<()> {
        let t = Instant::now();
        super::run::merge_window(self.part.world.as_ref(), &self.part.placement, w)?;
        w.phases.comm += t.elapsed().as_secs_f64();
        Ok(())
    }

    fn recorded_ranks(&self) -> Vec<usize> {
        self.part.placement.owners.clone()
    }

    fn writes_alone(&self) -> bool {
        false
    }

    /// The iterative trainers' `history` comparator (each agent's saved policies, written by
    /// its rank and read by every rank between two collectives) and `api` comparator (asked
    /// once per rank for the same answers) are refused on ranks.
    fn supports(&self, scenario: &Scenario) -> Result<()> {
        if scenario.trainer.collaboration_mode == comlrl_scenario::CollaborationMode::Centralized {
            // One policy for every role: nothing to place on several ranks (CoMLRL's centralized
            // trainer has no distributed form either).
            return Err(Error::Config(format!(
                "trainer.collaboration_mode centralized is not supported on {} MPI ranks: run it \
                 in one process, or use collaboration_mode decentralized",
                self.part.world.size()
            )));
        }
        let p = &scenario.preference;
        let name = match p.comparator_policy {
            ComparatorPolicy::History => "history",
            ComparatorPolicy::Api => "api",
            _ => return Ok(()),
        };
        let algorithm = match scenario.trainer.algorithm {
            comlrl_scenario::Algorithm::MadpoIter => "madpo_iter",
            comlrl_scenario::Algorithm::MarlhfIter => "marlhf_iter",
            _ => return Ok(()),
        };
        Err(Error::Config(format!(
            "preference.comparator_policy {name} is not supported on {} MPI ranks yet \
             (trainer.algorithm {algorithm}): use comparator_policy current, current_copy or \
             model, or run in one process",
            self.part.world.size()
        )))
    }
}
