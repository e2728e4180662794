//! One reward term of a scenario as written in YAML: its source (a Rhai script or a native
//! plugin), weight and params, and how it runs (time budget, isolation, what a failure does).
//! The scenario loader resolves relative paths in it; `comlrl-reward` builds the stack from it.
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
///     time_budget_ms: 1000             # default: 1000 per `reward` call, 10000 per `reward_batch`
///     isolate: true                    # plugins only; default: see `DEFAULT_ISOLATE`
///     on_error: fail                   # or `skip_step`
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
    /// Wall-clock budget of one call, in milliseconds: one `reward` call (one joint sample)
    /// or one `reward_batch` call for scripts, one batch for isolated plugins. Default: the
    /// `comlrl_reward::SandboxLimits` defaults for scripts, [`ISOLATED_BUDGET_MS`] for isolated
    /// plugins. Must be at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_budget_ms: Option<u64>,
    /// Run a plugin in a child process (`comlrl plugin-host`), so a crash in it becomes an
    /// error instead of ending the trainer. Plugins only; default [`DEFAULT_ISOLATE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<bool>,
    /// What the trainer does when this term fails: stop (`fail`, the default) or skip the
    /// step (`skip_step`). See [`OnError`].
    #[serde(default, skip_serializing_if = "OnError::is_fail")]
    pub on_error: OnError,
}

impl Default for RewardSpec {
    /// No source yet (set `rhai` or `plugin`), weight 1, empty params, every option default.
    fn default() -> Self {
        RewardSpec {
            rhai: None,
            plugin: None,
            name: None,
            weight: 1.0,
            params: empty_map(),
            time_budget_ms: None,
            isolate: None,
            on_error: OnError::Fail,
        }
    }
}

/// Whether plugins run in a child process unless the term says otherwise: yes on Unix (a
/// crash becomes an error, at a cost small next to sampling; see docs/rewards.md), no elsewhere
/// (isolation needs Unix).
pub const DEFAULT_ISOLATE: bool = cfg!(unix);

/// Default budget of one batch of an isolated plugin, in milliseconds (the child is killed
/// when it runs past it).
pub const ISOLATED_BUDGET_MS: u64 = 60_000;

/// What to do when a reward term fails while scoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Stop training with the error (default).
    #[default]
    Fail,
    /// The stack returns `comlrl_reward::RewardError::SkipStep`: the trainer logs it, drops the
    /// step's rollouts (no update, no reward metrics) and goes on with the next step.
    SkipStep,
}

impl OnError {
    /// `true` for the default, [`OnError::Fail`].
    pub fn is_fail(&self) -> bool {
        *self == OnError::Fail
    }
}

fn one() -> f64 {
    1.0
}

fn empty_map() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}
