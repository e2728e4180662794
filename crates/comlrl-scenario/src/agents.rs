//! The `agents` section's two shapes (`{count: N, model: ..., ...}` for N like agents, or a list
//! of per-agent entries) and the resolvers its key table (`agent_keys.rs`) calls: models
//! classified (builtin / local dir / GGUF / hub id), prompt templates compiled and checked
//! against the dataset's fields.
use crate::collect::Diags;
use crate::data::Dataset;
use crate::deser::section;
use crate::error::ErrorKind;
use crate::paths;
use crate::plan::{DatasetPlan, ModelRef, ModelSource};
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
            let count = group.count(d, &p);
            if count < 1 {
                return None;
            }
            Some((0..count).map(|_| (p.clone(), group.shared())).collect())
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

/// `agents.model`: a builtin, a local directory or GGUF file (made absolute), or a hub id.
pub(crate) fn model_ref(d: &mut Diags, p: &KeyPath, spec: &str, base: &Path) -> ModelRef {
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
                paths::not_a_file("GGUF file", &abs),
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
        if let Some(why) = hub_id_problem(spec_t) {
            d.invalid(
                p,
                format!("`{spec}` is not a model: no such local directory, and not a hub id of the form `owner/name` ({why})"),
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

/// Why `spec` is not `owner/name` or `owner/name@revision` as the model loader accepts them
/// (see [`crate::hub::repo_id_problem`]); `None`: it is one.
pub(crate) fn hub_id_problem(spec: &str) -> Option<String> {
    let (repo, revision) = match spec.split_once('@') {
        Some((r, rev)) => (r, Some(rev)),
        None => (spec, None),
    };
    crate::hub::repo_id_problem(repo).or_else(|| revision.and_then(crate::hub::revision_problem))
}

/// `agents.template`: parsed, and its placeholders checked against every row.
pub(crate) fn compile_template(
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
