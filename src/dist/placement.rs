//! Which ranks hold which agent. Agent i's copies (`agents[i].replicas`, R of them) sit on R
//! consecutive ranks (modulo N) starting at its first rank: `agents[i].rank` when set, else the
//! next free slot in agent order (agent 0 from rank 0, agent 1 right after agent 0's replicas,
//! ..., wrapping modulo N; with one replica each this is agent i on rank i mod N). The first
//! replica samples the agent's completions, reports its update statistics and writes its files;
//! every replica trains it (see `docs/distributed.md`).
use super::World;
use crate::error::{Error, Result};
use comlrl_scenario::Scenario;

/// The ranks of every agent, and this process's rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// `owners[i]`: the rank that samples agent `i` and writes its files (its first replica).
    pub owners: Vec<usize>,
    /// `replicas[i]`: every rank that holds agent `i`, its first replica first.
    pub replicas: Vec<Vec<usize>>,
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
            replicas: vec![vec![0]; agents],
            me: 0,
            size: 1,
        }
    }

    /// The placement of `s`'s agents in `world`; a rank outside the world, or more replicas
    /// than ranks, is an error naming the agent. In a world of one every agent is local (one
    /// copy) whatever `rank` and `replicas` say.
    pub fn new(s: &Scenario, world: &dyn World) -> Result<Self> {
        let size = world.size();
        if size == 1 {
            return Ok(Self::all_local(s.agents.len()));
        }
        let mut next = 0usize;
        let mut owners = Vec::with_capacity(s.agents.len());
        let mut replicas = Vec::with_capacity(s.agents.len());
        for a in &s.agents {
            let r = a.replicas.max(1);
            if r > size {
                return Err(Error::Invalid(format!(
                    "agents[{}].replicas is {r}, but the run has {size} ranks: each replica \
                     needs a rank of its own; lower `replicas` or start at least {r} processes \
                     (mpirun -np {r})",
                    a.index
                )));
            }
            let first = match a.rank {
                Some(f) if f >= size => {
                    return Err(Error::Invalid(format!(
                        "agents[{}].rank is {f}, but the run has {size} ranks (0..{}); \
                         lower it or start more processes (mpirun -np)",
                        a.index,
                        size - 1
                    )))
                }
                Some(f) => f,
                None => next % size,
            };
            next = first + r;
            owners.push(first);
            replicas.push((0..r).map(|j| (first + j) % size).collect());
        }
        Ok(Placement {
            owners,
            replicas,
            me: world.rank(),
            size,
        })
    }

    /// Whether this process samples agent `i` (holds its first replica).
    pub fn is_local(&self, i: usize) -> bool {
        self.owners.get(i) == Some(&self.me)
    }

    /// Whether this process holds a replica of agent `i` (trains it).
    pub fn holds(&self, i: usize) -> bool {
        self.replicas.get(i).is_some_and(|r| r.contains(&self.me))
    }

    /// This process's position among agent `i`'s replicas and their number, when it holds one.
    pub fn replica_of(&self, i: usize) -> Option<(usize, usize)> {
        let r = self.replicas.get(i)?;
        r.iter().position(|&x| x == self.me).map(|j| (j, r.len()))
    }

    /// The agents this process samples, in agent order.
    pub fn local(&self) -> Vec<usize> {
        (0..self.owners.len())
            .filter(|&i| self.is_local(i))
            .collect()
    }

    /// Whether other ranks take part (collectives are needed).
    pub fn distributed(&self) -> bool {
        self.size > 1
    }

    /// Whether some agent has more than one replica.
    pub fn replicated(&self) -> bool {
        self.replicas.iter().any(|r| r.len() > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A world of `size` ranks seen from `rank`, for placement only (no collectives).
    #[derive(Debug)]
    struct Fake {
        rank: usize,
        size: usize,
    }

    impl World for Fake {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            self.size
        }
        fn all_gather(&self, _: &[u8]) -> Vec<Vec<u8>> {
            unreachable!("placement needs no collective")
        }
        fn broadcast(&self, _: usize, _: Vec<u8>) -> Vec<u8> {
            unreachable!("placement needs no collective")
        }
        fn gather(&self, _: usize, _: &[u8]) -> Option<Vec<Vec<u8>>> {
            unreachable!("placement needs no collective")
        }
        fn all_reduce_sum(&self, _: &mut [f32]) {}
        fn barrier(&self) {}
        fn split(&self, _: Option<usize>) -> Option<std::sync::Arc<dyn World>> {
            unreachable!("placement needs no collective")
        }
        fn abort(&self, msg: &str) -> ! {
            panic!("{msg}")
        }
    }

    fn scenario(dir: &std::path::Path, agents: &str) -> Scenario {
        std::fs::write(dir.join("r.rhai"), "fn reward(c, ctx) { 1.0 }").expect("write");
        let text =
            format!("dataset: {{prompts: [\"Hi\"]}}\nagents:\n{agents}reward: {{rhai: r.rhai}}\n");
        comlrl_scenario::load_str(&text, &dir.join("s.yaml"), &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn default_is_i_mod_n_and_rank_overrides_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = scenario(
            dir.path(),
            "  - {model: builtin:tiny}\n  - {model: builtin:tiny}\n  - {model: builtin:tiny, rank: 0}\n",
        );
        let p = Placement::new(&s, &Fake { rank: 1, size: 2 }).expect("placement");
        assert_eq!(p.owners, vec![0, 1, 0]);
        assert_eq!(p.local(), vec![1]);
        assert!(p.distributed() && !p.is_local(0) && p.is_local(1));
        let one = Placement::new(&s, &super::super::Single).expect("placement");
        assert_eq!(one, Placement::all_local(3));
        assert_eq!(one.local(), vec![0, 1, 2]);
    }

    #[test]
    fn a_rank_outside_the_world_is_an_error_naming_the_agent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = scenario(
            dir.path(),
            "  - {model: builtin:tiny}\n  - {model: builtin:tiny, rank: 2}\n",
        );
        let e = Placement::new(&s, &Fake { rank: 0, size: 2 })
            .expect_err("rank 2 of 2")
            .to_string();
        assert!(
            e.contains("agents[1].rank is 2") && e.contains("mpirun -np"),
            "{e}"
        );
        // A one-process run ignores `rank`.
        assert!(Placement::new(&s, &super::super::Single).is_ok());
    }

    #[test]
    fn replicas_take_consecutive_ranks_in_agent_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = scenario(
            dir.path(),
            "  - {model: builtin:tiny, replicas: 2}\n  - {model: builtin:tiny, replicas: 2}\n  - {model: builtin:tiny, replicas: 2}\n",
        );
        let p = Placement::new(&s, &Fake { rank: 1, size: 4 }).expect("placement");
        assert_eq!(p.owners, vec![0, 2, 0]);
        assert_eq!(p.replicas, vec![vec![0, 1], vec![2, 3], vec![0, 1]]);
        assert!(p.replicated() && p.holds(0) && !p.is_local(0) && !p.holds(1));
        assert_eq!(p.replica_of(0), Some((1, 2)));
        assert_eq!(p.replica_of(1), None);
        assert!(p.local().is_empty());
        // An explicit rank starts the agent's replicas there, wrapping modulo N.
        let s = scenario(
            dir.path(),
            "  - {model: builtin:tiny, replicas: 3, rank: 2}\n",
        );
        let p = Placement::new(&s, &Fake { rank: 0, size: 4 }).expect("placement");
        assert_eq!(p.replicas, vec![vec![2, 3, 0]]);
        // One process: one copy, whatever `replicas` says.
        let one = Placement::new(&s, &super::super::Single).expect("placement");
        assert!(!one.replicated());
    }

    #[test]
    fn more_replicas_than_ranks_is_an_error_naming_the_agent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = scenario(
            dir.path(),
            "  - {model: builtin:tiny}\n  - {model: builtin:tiny, replicas: 3}\n",
        );
        let e = Placement::new(&s, &Fake { rank: 0, size: 2 })
            .expect_err("3 replicas on 2 ranks")
            .to_string();
        assert!(
            e.contains("agents[1].replicas is 3") && e.contains("mpirun -np 3"),
            "{e}"
        );
    }
}
