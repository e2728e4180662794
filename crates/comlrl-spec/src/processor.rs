//! The reward processor chain: steps applied in order to the weighted sum of the reward terms.
use serde::{Deserialize, Serialize};

/// One step of the reward processor chain, applied in order to the weighted sum `x` of the
/// terms (CoMLRL's `RewardProcessors`; `shift` is comlrl's addition):
///
/// | YAML | formula |
/// | --- | --- |
/// | `- scale: 100.0` | `x * factor` |
/// | `- shift: -1.0` | `x + offset` |
/// | `- clamp: {min: 0.0, max: 1.0}` | `max(min, min(max, x))`; `min` defaults to -10, `max` to 10 |
/// | `- sigmoid` | `1 / (1 + exp(-x))` |
/// | `- exp_scale: {factor: 1.0}` | `exp(factor * x) - 1` if `x > 0`, else `1 - exp(-factor * x)` |
///
/// `exp_scale` is odd (`exp_scale(-x) = -exp_scale(x)`), so it keeps the sign of `x`.
/// Non-finite results (e.g. `exp` overflow) are reported as errors by the stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ProcessorSpec {
    /// Multiply by the factor.
    Scale(f64),
    /// Add the offset.
    Shift(f64),
    /// Clamp into `[min, max]` (requires `min <= max`).
    Clamp {
        /// Lower bound; default -10.0 (CoMLRL's default).
        #[serde(default = "clamp_min")]
        min: f64,
        /// Upper bound; default 10.0 (CoMLRL's default).
        #[serde(default = "clamp_max")]
        max: f64,
    },
    /// The logistic function.
    Sigmoid,
    /// CoMLRL's exponential scale.
    ExpScale(ExpScaleSpec),
}

fn clamp_min() -> f64 {
    -10.0
}

fn clamp_max() -> f64 {
    10.0
}

/// Parameters of `exp_scale` (CoMLRL's `RewardProcessors.exponential_scale(factor)`):
/// `exp(factor * x) - 1` for `x > 0`, else `1 - exp(-factor * x)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpScaleSpec {
    /// The factor inside the exponential; default 1.0.
    #[serde(default = "one")]
    pub factor: f64,
}

impl Default for ExpScaleSpec {
    fn default() -> Self {
        ExpScaleSpec { factor: 1.0 }
    }
}

fn one() -> f64 {
    1.0
}
