//! Which rank holds which agent: `agents[i].rank` when set, else agent i on rank i mod N.
use super::World;
use crate::error::{Error, Result};
use comlrl_scenario::Scenario;

/// The rank of every agent, and this process's rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// `owners[i]`: the rank that holds agent `i`.
    pub owners: Vec<usize>,
    /// This process's rank.
    pub me: usize,
    /// Processes in the run.
    pub size: usize,
}

impl Placement {
    /// Every agent on this (only) process.
    pub fn all_local(agents: usize) -> Self {
        Placement {
            owners: vec![0; agents],
            me: 0,
            size: 1,
        }
    }

    /// The placement of `s`'s agents in `world`; a rank outside the world is an error naming
    /// the agent. In a world of one every agent is local whatever `rank` says.
    pub fn new(s: &Scenario, world: &dyn World) -> Result<Self> {
        let size = world.size();
        if size == 1 {
            return Ok(Self::all_local(s.agents.len()));
        }
        let owners = s
            .agents
            .iter()
            .map(|a| match a.rank {
                Some(r) if r >= size => Err(Error::Invalid(format!(
                    "agents[{}].rank is {r}, but the run has {size} ranks (0..{}); \
                     lower it or start more processes (mpirun -np)",
                    a.index,
                    size - 1
                ))),
                Some(r) => Ok(r),
                None => Ok(a.index % size),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Placement {
            owners,
            me: world.rank(),
            size,
        })
    }

    /// Whether this process holds agent `i`.
    pub fn is_local(&self, i: usize) -> bool {
        self.owners.get(i) == Some(&self.me)
    }

    /// The agents this process holds, in agent order.
    pub fn local(&self) -> Vec<usize> {
        (0..self.owners.len())
            .filter(|&i| self.is_local(i))
            .collect()
    }

    /// Whether other ranks take part (collectives are needed).
    pub fn distributed(&self) -> bool {
        self.size > 1
    }
}
