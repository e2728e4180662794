//! The training loop's own collectives in a distributed run, as bytes: rank 0's claim on the
//! output directory shared with the others, the metrics window's update statistics gathered to
//! rank 0 (each agent's from the rank that trained it), the stop flag agreed by all ranks, and
//! each agent's end tokens shared when the run starts. A process alone needs none of them
//! (`alone`).
use crate::dist::codec::{Dec, Enc};
use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::train::report::window::Window;
use crate::train::run::dir::RunLock;

/// The run id every rank uses and, on rank 0, the claim itself. `claimed` is rank 0's claim (or
/// the lock its caller took); its error reaches every rank.
pub fn share_claim(
    world: &dyn World,
    claimed: Option<Result<RunLock>>,
) -> Result<(String, Option<RunLock>)> {
    let mut e = Enc::default();
    if let Some(c) = &claimed {
        match c {
            Ok(l) => e.u64(0).str(l.run_id()),
            Err(err) => e.u64(1).str(&err.to_string()),
        };
    }
    let bytes = world.broadcast(0, e.0);
    if let Some(c) = claimed {
        let lock = c?;
        return Ok((lock.run_id().to_string(), Some(lock)));
    }
    let mut d = Dec::new(&bytes, "the run id from rank 0");
    let ok = d.u64()? == 0;
    let text = d.string()?;
    match ok {
        true => Ok((text, None)),
        false => Err(Error::Distributed(format!(
            "rank 0 could not claim the output directory: {text}"
        ))),
    }
}

/// Whether any rank's `flag` is set.
pub fn any(world: &dyn World, flag: bool) -> bool {
    let mut v = [f32::from(u8::from(flag))];
    world.all_reduce_sum(&mut v);
    v[0] > 0.0
}

/// Completes rank 0's window with what only other ranks measured: the loss, gradient norm and
/// update count (and the algorithm's own sums) of the agents they hold, the learning rate (from
/// agent 0's rank), the loss's
/// FLOPs and the forward/backward/optimizer seconds (summed over agents, so over ranks). Every
/// other field is the same on every rank already. A collective.
pub fn merge_window(world: &dyn World, placement: &Placement, w: &mut Window) -> Result<()> {
    let local = placement.local();
    let mut e = Enc::default();
    e.usize(local.len());
    for &i in &local {
        let a = &w.agents[i];
        e.usize(i).f64(a.loss).f64(a.grad_norm).usize(a.updates);
        e.usize(a.extra.len());
        for (name, sum) in &a.extra {
            e.str(name).f64(*sum);
        }
    }
    match w.lr {
        Some(lr) => e.u64(1).f64(lr),
        None => e.u64(0),
    };
    e.f64(w.train_flops)
        .f64(w.phases.forward)
        .f64(w.phases.backward)
        .f64(w.phases.optimizer);
    let Some(packets) = world.gather(0, &e.0) else {
        return Ok(());
    };
    let lr_rank = placement.owners.first().copied().unwrap_or(0);
    for (rank, packet) in packets.iter().enumerate().skip(1) {
        let what = format!("metrics from rank {rank}");
        let mut d = Dec::new(packet, &what);
        for _ in 0..d.usize()? {
            let i = d.usize()?;
            let a = w
                .agents
                .get_mut(i)
                .ok_or_else(|| Error::Distributed(format!("{what}: no agent {i}")))?;
            a.loss = d.f64()?;
            a.grad_norm = d.f64()?;
            a.updates = d.usize()?;
            a.extra.clear();
            for _ in 0..d.usize()? {
                let name = d.string()?;
                a.extra.insert(name, d.f64()?);
            }
        }
        let lr = match d.u64()? {
            0 => None,
            _ => Some(d.f64()?),
        };
        if rank == lr_rank {
            w.lr = lr;
        }
        w.train_flops += d.f64()?;
        w.phases.forward += d.f64()?;
        w.phases.backward += d.f64()?;
        w.phases.optimizer += d.f64()?;
        d.end()?;
    }
    Ok(())
}

