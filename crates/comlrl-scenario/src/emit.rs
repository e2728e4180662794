//! The resolved scenario written back as a scenario file: every default explicit, every path
//! absolute, agents in list form. Stored with checkpoints and as the W&B config; loading it again
//! gives the same plan (rows of a data file are re-read from its path, not embedded).
use crate::data::{DataSource, Dataset};
use crate::plan::Scenario;
use crate::raw::{RawAgent, RawDataSource, RawDataset, RawLogging, RawTrainer};
use crate::spec::{ProcessorSpec, RewardSpec};
use serde::{Serialize, Serializer};
use std::path::PathBuf;

#[derive(Serialize)]
struct Emitted<'a> {
    dataset: RawDataset,
    agents: Vec<RawAgent>,
    reward: &'a [RewardSpec],
    #[serde(serialize_with = "processors_as_maps")]
    reward_processors: &'a [ProcessorSpec],
    trainer: RawTrainer,
    logging: RawLogging,
    seed: u64,
    output_dir: &'a PathBuf,
    checkpoint_every: u64,
}

/// `- scale: 100.0` rather than YAML tags (`- !scale 100.0`), as users write them.
fn processors_as_maps<S: Serializer>(p: &&[ProcessorSpec], s: S) -> Result<S::Ok, S::Error> {
    let maps: Vec<serde_json::Value> = p
        .iter()
        .map(|x| serde_json::to_value(x).unwrap_or(serde_json::Value::Null))
        .collect();
    maps.serialize(s)
}

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
    let train = source(&s.dataset.train);
    let dataset = RawDataset {
        prompts: train.prompts,
        path: train.path,
        format: train.format,
        prompt_field: train.prompt_field,
        hub: train.hub,
        config: train.config,
        split: train.split,
        eval: s.dataset.eval.as_ref().map(source),
    };
    let agents = s.agents.iter().map(|a| a.to_raw()).collect();
    // Settings that are moot in this run (multi-turn ones with one turn, eval ones without an
    // eval set) are left out: reloading gives the same plan, without "no effect" warnings.
    let trainer = s.trainer.to_raw(s.dataset.eval.is_some());
    let logging = s.logging.to_raw(false);
    let doc = Emitted {
        dataset,
        agents,
        reward: &s.reward.terms,
        reward_processors: &s.reward.processors,
        trainer,
        logging,
        seed: s.seed,
        output_dir: &s.output_dir,
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
