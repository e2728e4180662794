//! From the (overridden) JSON tree to the [`Scenario`]: splits the top level into sections,
//! resolves each (collecting every error), and fills the top-level settings and `logging`.
use crate::agent_keys::{AgentContext, DEFAULT_COUNT};
use crate::collect::Diags;
use crate::deser::section;
use crate::error::ErrorKind;
use crate::logging_keys::LoggingContext;
use crate::plan::{AgentPlan, LoggingPlan, Scenario};
use crate::positions::KeyPath;
use crate::raw::{RawLogging, RawPreference, RawTop, RawTrainer};
use crate::trainer::TrainerContext;
use crate::{agents, dataset, paths, preference_keys, rewards, trainer, LoadOptions};
use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

/// The folder of a scenario's runs, relative to the scenario file: `runs/<scenario stem>`.
const OUTPUT_ROOT: &str = "runs";

pub(crate) fn resolve(
    d: &mut Diags,
    root: Json,
    origin: &Path,
    overrides: &[String],
    opts: &LoadOptions,
) -> Option<Scenario> {
    let rp = KeyPath::root();
    match &root {
        Json::Object(m) if m.is_empty() => {
            d.error(ErrorKind::MissingKey, &rp, "the scenario is empty", Some("a scenario needs at least `dataset`, `agents` and `reward` (see 'Scenario reference' in README.md)".into()));
            return None;
        }
        Json::Object(_) => {}
        Json::Null => {
            d.error(ErrorKind::MissingKey, &rp, "the scenario is empty", Some("a scenario needs at least `dataset`, `agents` and `reward` (see 'Scenario reference' in README.md)".into()));
            return None;
        }
        _ => {
            d.error(
                ErrorKind::WrongType,
                &rp,
                "a scenario must be a mapping of sections",
                Some("start with `dataset:`, `agents:`, `reward:`, `trainer:` keys".into()),
            );
            return None;
        }
    }
    let top: RawTop = section(d, &rp, root)?;
    let base = paths::base_dir(origin);
    let name = origin
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "scenario".into());

    let seed = top.seed(d, &rp);
    let checkpoint_every = top.checkpoint_every(d, &rp);
    let output_dir = match scalar::<PathBuf>(d, "output_dir", top.output_dir) {
        Some(p) if p.as_os_str().is_empty() => {
            d.invalid(
                &rp.key("output_dir"),
                "output_dir is empty",
                "remove it to use runs/<scenario name>, or give a folder",
            );
            base.join(OUTPUT_ROOT).join(&name)
        }
        Some(p) => paths::resolve(&base, &p),
        None => base.join(OUTPUT_ROOT).join(&name),
    };

    let dataset = dataset::resolve(d, top.dataset, &base, opts);
    let raw_agents = agents::parse(d, top.agents);
    let raw_trainer: RawTrainer = optional(d, "trainer", top.trainer).unwrap_or_default();
    let generations_set = raw_trainer.num_generations.is_some();
    let raw_preference: RawPreference =
        optional(d, "preference", top.preference).unwrap_or_default();
    // MARLHF's online actor-critic, whose critic the trainer's `critic` section configures.
    let critic_for = match (raw_trainer.algorithm, raw_preference.rl_algorithm) {
        (Some(crate::plan::Algorithm::Marlhf), Some(crate::plan::RlAlgorithm::Iac)) => {
            Some(crate::plan::Algorithm::Iac)
        }
        (Some(crate::plan::Algorithm::Marlhf), Some(crate::plan::RlAlgorithm::Maac)) => {
            Some(crate::plan::Algorithm::Maac)
        }
        _ => None,
    };
    let num_agents = raw_agents.as_ref().map_or(DEFAULT_COUNT, Vec::len);
    let cx = TrainerContext {
        base: &base,
        opts,
        has_eval: dataset.as_ref().is_some_and(|ds| ds.eval.is_some()),
        num_agents,
        critic_for,
    };
    let mut trainer = trainer::resolve(d, raw_trainer, &cx);
    let preference = preference_keys::resolve(
        d,
        &raw_preference,
        &mut trainer,
        generations_set,
        &base,
        num_agents,
    );
    let agents = raw_agents.map(|list| {
        list.into_iter()
            .enumerate()
            .map(|(i, (p, raw))| {
                let cx = AgentContext {
                    index: i,
                    default_lr: trainer.agent_learning_rate,
                    base: &base,
                    dataset: dataset.as_ref(),
                };
                AgentPlan::from_raw(d, &p, &raw, &cx)
            })
            .collect::<Vec<_>>()
    });
    if let Some(list) = &agents {
        if trainer.logprob_temperature == crate::plan::LogprobTemperature::Sampling {
            if let Some(i) = list.iter().position(|a| a.sampling.temperature <= 0.0) {
                d.invalid(
                    &KeyPath::root().key("trainer").key("logprob_temperature"),
                    format!("`sampling` divides the logits by each agent's sampling temperature, and agent {i} samples greedily (temperature 0)"),
                    "give every agent a temperature above 0, or use `logprob_temperature: 1`",
                );
            }
        }
        let greedy = list.iter().any(|a| a.sampling.temperature == 0.0);
        if greedy && trainer.num_generations >= 2 {
            d.warn(&rp.key("agents"), "temperature 0 (greedy) makes all generations of a prompt identical, so every group advantage is 0 and nothing is learned; use a temperature > 0");
        }
    }
    if let (Some(list), crate::plan::CollaborationMode::Centralized) =
        (&agents, trainer.collaboration_mode)
    {
        // One actor, agent 0, acts for every agent: another agent's settings but its template
        // would be silently unused.
        for a in list.iter().skip(1) {
            let mut as_first = a.clone();
            as_first.index = list[0].index;
            as_first.template = list[0].template.clone();
            if as_first != list[0] {
                d.warn(&rp.key("agents"), format!(
                    "agent {}: only its `template` is read under `trainer.collaboration_mode: centralized` (agent 0's model, sampling settings and learning rate act for every agent)",
                    a.index
                ));
            }
        }
    }
    let reward = rewards::resolve(d, top.reward, top.reward_processors, &base, opts);
    if let Some(r) = &reward {
        trainer::check_reward_aggregation(d, &trainer, r);
    }
    let logging = logging(d, top.logging, &name);

    Some(Scenario {
        name,
        source: origin.to_path_buf(),
        base_dir: base,
        overrides: overrides.to_vec(),
        seed,
        output_dir,
        checkpoint_every,
        dataset: dataset?,
        agents: agents?,
        reward: reward?,
        trainer,
        logging,
        preference,
        warnings: Vec::new(),
    })
}

/// A top-level scalar setting.
fn scalar<T: DeserializeOwned>(d: &mut Diags, key: &str, v: Option<Json>) -> Option<T> {
    section(d, &KeyPath::root().key(key), v?)
}

/// An optional section (absent or empty = all defaults).
fn optional<T: DeserializeOwned>(d: &mut Diags, key: &str, v: Option<Json>) -> Option<T> {
    let p = KeyPath::root().key(key);
    match v? {
        v @ Json::Object(_) => section(d, &p, v),
        _ => {
            d.error(
                ErrorKind::WrongType,
                &p,
                format!("wrong type: `{key}` must be a mapping"),
                Some(format!(
                    "write `{key}:` followed by indented `setting: value` lines"
                )),
            );
            None
        }
    }
}

fn logging(d: &mut Diags, v: Option<Json>, name: &str) -> LoggingPlan {
    let raw: RawLogging = optional(d, "logging", v).unwrap_or_default();
    let p = KeyPath::root().key("logging");
    LoggingPlan::from_raw(d, &p, &raw, &LoggingContext { name })
}
