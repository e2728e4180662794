//! Evaluation during training: the eval prompts rolled out with the training settings from an
//! RNG of their own, so evaluating never changes the training stream.
use super::settings::Settings;
use crate::error::Result;
use crate::train::algorithms::Algorithm;
use crate::train::report::timing::Phases;
use crate::train::rollout::prompt::Prompts;
use crate::train::rollout::{rollout, RolloutSpec, RowInput};
use rand::SeedableRng;

/// Mean joint reward and mean completion return (as the algorithm computes returns) over the
/// first `eval_num_samples` eval prompts, sampled with the training settings from an RNG of
/// its own (seeded by the run seed and the step), so evaluating never changes the training
/// stream.
pub(super) fn evaluate(
    settings: &Settings,
    prompts: &Prompts,
    spec: &RolloutSpec,
    algorithm: &dyn Algorithm,
    step: usize,
) -> Result<(f64, f64)> {
    let s = &settings.scenario;
    let Some(eval) = &s.dataset.eval else {
        return Ok((f64::NAN, f64::NAN));
    };
    let mut rng =
        rand_chacha::ChaCha8Rng::seed_from_u64(s.seed ^ (0x9e37_79b9_7f4a_7c15 ^ step as u64));
    let (mut rs, mut rets) = (vec![], vec![]);
    for row in eval.rows.iter().take(s.trainer.eval_num_samples) {
        let rendered = prompts.render(row)?;
        let input = RowInput {
            prompt: &row.prompt,
            fields: &row.fields,
        };
        let nodes = rollout(
            spec,
            &input,
            &rendered,
            &mut rng,
            &mut Phases::default(),
            None,
        )
        .and_then(|root| algorithm.targets(root))
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
