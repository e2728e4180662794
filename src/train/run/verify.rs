//! Checks a checkpoint's `state.json` against the scenario it is resumed with: every array
//! length (agents, buffered rollouts, metrics window) and the step, so that a damaged or
//! mismatched checkpoint is an error naming the file and field instead of a panic mid-run.
use super::state::TrainState;
use crate::error::{Error, Result};
use std::path::Path;

/// What the scenario being resumed expects of the state.
pub struct Expect {
    /// Number of agents.
    pub agents: usize,
    /// Completions per agent and node (`num_generations`).
    pub k: usize,
    /// Joint actions per node.
    pub joint: usize,
    /// Reward terms.
    pub terms: usize,
    /// Turns per episode.
    pub turns: usize,
    /// Training steps of the whole run.
    pub total_steps: usize,
    /// Training epochs.
    pub epochs: usize,
    /// Each agent's vocabulary size (buffered token ids must be below it; `usize::MAX` for
    /// an agent held by another rank).
    pub vocab: Vec<usize>,
    /// Each agent's rank in a distributed run (empty: one process).
    pub ranks: Vec<usize>,
    /// What each agent trains (`TrainState::trained`).
    pub trained: Vec<String>,
}

/// Checks `s`, read from `path`, against `e`; the error names the field that does not fit.
pub fn check_state(s: &TrainState, e: &Expect, path: &Path) -> Result<()> {
    let bad = |field: String, msg: String| {
        Err(Error::checkpoint(
            path,
            format!(
                "field `{field}` {msg}; the checkpoint does not fit this scenario (or is damaged)"
            ),
        ))
    };
    if s.step > e.total_steps {
        return bad(
            "step".into(),
            format!("is {}, beyond the run's {} steps", s.step, e.total_steps),
        );
    }
    if s.opt_steps.len() != e.agents {
        return bad(
            "opt_steps".into(),
            format!("has {} entries for {} agents", s.opt_steps.len(), e.agents),
        );
    }
    if s.epoch_rewards.len() > e.epochs {
        return bad(
            "epoch_rewards".into(),
            format!(
                "has {} entries for {} epochs",
                s.epoch_rewards.len(),
                e.epochs
            ),
        );
    }
    if s.window.agents.len() != e.agents {
        return bad(
            "window.agents".into(),
            format!(
                "has {} entries for {} agents",
                s.window.agents.len(),
                e.agents
            ),
        );
    }
    if s.window.components.len() != e.terms {
        return bad(
            "window.components".into(),
            format!(
                "has {} entries for {} reward terms",
                s.window.components.len(),
                e.terms
            ),
        );
    }
    for (b, node) in s.buffer.iter().enumerate() {
        let at = |f: &str| format!("buffer[{b}].{f}");
        if node.turn >= e.turns {
            return bad(
                at("turn"),
                format!("is {}, the scenario has {} turns", node.turn, e.turns),
            );
        }
        if node.agents.len() != e.agents {
            return bad(
                at("agents"),
                format!("has {} entries for {} agents", node.agents.len(), e.agents),
            );
        }
        if node.rewards.len() != e.joint {
            return bad(
                at("rewards"),
                format!(
                    "has {} entries for {} joint actions",
                    node.rewards.len(),
                    e.joint
                ),
            );
        }
        if node.components.len() != e.joint {
            return bad(
                at("components"),
                format!(
                    "has {} entries for {} joint actions",
                    node.components.len(),
                    e.joint
                ),
            );
        }
        if let Some((j, c)) = node
            .components
            .iter()
            .enumerate()
            .find(|(_, c)| c.len() != e.terms)
        {
            return bad(
                at(&format!("components[{j}]")),
                format!("has {} entries for {} reward terms", c.len(), e.terms),
            );
        }
        for (i, a) in node.agents.iter().enumerate() {
            let lens = [
                ("completions", a.completions.len()),
                ("texts", a.texts.len()),
                ("returns", a.returns.len()),
                ("advantages", a.advantages.len()),
            ];
            for (name, n) in lens {
                if n != e.k {
                    return bad(
                        at(&format!("agents[{i}].{name}")),
                        format!("has {n} entries for {} generations", e.k),
                    );
                }
            }
            let vocab = e.vocab.get(i).copied().unwrap_or(0);
            let ids = a.prompt_ids.iter().chain(a.completions.iter().flatten());
            if let Some(id) = ids.copied().find(|&id| id as usize >= vocab) {
                return bad(
                    at(&format!("agents[{i}]")),
                    format!("holds token id {id}, outside the model's vocabulary of {vocab}"),
                );
            }
            if !a.kl.is_empty() && a.kl.len() != e.k {
                return bad(
                    at(&format!("agents[{i}].kl")),
                    format!("has {} entries for {} generations", a.kl.len(), e.k),
                );
            }
        }
    }
    Ok(())
}
