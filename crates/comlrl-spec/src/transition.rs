//! The multi-turn transition (`trainer.external_transition`) as the scenario resolved it: the
//! script or plugin that writes each agent's next-turn prompt, and how it runs.
use crate::OnError;
use std::path::PathBuf;

/// A Rhai script or a native plugin, as an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeSource {
    /// A Rhai script.
    Rhai(PathBuf),
    /// As written (resolved against the scenario dir); a bare name is mapped to the platform's
    /// `lib<name>.so` / `<name>.dll` / `lib<name>.dylib` by the plugin loader.
    Plugin(PathBuf),
}

/// The multi-turn external transition: code that writes each agent's next-turn prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionPlan {
    /// The script or plugin.
    pub source: CodeSource,
    /// Free-form JSON handed to it (`{}` when none).
    pub params: serde_json::Value,
    /// Wall-clock budget of one call in milliseconds (≥ 1); `None`: the script sandbox's
    /// per-call default, or [`crate::ISOLATED_BUDGET_MS`] for an isolated plugin.
    pub time_budget_ms: Option<u64>,
    /// Run a plugin in a child process; `None`: [`crate::DEFAULT_ISOLATE`]. Never set for
    /// a script.
    pub isolate: Option<bool>,
    /// What a failing call does to the training step.
    pub on_error: OnError,
}
