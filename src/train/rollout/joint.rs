//! Joint actions of N agents with K completions each, and each completion's return.
//! `aligned`: joint action j = the j-th completion of every agent (K per prompt).
//! `cross`: every combination (K^N); a completion's return sums the rewards of the combinations
//! it takes part in (CoMLRL's semantics).
use crate::error::{Error, Result};
use comlrl_scenario::Scenario;

/// Joint actions per prompt: `k` aligned, `k^agents` crossed; `None` when that overflows.
pub fn joint_count(agents: usize, k: usize, cross: bool) -> Option<usize> {
    if cross {
        k.checked_pow(u32::try_from(agents).ok()?)
    } else {
        Some(k)
    }
}

/// Indices (one completion index per agent) of every joint action, in a fixed order.
pub fn joint_actions(agents: usize, k: usize, cross: bool) -> Vec<Vec<usize>> {
    if !cross {
        return (0..k).map(|j| vec![j; agents]).collect();
    }
    // The scenario bounds `k^agents` (trainer.max_joint_actions) before any rollout.
    let total = joint_count(agents, k, true).expect("joint actions bounded at scenario load");
    (0..total)
        .map(|mut idx| {
            let mut combo = vec![0; agents];
            for slot in combo.iter_mut().rev() {
                *slot = idx % k;
                idx /= k;
            }
            combo
        })
        .collect()
}

/// Per-agent returns `[agent][completion]` from the rewards of `joint` actions.
pub fn completion_returns(
    joint: &[Vec<usize>],
    rewards: &[f32],
    agents: usize,
    k: usize,
) -> Vec<Vec<f32>> {
    let mut out = vec![vec![0f32; k]; agents];
    for (combo, r) in joint.iter().zip(rewards) {
        for (agent, &c) in combo.iter().enumerate() {
            out[agent][c] += r;
        }
    }
    out
}

/// Fails when a rollout node would score more joint actions than `trainer.max_joint_actions`
/// (the scenario loader checks this too; a hand-built plan is checked here).
pub fn check_joint_actions(s: &Scenario) -> Result<()> {
    let t = &s.trainer;
    let cross = t.joint_mode == comlrl_scenario::JointMode::Cross;
    if !cross || s.agents.len() < 2 {
        return Ok(());
    }
    match joint_count(s.agents.len(), t.num_generations, cross) {
        Some(n) if n <= t.max_joint_actions => Ok(()),
        n => Err(Error::Config(format!(
            "trainer.joint_mode: {} joint actions per prompt ({} generations, {} agents) exceed \
             trainer.max_joint_actions ({})",
            n.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string()),
            t.num_generations,
            s.agents.len(),
            t.max_joint_actions
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_pairs_same_index() {
        assert_eq!(
            joint_actions(2, 3, false),
            vec![vec![0, 0], vec![1, 1], vec![2, 2]]
        );
        let r = completion_returns(&joint_actions(2, 3, false), &[1.0, 2.0, 3.0], 2, 3);
        assert_eq!(r, vec![vec![1.0, 2.0, 3.0], vec![1.0, 2.0, 3.0]]);
    }

    #[test]
    fn cross_covers_every_combination() {
        let j = joint_actions(2, 2, true);
        assert_eq!(j, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
        let r = completion_returns(&j, &[1.0, 2.0, 3.0, 4.0], 2, 2);
        assert_eq!(r, vec![vec![3.0, 7.0], vec![4.0, 6.0]]);
        assert_eq!(joint_actions(3, 2, true).len(), 8);
    }
}
