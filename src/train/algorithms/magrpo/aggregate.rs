//! `trainer.reward_aggregation: normalize_then_sum` (GDPO; TRL's `multi_objective_aggregation`):
//! the return a node's joint actions train on is Σ_t w_t · (x_t − mean_t) / (std_t + 1e-4), each
//! reward term z-scored over the node's joint actions before the weighted sum, so that a term
//! with a wide range does not drown the others. mean and std are NaN-aware and std is the sample
//! one, as TRL's `nanmean` and `nanstd`; a term value that is NaN adds nothing. The tree's
//! logged rewards are left as they are: only the returns are computed from these.
use crate::train::rollout::Node;

/// TRL's epsilon under the spread.
const EPS: f64 = 1e-4;

/// The training rewards of one node's joint actions from their raw term values
/// (`components[joint][term]`) and the terms' weights.
pub fn normalized_term_sum(components: &[Vec<f32>], weights: &[f64]) -> Vec<f32> {
    let n = components.len();
    let mut out = vec![0.0f64; n];
    for (t, &w) in weights.iter().enumerate() {
        let xs: Vec<f64> = components
            .iter()
            .map(|c| c.get(t).map_or(f64::NAN, |&v| v as f64))
            .collect();
        let finite: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
        if finite.is_empty() {
            continue;
        }
        let count = finite.len() as f64;
        let mean = finite.iter().sum::<f64>() / count;
        // One value has no spread (TRL: zeros with one generation).
        let std = if finite.len() > 1 {
            (finite.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (count - 1.0)).sqrt()
        } else {
            0.0
        };
        for (o, x) in out.iter_mut().zip(&xs) {
            if !x.is_nan() {
                *o += w * (x - mean) / (std + EPS);
            }
        }
    }
    out.into_iter().map(|x| x as f32).collect()
}

/// Replaces every node's rewards in `node`'s tree by [`normalized_term_sum`] of its terms and
/// returns the replaced rewards in creation order (the node first, then its children's
/// subtrees), for the samples to log.
pub fn renormalize_tree(node: &mut Node, weights: &[f64]) -> Vec<Vec<f32>> {
    let mut logged = vec![];
    swap_in(node, weights, &mut logged);
    logged
}

fn swap_in(node: &mut Node, weights: &[f64], logged: &mut Vec<Vec<f32>>) {
    let trained = normalized_term_sum(&node.components, weights);
    logged.push(std::mem::replace(&mut node.rewards, trained));
    for child in &mut node.children {
        swap_in(child, weights, logged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_term_is_z_scored_before_the_weighted_sum() {
        // Term 0 spans 0..300, term 1 spans 0..1: after z-scoring both weigh alike.
        let c = vec![vec![0.0, 1.0], vec![300.0, 0.0], vec![150.0, 0.5]];
        let got = normalized_term_sum(&c, &[1.0, 2.0]);
        let z0 = [-1.0, 1.0, 0.0];
        let z1 = [1.0, -1.0, 0.0];
        for j in 0..3 {
            // std of (0, 300, 150) is 150, of (1, 0, 0.5) is 0.5 (sample).
            let want = z0[j] * 150.0 / (150.0 + EPS) + 2.0 * z1[j] * 0.5 / (0.5 + EPS);
            assert!((got[j] as f64 - want).abs() < 1e-6, "{got:?}");
        }
        // NaN values are left out of the statistics and add nothing.
        let c = vec![vec![1.0, f32::NAN], vec![3.0, 2.0], vec![5.0, 2.0]];
        let got = normalized_term_sum(&c, &[1.0, 1.0]);
        assert!((got[0] as f64 + 2.0 / (2.0 + EPS)).abs() < 1e-6);
        assert!(got.iter().all(|x| x.is_finite()));
    }
}
