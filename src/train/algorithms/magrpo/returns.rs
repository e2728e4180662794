//! Returns in a rollout tree, as CoMLRL's MAGRPO computes them: a joint action's return is its
//! reward plus γ times the mean return of its child node's joint actions (none at the last turn
//! or where the branch terminated early); each completion's return sums the returns of the
//! joint actions it takes part in (`rollout::joint::completion_returns`).
use crate::train::rollout::Node;

/// Returns of a node's joint actions: reward + discount · mean(child returns).
pub fn joint_returns(node: &Node, discount: f64) -> Vec<f32> {
    if node.children.is_empty() {
        return node.rewards.clone();
    }
    node.rewards
        .iter()
        .zip(&node.children)
        .map(|(r, child)| {
            let cr = joint_returns(child, discount);
            let m = cr.iter().map(|&x| x as f64).sum::<f64>() / cr.len().max(1) as f64;
            (*r as f64 + discount * m) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rewards: Vec<f32>, children: Vec<Node>) -> Node {
        Node {
            turn: 0,
            agents: vec![],
            joint: vec![],
            rewards,
            components: vec![],
            children,
        }
    }

    #[test]
    fn returns_add_discounted_mean_of_children() {
        let leaf = |r: Vec<f32>| node(r, vec![]);
        let root = node(
            vec![1.0, 2.0],
            vec![leaf(vec![0.0, 4.0]), leaf(vec![1.0, 1.0])],
        );
        assert_eq!(
            joint_returns(&root, 0.5),
            vec![1.0 + 0.5 * 2.0, 2.0 + 0.5 * 1.0]
        );
        assert_eq!(joint_returns(&leaf(vec![3.0]), 0.9), vec![3.0]);
    }
}
