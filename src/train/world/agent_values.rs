//! Per-agent numbers an update round's losses share across ranks: each rank computes them for
//! the agents it holds (MADPO's per-pair Δ, a central critic's values), and every rank needs
//! every agent's. Sent as f32 bits, so every rank reads exactly what the holder computed and a
//! run on ranks adds the same numbers as one process.
use crate::dist::codec::{Dec, Enc};
use crate::dist::World;
use crate::error::{Error, Result};

/// All-gathers `mine` (agent index, its values) over `world` and returns each of the `agents`'
/// values, in agent order. An agent's replicas send identical values: the lowest rank's are
/// kept. `what` names the values in errors (e.g. "MADPO's Δ of mini-batch 3"). A collective.
pub fn share_agent_values(
    world: &dyn World,
    mine: &[(usize, Vec<f32>)],
    agents: usize,
    what: &str,
) -> Result<Vec<Vec<f32>>> {
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; agents];
    if world.size() == 1 {
        for (i, v) in mine {
            place(&mut slots, *i, v.clone(), what, 0)?;
        }
    } else {
        let mut e = Enc::default();
        e.usize(mine.len());
        for (i, v) in mine {
            e.usize(*i).f32s(v);
        }
        let packets = world.all_gather(&e.0);
        log::debug!("{what}: {} bytes all-gathered from this rank", e.0.len());
        for (rank, packet) in packets.iter().enumerate() {
            let from = format!("{what} from rank {rank}");
            let mut d = Dec::new(packet, &from);
            for _ in 0..d.usize()? {
                let i = d.usize()?;
                let v = d.f32s()?;
                place(&mut slots, i, v, what, rank)?;
            }
            d.end()?;
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.ok_or_else(|| {
                Error::Distributed(format!(
                    "{what}: no rank holds agent {i} (ranks disagree on the placement?)"
                ))
            })
        })
        .collect()
}

/// Keeps the first values of agent `i` seen (a replica's are the same numbers).
fn place(
    slots: &mut [Option<Vec<f32>>],
    i: usize,
    v: Vec<f32>,
    what: &str,
    rank: usize,
) -> Result<()> {
    let slot = slots.get_mut(i).ok_or_else(|| {
        Error::Distributed(format!(
            "{what} from rank {rank}: agent {i} is not an agent of this run"
        ))
    })?;
    if let Some(first) = slot {
        if first.len() != v.len() {
            return Err(Error::Distributed(format!(
                "{what} from rank {rank}: agent {i} has {} values here and {} on another rank",
                v.len(),
                first.len()
            )));
        }
        return Ok(());
    }
    *slot = Some(v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Rank 0 of two, whose other rank holds agent 1 (and a replica of agent 0).
    #[derive(Debug)]
    struct Two {
        theirs: Vec<u8>,
    }

    impl World for Two {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            2
        }
        fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
            vec![mine.to_vec(), self.theirs.clone()]
        }
        fn broadcast(&self, _: usize, data: Vec<u8>) -> Vec<u8> {
            data
        }
        fn gather(&self, _: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
            Some(vec![mine.to_vec()])
        }
        fn all_reduce_sum(&self, _: &mut [f32]) {}
        fn barrier(&self) {}
        fn split(&self, _: Option<usize>) -> Option<Arc<dyn World>> {
            None
        }
        fn abort(&self, msg: &str) -> ! {
            panic!("{msg}")
        }
    }

    fn packet(values: &[(usize, Vec<f32>)]) -> Vec<u8> {
        let mut e = Enc::default();
        e.usize(values.len());
        for (i, v) in values {
            e.usize(*i).f32s(v);
        }
        e.0
    }

    #[test]
    fn every_agent_s_values_reach_every_rank_bit_for_bit() {
        let tiny = f32::from_bits(1);
        let world = Two {
            theirs: packet(&[(0, vec![9.0, 9.0]), (1, vec![tiny, -0.0])]),
        };
        let all = share_agent_values(&world, &[(0, vec![1.5, -2.0])], 2, "Δ").unwrap();
        // Agent 0's lowest rank wins over its replica's copy.
        assert_eq!(all[0], [1.5, -2.0]);
        assert_eq!(all[1][0].to_bits(), 1);
        assert!(all[1][1].is_sign_negative());
    }

    #[test]
    fn an_agent_no_rank_holds_is_an_error_naming_it() {
        let world = Two {
            theirs: packet(&[]),
        };
        let err = share_agent_values(&world, &[(0, vec![1.0])], 2, "MADPO's Δ")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("agent 1") && err.contains("MADPO's Δ"),
            "{err}"
        );
        let world = Two {
            theirs: packet(&[(7, vec![1.0])]),
        };
        let err = share_agent_values(&world, &[(0, vec![1.0])], 2, "Δ")
            .unwrap_err()
            .to_string();
        assert!(err.contains("agent 7") && err.contains("rank 1"), "{err}");
    }

    #[test]
    fn alone_nothing_is_sent() {
        let all = share_agent_values(
            &crate::dist::Single,
            &[(1, vec![2.0]), (0, vec![1.0])],
            2,
            "Δ",
        )
        .unwrap();
        assert_eq!(all, [vec![1.0], vec![2.0]]);
    }
}
