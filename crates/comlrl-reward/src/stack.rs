//! `RewardStack`: the scenario's reward terms (scripts and plugins) with their weights and
//! names, combined as a weighted sum and passed through the processor chain.
use crate::error::RewardError;
use crate::isolate::{HostCommand, IsolatedReward};
use crate::native::NativeReward;
use crate::processor::{apply_chain, build_chain, Processor};
use crate::sandbox::SandboxLimits;
use crate::script::RhaiReward;
use crate::spec::{OnError, ProcessorSpec, RewardSpec, DEFAULT_ISOLATE, ISOLATED_BUDGET_MS};
use crate::{JointSample, RewardFn};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The reward of one joint sample.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scored {
    /// Final reward: `Σ weight_i · component_i`, then every processor in order.
    pub reward: f32,
    /// Raw value of each term, in spec order (see [`RewardStack::component_names`]).
    pub components: Vec<f32>,
}

struct Term {
    name: String,
    weight: f64,
    reward: Box<dyn RewardFn>,
    on_error: OnError,
}

/// Weighted reward terms followed by a processor chain.
pub struct RewardStack {
    terms: Vec<Term>,
    processors: Vec<Processor>,
}

impl std::fmt::Debug for RewardStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RewardStack")
            .field("terms", &self.component_names())
            .field("processors", &self.processors)
            .finish()
    }
}

fn resolve(base_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

impl RewardStack {
    /// Load every term (relative paths are joined to `base_dir`) and validate the chain.
    ///
    /// Errors: a term with neither or both of `rhai`/`plugin`, a non-finite weight, duplicate
    /// names (the default name is the file stem), no terms at all, and any load error.
    pub fn build(
        specs: &[RewardSpec],
        processors: &[ProcessorSpec],
        base_dir: &Path,
    ) -> Result<Self, RewardError> {
        if specs.is_empty() {
            return Err(RewardError::Config(
                "no reward terms; add at least one `- rhai: ...` or `- plugin: ...` under `reward:`".into(),
            ));
        }
        let processors = build_chain(processors)?;
        let mut terms: Vec<Term> = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            if spec.time_budget_ms == Some(0) {
                return Err(RewardError::Config(format!(
                    "reward term #{} has `time_budget_ms: 0`; give at least 1 (milliseconds) or remove it for the default",
                    i + 1
                )));
            }
            let (reward, file): (Box<dyn RewardFn>, &Path) = match (&spec.rhai, &spec.plugin) {
                (Some(script), None) => {
                    let mut limits = SandboxLimits::default();
                    if let Some(ms) = spec.time_budget_ms {
                        limits.time_budget_ms = ms;
                        limits.batch_time_budget_ms = ms;
                    }
                    let path = resolve(base_dir, script);
                    (
                        Box::new(RhaiReward::load_with_limits(path, &spec.params, &limits)?),
                        script,
                    )
                }
                (None, Some(plugin)) => (load_plugin(&resolve(base_dir, plugin), spec)?, plugin),
                _ => {
                    return Err(RewardError::Config(format!(
                        "reward term #{} must set exactly one of `rhai:` or `plugin:`",
                        i + 1
                    )))
                }
            };
            let name = match &spec.name {
                Some(n) => n.clone(),
                None => file
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| reward.name().to_string()),
            };
            if !spec.weight.is_finite() {
                return Err(RewardError::Config(format!(
                    "reward term `{name}` has weight {}; use a finite number",
                    spec.weight
                )));
            }
            if terms.iter().any(|t| t.name == name) {
                return Err(RewardError::Config(format!(
                    "two reward terms are named `{name}`; give one of them a distinct `name:`"
                )));
            }
            terms.push(Term {
                name,
                weight: spec.weight,
                reward,
                on_error: spec.on_error,
            });
        }
        Ok(RewardStack { terms, processors })
    }

    /// Build from already-loaded rewards (`(name, weight, reward)`), e.g. built-ins or tests.
    pub fn from_parts(
        parts: Vec<(String, f64, Box<dyn RewardFn>)>,
        processors: &[ProcessorSpec],
    ) -> Result<Self, RewardError> {
        let processors = build_chain(processors)?;
        let mut terms: Vec<Term> = Vec::with_capacity(parts.len());
        for (name, weight, reward) in parts {
            if !weight.is_finite() {
                return Err(RewardError::Config(format!(
                    "reward term `{name}` has weight {weight}; use a finite number"
                )));
            }
            if terms.iter().any(|t| t.name == name) {
                return Err(RewardError::Config(format!(
                    "two reward terms are named `{name}`"
                )));
            }
            terms.push(Term {
                name,
                weight,
                reward,
                on_error: OnError::Fail,
            });
        }
        Ok(RewardStack { terms, processors })
    }

    /// Names of the terms, in spec order (the order of [`Scored::components`]).
    pub fn component_names(&self) -> Vec<&str> {
        self.terms.iter().map(|t| t.name.as_str()).collect()
    }

    /// The validated processor chain.
    pub fn processors(&self) -> &[Processor] {
        &self.processors
    }

    /// Score a batch: each term scores the whole batch, then per sample the weighted sum
    /// (in `f64`) goes through the processors.
    pub fn score(&self, batch: &[JointSample]) -> Result<Vec<Scored>, RewardError> {
        let mut columns = Vec::with_capacity(self.terms.len());
        for term in &self.terms {
            let values = term.reward.score(batch).map_err(|e| match term.on_error {
                OnError::Fail => e,
                OnError::SkipStep => RewardError::SkipStep {
                    term: term.name.clone(),
                    source: Box::new(e),
                },
            })?;
            if values.len() != batch.len() {
                return Err(RewardError::Config(format!(
                    "reward term `{}` returned {} values for {} joint samples",
                    term.name,
                    values.len(),
                    batch.len()
                )));
            }
            columns.push(values);
        }
        (0..batch.len())
            .map(|i| {
                let components: Vec<f32> = columns.iter().map(|c| c[i]).collect();
                let sum: f64 = self
                    .terms
                    .iter()
                    .zip(&components)
                    .map(|(t, &v)| t.weight * f64::from(v))
                    .sum();
                let reward = apply_chain(&self.processors, sum)? as f32;
                if !reward.is_finite() {
                    return Err(RewardError::Config(format!(
                        "the final reward of joint sample #{i} is {reward} (weighted sum {sum}); use smaller weights or factors"
                    )));
                }
                Ok(Scored { reward, components })
            })
            .collect()
    }
}

/// Load a plugin term: in a child process when the term is isolated (the default, see
/// [`DEFAULT_ISOLATE`]; the host is [`HostCommand::from_env`]), else in-process.
fn load_plugin(path: &Path, spec: &RewardSpec) -> Result<Box<dyn RewardFn>, RewardError> {
    if spec.isolate.unwrap_or(DEFAULT_ISOLATE) {
        let budget = Duration::from_millis(spec.time_budget_ms.unwrap_or(ISOLATED_BUDGET_MS));
        Ok(Box::new(IsolatedReward::load(
            path,
            &spec.params,
            HostCommand::from_env()?,
            budget,
        )?))
    } else {
        Ok(Box::new(NativeReward::load(path, &spec.params)?))
    }
}

impl RewardFn for RewardStack {
    fn name(&self) -> &str {
        "reward"
    }

    /// The final rewards only.
    fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
        Ok(RewardStack::score(self, batch)?
            .into_iter()
            .map(|s| s.reward)
            .collect())
    }
}
