//! What an update round's losses share across ranks: per-agent numbers each rank computes for
//! the agents it holds (MADPO's per-pair Δ, the agents' decoded prompts MAAC's critic reads),
//! which every rank needs for every agent, and what only one rank computes for all (MAAC's
//! critic: the advantages and its statistics). Numbers go as their bits, so every rank reads
//! exactly what the holder computed and a run on ranks adds the same numbers as one process.
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
    share(
        world,
        mine,
        agents,
        what,
        |e, v| {
            e.f32s(v);
        },
        |d| d.f32s(),
    )
}

/// [`share_agent_values`] for texts (each agent's decoded prompts, say).
pub fn share_agent_texts(
    world: &dyn World,
    mine: &[(usize, Vec<String>)],
    agents: usize,
    what: &str,
) -> Result<Vec<Vec<String>>> {
    share(
        world,
        mine,
        agents,
        what,
        |e, v| {
            e.usize(v.len());
            for t in v {
                e.str(t);
            }
        },
        |d| (0..d.usize()?).map(|_| d.string()).collect(),
    )
}

/// What only the ranks holding something compute (MAAC's critic: its rank's advantages and
/// statistics), on every rank: `mine` is `Some` where it is held (the bytes, or the error that
/// stopped it there, which then reaches every rank), `None` elsewhere; the lowest holding
/// rank's is kept. A collective.
pub fn share_from_holder(
    world: &dyn World,
    mine: Option<Result<Vec<u8>>>,
    what: &str,
) -> Result<Vec<u8>> {
    if world.size() == 1 {
        return mine.unwrap_or_else(|| {
            Err(Error::Internal(format!(
                "{what}: this process holds nothing"
            )))
        });
    }
    let mut e = Enc::default();
    let mut own_error = None;
    match mine {
        None => {
            e.usize(0);
        }
        Some(Ok(bytes)) => {
            e.usize(1).bytes(&bytes);
        }
        Some(Err(err)) => {
            e.usize(2).str(&err.to_string());
            own_error = Some(err);
        }
    }
    let packets = world.all_gather(&e.0);
    log::debug!("{what}: {} bytes all-gathered from this rank", e.0.len());
    for (rank, packet) in packets.iter().enumerate() {
        let from = format!("{what} from rank {rank}");
        let mut d = Dec::new(packet, &from);
        match d.usize()? {
            0 => continue,
            1 => {
                let bytes = d.bytes()?.to_vec();
                d.end()?;
                return Ok(bytes);
            }
            2 => {
                let msg = d.string()?;
                return Err(match own_error {
                    Some(err) if rank == world.rank() => err,
                    _ => Error::Distributed(format!("{what}: rank {rank} failed: {msg}")),
                });
            }
            tag => {
                return Err(Error::Distributed(format!(
                    "{from}: unknown tag {tag} (ranks run different binaries?)"
                )))
            }
        }
    }
    Err(Error::Distributed(format!(
        "{what}: no rank holds it (ranks disagree on the placement?)"
    )))
}

/// All-gathers each rank's per-agent items (`enc` writes one, `dec` reads it back) and returns
/// every agent's, in agent order, the lowest rank's where several send one (replicas).
fn share<T: Clone>(
    world: &dyn World,
    mine: &[(usize, T)],
    agents: usize,
    what: &str,
    enc: impl Fn(&mut Enc, &T),
    dec: impl Fn(&mut Dec) -> Result<T>,
) -> Result<Vec<T>> {
    let mut slots: Vec<Option<T>> = vec![None; agents];
    if world.size() == 1 {
        for (i, v) in mine {
            place(&mut slots, *i, v.clone(), what, 0)?;
        }
    } else {
        let mut e = Enc::default();
        e.usize(mine.len());
        for (i, v) in mine {
            e.usize(*i);
            enc(&mut e, v);
        }
        let packets = world.all_gather(&e.0);
        log::debug!("{what}: {} bytes all-gathered from this rank", e.0.len());
        for (rank, packet) in packets.iter().enumerate() {
            let from = format!("{what} from rank {rank}");
            let mut d = Dec::new(packet, &from);
            for _ in 0..d.usize()? {
                let i = d.usize()?;
                let v = dec(&mut d)?;
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

/// Keeps the first item of agent `i` seen (a replica's is the same).
fn place<T>(slots: &mut [Option<T>], i: usize, v: T, what: &str, rank: usize) -> Result<()> {
    let slot = slots.get_mut(i).ok_or_else(|| {
        Error::Distributed(format!(
            "{what} from rank {rank}: agent {i} is not an agent of this run"
        ))
    })?;
    if slot.is_none() {
        *slot = Some(v);
    }
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

    #[test]
    fn texts_travel_too() {
        let mut e = Enc::default();
        e.usize(1).usize(1).usize(2).str("[Agent 1] b").str("ü");
        let world = Two { theirs: e.0 };
        let all =
            share_agent_texts(&world, &[(0, vec!["a".into(), "c".into()])], 2, "prompts").unwrap();
        assert_eq!(all, [vec!["a", "c"], vec!["[Agent 1] b", "ü"]]);
    }

    #[test]
    fn what_one_rank_computes_reaches_the_others_with_its_error() {
        let held = |tag: usize, body: &dyn Fn(&mut Enc)| {
            let mut e = Enc::default();
            e.usize(tag);
            body(&mut e);
            Two { theirs: e.0 }
        };
        // Rank 1 holds it: rank 0 gets its bytes.
        let world = held(1, &|e| {
            e.bytes(&[7, 8]);
        });
        assert_eq!(share_from_holder(&world, None, "critic").unwrap(), [7, 8]);
        // Rank 1 failed: rank 0 reports it, naming the rank.
        let world = held(2, &|e| {
            e.str("V_old is NaN");
        });
        let err = share_from_holder(&world, None, "the critic's advantages")
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 1 failed: V_old is NaN"), "{err}");
        // This rank failed: its own error comes back unchanged.
        let world = held(0, &|_| {});
        let err = share_from_holder(
            &world,
            Some(Err(Error::Config("lower the learning rate".into()))),
            "critic",
        )
        .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
        // Nobody holds it.
        let world = held(0, &|_| {});
        let err = share_from_holder(&world, None, "critic")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no rank holds it"), "{err}");
    }
}
