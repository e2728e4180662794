//! `RewardError`: every way loading or running a reward can fail, each message naming the
//! script or plugin (and, for scripts, the line and column) and saying what to do.
use std::fmt;
use std::path::PathBuf;

/// What went wrong with a Rhai script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptFailure {
    /// The file could not be read.
    Read,
    /// The script does not parse (syntax error, undefined variable under strict mode, ...).
    Syntax,
    /// The entry point is missing or has the wrong number of parameters.
    Entry,
    /// The script raised an error while running (including `throw`).
    Runtime,
    /// A sandbox limit was hit (operations, call depth, string/array/map size).
    Limit,
    /// The call ran past its wall-clock time budget.
    TimeBudget,
    /// The script returned something other than a finite number (or the wrong count).
    Return,
    /// The scenario's `params` could not be handed to the script.
    Params,
}

impl ScriptFailure {
    fn label(self) -> &'static str {
        match self {
            ScriptFailure::Read => "cannot read",
            ScriptFailure::Syntax => "syntax error",
            ScriptFailure::Entry => "bad entry point",
            ScriptFailure::Runtime => "runtime error",
            ScriptFailure::Limit => "sandbox limit exceeded",
            ScriptFailure::TimeBudget => "time budget exceeded",
            ScriptFailure::Return => "bad return value",
            ScriptFailure::Params => "bad params",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            ScriptFailure::Read => "check the `rhai:` path in the scenario (relative paths are resolved against the scenario file)",
            ScriptFailure::Syntax => "fix the script at the position shown; every variable must be declared with `let` (strict mode)",
            ScriptFailure::Entry => "define `fn reward(completions, ctx)` returning a number, or `fn reward_batch(samples, ctx)` returning an array with one number per sample (see 'Writing your own reward' in README.md)",
            ScriptFailure::Runtime => "fix the script at the position shown",
            ScriptFailure::Limit => "the script ran too long or built too large a value; look for an endless loop or runaway recursion, or simplify the script",
            ScriptFailure::TimeBudget => "look for an endless loop or a runaway closure at the position shown; if the work is legitimate, raise the term's `time_budget_ms` (see docs/rewards.md)",
            ScriptFailure::Return => "return an integer or a finite float (one per sample for `reward_batch`)",
            ScriptFailure::Params => "fix the term's `params:` in the scenario",
        }
    }
}

/// What went wrong with a native plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PluginFailure {
    /// The dynamic loader refused the library.
    Load,
    /// The library does not export the entry symbol.
    Symbol,
    /// The table's `abi_version` or `size` does not match this host.
    Abi,
    /// `create` failed (bad params) or panicked.
    Create,
    /// `score` returned an error.
    Score,
    /// The plugin panicked.
    Panic,
    /// The plugin returned a non-finite score.
    Return,
    /// The function table has a null entry or an invalid name.
    Table,
    /// The plugin wrote outside the host buffer it was given (or left scores unwritten).
    Memory,
    /// The isolated plugin's process died (signal or exit) while working.
    Crash,
    /// The isolated plugin ran past its time budget and was stopped.
    TimeBudget,
    /// The isolated plugin's host process could not be started or spoke garbage.
    Host,
}

/// What a native plugin is to the trainer: a reward term or the multi-turn transition. It
/// decides the words of an error (`reward plugin …` / `transition plugin …`) and where its hint
/// points (the term's keys, or `trainer.external_transition`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PluginRole {
    /// A reward term (`reward: - plugin: …`).
    #[default]
    Reward,
    /// The multi-turn transition (`trainer.external_transition: {plugin: …}`).
    Transition,
}

impl fmt::Display for PluginRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginRole::Reward => "reward",
            PluginRole::Transition => "transition",
        })
    }
}

/// The reward term name a transition failure carries in [`RewardError::SkipStep`].
pub const TRANSITION_TERM: &str = "trainer.external_transition";

