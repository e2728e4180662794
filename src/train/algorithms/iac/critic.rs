//! A separate critic (CoMLRL `use_separate_critic: true`): a causal LM of its own with a value
//! head, trained by its own AdamW. It reads V(h) at the last prompt token (`critic_type: v`,
//! from the prompt alone) or Q(h, a) at the last response token (`q`), and learns
//! `value_loss_coef` · mean_b((target_b − V_b)²) with no value clipping (CoMLRL clips only a
//! head shared with the actor).
use crate::error::{Error, Result};
use crate::model::grad::recompute::{value_forward, PassPlan};
use crate::model::grad::value::{value_columns, values, ValueAt};
use crate::model::{Mode, Policy, ScoreLayout, ValueHead};
use candle_core::{Tensor, Var};

/// A critic: its backbone, its value head and where it reads.
pub struct Critic {
    /// The backbone (a loaded causal LM; its LM head is never used).
    pub policy: Policy,
    /// The value head on its final hidden state.
    pub head: ValueHead,
    /// V (the last prompt token) or Q (the last response token).
    pub at: ValueAt,
}

/// One (prompt, response) a critic reads.
pub type Row<'a> = (&'a [u32], &'a [u32]);

/// What one critic mini-batch gives.
pub struct CriticGrads {
    /// value_loss_coef · mean((target − V)²).
    pub loss: f64,
    /// V of each row before the step.
    pub values: Vec<f32>,
    /// The gradient of each of the critic's variables ([`Critic::vars`] order).
    pub grads: Vec<Option<Tensor>>,
}

impl Critic {
    /// The trainable tensors: the backbone's, then the head's (`value_head.<CoMLRL name>`).
    pub fn vars(&self) -> Vec<(String, Var)> {
        let mut v = self.policy.vars();
        v.extend(
            self.head
                .vars()
                .into_iter()
                .map(|(n, var)| (format!("value_head.{n}"), var)),
        );
        v
    }

    /// The rows as the critic reads them: V from the prompts alone, Q from prompt + response.
    fn layout(&self, rows: &[Row]) -> Result<ScoreLayout> {
        let prompts: Vec<&[u32]> = rows.iter().map(|r| r.0).collect();
        let responses: Vec<&[u32]> = rows
            .iter()
            .map(|r| match self.at {
                ValueAt::PromptEnd => &[][..],
                ValueAt::SequenceEnd => r.1,
            })
            .collect();
        let m = &self.policy;
        Ok(ScoreLayout::new(&m.model, &prompts, &responses, m.pad_id)?)
    }

    /// The values of `rows`, without a graph (V_old at rollout time).
    pub fn values(&self, rows: &[Row]) -> Result<Vec<f32>> {
        let layout = self.layout(rows)?;
        let cols = value_columns(&layout, self.at)?;
        let v = values(&self.policy.model, &self.head, &layout, &cols, Mode::Infer)?;
        Ok(v.to_dtype(candle_core::DType::F32)?.to_vec1()?)
    }

    /// The critic loss `coef` · mean((target − V)²) over `rows` and its gradients (one pass
    /// over all rows, as `plan` says). A non-finite value or loss is an error, as in CoMLRL.
    pub fn loss_and_grads(
        &self,
        rows: &[Row],
        targets: &[f32],
        coef: f64,
        vars: &[Var],
        plan: PassPlan,
    ) -> Result<CriticGrads> {
        if targets.len() != rows.len() {
            return Err(Error::Internal(format!(
                "{} critic targets for {} rows",
                targets.len(),
                rows.len()
            )));
        }
        let layout = self.layout(rows)?;
        let cols = value_columns(&layout, self.at)?;
        let pass = value_forward(&self.policy.model, &self.head, &layout, &cols, plan, None)?;
        let v: Vec<f32> = pass.values().to_dtype(candle_core::DType::F32)?.to_vec1()?;
        let n = v.len() as f32;
        let loss = coef
            * v.iter()
                .zip(targets)
                .map(|(&v, &t)| ((t - v) as f64).powi(2))
                .sum::<f64>()
            / v.len().max(1) as f64;
        if !loss.is_finite() {
            return Err(Error::Diverged(format!(
                "the critic's loss is {loss} (values {v:?}): lower critic_learning_rate"
            )));
        }
        // d/dV of coef · mean((t − V)²), in f32 as torch's backward computes it.
        let dv: Vec<f32> = v
            .iter()
            .zip(targets)
            .map(|(&v, &t)| coef as f32 * 2.0 * (v - t) / n)
            .collect();
        let dv = Tensor::new(dv, self.policy.model.device())?;
        let mut grads = vec![None; vars.len()];
        pass.backward(&self.policy.model, &self.head, &dv, vars, &mut grads)?;
        Ok(CriticGrads {
            loss,
            values: v,
            grads,
        })
    }
}
