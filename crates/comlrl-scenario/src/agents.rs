//! The `agents` section: `{count: N, model: ..., ...}` for N like agents, or a list of per-agent
//! entries; models classified (builtin / local dir / hub id), sampling and learning-rate checks,
//! prompt templates compiled and checked against the dataset's fields.
use crate::collect::Diags;
use crate::data::Dataset;
use crate::defaults as def;
use crate::deser::section;
use crate::error::ErrorKind;
use crate::paths;
use crate::plan::{AgentPlan, DatasetPlan, ModelRef, ModelSource, Sampling};
use crate::positions::KeyPath;
use crate::raw::{RawAgent, RawAgentGroup};
use crate::suggest;
use crate::template::Template;
use serde_json::Value as Json;
use std::path::Path;

/// Each agent's raw settings and the key path its settings are written under (`agents` for the
/// shared form, `agents[i]` for the list form).
pub(crate) fn parse(d: &mut Diags, value: Option<Json>) -> Option<Vec<(KeyPath, RawAgent)>> {
    let p = KeyPath::root().key("agents");
    match value {
        None => {
            d.error(
                ErrorKind::MissingKey,
                &p,
                "the scenario has no `agents` section",
                Some("add e.g. `agents: {count: 2, model: Qwen/Qwen2.5-0.5B}`".into()),
            );
            None
        }
        Some(v @ Json::Object(_)) => {
            let group: RawAgentGroup = section(d, &p, v)?;
            let count = group.count.unwrap_or(def::AGENT_COUNT);
            if count < 1 {
                d.invalid(
                    &p.key("count"),
                    "count must be at least 1",
                    "use `count: 2` for two cooperating agents (1 = single-agent GRPO)",
                );
                return None;
            }
            Some((0..count).map(|_| (p.clone(), group.agent())).collect())
        }
        Some(Json::Array(items)) => {
            if items.is_empty() {
                d.invalid(
                    &p,
                    "the agent list is empty",
                    "add at least one `- model: ...` entry",
                );
                return None;
            }
            let mut out = Vec::new();
            for (i, v) in items.into_iter().enumerate() {
                let ap = p.index(i);
                if let Some(a) = section::<RawAgent>(d, &ap, v) {
                    out.push((ap, a));
                }
            }
            Some(out)
        }
        Some(_) => {
            d.error(
                ErrorKind::WrongType,
                &p,
                "wrong type: `agents` must be a mapping or a list",
                Some(
                    "write `agents: {count: 2, model: ...}` or a list of `- model: ...` entries"
                        .into(),
                ),
            );
            None
        }
    }
}

/// Resolves one agent. `default_lr` is `trainer.agent_learning_rate`.
pub(crate) fn resolve(
    d: &mut Diags,
    index: usize,
    p: &KeyPath,
    raw: RawAgent,
    default_lr: f64,
    base: &Path,
    dataset: Option<&DatasetPlan>,
) -> AgentPlan {
    let model = model_ref(d, &p.key("model"), &raw.model, base);
    let temperature = raw.temperature.unwrap_or(def::TEMPERATURE);
    if !(temperature >= 0.0 && temperature.is_finite()) {
        d.invalid(
            &p.key("temperature"),
            format!("temperature must be ≥ 0 (got {temperature})"),
            "use e.g. `temperature: 0.6` (0 = greedy)",
        );
    }
    let top_p = raw.top_p.unwrap_or(def::TOP_P);
    if !(top_p > 0.0 && top_p <= 1.0) {
        d.invalid(
            &p.key("top_p"),
            format!("top_p must be in (0, 1] (got {top_p})"),
            "use e.g. `top_p: 0.6`; 1.0 disables nucleus filtering",
        );
    }
    let top_k = match raw.top_k {
        None => def::TOP_K,
        Some(k) => k,
    };
    if top_k == Some(0) {
        d.invalid(
            &p.key("top_k"),
            "top_k must be at least 1",
            "use `top_k: null` to disable top-k filtering",
        );
    }
    let max_new_tokens = raw.max_new_tokens.unwrap_or(def::MAX_NEW_TOKENS);
    if max_new_tokens == 0 {
        d.invalid(
            &p.key("max_new_tokens"),
            "max_new_tokens must be at least 1",
            "use e.g. `max_new_tokens: 128` (CoMLRL default 256)",
        );
    }
    let sampling_dtype = raw.sampling_dtype.unwrap_or(def::SAMPLING_DTYPE);
    if sampling_dtype == crate::plan::Dtype::F16 {
        d.invalid(
            &p.key("sampling_dtype"),
            "sampling_dtype f16 is not supported",
            "use `sampling_dtype: f32` (the weights themselves) or `bf16` (bf16 copies, f32 sums)",
        );
    }
    let learning_rate = match raw.learning_rate {
        Some(lr) => {
            crate::trainer::check_lr(d, &p.key("learning_rate"), lr);
            lr
        }
        None => default_lr,
    };
    let template = template(d, &p.key("template"), raw.template.as_deref(), dataset);
    let chat_template = crate::chat_spec::resolve(
        d,
        p,
        raw.chat_template.as_deref(),
        raw.system_prompt.as_deref(),
        &model.source,
        base,
        dataset,
    );
    AgentPlan {
        index,
        model,
        dtype: raw.dtype.unwrap_or(def::DTYPE),
        sampling_dtype,
        sampling: Sampling {
            temperature,
            top_p,
            top_k,
            max_new_tokens,
        },
        learning_rate,
        template,
        chat_template,
        system_prompt: raw.system_prompt,
    }
}

