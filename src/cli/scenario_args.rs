//! The scenario argument shared by `run`, `check` and `reward`: a file plus `--set` overrides.
use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ScenarioArgs {
    /// The scenario YAML file.
    pub scenario: PathBuf,
    /// Override a field: `--set trainer.num_generations=4` (repeatable; values are YAML).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub overrides: Vec<String>,
}

impl ScenarioArgs {
    /// Loads and validates the scenario, printing its warnings to stderr.
    pub fn load(&self) -> anyhow::Result<comlrl_scenario::Scenario> {
        let s = comlrl_scenario::load(&self.scenario, &self.overrides)
            .with_context(|| format!("invalid scenario {}", self.scenario.display()))?;
        for w in &s.warnings {
            eprintln!("warning: {w}");
        }
        Ok(s)
    }
}
