//! Evaluation during training: the eval prompts rolled out with the training settings from an
//! RNG of their own, so evaluating never changes the training stream.
use super::settings::Settings;
use crate::error::Result;
use crate::train::algorithms::Algorithm;
use crate::train::report::timing::Phases;
use crate::train::rollout::prompt::Prompts;
use crate::train::rollout::{rollout, RolloutSpec, RowInput};
use rand::SeedableRng;

/// What one evaluation measured over the first `eval_num_samples` eval prompts (their first
/// turn, as CoMLRL's `eval/turn_1/*`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EvalResult {
    /// Mean joint reward (after the reward processors).
    pub(crate) reward_mean: f64,
    /// Mean completion return (as the algorithm computes returns).
    pub(crate) return_mean: f64,
    /// Each reward term's mean raw value, in the terms' order (e.g. the code_exec level and
    /// its pass-all term: the mean level reward and the fraction of joint programs that pass).
    pub(crate) terms: Vec<f64>,
}

/// Evaluates the eval prompts, sampled with the training settings from an RNG of its own
/// (seeded by the run seed and the step), so evaluating never changes the training stream.
pub(super) fn evaluate(
    settings: &Settings,
    prompts: &Prompts,
    spec: &RolloutSpec,
    algorithm: &dyn Algorithm,
    step: usize,
) -> Result<EvalResult> {
    let s = &settings.scenario;
    let Some(eval) = &s.dataset.eval else {
        return Ok(EvalResult {
            reward_mean: f64::NAN,
            return_mean: f64::NAN,
            terms: Vec::new(),
        });
    };
    let mut rng =
        rand_chacha::ChaCha8Rng::seed_from_u64(s.seed ^ (0x9e37_79b9_7f4a_7c15 ^ step as u64));
    let (mut rs, mut rets) = (vec![], vec![]);
    let mut terms: Vec<(f64, usize)> = Vec::new();
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
            for joint in &root.components {
                if terms.len() < joint.len() {
                    terms.resize(joint.len(), (0.0, 0));
                }
                for (t, &v) in terms.iter_mut().zip(joint) {
                    t.0 += v as f64;
                    t.1 += 1;
                }
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Ok(EvalResult {
        reward_mean: mean(&rs),
        return_mean: mean(&rets),
        terms: terms
            .into_iter()
            .map(|(sum, n)| sum / n.max(1) as f64)
            .collect(),
    })
}
