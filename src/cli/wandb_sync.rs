//! `comlrl wandb-sync <output_dir>`: uploads a finished (or stopped) run to W&B afterwards, from
//! its `metrics.jsonl` and the resolved scenario of its latest checkpoint — for runs that trained
//! offline or while W&B was unreachable. Also home of the `--wandb-*` flags `run` shares.
use anyhow::{anyhow, Context};
use comlrl::metrics::{read_jsonl, COMPLETIONS_FILE};
use comlrl::track::wandb::{self, Connection, RunRef, RunSpec};
use comlrl::track::{attach_samples, end_time, records_from_json, WandbSettings};
use comlrl::train::run::checkpoint;
use comlrl_scenario::{LoadOptions, WandbPlan};
use std::path::{Path, PathBuf};

/// The W&B run flags shared by `run` and `wandb-sync`; they win over `logging.wandb`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WandbArgs {
    /// W&B project (default: `logging.wandb.project`, else `comlrl`).
    #[arg(long, value_name = "PROJECT")]
    pub wandb_project: Option<String>,
    /// W&B entity, a user or team (default: `logging.wandb.entity`, else the API key's default).
    #[arg(long, value_name = "ENTITY")]
    pub wandb_entity: Option<String>,
    /// W&B run name (default: `logging.wandb.name`, else the scenario name).
    #[arg(long, value_name = "NAME")]
    pub wandb_name: Option<String>,
}

impl WandbArgs {
    /// Whether any `--wandb-*` flag was given.
    pub fn any(&self) -> bool {
        self.wandb_project.is_some() || self.wandb_entity.is_some() || self.wandb_name.is_some()
    }

    /// The scenario's W&B settings (or the defaults) with these flags applied.
    pub fn settings(&self, plan: Option<&WandbPlan>, scenario_name: &str) -> WandbSettings {
        let pick = |flag: &Option<String>, from_plan: Option<String>, default: &str| {
            flag.clone()
                .or(from_plan)
                .unwrap_or_else(|| default.to_string())
        };
        WandbSettings {
            project: pick(
                &self.wandb_project,
                plan.map(|p| p.project.clone()),
                comlrl_scenario::WANDB_PROJECT,
            ),
            entity: self
                .wandb_entity
                .clone()
                .or_else(|| plan.and_then(|p| p.entity.clone())),
            name: pick(
                &self.wandb_name,
                plan.map(|p| p.name.clone()),
                scenario_name,
            ),
            tags: plan.map(|p| p.tags.clone()).unwrap_or_default(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's output directory (with metrics.jsonl and checkpoints/).
    pub output_dir: PathBuf,
    #[command(flatten)]
    pub wandb: WandbArgs,
}

/// What the saved scenario tells about the run.
struct SavedRun {
    name: String,
    wandb: Option<WandbPlan>,
    num_turns: usize,
    /// Steps of the whole run; `None` when the scenario no longer loads (moved dataset, ...).
    total_steps: Option<usize>,
}

/// The scenario name: the saved file is `scenario.yaml`, so the name comes from its header
/// comment (`# Resolved comlrl scenario `NAME` ...`), else from the output directory.
fn scenario_name(yaml: &str, output_dir: &Path) -> String {
    let header = yaml
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# Resolved comlrl scenario `"))
        .and_then(|rest| rest.split('`').next())
        .filter(|n| !n.is_empty());
    match header {
        Some(n) => n.to_string(),
        None => output_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "comlrl".into()),
    }
}

fn saved_run(yaml: &str, origin: &Path, output_dir: &Path) -> SavedRun {
    let opts = LoadOptions {
        require_reward_files: false,
        ..LoadOptions::default()
    };
    let name = scenario_name(yaml, output_dir);
    match comlrl_scenario::load_str_with(yaml, origin, &[], &opts) {
        Ok(s) => SavedRun {
            name,
            wandb: s.logging.wandb.clone(),
            num_turns: s.trainer.num_turns,
            total_steps: Some(s.run_epochs() * s.dataset.train.rows.len()),
        },
        Err(_) => {
            // Read what is needed straight from the YAML.
            let v: serde_json::Value = serde_norway::from_str(yaml).unwrap_or_default();
            let text = |p: &str| v.pointer(p).and_then(|x| x.as_str()).map(str::to_string);
            let wandb = v
                .pointer("/logging/wandb")
                .filter(|w| w.is_object())
                .map(|_| WandbPlan {
                    project: text("/logging/wandb/project")
                        .unwrap_or_else(|| comlrl_scenario::WANDB_PROJECT.into()),
                    entity: text("/logging/wandb/entity"),
                    name: text("/logging/wandb/name").unwrap_or_else(|| name.clone()),
                    tags: v
                        .pointer("/logging/wandb/tags")
                        .and_then(|t| t.as_array())
                        .map(|t| {
                            t.iter()
                                .filter_map(|x| x.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                });
            let num_turns = v
                .pointer("/trainer/num_turns")
                .and_then(|x| x.as_u64())
                .unwrap_or(1) as usize;
            SavedRun {
                name,
                wandb,
                num_turns,
                total_steps: None,
            }
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = &a.output_dir;
    let metrics = dir.join("metrics.jsonl");
    let rows = read_jsonl(&metrics)
        .with_context(|| format!("{} is not a comlrl run directory", dir.display()))?;
    let ckpt = checkpoint::latest(dir)?.ok_or_else(|| {
        anyhow!(
            "{}: no checkpoint, so no resolved scenario to send as the run config",
            checkpoint::checkpoints_dir(dir).display()
        )
    })?;
    let scen_path = ckpt.join("scenario.yaml");
    let yaml = std::fs::read_to_string(&scen_path)
        .with_context(|| format!("reading {}", scen_path.display()))?;
    let saved = saved_run(&yaml, &scen_path, dir);
    let state: serde_json::Value = std::fs::read_to_string(ckpt.join("state.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let done = state["step"].as_u64().unwrap_or(0) as usize;
    let complete = match saved.total_steps {
        Some(total) => done >= total,
        None => dir.join("models").is_dir(),
    };
    let settings = a.wandb.settings(saved.wandb.as_ref(), &saved.name);
    let mut records = records_from_json(&rows, saved.num_turns, end_time(&metrics));
    // The sampled completions (`logging.completions`) go up as tables with their rows.
    let completions = dir.join(COMPLETIONS_FILE);
    if completions.is_file() {
        attach_samples(&mut records, read_jsonl(&completions)?);
    }
    let id = RunRef::load(dir, &settings)
        .map(|r| r.id)
        .unwrap_or_else(wandb::new_run_id);
    let spec = RunSpec {
        id,
        settings,
        scenario_yaml: yaml,
    };
    let conn = Connection::from_env();
    let run = wandb::sync(&conn, &spec, &records, if complete { 0 } else { 1 })?;
    run.save(dir)?;
    let state = if complete {
        "marked finished".to_string()
    } else {
        format!("stopped at step {done}: marked failed; after `comlrl run --resume` sync again")
    };
    eprintln!(
        "W&B: uploaded {} rows ({state}): {}",
        records.len(),
        run.url
    );
    Ok(())
}
