//! The MAGRPO policy-gradient loss of one agent over buffered node samples:
//! per sample (1/K)·Σ_k −A_k·Σ_t log π(y_k,t | prompt, y_k,<t) over real completion tokens
//! (pads masked, the last real token included), averaged over the samples of a mini-batch.
//! Each sample's K sequences go through one batched forward; gradients are accumulated sample by
//! sample so only one sample's activations live at a time.
use super::rollout::AgentRollout;
use crate::error::Result;
use crate::model::{completion_logprobs, Mode, Policy, ScoreLayout};
use candle_core::{Tensor, Var};

/// Loss value and accumulated gradients (in `vars` order) of one mini-batch.
pub struct LossGrads {
    pub loss: f64,
    pub grads: Vec<Option<Tensor>>,
    /// Seconds in the scoring forward (log-probs and loss) and in backward + accumulation.
    pub forward_s: f64,
    pub backward_s: f64,
}

/// Forward + backward of the mini-batch `samples` for `policy`.
pub fn loss_and_grads(
    policy: &Policy,
    vars: &[Var],
    samples: &[&AgentRollout],
) -> Result<LossGrads> {
    let mut acc: Vec<Option<Tensor>> = vec![None; vars.len()];
    let mut total = 0f64;
    let (mut forward_s, mut backward_s) = (0f64, 0f64);
    let scale = 1.0 / samples.len().max(1) as f64;
    for s in samples {
        let k = s.completions.len();
        // Completions with no tokens (max_new_tokens 0) contribute nothing.
        if k == 0 || s.completions.iter().all(|c| c.is_empty()) {
            continue;
        }
        let t = std::time::Instant::now();
        let prompts: Vec<&[u32]> = vec![s.prompt_ids.as_slice(); k];
        let comps: Vec<&[u32]> = s.completions.iter().map(|c| c.as_slice()).collect();
        let layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id)?;
        let lp = completion_logprobs(&policy.model, &layout, Mode::Train)?;
        let adv = Tensor::from_vec(s.advantages.clone(), k, policy.model.device())?
            .to_dtype(lp.dtype())?;
        let loss = ((lp.sum(1)? * adv)?.sum_all()?.neg()? * (scale / k as f64))?;
        total += loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        forward_s += t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let grads = loss.backward()?;
        for (slot, var) in acc.iter_mut().zip(vars) {
            if let Some(g) = grads.get(var.as_tensor()) {
                *slot = Some(match slot.take() {
                    Some(prev) => (prev + g)?,
                    None => g.clone(),
                });
            }
        }
        backward_s += t.elapsed().as_secs_f64();
    }
    Ok(LossGrads {
        loss: total,
        grads: acc,
        forward_s,
        backward_s,
    })
}
