//! What the ranks of a distributed run exchange during a rollout, as bytes: each rank's sampled
//! completions (all-gathered, so every rank sees every agent's), rank 0's rewards and next-turn
//! prompts (broadcast: scripts and plugins run in one place), and the reference KL of each
//! rank's agents. A process alone exchanges nothing (`alone`).
use crate::dist::codec::{Dec, Enc};
use crate::dist::World;
use crate::error::{Error, Result};
use crate::train::rollout::AgentRollout;
use comlrl_reward::{RewardError, Scored};

/// All-gathers the rollouts sampled here (`mine[j]` is agent `local[j]`'s, with its prompt
/// `prompts[local[j]]`): returns every agent's rollout and fills `prompts` for the others.
pub fn share_rollouts(
    world: &dyn World,
    local: &[usize],
    mine: Vec<AgentRollout>,
    prompts: &mut [String],
) -> Result<Vec<AgentRollout>> {
    let n = prompts.len();
    let mut e = Enc::default();
    e.usize(mine.len());
    for (&i, a) in local.iter().zip(&mine) {
        e.usize(i).str(&prompts[i]).u32s(&a.prompt_ids);
        e.usize(a.completions.len());
        for (c, t) in a.completions.iter().zip(&a.texts) {
            e.u32s(c).str(t);
        }
        // The sampling-time log-probs a clipped ratio needs (none when it is off).
        e.usize(a.sampling_logprobs.len());
        for lp in &a.sampling_logprobs {
            e.f32s(lp);
        }
    }
    let mut slots: Vec<Option<AgentRollout>> = vec![None; n];
    let packets = world.all_gather(&e.0);
    log::debug!(
        "completions all-gathered: {} bytes sent, {} received",
        e.0.len(),
        packets.iter().map(Vec::len).sum::<usize>() - e.0.len()
    );
    for (rank, packet) in packets.iter().enumerate() {
        let what = format!("completions from rank {rank}");
        let mut d = Dec::new(packet, &what);
        for _ in 0..d.usize()? {
            let i = d.usize()?;
            if i >= n || slots[i].is_some() {
                return Err(Error::Distributed(format!(
                    "{what}: agent {i} is not an agent of this run or was sampled twice \
                     (ranks disagree on the placement?)"
                )));
            }
            prompts[i] = d.string()?;
            let prompt_ids = d.u32s()?;
            let k = d.usize()?;
            let (mut completions, mut texts) = (Vec::new(), Vec::new());
            for _ in 0..k {
                completions.push(d.u32s()?);
                texts.push(d.string()?);
            }
            let kept = d.usize()?;
            if kept != 0 && kept != k {
                return Err(Error::Distributed(format!(
                    "{what}: agent {i} has sampling log-probs for {kept} of its {k} completions"
                )));
            }
            let mut logprobs = Vec::new();
            for c in completions.iter().take(kept) {
                let lp = d.f32s()?;
                if lp.len() != c.len() {
                    return Err(Error::Distributed(format!(
                        "{what}: agent {i} has {} sampling log-probs for a completion of {} tokens",
                        lp.len(),
                        c.len()
                    )));
                }
                logprobs.push(lp);
            }
            let mut a = AgentRollout::sampled(prompt_ids, completions, texts);
            a.sampling_logprobs = logprobs;
            slots[i] = Some(a);
        }
        d.end()?;
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.ok_or_else(|| Error::Distributed(format!("agent {i} was sampled by no rank")))
        })
        .collect()
}

/// Rank 0 runs `score` and broadcasts the outcome; every rank returns the same rewards and
/// components, or the same error (a `skip_step` failure stays one, so the step is skipped
/// everywhere).
pub fn root_scores(
    world: &dyn World,
    score: impl FnOnce() -> std::result::Result<Vec<Scored>, RewardError>,
) -> Result<Vec<Scored>> {
    let mut e = Enc::default();
    let mut own = None;
    if world.is_root() {
        match score() {
            Ok(s) => {
                e.u64(0).usize(s.len());
                for x in &s {
                    e.f32(x.reward).f32s(&x.components);
                }
                own = Some(Ok(s));
            }
            Err(err) => {
                match &err {
                    RewardError::SkipStep { term, source } => {
                        e.u64(1).str(term).str(&source.to_string())
                    }
                    other => e.u64(2).str(&other.to_string()),
                };
                own = Some(Err(err));
            }
        }
    }
    let bytes = world.broadcast(0, e.0);
    log::debug!("rewards broadcast: {} bytes", bytes.len());
    if let Some(own) = own {
        return own.map_err(Error::from);
    }
    let mut d = Dec::new(&bytes, "rewards from rank 0");
    match d.u64()? {
        0 => {
            let n = d.usize()?;
            let mut out = Vec::with_capacity(n.min(1 << 20));
            for _ in 0..n {
                let reward = d.f32()?;
                let components = d.f32s()?;
                out.push(Scored { reward, components });
            }
            d.end()?;
            Ok(out)
        }
        1 => {
            let term = d.string()?;
            let msg = d.string()?;
            Err(Error::Reward(RewardError::SkipStep {
                term,
                source: Box::new(RewardError::Config(format!("(on rank 0) {msg}"))),
            }))
        }
        _ => Err(Error::Distributed(format!(
            "the reward failed on rank 0: {}",
            d.string()?
        ))),
    }
}

