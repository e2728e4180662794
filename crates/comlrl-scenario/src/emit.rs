//! The resolved scenario written back as a scenario file: every default explicit, every path
//! absolute, agents in list form. Stored with checkpoints and as the W&B config; loading it again
//! gives the same plan (rows of a data file are re-read from its path, not embedded).
use crate::data::{DataSource, Dataset};
use crate::plan::Scenario;
use crate::raw::{ProcessorChain, RawDataSource, RawDataset, RawScenario};

/// A set of rows as the keys that name its source.
fn source(ds: &Dataset) -> RawDataSource {
    match &ds.source {
        DataSource::Inline => RawDataSource {
            prompts: Some(ds.rows.iter().map(|r| r.prompt.clone()).collect()),
            ..Default::default()
        },
        DataSource::File { path, format } => RawDataSource {
            path: Some(path.clone()),
            format: Some(*format),
            prompt_field: Some(ds.prompt_field.clone()),
            ..Default::default()
        },
        DataSource::Hub {
            repo,
            config,
            split,
            ..
        } => RawDataSource {
            hub: Some(repo.clone()),
            config: Some(config.clone()),
            split: Some(split.clone()),
            prompt_field: Some(ds.prompt_field.clone()),
            ..Default::default()
        },
    }
}

pub(crate) fn to_yaml(s: &Scenario) -> String {
    let mut dataset = RawDataset::from_shared(source(&s.dataset.train));
    dataset.eval = s.dataset.eval.as_ref().map(source);
    // Settings that are moot in this run (multi-turn ones with one turn, eval ones without an
    // eval set) are left out: reloading gives the same plan, without "no effect" warnings.
    let has_eval = s.dataset.eval.is_some();
    let doc = RawScenario {
        dataset,
        agents: s.agents.iter().map(|a| a.to_raw(has_eval)).collect(),
        reward: s.reward.terms.clone(),
        reward_processors: ProcessorChain(s.reward.processors.clone()),
        trainer: s.trainer.to_raw(has_eval),
        logging: s.logging.to_raw(has_eval),
        preference: s.preference.to_raw(has_eval),
        seed: s.seed,
        output_dir: s.output_dir.clone(),
        checkpoint_every: s.checkpoint_every,
    };
    let mut out = format!(
        "# Resolved comlrl scenario `{}` (from {}).\n",
        s.name,
        s.source.display()
    );
    for o in &s.overrides {
        out.push_str(&format!("# --set {o}\n"));
    }
    match serde_norway::to_string(&doc) {
        Ok(body) => out.push_str(&body),
        Err(e) => out.push_str(&format!("# could not serialize the scenario: {e}\n")),
    }
    out
}
