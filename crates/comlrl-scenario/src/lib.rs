//! comlrl scenario files: load a YAML scenario (plus `--set key.path=value` overrides), validate
//! it with file:line:column errors that say how to fix each problem, and hand back the resolved
//! plan ([`Scenario`]) the trainer runs. The full key reference is the README's "Scenario reference".
//!
//! ```no_run
//! let s = comlrl_scenario::load(
//!     std::path::Path::new("scenarios/story_len_ratio.yaml"),
//!     &["trainer.num_generations=4".to_string()],
//! )?;
//! assert_eq!(s.trainer.num_generations, 4);
//! for w in &s.warnings { eprintln!("warning: {w}"); }
//! # Ok::<(), comlrl_scenario::ScenarioError>(())
//! ```
mod adapter;
pub use adapter::PROJECTIONS;
mod agent_keys;
mod agents;
pub mod chat;
mod chat_spec;
mod code;
mod collect;
mod critic_keys;
pub mod data;
mod dataset;
mod dataset_keys;
mod deser;
mod emit;
pub mod error;
pub mod files;
pub mod hub;
pub mod keys;
mod logging_keys;
mod overrides;
mod parquet_rows;
mod paths;
pub mod plan;
pub mod positions;
mod preference_keys;
pub mod raw;
mod resolve;
mod rewards;
pub mod split;
mod suggest;
pub mod tables;
pub mod template;
mod top_keys;
mod trainer;
mod trainer_keys;

/// The reward section's plain data, shared with the reward runtime (the `comlrl-spec` crate).
pub use comlrl_spec as spec;

pub use chat::{ChatTemplate, ChatTemplateError};
pub use data::{DataFormat, DataSource, Dataset, Row};
pub use error::{Diagnostic, ErrorKind, Location, ScenarioError};
pub use hub::{HubDownload, HubRequest};
pub use plan::*;
pub use template::Template;

use collect::Diags;
use positions::{KeyPath, PositionIndex};
use std::path::Path;

/// Loader switches.
#[derive(Clone)]
pub struct LoadOptions {
    /// Require reward scripts, reward plugins and the external transition to exist (default
    /// true). Turn off to inspect a scenario whose plugins are not built yet.
    pub require_reward_files: bool,
    /// The Hugging Face Hub cache that `dataset.hub` is read from; `None` (default): from the
    /// environment (`HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`).
    pub hub_cache: Option<std::path::PathBuf>,
    /// Downloads a Hub dataset missing from the cache; `None` (default): the cache only.
    pub hub_download: Option<HubDownload>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            require_reward_files: true,
            hub_cache: None,
            hub_download: None,
        }
    }
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("require_reward_files", &self.require_reward_files)
            .field("hub_cache", &self.hub_cache)
            .field("hub_download", &self.hub_download.is_some())
            .finish()
    }
}

/// Reads and resolves the scenario file at `path`, applying `overrides` (`key.path=value`).
pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    load_with(path, overrides, &LoadOptions::default())
}

/// [`load`] with options.
pub fn load_with(
    path: &Path,
    overrides: &[String],
    opts: &LoadOptions,
) -> Result<Scenario, ScenarioError> {
    let too_big = "move long prompt lists into a data file (`dataset.path`)";
    let text = files::read_text(path, files::MAX_SCENARIO_BYTES, too_big).map_err(|source| {
        ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?;
    load_str_with(&text, path, overrides, opts)
}

/// Resolves scenario `text` as if read from `origin` (which names it in errors and anchors its
/// relative paths; it need not exist).
pub fn load_str(
    text: &str,
    origin: &Path,
    overrides: &[String],
) -> Result<Scenario, ScenarioError> {
    load_str_with(text, origin, overrides, &LoadOptions::default())
}

/// [`load_str`] with options.
pub fn load_str_with(
    text: &str,
    origin: &Path,
    overrides: &[String],
    opts: &LoadOptions,
) -> Result<Scenario, ScenarioError> {
    let mut d = Diags::new(PositionIndex::build(text));
    let invalid = |d: Diags| ScenarioError::Invalid {
        file: origin.to_path_buf(),
        diagnostics: d.errors,
    };
    if let Some(at) = d.index.too_deep().cloned() {
        d.errors.push(Diagnostic {
            kind: ErrorKind::Syntax,
            key: KeyPath::root().to_string(),
            location: at,
            message: format!(
                "the YAML nests deeper than {} levels of mappings and lists",
                positions::MAX_NESTING
            ),
            hint: Some("a scenario nests a few levels; check this part of the file".into()),
        });
        return Err(invalid(d));
    }
    let mut yaml: serde_norway::Value = match serde_norway::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            // serde_norway places a duplicate key at its mapping's first key; the event index
            // knows where the second one is written.
            match d.index.first_duplicate().cloned() {
                Some((path, at)) => d.errors.push(Diagnostic {
                    kind: ErrorKind::Syntax,
                    key: path.to_string(),
                    location: at,
                    message: format!("duplicate key `{path}`: it is already set above"),
                    hint: Some("write each key once; remove or merge the repeated entry".into()),
                }),
                None => syntax_error(&mut d, &e),
            }
            return Err(invalid(d));
        }
    };
    if let Err(e) = yaml.apply_merge() {
        syntax_error(&mut d, &e);
        return Err(invalid(d));
    }
    let mut root = overrides::yaml_to_json(yaml, &KeyPath::root(), &mut d);
    for arg in overrides {
        if let Some(ov) = overrides::parse(arg, &mut d) {
            if overrides::apply(&mut root, &ov, &mut d) {
                d.index.set_override(&ov.path, arg);
            }
        }
    }
    let scenario = resolve::resolve(&mut d, root, origin, overrides, opts);
    match scenario {
        Some(mut s) if d.errors.is_empty() => {
            s.warnings = d.warnings;
            Ok(s)
        }
        _ => {
            // In file order; values from `--set` last.
            d.errors.sort_by_key(|e| match e.location {
                Location::File { line, column } => (0, line, column),
                Location::Override(_) => (1, 0, 0),
            });
            Err(invalid(d))
        }
    }
}

fn syntax_error(d: &mut Diags, e: &serde_norway::Error) {
    let location = match e.location() {
        Some(l) => Location::File {
            line: l.line(),
            column: l.column(),
        },
        None => Location::File { line: 1, column: 1 },
    };
    d.errors.push(Diagnostic {
        kind: ErrorKind::Syntax,
        key: KeyPath::root().to_string(),
        location,
        message: format!("invalid YAML: {e}"),
        hint: Some(
            "check indentation and quoting; values containing `: ` or ending with `:` need quotes"
                .into(),
        ),
    });
}

impl Scenario {
    /// The resolved scenario as YAML (all defaults explicit, absolute paths): store it with
    /// checkpoints and in the W&B config; `load_str` of it yields the same plan.
    pub fn to_yaml(&self) -> String {
        emit::to_yaml(self)
    }
}
