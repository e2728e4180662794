//! The reference KL of a completion: how far the current policy has moved from the frozen
//! initial one on the tokens it sampled, for the KL penalty (`trainer.kl_coef`).
use super::samples::AgentRollout;
use crate::error::Result;
use crate::model::Policy;

/// Per completion, Σ_t k3 = Σ_t [exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1] with ℓ the token log-probs
/// under the current policy and ℓ_ref under the frozen reference (no gradients), and each
/// completion's ℓ_ref (what `kl_in_loss` compares the update's log-probs with).
pub fn kl_k3(
    policy: &Policy,
    reference: &Policy,
    a: &AgentRollout,
) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
    use crate::model::{completion_logprobs, Mode, ScoreLayout};
    let k = a.completions.len();
    if k == 0 || a.completions.iter().all(|c| c.is_empty()) {
        return Ok((vec![0.0; k], vec![vec![]; k]));
    }
    let prompts: Vec<&[u32]> = vec![a.prompt_ids.as_slice(); k];
    let comps: Vec<&[u32]> = a.completions.iter().map(|c| c.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id)?;
    let cur = completion_logprobs(&policy.model, &layout, policy.products(Mode::Infer))?
        .to_vec2::<f32>()?;
    let refl = completion_logprobs(&reference.model, &layout, reference.products(Mode::Infer))?
        .to_vec2::<f32>()?;
    let kl = a
        .completions
        .iter()
        .enumerate()
        .map(|(row, c)| {
            (0..c.len())
                .map(|t| {
                    let d = (refl[row][t] - cur[row][t]) as f64;
                    d.exp() - d - 1.0
                })
                .sum::<f64>() as f32
        })
        .collect();
    let refs = a
        .completions
        .iter()
        .enumerate()
        .map(|(row, c)| refl[row][..c.len()].to_vec())
        .collect();
    Ok((kl, refs))
}