impl PluginFailure {
    fn label(self, role: PluginRole) -> &'static str {
        match self {
            PluginFailure::Load => "cannot load library",
            PluginFailure::Symbol => match role {
                PluginRole::Reward => "not a comlrl reward plugin",
                PluginRole::Transition => "not a comlrl transition plugin",
            },
            PluginFailure::Abi => "incompatible plugin ABI",
            PluginFailure::Create => "create failed",
            PluginFailure::Score => match role {
                PluginRole::Reward => "score failed",
                PluginRole::Transition => "next failed",
            },
            PluginFailure::Panic => "plugin panicked",
            PluginFailure::Return => "bad return value",
            PluginFailure::Table => "invalid function table",
            PluginFailure::Memory => "plugin wrote out of bounds",
            PluginFailure::Crash => "plugin crashed",
            PluginFailure::TimeBudget => "time budget exceeded",
            PluginFailure::Host => "plugin host failed",
        }
    }

    fn hint(self, role: PluginRole) -> &'static str {
        use PluginRole::{Reward, Transition};
        match (self, role) {
            (PluginFailure::Load, _) => "check that the file is a shared library built for this platform (`cargo build --release --workspace`)",
            (PluginFailure::Symbol, Reward) => "a plugin must call `comlrl_plugin_api::export_reward!(YourType)` and be built as `crate-type = [\"cdylib\"]`",
            (PluginFailure::Symbol, Transition) => "a transition plugin must call `comlrl_plugin_api::export_transition!(YourType)` and be built as `crate-type = [\"cdylib\"]`",
            (PluginFailure::Abi, _) => "rebuild the plugin against this version of comlrl-plugin-api (`cargo build --release --workspace`)",
            (PluginFailure::Create, Reward) => "fix the term's `params:` in the scenario, or the plugin's `create`",
            (PluginFailure::Create, Transition) => "fix `trainer.external_transition.params` in the scenario, or the plugin's `create`",
            (PluginFailure::Score, _) => "see the plugin's message above; fix the plugin or its input",
            (PluginFailure::Panic, _) => "a bug in the plugin: fix the panic (the trainer caught it and stopped cleanly)",
            (PluginFailure::Return, _) => "the plugin must return finite numbers (a transition: one valid UTF-8 prompt per agent)",
            (PluginFailure::Table, Reward) => "build the plugin with `comlrl_plugin_api::export_reward!` (or fill every table entry by hand)",
            (PluginFailure::Table, Transition) => "build the plugin with `comlrl_plugin_api::export_transition!` (or fill every table entry by hand)",
            (PluginFailure::Memory, _) => "a memory bug in the plugin; run it with `isolate: true` so such bugs cannot corrupt the trainer, and fix it",
            (PluginFailure::Crash, Reward) => "a bug in the plugin: the child process running it died, the trainer is unharmed; reproduce with `comlrl reward` and fix the plugin",
            (PluginFailure::Crash, Transition) => "a bug in the plugin: the child process running it died, the trainer is unharmed; fix the plugin (or set `on_error: skip_step` on `trainer.external_transition` to skip such steps)",
            (PluginFailure::TimeBudget, Reward) => "look for an endless loop in the plugin, or raise the term's `time_budget_ms` (see docs/rewards.md)",
            (PluginFailure::TimeBudget, Transition) => "look for an endless loop in the plugin, or raise `trainer.external_transition.time_budget_ms` (see docs/rewards.md)",
            (PluginFailure::Host, Reward) => "the trainer could not run `comlrl plugin-host`; set COMLRL_PLUGIN_HOST to the comlrl binary, or set `isolate: false` on the term",
            (PluginFailure::Host, Transition) => "the trainer could not run `comlrl plugin-host`; set COMLRL_PLUGIN_HOST to the comlrl binary, or set `isolate: false` on `trainer.external_transition`",
        }
    }
}

/// A script position as Rhai reports it (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// Formats ` (line L, column C)` or nothing.
struct At(Option<Pos>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, " (line {}, column {})", p.line, p.column),
            None => Ok(()),
        }
    }
}

