//! Which algorithm a scenario trains with: one arm per `trainer.algorithm` value. Adding an
//! algorithm is a folder beside `magrpo/`, a value of `trainer.algorithm` in the scenario crate
//! and its arm here.
use super::algorithm::Algorithm;
use super::magrpo::Magrpo;
use crate::error::Result;
use comlrl_scenario::Scenario;

/// The algorithm `s.trainer.algorithm` names, set up from the scenario (an algorithm with
/// networks of its own loads them here).
pub fn build(s: &Scenario) -> Result<Box<dyn Algorithm>> {
    Ok(match s.trainer.algorithm {
        comlrl_scenario::Algorithm::Magrpo => Box::new(Magrpo::new(s)),
    })
}
