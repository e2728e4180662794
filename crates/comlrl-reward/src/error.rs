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

impl PluginFailure {
    fn label(self) -> &'static str {
        match self {
            PluginFailure::Load => "cannot load library",
            PluginFailure::Symbol => "not a comlrl reward plugin",
            PluginFailure::Abi => "incompatible plugin ABI",
            PluginFailure::Create => "create failed",
            PluginFailure::Score => "score failed",
            PluginFailure::Panic => "plugin panicked",
            PluginFailure::Return => "bad return value",
            PluginFailure::Table => "invalid function table",
            PluginFailure::Memory => "plugin wrote out of bounds",
            PluginFailure::Crash => "plugin crashed",
            PluginFailure::TimeBudget => "time budget exceeded",
            PluginFailure::Host => "plugin host failed",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            PluginFailure::Load => "check that the file is a shared library built for this platform (`cargo build --release --workspace`)",
            PluginFailure::Symbol => "a plugin must call `comlrl_plugin_api::export_reward!(YourType)` and be built as `crate-type = [\"cdylib\"]`",
            PluginFailure::Abi => "rebuild the plugin against this version of comlrl-plugin-api (`cargo build --release --workspace`)",
            PluginFailure::Create => "fix the term's `params:` in the scenario, or the plugin's `create`",
            PluginFailure::Score => "see the plugin's message above; fix the plugin or its input",
            PluginFailure::Panic => "a bug in the plugin: fix the panic (the trainer caught it and stopped cleanly)",
            PluginFailure::Return => "the plugin must return finite numbers",
            PluginFailure::Table => "build the plugin with `comlrl_plugin_api::export_reward!` (or fill every table entry by hand)",
            PluginFailure::Memory => "a memory bug in the plugin; run it with `isolate: true` so such bugs cannot corrupt the trainer, and fix it",
            PluginFailure::Crash => "a bug in the plugin: the child process running it died, the trainer is unharmed; reproduce with `comlrl reward` and fix the plugin",
            PluginFailure::TimeBudget => "look for an endless loop in the plugin, or raise the term's `time_budget_ms` (see docs/rewards.md)",
            PluginFailure::Host => "the trainer could not run `comlrl plugin-host`; set COMLRL_PLUGIN_HOST to the comlrl binary, or set `isolate: false` on the term",
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
    #[error("reward plugin {}: {}: {message}\n  hint: {}", path.display(), kind.label(), kind.hint())]
    Plugin {
        /// The library file.
        path: PathBuf,
        /// Category (decides the hint).
        kind: PluginFailure,
        /// The loader's or plugin's message.
        message: String,
    },
    /// No file exists at any of the platform-specific names of a plugin path.
    #[error("reward plugin {} not found; tried: {}\n  hint: build the plugins with `cargo build --release --workspace`, or fix the `plugin:` path in the scenario", requested.display(), list(tried))]
    PluginNotFound {
        /// The path as written.
        requested: PathBuf,
        /// Every path that was tried, in order.
        tried: Vec<PathBuf>,
    },
    /// A term with `on_error: skip_step` failed: the trainer skips this step (no update, no
    /// reward metrics) and goes on; see [`crate::spec::OnError`].
    #[error("reward term `{term}` failed (it has `on_error: skip_step`): {source}")]
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
            path: path.into(),
            kind,
            message: message.into(),
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
            requested: "a/b".into(),
            tried: vec!["a/b".into(), "a/libb.so".into()],
        };
        let s = e.to_string();
        assert!(
            s.contains("a/b, a/libb.so") && s.contains("cargo build --release --workspace"),
            "{s}"
        );
    }
}
