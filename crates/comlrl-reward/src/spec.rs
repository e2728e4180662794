//! The reward section of a scenario as written in YAML: reward sources with weights and params,
//! and the processor chain. Raw, serde-facing types; `comlrl-scenario` embeds them and resolves
//! relative paths against the scenario file before the stack is built.
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One reward term. Exactly one of `rhai` / `plugin` must be set.
///
/// ```yaml
/// reward:
///   - rhai: ../rewards/len_ratio.rhai   # or `plugin: path/to/libfoo.so`
///     name: len_ratio                  # default: the file stem
///     weight: 1.0                      # default 1.0
///     params: {target_min: 2.0, target_max: 3.0}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardSpec {
    /// Path of a Rhai reward script (relative to the scenario file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rhai: Option<PathBuf>,
    /// Path of a native reward plugin (a cdylib; relative to the scenario file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PathBuf>,
    /// Name used in logs and metrics (`reward/<name>`); default: the file stem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Weight of this term in the weighted sum; default 1.0.
    #[serde(default = "one")]
    pub weight: f64,
    /// Free-form parameters handed to the script (`ctx.params`) or plugin (`create(params_json)`).
    #[serde(default = "empty_map")]
    pub params: serde_json::Value,
}

fn one() -> f64 {
    1.0
}

fn empty_map() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// One step of the reward processor chain, applied in order to the weighted sum.
/// YAML: `- scale: 100.0`, `- shift: -1.0`, `- clamp: {min: 0.0, max: 1.0}`, `- sigmoid`,
/// `- exp_scale: {...}` (see `processor.rs` for the exact formulas and their defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ProcessorSpec {
    Scale(f64),
    Shift(f64),
    Clamp { min: f64, max: f64 },
    Sigmoid,
    ExpScale(ExpScaleSpec),
}

/// Parameters of `exp_scale`. The helper writing `processor.rs` fixes the formula to match
/// CoMLRL's and documents it here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpScaleSpec {
    #[serde(default = "one")]
    pub scale: f64,
}
