//! The scenario's reward side, loaded: the joint reward (terms and processors) and the
//! multi-turn transition.
use crate::error::Result;
use comlrl_reward::{RewardStack, TransitionFn};
use comlrl_scenario::Scenario;

/// The joint reward of a run and the transition that writes its next-turn prompts.
pub struct Rewards {
    /// The joint reward.
    pub stack: RewardStack,
    /// The multi-turn transition, when the scenario has one.
    pub transition: Option<Box<dyn TransitionFn>>,
    /// The reward terms' names, in order (metrics columns `reward/<name>`).
    pub names: Vec<String>,
    /// A centralized actor's number of roles: each of its answers is split into that many
    /// outputs for the joint reward (`trainer.collaboration_mode: centralized`); `None`: each
    /// agent's completion is its own output.
    pub roles: Option<usize>,
}

impl Rewards {
    /// Builds the reward stack and loads the transition.
    pub fn load(s: &Scenario) -> Result<Self> {
        let stack = reward_stack(s)?;
        let transition = transition(s)?;
        let names = stack
            .component_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        Ok(Rewards {
            stack,
            transition,
            names,
            roles: super::centralized::roles(s),
        })
    }
}

/// The scenario's joint reward, built from its terms and processors.
pub fn reward_stack(s: &Scenario) -> Result<RewardStack> {
    Ok(RewardStack::build(
        &s.reward.terms,
        &s.reward.processors,
        &s.base_dir,
    )?)
}

/// The loaded multi-turn transition (a Rhai script, or a native plugin isolated in
/// `comlrl plugin-host` unless `isolate: false`), when the scenario has one.
pub fn transition(s: &Scenario) -> Result<Option<Box<dyn TransitionFn>>> {
    match &s.trainer.external_transition {
        Some(t) => Ok(Some(comlrl_reward::load_transition(t)?)),
        None => Ok(None),
    }
}
