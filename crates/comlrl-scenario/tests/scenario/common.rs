//! Test helpers: a temporary scenario folder with a reward script, and lookups into diagnostics.
#![allow(dead_code)]
use comlrl_scenario::{load_str, Diagnostic, ErrorKind, Location, Scenario, ScenarioError};
use std::path::PathBuf;

/// A minimal valid scenario; tests edit it. Line numbers matter to the error tests.
pub const BASE: &str = "\
dataset:
  prompts: [\"a\", \"b\"]
agents:
  count: 2
  model: builtin:tiny
reward:
  rhai: r.rhai
trainer:
  num_generations: 8
";

/// A temp folder holding `r.rhai`, in which scenarios are loaded as `<dir>/s.yaml`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("r.rhai"), "fn reward(c, ctx) { 1.0 }").expect("write");
        Fixture { dir }
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    pub fn origin(&self) -> PathBuf {
        self.dir.path().join("s.yaml")
    }

    pub fn load(&self, text: &str, sets: &[&str]) -> Result<Scenario, ScenarioError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load_str(text, &self.origin(), &sets)
    }

    pub fn ok(&self, text: &str, sets: &[&str]) -> Scenario {
        match self.load(text, sets) {
            Ok(s) => s,
            Err(e) => panic!("expected the scenario to load, got:\n{e}"),
        }
    }

    /// The diagnostics of a scenario that must fail.
    pub fn errs(&self, text: &str, sets: &[&str]) -> (String, Vec<Diagnostic>) {
        match self.load(text, sets) {
            Ok(_) => panic!("expected errors for:\n{text}"),
            Err(e) => (e.to_string(), e.diagnostics().to_vec()),
        }
    }

    /// The only diagnostic of a scenario that must fail with exactly one error.
    pub fn one(&self, text: &str, sets: &[&str]) -> (String, Diagnostic) {
        let (msg, ds) = self.errs(text, sets);
        assert_eq!(ds.len(), 1, "expected one error, got:\n{msg}");
        (msg, ds[0].clone())
    }
}

/// Asserts kind, key, location and that the rendered message and hint contain `parts`.
pub fn check(
    d: &Diagnostic,
    kind: ErrorKind,
    key: &str,
    line: usize,
    column: usize,
    parts: &[&str],
) {
    assert_eq!(d.kind, kind, "{d:?}");
    assert_eq!(d.key, key, "{d:?}");
    assert_eq!(d.location, Location::File { line, column }, "{d:?}");
    let text = format!("{} {}", d.message, d.hint.clone().unwrap_or_default());
    for p in parts {
        assert!(text.contains(p), "`{p}` not in `{text}`");
    }
}

/// Asserts that `ds` holds one `InvalidValue` per case `(line, message, hint)`, in order: the
/// case's `key: value` line written at line `first_line + i`, column `column`, reported under
/// `prefix` + key (`trainer.`, `agents[1].`) with its message and hint.
pub fn check_cases(
    msg: &str,
    ds: &[Diagnostic],
    cases: &[(&str, &str, &str)],
    prefix: &str,
    first_line: usize,
    column: usize,
) {
    assert_eq!(ds.len(), cases.len(), "{msg}");
    for (i, (line, message, hint)) in cases.iter().enumerate() {
        let key = line.split(':').next().unwrap();
        check(
            &ds[i],
            ErrorKind::InvalidValue,
            &format!("{prefix}{key}"),
            first_line + i,
            column,
            &[message, hint],
        );
    }
}

/// Path of the workspace's `scenarios/` folder.
pub fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// [`BASE`] with the first `replace` replaced by `by` (which must be there).
pub fn with(replace: &str, by: &str) -> String {
    assert!(BASE.contains(replace), "{replace}");
    BASE.replacen(replace, by, 1)
}
