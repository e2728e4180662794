//! Which algorithm a scenario trains with: one arm per `trainer.algorithm` value. Adding an
//! algorithm is a folder beside `magrpo/`, a value of `trainer.algorithm` in the scenario crate
//! and its arm here.
use super::algorithm::Algorithm;
use super::iac::Iac;
use super::maac::Maac;
use super::madpo::iter::MadpoIter;
use super::madpo::Madpo;
use super::magrpo::Magrpo;
use super::marlhf::iter::MarlhfIter;
use super::marlhf::Marlhf;
use crate::error::Result;
use crate::model::Policy;
use comlrl_scenario::Scenario;

/// The algorithm `s.trainer.algorithm` names, set up from the scenario (an algorithm with
/// networks of its own loads them here, beside the agents this rank holds: `Some` in `agents`;
/// `samples[i]`: this rank holds agent `i`'s first replica, where a network kept in one copy
/// per run, MAAC's critic, lives).
pub fn build(
    s: &Scenario,
    agents: &[Option<Policy>],
    samples: &[bool],
) -> Result<Box<dyn Algorithm>> {
    use comlrl_scenario::Algorithm as A;
    Ok(match s.trainer.algorithm {
        // CoMLRL's MAREINFORCE, MARLOO and MAReMax are its MAGRPO trainer with another
        // `advantage_mode` default; the scenario crate has resolved `trainer.advantage_mode`
        // to theirs (and refused a contradicting one), which `Magrpo::new` reads.
        A::Magrpo | A::Mareinforce | A::Marloo | A::Maremax => Box::new(Magrpo::new(s)),
        A::Madpo => Box::new(Madpo::new(s)),
        A::Iac => Box::new(Iac::new(s, agents)?),
        // MARLHF trains online with its `rl_algorithm` against the reward model it learns
        // first: the MAGRPO family (the scenario crate has resolved `trainer.advantage_mode` to
        // the one named) or an actor-critic (its critic resolved as `trainer.critic`).
        A::Marlhf => Box::new(Marlhf::new(s, online(s, agents, samples)?)?),
        // Iterative MARLHF's online phase: the MAGRPO family only (the scenario crate refuses
        // the actor-critics there).
        A::MarlhfIter => Box::new(MarlhfIter::new(s, agents, online(s, agents, samples)?)?),
        A::Maac => Box::new(Maac::new(s, samples)?),
        A::MadpoIter => Box::new(MadpoIter::new(s, agents)?),
    })
}

/// MARLHF's online algorithm (`preference.rl_algorithm`): the MAGRPO family (the scenario crate
/// has resolved `trainer.advantage_mode` to the one named) or an actor-critic (its critic
/// resolved as `trainer.critic`).
fn online(s: &Scenario, agents: &[Option<Policy>], samples: &[bool]) -> Result<Box<dyn Algorithm>> {
    use comlrl_scenario::RlAlgorithm as R;
    Ok(match s.preference.rl_algorithm {
        R::Magrpo | R::Mareinforce | R::Marloo | R::Maremax => Box::new(Magrpo::new(s)),
        R::Iac => Box::new(Iac::new(s, agents)?),
        R::Maac => Box::new(Maac::new(s, samples)?),
    })
}