fn model_ref(d: &mut Diags, p: &KeyPath, spec: &str, base: &Path) -> ModelRef {
    let spec_t = spec.trim();
    let source = if let Some(name) = spec_t.strip_prefix("builtin:") {
        if name.trim().is_empty() {
            d.invalid(
                p,
                "`builtin:` needs a model name",
                "e.g. `model: builtin:tiny`",
            );
        }
        ModelSource::Builtin(name.trim().to_string())
    } else if is_gguf(spec_t) {
        let abs = paths::resolve(base, Path::new(spec_t));
        if !abs.is_file() {
            d.error(
                ErrorKind::MissingFile,
                p,
                format!("GGUF file {} does not exist", abs.display()),
                Some(format!(
                    "a `*.gguf` model path is relative to {}",
                    base.display()
                )),
            );
        }
        ModelSource::Local(abs)
    } else if paths::is_local_model(spec_t) || paths::resolve(base, Path::new(spec_t)).is_dir() {
        let abs = paths::resolve(base, Path::new(spec_t));
        if !abs.is_dir() {
            d.error(
                ErrorKind::MissingFile,
                p,
                format!("local model directory {} does not exist", abs.display()),
                Some(format!(
                    "paths starting with ./, ../ or / are local directories, relative to {}; a hub id looks like `Qwen/Qwen2.5-0.5B`",
                    base.display()
                )),
            );
        }
        ModelSource::Local(abs)
    } else {
        if !is_hub_id(spec_t) {
            d.invalid(
                p,
                format!("`{spec}` is not a model: no such local directory, and not a hub id of the form `owner/name`"),
                "use a hub id (`Qwen/Qwen2.5-0.5B`, optionally `@revision`), a local dir (`./models/x`) or `builtin:tiny`",
            );
        }
        ModelSource::Hub(spec_t.to_string())
    };
    ModelRef {
        spec: spec.to_string(),
        source,
    }
}

/// A llama.cpp GGUF file path (`*.gguf`, any case).
fn is_gguf(spec: &str) -> bool {
    Path::new(spec)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// `owner/name` or `owner/name@revision`, as the model loader accepts.
pub(crate) fn is_hub_id(spec: &str) -> bool {
    let repo = spec.split_once('@').map_or(spec, |(r, _)| r);
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!(repo.split_once('/'), Some((owner, name)) if valid(owner) && valid(name))
}

fn template(
    d: &mut Diags,
    p: &KeyPath,
    text: Option<&str>,
    dataset: Option<&DatasetPlan>,
) -> Template {
    let Some(text) = text else {
        return Template::default();
    };
    let t = match Template::parse(text) {
        Ok(t) => t,
        Err(msg) => {
            d.error(
                ErrorKind::Template,
                p,
                format!("bad template: {msg}"),
                Some("placeholders look like `{prompt}` or `{field}`".into()),
            );
            return Template::default();
        }
    };
    if let Some(ds) = dataset {
        for set in std::iter::once(&ds.train).chain(ds.eval.as_ref()) {
            check_fields(d, p, &t, set);
        }
    }
    t
}

/// Every placeholder must be a field of every row.
fn check_fields(d: &mut Diags, p: &KeyPath, t: &Template, set: &Dataset) {
    for field in t.fields() {
        let missing = set.rows.iter().position(|r| r.field(field).is_none());
        let Some(row) = missing else { continue };
        if field == set.prompt_field {
            d.error(
                ErrorKind::Template,
                p,
                format!("placeholder `{{{field}}}` names the prompt column"),
                Some(format!(
                    "write `{{prompt}}`: the `{field}` column is the prompt (dataset.prompt_field)"
                )),
            );
            continue;
        }
        let mut known: Vec<&str> = vec!["prompt"];
        known.extend(set.rows[row].fields.keys().map(String::as_str));
        let everywhere = set.rows.iter().all(|r| r.field(field).is_none());
        let message = if everywhere {
            format!("unknown placeholder `{{{field}}}`: the dataset rows have no `{field}` field")
        } else {
            format!(
                "placeholder `{{{field}}}`: row {} of the dataset has no `{field}` field",
                row + 1
            )
        };
        let hint = match suggest::closest(field, &known) {
            Some(g) if everywhere => {
                format!("did you mean `{{{g}}}`? (fields: {})", known.join(", "))
            }
            _ => format!("fields: {}", known.join(", ")),
        };
        d.error(ErrorKind::Template, p, message, Some(hint));
    }
}