/// Rank 0 runs `next` (the external transition) and broadcasts the prompts it wrote, or its
/// error (a `skip_step` failure stays one, so the step is skipped everywhere).
pub fn root_prompts(
    world: &dyn World,
    next: impl FnOnce() -> Result<Vec<String>>,
) -> Result<Vec<String>> {
    let mut e = Enc::default();
    let mut own = None;
    if world.is_root() {
        let r = next();
        match &r {
            Ok(v) => {
                e.u64(0).usize(v.len());
                for p in v {
                    e.str(p);
                }
            }
            Err(Error::Reward(RewardError::SkipStep { term, source })) => {
                e.u64(2).str(term).str(&source.to_string());
            }
            Err(err) => {
                e.u64(1).str(&err.to_string());
            }
        }
        own = Some(r);
    }
    let bytes = world.broadcast(0, e.0);
    if let Some(own) = own {
        return own;
    }
    let mut d = Dec::new(&bytes, "next-turn prompts from rank 0");
    match d.u64()? {
        0 => {}
        2 => {
            let term = d.string()?;
            let msg = d.string()?;
            return Err(Error::Reward(RewardError::SkipStep {
                term,
                source: Box::new(RewardError::Config(format!("(on rank 0) {msg}"))),
            }));
        }
        _ => {
            return Err(Error::Distributed(format!(
                "the transition failed on rank 0: {}",
                d.string()?
            )))
        }
    }
    let v = (0..d.usize()?)
        .map(|_| d.string())
        .collect::<Result<Vec<_>>>()?;
    d.end()?;
    Ok(v)
}

/// All-gathers each agent's per-completion reference KL from the rank that holds it.
pub fn share_kl(world: &dyn World, agents: &mut [AgentRollout], local: &[usize]) -> Result<()> {
    let mut e = Enc::default();
    e.usize(local.len());
    for &i in local {
        e.usize(i).f32s(&agents[i].kl);
        e.usize(agents[i].ref_logprobs.len());
        for r in &agents[i].ref_logprobs {
            e.f32s(r);
        }
    }
    for (rank, packet) in world.all_gather(&e.0).iter().enumerate() {
        let what = format!("reference KL from rank {rank}");
        let mut d = Dec::new(packet, &what);
        for _ in 0..d.usize()? {
            let i = d.usize()?;
            let kl = d.f32s()?;
            let refs = (0..d.usize()?)
                .map(|_| d.f32s())
                .collect::<Result<Vec<_>>>()?;
            let slot = agents
                .get_mut(i)
                .ok_or_else(|| Error::Distributed(format!("{what}: no agent {i}")))?;
            slot.kl = kl;
            slot.ref_logprobs = refs;
        }
        d.end()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::Single;

    /// The sampling-time log-probs of a clipped ratio travel with the completions, and a
    /// rollout without them arrives without them.
    #[test]
    fn reference_logprobs_travel_with_the_kl() {
        // Encoded and decoded back into the slot (one process): what another rank receives.
        let mut a = AgentRollout::sampled(vec![1], vec![vec![2, 3], vec![4]], vec![]);
        a.kl = vec![0.25, 0.5];
        a.ref_logprobs = vec![vec![-0.5, -1.25], vec![-2.0]];
        let sent = a.clone();
        let mut agents = vec![a];
        share_kl(&Single, &mut agents, &[0]).unwrap();
        assert_eq!(agents[0].kl, sent.kl);
        assert_eq!(agents[0].ref_logprobs, sent.ref_logprobs);
    }

    #[test]
    fn sampling_logprobs_travel_with_the_completions() {
        let mut with = AgentRollout::sampled(
            vec![1],
            vec![vec![2, 3], vec![4]],
            vec!["a".into(), "b".into()],
        );
        with.sampling_logprobs = vec![vec![-0.5, -1.25], vec![-2.0]];
        let without = AgentRollout::sampled(vec![5], vec![vec![6]], vec!["c".into()]);
        let mut prompts = vec![String::from("p0"), String::from("p1")];
        let got =
            share_rollouts(&Single, &[0, 1], vec![with.clone(), without], &mut prompts).unwrap();
        assert_eq!(got[0].completions, with.completions);
        assert_eq!(got[0].sampling_logprobs, with.sampling_logprobs);
        assert!(got[1].sampling_logprobs.is_empty());
    }
}
