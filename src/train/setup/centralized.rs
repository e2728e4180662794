//! CoMLRL's centralized collaboration (`trainer.collaboration_mode: centralized`,
//! `CentralizedMAGRPOTrainer`) as the run the loop trains. CoMLRL builds its MAGRPO trainer with
//! one agent, the actor, whose prompt is the centralized adapter's and whose reward splits each
//! answer into the roles' outputs before the task reward; here the same: the scenario the loop
//! runs has one agent, agent 0 (its model, sampling settings and learning rate) with the joint
//! template of every agent's template, and [`super::Rewards::roles`] makes the reward split.
//! Every part of the loop (sampling, MAGRPO's targets and loss, checkpoints, metrics, final
//! model) then sees a single-agent run, as CoMLRL's does.
use crate::error::{Error, Result};
use crate::train::rollout::centralized::joint_template;
use comlrl_scenario::{CollaborationMode, Scenario};

/// The number of agents a centralized actor answers for (`None`: decentralized).
pub fn roles(s: &Scenario) -> Option<usize> {
    (s.trainer.collaboration_mode == CollaborationMode::Centralized).then_some(s.agents.len())
}

/// The single-agent scenario of `s`'s centralized actor: agent 0 with the joint template.
pub fn actor_scenario(s: &Scenario) -> Result<Scenario> {
    let templates: Vec<_> = s.agents.iter().map(|a| a.template.clone()).collect();
    let mut actor = s.agents.first().cloned().ok_or_else(|| {
        Error::Config("trainer.collaboration_mode: centralized needs agents".into())
    })?;
    actor.template = joint_template(&templates).map_err(|e| {
        Error::Config(format!(
            "trainer.collaboration_mode: centralized: the joint prompt of the agents' templates does not parse ({e})"
        ))
    })?;
    let mut out = s.clone();
    out.agents = vec![actor];
    Ok(out)
}
