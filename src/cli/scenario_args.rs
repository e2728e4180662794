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
    /// Loads and validates the scenario, printing its warnings to stderr. `dataset.hub`
    /// datasets are read from the Hub cache only.
    pub fn load(&self) -> anyhow::Result<comlrl_scenario::Scenario> {
        self.load_with(comlrl_scenario::LoadOptions::default())
    }

    /// [`ScenarioArgs::load`], downloading `dataset.hub` datasets missing from the cache.
    pub fn load_downloading(&self) -> anyhow::Result<comlrl_scenario::Scenario> {
        self.load_with(comlrl_scenario::LoadOptions {
            hub_download: Some(comlrl::hub_dataset::downloader()),
            ..Default::default()
        })
    }

    fn load_with(
        &self,
        opts: comlrl_scenario::LoadOptions,
    ) -> anyhow::Result<comlrl_scenario::Scenario> {
        let s = comlrl_scenario::load_with(&self.scenario, &self.overrides, &opts)
            .with_context(|| format!("invalid scenario {}", self.scenario.display()))?;
        for w in &s.warnings {
            eprintln!("warning: {w}");
        }
        Ok(s)
    }
}
