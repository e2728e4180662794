//! The actor-critic actor's loss (IAC and MAAC) over a mini-batch of B samples, one response
//! each: mean_b(−(Σ_t log π(y_b,t | prompt_b, y_b,<t))·Â_b) over the response's tokens (the last
//! included), log-probabilities at temperature 1 (CoMLRL `_policy_eval`), no ratio or
//! clipping. The passes are the shared `train::update::passes`.
use crate::error::Result;
use crate::model::grad::recompute::PassPlan;
use crate::model::Policy;
use crate::train::update::passes::{sequence_grads, Group, SequenceLoss};
use crate::train::update::{LossGrads, Share};
use candle_core::{Tensor, Var};

/// One sample the actor trains on: its prompt, its response and its normalised advantage.
pub struct ActorSample<'a> {
    /// The prompt's token ids.
    pub prompt: &'a [u32],
    /// The response (a one-element slice: the sample's only completion).
    pub response: &'a [Vec<u32>],
    /// Â.
    pub advantage: f32,
}

/// The tokens of `completion` the actor's loss reads: all of them (comlrl, as its MAGRPO), or
/// with `pad_cut` (CoMLRL 1.4.3's `trainer.critic.compat_pad_cut`) those before its first
/// `pad` token, which leaves out the EOS wherever a tokenizer's pad is its EOS.
pub fn trained_tokens(completion: &[u32], pad_cut: Option<u32>) -> Vec<u32> {
    let end = pad_cut
        .and_then(|pad| completion.iter().position(|&t| t == pad))
        .unwrap_or(completion.len());
    completion[..end].to_vec()
}

/// Forward + backward of the actor's loss over `samples` (the gradients of `vars`, in order),
/// each sample its own pass, as `plan` says.
pub fn actor_grads(
    policy: &Policy,
    vars: &[Var],
    samples: &[ActorSample],
    recompute: bool,
    share: Share,
    plan: PassPlan,
) -> Result<LossGrads> {
    let loss = Weights::of(samples);
    sequence_grads(
        policy,
        vars,
        &groups(samples),
        &loss,
        0,
        recompute,
        share,
        plan,
    )
}

/// One group per sample, in order, its one response the row (none where it is empty).
pub(super) fn groups<'a>(samples: &[ActorSample<'a>]) -> Vec<Group<'a>> {
    samples
        .iter()
        .map(|s| Group {
            prompt: s.prompt,
            completions: s.response,
            // An empty response (CoMLRL's pad cut of an answer that is only its EOS) adds no
            // term, but still counts in the mean's 1/B.
            rows: (0..s.response.len())
                .filter(|&r| !s.response[r].is_empty())
                .collect(),
        })
        .collect()
}

/// Each response weighs −Â/B.
pub(super) struct Weights<'a> {
    samples: &'a [ActorSample<'a>],
    /// 1/B.
    scale: f64,
}

impl<'a> Weights<'a> {
    /// The actor's loss over `samples`.
    pub(super) fn of(samples: &'a [ActorSample<'a>]) -> Self {
        Weights {
            samples,
            scale: 1.0 / samples.len().max(1) as f64,
        }
    }
}

impl SequenceLoss for Weights<'_> {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        let a = self.samples[group].advantage as f64;
        rows.iter().map(|_| (-a * self.scale) as f32).collect()
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        let a = self.samples[group].advantage as f64;
        let adv = Tensor::full(a as f32, rows.len(), lp.device())?.to_dtype(lp.dtype())?;
        Ok(((lp.sum(1)? * adv)?.sum_all()?.neg()? * self.scale)?)
    }
}

#[cfg(test)]
mod tests {
    use super::trained_tokens;

    #[test]
    fn the_pad_cut_leaves_out_the_first_pad_and_what_follows() {
        // comlrl trains every sampled token, the EOS included.
        assert_eq!(trained_tokens(&[5, 6, 0], None), [5, 6, 0]);
        // CoMLRL cuts at the first pad: with pad = EOS (0 here) the EOS goes.
        assert_eq!(trained_tokens(&[5, 6, 0], Some(0)), [5, 6]);
        assert_eq!(trained_tokens(&[0], Some(0)), Vec::<u32>::new());
        // A response cut off by max_new_tokens has no pad: nothing goes.
        assert_eq!(trained_tokens(&[5, 6, 7], Some(0)), [5, 6, 7]);
    }
}
