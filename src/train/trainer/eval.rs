//! Evaluation during training: the eval prompts sampled with the training settings from an RNG
//! of their own, so evaluating never changes the training stream.
use super::Trainer;
use crate::error::Result;
use crate::train::report::timing::Phases;
use crate::train::rollout::tree::{rollout, RolloutSpec, RowInput};
use rand::SeedableRng;

impl Trainer {
    pub(super) fn eval_enabled(&self) -> bool {
        self.scenario.dataset.eval.is_some()
            && self.scenario.trainer.eval_interval > 0
            && self.scenario.trainer.eval_num_samples > 0
    }

    /// Mean joint reward and mean completion return over the first `eval_num_samples` eval
    /// prompts, sampled with the training settings from an RNG of its own (seeded by the run
    /// seed and the step), so evaluating never changes the training stream.
    pub(super) fn evaluate(&self, spec: &RolloutSpec, step: usize) -> Result<(f64, f64)> {
        let Some(eval) = &self.scenario.dataset.eval else {
            return Ok((f64::NAN, f64::NAN));
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
            self.scenario.seed ^ (0x9e37_79b9_7f4a_7c15 ^ step as u64),
        );
        let (mut rs, mut rets) = (vec![], vec![]);
        for row in eval
            .rows
            .iter()
            .take(self.scenario.trainer.eval_num_samples)
        {
            let prompts = self.prompts.render(row)?;
            let input = RowInput {
                prompt: &row.prompt,
                fields: &row.fields,
            };
            let nodes = rollout(
                &self.policies,
                &prompts,
                &input,
                &self.stack,
                spec,
                &mut rng,
                &mut Phases::default(),
            )
            .map_err(|e| e.at_step(step, format!("evaluation at step {step}")))?;
            if let Some(root) = nodes.first() {
                rs.extend(root.rewards.iter().map(|&r| r as f64));
                rets.extend(
                    root.agents
                        .iter()
                        .flat_map(|a| a.returns.iter().map(|&r| r as f64)),
                );
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        Ok((mean(&rs), mean(&rets)))
    }
}
