//! A process that runs alone: it samples every agent, scores every joint action and trains
//! every agent itself, so each exchange is the identity and waits for nothing.
use super::replicas::Replicas;
use super::strategy::{Part, Strategy};
use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::train::report::timing::since;
use crate::train::report::window::Window;
use crate::train::rollout::{AgentRollout, RolloutExchange};
use crate::train::run::dir::RunLock;
use comlrl_reward::{RewardError, Scored};
use std::sync::Arc;
use std::time::Instant;

/// The only process of its run.
pub struct Alone {
    /// Its world, of size one (MPI's, when built with the `mpi` feature and launched plainly).
    part: Part,
}

impl Alone {
    /// Alone in `world` (of size 1), holding every agent (`placement`).
    pub fn new(world: Arc<dyn World>, placement: Placement) -> Self {
        let replicas = Replicas::none(placement.owners.len());
        Alone {
            part: Part {
                world,
                placement,
                replicas,
            },
        }
    }
}

impl RolloutExchange for Alone {
    fn rollouts(
        &self,
        _local: &[usize],
        mine: Vec<AgentRollout>,
        _prompts: &mut [String],
        _comm: &mut f64,
    ) -> Result<Vec<AgentRollout>> {
        Ok(mine)
    }

    fn scores(
        &self,
        score: &mut dyn FnMut() -> std::result::Result<Vec<Scored>, RewardError>,
        work: &mut f64,
        _comm: &mut f64,
    ) -> Result<Vec<Scored>> {
        let t = Instant::now();
        let s = score()?;
        *work += since(t);
        Ok(s)
    }

    fn next_prompts(
        &self,
        next: &mut dyn FnMut() -> Result<Vec<String>>,
        work: &mut f64,
        _comm: &mut f64,
    ) -> Result<Vec<String>> {
        let t = Instant::now();
        let n = next()?;
        *work += since(t);
        Ok(n)
    }

    fn kl(&self, _agents: &mut [AgentRollout], _local: &[usize], _comm: &mut f64) -> Result<()> {
        Ok(())
    }
}

impl Strategy for Alone {
    fn part(&self) -> &Part {
        &self.part
    }

    fn share_claim(&self, claimed: Option<Result<RunLock>>) -> Result<(String, Option<RunLock>)> {
        let lock = claimed
            .ok_or_else(|| Error::Distributed("no claim on the output directory".into()))??;
        Ok((lock.run_id().to_string(), Some(lock)))
    }

    fn any(&self, flag: bool) -> bool {
        flag
    }

    fn merge_window(&self, _w: &mut Window) -> Result<()> {
        Ok(())
    }

    fn recorded_ranks(&self) -> Vec<usize> {
        vec![]
    }

    fn writes_alone(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_every_exchange_is_the_identity_and_waits_for_nothing() {
        let alone = Alone::new(crate::dist::single(), Placement::all_local(2));
        let a = AgentRollout::sampled(vec![1], vec![vec![2, 3]], vec!["x".into()]);
        let mut prompts = vec!["p".to_string(), "q".to_string()];
        let (mut work, mut comm) = (0.0, 0.0);
        let all = alone
            .rollouts(&[0, 1], vec![a.clone(), a], &mut prompts, &mut comm)
            .expect("rollouts");
        assert_eq!(all.len(), 2);
        assert_eq!(prompts, ["p", "q"]);
        let scored = alone
            .scores(
                &mut || {
                    Ok(vec![Scored {
                        reward: 1.5,
                        components: vec![],
                    }])
                },
                &mut work,
                &mut comm,
            )
            .expect("scores");
        assert_eq!(scored[0].reward, 1.5);
        assert!(alone.any(true) && !alone.any(false));
        assert!(alone.recorded_ranks().is_empty() && alone.writes_alone());
        assert_eq!(comm, 0.0, "a process alone never waits");
    }
}
