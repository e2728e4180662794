//! The buffer's samples of a single-turn rollout under an actor-critic algorithm (CoMLRL's
//! `_collect_rollouts`): each completion's target is its joint action's reward, less
//! `kl_coef` · its reference KL when the penalty is on (CoMLRL's reward shaping). The advantage
//! needs V_old, read in the update round, so the buffer keeps the target in both places (and
//! `zero_advantage_frac` counts targets of 0).
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
