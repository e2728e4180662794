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
    let groups: Vec<Group> = samples
        .iter()
        .map(|s| Group {
            prompt: s.prompt,
            completions: s.response,
            rows: (0..s.response.len()).collect(),
        })
        .collect();
    let loss = Weights {
        samples,
        scale: 1.0 / samples.len().max(1) as f64,
    };
    sequence_grads(policy, vars, &groups, &loss, 0, recompute, share, plan)
}

/// Each response weighs −Â/B.
struct Weights<'a> {
    samples: &'a [ActorSample<'a>],
    /// 1/B.
    scale: f64,
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
