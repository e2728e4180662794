//! The buffer's samples of a rollout under an actor-critic algorithm (CoMLRL's
//! `_collect_rollouts`): each completion's target is its joint action's reward, less
//! `kl_coef` · its reference KL when the penalty is on (CoMLRL's reward shaping). The advantage
//! needs V_old, read in the update round, so the buffer keeps the target in both places (and
//! `zero_advantage_frac` counts targets of 0).
//!
//! A multi-turn episode (CoMLRL's `_collect_rollouts_multi_turn`, one completion per agent and
//! turn) is a chain of nodes, buffered one after the other, turn 0 first; in the update round
//! each node's TD(0) target is r_t + γ · V_old(h_{t+1}) of the next node of its episode, r_T
//! for the last ([`td_targets`]), and each turn is updated as a group of its own
//! ([`turn_groups`]), as CoMLRL's `_process_buffer` does.
use crate::error::{Error, Result};
use crate::train::rollout::joint::completion_returns;
use crate::train::rollout::{Node, NodeSample};

/// `node`'s samples (`k` completions per agent); `alg` names the algorithm in errors.
pub fn single_turn(node: Node, k: usize, kl_coef: f64, alg: &str) -> Result<NodeSample> {
    if !node.children.is_empty() {
        return Err(Error::Internal(format!(
            "{alg} trains single-turn episodes; the rollout has a second turn"
        )));
    }
    let Node {
        turn,
        mut agents,
        joint,
        rewards,
        components,
        ..
    } = node;
    let n = agents.len();
    let returns = completion_returns(&joint, &rewards, n, k);
    for (a, mut r) in agents.iter_mut().zip(returns) {
        for (ret, kl) in r.iter_mut().zip(&a.kl) {
            *ret -= (kl_coef * *kl as f64) as f32;
        }
        a.advantages = r.clone();
        a.returns = r;
    }
    Ok(NodeSample {
        turn,
        agents,
        rewards,
        components,
    })
}

/// The nodes of a multi-turn episode (one completion per agent and node: a chain), turn 0
/// first, each completion's return its shaped reward of that turn alone (the TD target needs
/// V_old, so it is formed in the update round).
pub fn episode(mut node: Node, kl_coef: f64, alg: &str) -> Result<Vec<NodeSample>> {
    let mut out = Vec::new();
    loop {
        if node.joint.len() != 1 || node.children.len() > 1 {
            return Err(Error::Internal(format!(
                "{alg} trains multi-turn episodes of one completion per agent and turn; a node \
                 has {} joint actions and {} children",
                node.joint.len(),
                node.children.len()
            )));
        }
        let next = node.children.pop();
        out.push(single_turn(node, 1, kl_coef, alg)?);
        match next {
            Some(n) => node = n,
            None => return Ok(out),
        }
    }
}

/// TD(0) targets of buffered nodes (one completion each), in buffer order, as CoMLRL 1.4.3's
/// `_collect_rollouts_multi_turn`: r_j + γ · V_old of node j + 1 where that node is the next
/// turn of the same episode (turn `turns[j] + 1`: an episode's nodes are buffered together,
/// turn 0 first), else r_j (the episode's last turn, or an early termination). Summed in f64
/// and rounded to f32, as CoMLRL does with Python floats.
pub fn td_targets(turns: &[usize], rewards: &[f32], old: &[f32], gamma: f64) -> Vec<f32> {
    (0..rewards.len())
        .map(|j| {
            let next = turns.get(j + 1).is_some_and(|&t| t == turns[j] + 1);
            match (next, old.get(j + 1)) {
                (true, Some(&v)) => (rewards[j] as f64 + gamma * v as f64) as f32,
                _ => rewards[j],
            }
        })
        .collect()
}

/// The buffer's indices grouped by turn, the turns in increasing order, each group in buffer
/// order: CoMLRL's `_process_buffer` updates turn after turn, each turn's samples as a buffer
/// of their own (their advantages z-scored together, their mini-batches).
pub fn turn_groups(turns: &[usize]) -> Vec<(usize, Vec<usize>)> {
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (j, &t) in turns.iter().enumerate() {
        groups.entry(t).or_default().push(j);
    }
    groups.into_iter().collect()
}

/// Optimizer steps per agent in a round of `buffer` nodes (for the learning-rate schedule):
/// mini-batches of `batch` nodes, each of the `turns` turns a group of its own holding
/// ⌈`buffer` / `turns`⌉ nodes (rounds take whole episodes; early termination makes it fewer).
pub fn steps_per_round(buffer: usize, batch: usize, turns: usize) -> usize {
    let turns = turns.max(1);
    turns * buffer.div_ceil(turns).div_ceil(batch.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_bootstraps_from_the_next_turn_of_its_episode_only() {
        // Two episodes of two turns, then one cut short after turn 0.
        let turns = [0, 1, 0, 1, 0];
        let r = [1.0, 2.0, 0.0, -1.0, 0.5];
        let v = [0.1, 0.2, 0.3, 0.4, 0.5];
        let t = td_targets(&turns, &r, &v, 0.9);
        let want = [1.0 + 0.9 * 0.2, 2.0, 0.0 + 0.9 * 0.4, -1.0, 0.5];
        for (a, b) in t.iter().zip(want) {
            assert!((*a as f64 - b).abs() < 1e-6, "{t:?}");
        }
        assert_eq!(
            turn_groups(&turns),
            vec![(0, vec![0, 2, 4]), (1, vec![1, 3])]
        );
    }
}