/// The reward subsystem's error.
#[derive(Debug, thiserror::Error)]
pub enum RewardError {
    /// A Rhai script failed to load or run.
    #[error("reward script {}{}: {}: {message}\n  hint: {}", path.display(), At(*pos), kind.label(), kind.hint())]
    Script {
        /// The script file.
        path: PathBuf,
        /// Where in the script, when Rhai reports it.
        pos: Option<Pos>,
        /// Category (decides the hint).
        kind: ScriptFailure,
        /// Rhai's or our message.
        message: String,
    },
    /// A native plugin failed to load or run.
    #[error("{role} plugin {}: {}: {message}\n  hint: {}", path.display(), kind.label(*role), kind.hint(*role))]
    Plugin {
        /// A reward or the transition (decides the words).
        role: PluginRole,
        /// The library file.
        path: PathBuf,
        /// Category (decides the hint).
        kind: PluginFailure,
        /// The loader's or plugin's message.
        message: String,
    },
    /// No file exists at any of the platform-specific names of a plugin path.
    #[error("{role} plugin {} not found; tried: {}\n  hint: build the plugins with `cargo build --release --workspace`, or fix the `plugin:` path in the scenario", requested.display(), list(tried))]
    PluginNotFound {
        /// A reward or the transition (decides the words).
        role: PluginRole,
        /// The path as written.
        requested: PathBuf,
        /// Every path that was tried, in order.
        tried: Vec<PathBuf>,
    },
    /// A term with `on_error: skip_step` failed: the trainer skips this step (no update, no
    /// reward metrics) and goes on; see [`crate::spec::OnError`].
    #[error("{} failed (it has `on_error: skip_step`): {source}", skipped(term))]
    SkipStep {
        /// The failing term's name.
        term: String,
        /// Its error.
        #[source]
        source: Box<RewardError>,
    },
    /// The reward section itself is wrong (duplicate names, no source, ...).
    #[error("reward configuration: {0}")]
    Config(String),
}

/// What failed, in words: a reward term, or the transition ([`TRANSITION_TERM`]).
fn skipped(term: &str) -> String {
    if term == TRANSITION_TERM {
        format!("the transition (`{TRANSITION_TERM}`)")
    } else {
        format!("reward term `{term}`")
    }
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl RewardError {
    /// Shorthand for a script error.
    pub fn script(
        path: impl Into<PathBuf>,
        pos: Option<Pos>,
        kind: ScriptFailure,
        message: impl Into<String>,
    ) -> Self {
        RewardError::Script {
            path: path.into(),
            pos,
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for a plugin error.
    pub fn plugin(
        path: impl Into<PathBuf>,
        kind: PluginFailure,
        message: impl Into<String>,
    ) -> Self {
        RewardError::Plugin {
            role: PluginRole::Reward,
            path: path.into(),
            kind,
            message: message.into(),
        }
    }

    /// The same error said of the transition plugin: a plugin error (or a missing plugin file)
    /// is reworded for the transition; any other error is returned as it is.
    pub fn of_transition(self) -> Self {
        match self {
            RewardError::Plugin {
                path,
                kind,
                message,
                ..
            } => RewardError::Plugin {
                role: PluginRole::Transition,
                path,
                kind,
                message,
            },
            RewardError::PluginNotFound {
                requested, tried, ..
            } => RewardError::PluginNotFound {
                role: PluginRole::Transition,
                requested,
                tried,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_path_position_and_hint() {
        let e = RewardError::script(
            "/x/r.rhai",
            Some(Pos { line: 3, column: 7 }),
            ScriptFailure::Runtime,
            "boom",
        );
        let s = e.to_string();
        assert!(
            s.starts_with("reward script /x/r.rhai (line 3, column 7): runtime error: boom"),
            "{s}"
        );
        assert!(s.contains("hint:"), "{s}");
        let e = RewardError::PluginNotFound {
            role: PluginRole::Reward,
            requested: "a/b".into(),
            tried: vec!["a/b".into(), "a/libb.so".into()],
        };
        let s = e.to_string();
        assert!(
            s.contains("a/b, a/libb.so") && s.contains("cargo build --release --workspace"),
            "{s}"
        );
        let s = e.of_transition().to_string();
        assert!(s.starts_with("transition plugin a/b not found"), "{s}");
        let s = RewardError::plugin("/x/t.so", PluginFailure::TimeBudget, "slow")
            .of_transition()
            .to_string();
        assert!(
            s.starts_with("transition plugin /x/t.so: time budget exceeded: slow")
                && s.contains("`trainer.external_transition.time_budget_ms`"),
            "{s}"
        );
    }
}