/// Fills each agent's EOS ids and pad id (`ends`, `None` where another rank holds the agent)
/// from the rank that holds it, so every rank tells a completion that ended by itself from one
/// cut off at `max_new_tokens` (the metrics' `clipped_ratio`) as one process does. A
/// collective; nothing is sent in a world of one.
pub fn share_ends(world: &dyn World, ends: &mut [Option<(Vec<u32>, u32)>]) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let mut e = Enc::default();
    let held: Vec<usize> = (0..ends.len()).filter(|&i| ends[i].is_some()).collect();
    e.usize(held.len());
    for &i in &held {
        if let Some((eos, pad)) = &ends[i] {
            e.usize(i).u32s(eos).u32s(&[*pad]);
        }
    }
    for (rank, packet) in world.all_gather(&e.0).iter().enumerate() {
        let what = format!("the agents' end tokens from rank {rank}");
        let mut d = Dec::new(packet, &what);
        for _ in 0..d.usize()? {
            let i = d.usize()?;
            let eos = d.u32s()?;
            let pad = match d.u32s()?[..] {
                [pad] => pad,
                _ => {
                    return Err(Error::Distributed(format!(
                        "{what}: agent {i}'s pad id is not one token"
                    )))
                }
            };
            let slot = ends.get_mut(i).ok_or_else(|| {
                Error::Distributed(format!("{what}: agent {i} is not an agent of this run"))
            })?;
            if slot.is_none() {
                *slot = Some((eos, pad));
            }
        }
        d.end()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// One of two ranks: rank 1 hands its gathered packet to `sent`; rank 0 receives `sent`
    /// as rank 1's.
    #[derive(Debug)]
    struct Two {
        rank: usize,
        sent: Arc<Mutex<Vec<u8>>>,
    }

    impl World for Two {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            2
        }
        fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
            // As `gather`, but rank 1 sees only its own packet.
            match self.gather(0, mine) {
                Some(all) => all,
                None => vec![vec![0; 8], mine.to_vec()],
            }
        }
        fn broadcast(&self, _: usize, data: Vec<u8>) -> Vec<u8> {
            data
        }
        fn gather(&self, _: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
            let mut sent = self.sent.lock().expect("lock");
            match self.rank {
                0 => Some(vec![mine.to_vec(), sent.clone()]),
                _ => {
                    *sent = mine.to_vec();
                    None
                }
            }
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

    #[test]
    fn rank_0s_window_gets_the_statistics_of_the_agents_other_ranks_train() {
        let sent = Arc::new(Mutex::new(vec![]));
        let placement = |me| Placement {
            owners: vec![0, 1],
            replicas: vec![vec![0], vec![1]],
            me,
            size: 2,
        };
        let mut theirs = Window::new(2, 0, false, false);
        let a = &mut theirs.agents[1];
        (a.loss, a.grad_norm, a.updates) = (2.0, 3.0, 1);
        a.extra.insert("value_loss".into(), 0.5);
        theirs.train_flops = 7.0;
        let one = Two {
            rank: 1,
            sent: sent.clone(),
        };
        merge_window(&one, &placement(1), &mut theirs).expect("rank 1 sends");
        let mut mine = Window::new(2, 0, false, false);
        mine.agents[0].loss = 1.0;
        mine.train_flops = 1.0;
        let zero = Two { rank: 0, sent };
        merge_window(&zero, &placement(0), &mut mine).expect("rank 0 merges");
        let b = &mine.agents[1];
        assert_eq!((b.loss, b.grad_norm, b.updates), (2.0, 3.0, 1));
        assert_eq!(b.extra.get("value_loss"), Some(&0.5));
        assert_eq!(mine.agents[0].loss, 1.0, "rank 0's own agent is kept");
        assert_eq!(mine.train_flops, 8.0);
    }

    #[test]
    fn every_rank_learns_the_end_tokens_of_the_agents_others_hold() {
        let sent = Arc::new(Mutex::new(vec![]));
        let one = Two {
            rank: 1,
            sent: sent.clone(),
        };
        let mut theirs = vec![None, Some((vec![2, 7], 0))];
        share_ends(&one, &mut theirs).expect("rank 1 sends");
        let zero = Two { rank: 0, sent };
        let mut mine = vec![Some((vec![2], 5)), None];
        share_ends(&zero, &mut mine).expect("rank 0 receives");
        assert_eq!(mine, [Some((vec![2], 5)), Some((vec![2, 7], 0))]);
        // Alone: nothing to learn, nothing sent.
        let mut alone = vec![None];
        share_ends(&crate::dist::Single, &mut alone).expect("alone");
        assert_eq!(alone, [None]);
    }
}
