//! The `dataset` section: inline `prompts`, a `path` (with `format` and `prompt_field`) or a
//! Hugging Face `hub` dataset (with `config` and `split`), an optional `eval` set of the same
//! shape; rows are loaded here and must not be empty.
use crate::collect::Diags;
use crate::data::{self, DataFormat, DataSource, Dataset, Row};
use crate::deser::section;
use crate::error::ErrorKind;
use crate::hub::{self, HubRequest};
use crate::paths;
use crate::plan::DatasetPlan;
use crate::positions::KeyPath;
use crate::raw::{RawDataSource, RawDataset};
use crate::split::SplitSpec;
use crate::LoadOptions;
use serde_json::Value as Json;
use std::path::Path;

/// The split of a training set from the Hub that names none (an eval set must name its split).
const HUB_SPLIT: &str = "train";

pub(crate) fn resolve(
    d: &mut Diags,
    value: Option<Json>,
    base: &Path,
    opts: &LoadOptions,
) -> Option<DatasetPlan> {
    let p = KeyPath::root().key("dataset");
    let Some(value) = value else {
        d.error(
            ErrorKind::MissingKey,
            &p,
            "the scenario has no `dataset` section",
            Some(
                "add `dataset: {prompts: [\"...\", \"...\"]}`, `dataset: {path: data.jsonl}` or `dataset: {hub: org/name}`"
                    .into(),
            ),
        );
        return None;
    };
    let raw: RawDataset = section(d, &p, value)?;
    let train = source(d, &p, raw.shared(), base, opts, false);
    let eval = match raw.eval {
        Some(e) => Some(source(d, &p.key("eval"), e, base, opts, true)?),
        None => None,
    };
    Some(DatasetPlan {
        train: train?,
        eval,
    })
}

fn source(
    d: &mut Diags,
    p: &KeyPath,
    raw: RawDataSource,
    base: &Path,
    opts: &LoadOptions,
    is_eval: bool,
) -> Option<Dataset> {
    let prompt_field = raw.prompt_field(d, p);
    let set: Vec<&str> = [
        ("prompts", raw.prompts.is_some()),
        ("path", raw.path.is_some()),
        ("hub", raw.hub.is_some()),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(k, _)| *k)
    .collect();
    if set.len() > 1 {
        d.invalid(
            &p.key(set[1]),
            format!("both `{}` and `{}` are set", set[0], set[1]),
            "keep one: inline `prompts:`, a data file `path:` or a Hub dataset `hub:`",
        );
        return None;
    }
    let unused = |d: &mut Diags, keys: &[(&str, bool)], what: &str| {
        for (key, on) in keys {
            if *on {
                d.warn(&p.key(key), format!("only applies to {what}"));
            }
        }
    };
    let (source, rows) = if let Some(prompts) = raw.prompts {
        unused(
            d,
            &[
                ("format", raw.format.is_some()),
                ("prompt_field", raw.prompt_field.is_some()),
                ("config", raw.config.is_some()),
                ("split", raw.split.is_some()),
            ],
            "a data file (`path`) or a Hub dataset (`hub`), not to inline prompts",
        );
        (DataSource::Inline, data::inline_rows(&prompts))
    } else if let Some(path) = raw.path {
        unused(
            d,
            &[
                ("config", raw.config.is_some()),
                ("split", raw.split.is_some()),
            ],
            "a Hub dataset (`hub`), not to a data file",
        );
        file(d, p, &path, raw.format, &prompt_field, base)?
    } else if let Some(repo) = raw.hub.clone() {
        unused(
            d,
            &[("format", raw.format.is_some())],
            "a data file (`path`); Hub datasets are read as parquet",
        );
        let config = raw.config(d, p);
        let split = match (raw.split, is_eval) {
            (Some(s), _) => s,
            (None, false) => HUB_SPLIT.to_string(),
            (None, true) => {
                d.error(
                    ErrorKind::MissingKey,
                    &p.key("hub"),
                    "an eval set from the Hub needs a `split`",
                    Some("e.g. `split: test` or `split: \"train[-100:]\"`".into()),
                );
                return None;
            }
        };
        from_hub(d, p, repo, config, split, &prompt_field, opts)?
    } else {
        d.error(
            ErrorKind::MissingKey,
            p,
            "no rows: set `prompts`, `path` or `hub`",
            Some("e.g. `prompts: [\"Tell a joke:\"]`, `path: data/train.jsonl` or `hub: openai/gsm8k`".into()),
        );
        return None;
    };
    if rows.is_empty() {
        let key = match source {
            DataSource::Inline => p.key("prompts"),
            DataSource::File { .. } => p.key("path"),
            DataSource::Hub { .. } => p.key("split"),
        };
        d.error(
            ErrorKind::Dataset,
            &key,
            "the dataset is empty",
            Some("add at least one prompt (row), or widen the split's slice".into()),
        );
        return None;
    }
    Some(Dataset {
        source,
        prompt_field,
        rows,
    })
}

fn file(
    d: &mut Diags,
    p: &KeyPath,
    path: &Path,
    format: Option<DataFormat>,
    prompt_field: &str,
    base: &Path,
) -> Option<(DataSource, Vec<Row>)> {
    let abs = paths::resolve(base, path);
    let Some(format) = format.or_else(|| DataFormat::from_extension(&abs)) else {
        d.invalid(
            &p.key("path"),
            format!(
                "cannot tell the format of {} from its extension",
                abs.display()
            ),
            "name it .jsonl, .json, .csv or .parquet, or add `format: jsonl | json | csv | parquet`",
        );
        return None;
    };
    if let Some(why) = crate::files::not_regular(&abs) {
        // Missing (or a dangling symlink): the path is wrong. Anything else is there but is not
        // a file of rows; a FIFO or device is refused by its type, never opened.
        let (kind, hint) = if why.ends_with("does not exist") {
            (
                ErrorKind::MissingFile,
                format!(
                    "paths are relative to the scenario file's directory ({})",
                    base.display()
                ),
            )
        } else {
            (
                ErrorKind::Dataset,
                "point `path` at a regular file (pipes and devices are not read)".to_string(),
            )
        };
        d.error(
            kind,
            &p.key("path"),
            format!("data file {} {why}", abs.display()),
            Some(hint),
        );
        return None;
    }
    match data::load_file(&abs, format, prompt_field) {
        Ok(rows) => Some((DataSource::File { path: abs, format }, rows)),
        Err(msg) => {
            d.error(
                ErrorKind::Dataset,
                &p.key("path"),
                msg,
                Some("fix the data file, or point `prompt_field` at the prompt column".into()),
            );
            None
        }
    }
}

fn from_hub(
    d: &mut Diags,
    p: &KeyPath,
    repo: String,
    config: String,
    split: String,
    prompt_field: &str,
    opts: &LoadOptions,
) -> Option<(DataSource, Vec<Row>)> {
    if let Some(why) = hub::repo_id_problem(&repo) {
        d.invalid(
            &p.key("hub"),
            format!("`{repo}` is not a Hub dataset id of the form `org/name`: {why}"),
            "e.g. `hub: openai/gsm8k` (letters, digits, `-`, `_` and `.`)",
        );
        return None;
    }
    let spec = match SplitSpec::parse(&split) {
        Ok(s) => s,
        Err(msg) => {
            d.invalid(&p.key("split"), msg, "see docs/data.md, \"Hub datasets\"");
            return None;
        }
    };
    let req = HubRequest {
        repo,
        config,
        split: spec.name.clone(),
    };
    let root = opts.hub_cache.clone().unwrap_or_else(hub::cache_root);
    let files = match hub::find_cached(&root, &req) {
        Ok(f) => Ok(f),
        Err(hub::FindError::Missing(first)) => match &opts.hub_download {
            Some(download) => match download(&req, &root) {
                Ok(()) => hub::find_cached(&root, &req),
                Err(e) => Err(hub::FindError::Missing(format!(
                    "{first}; downloading failed: {e}"
                ))),
            },
            None => Err(hub::FindError::Missing(format!(
                "{first}; this command reads the cache only (`comlrl run` downloads when online)"
            ))),
        },
        Err(bad) => Err(bad),
    };
    let files = match files {
        Ok(f) => f,
        Err(hub::FindError::Bad(msg)) => {
            d.error(
                ErrorKind::Dataset,
                &p.key("hub"),
                msg,
                Some("or set HF_HOME / HF_HUB_CACHE to another cache".into()),
            );
            return None;
        }
        Err(hub::FindError::Missing(msg)) => {
            d.error(
                ErrorKind::MissingFile,
                &p.key("hub"),
                format!(
                    "dataset `{}` (config `{}`, split `{}`) is not in the Hugging Face cache: {msg}",
                    req.repo, req.config, req.split
                ),
                Some(format!(
                    "download it where you have network (`huggingface-cli download --repo-type dataset {}`) and copy the cache, or set HF_HOME / HF_HUB_CACHE to the cache that has it; files are looked for as <config>/<split>/*.parquet, <config>/<split>-*.parquet or data/<split>-*.parquet",
                    req.repo
                )),
            );
            return None;
        }
    };
    let mut rows = Vec::new();
    for f in &files {
        match data::load_file(f, DataFormat::Parquet, prompt_field) {
            Ok(r) => rows.extend(r),
            Err(msg) => {
                d.error(
                    ErrorKind::Dataset,
                    &p.key("hub"),
                    msg,
                    Some("point `prompt_field` at the prompt column (a dotted path such as `meta.question` reaches nested fields)".into()),
                );
                return None;
            }
        }
    }
    let range = match spec.range(rows.len()) {
        Ok(r) => r,
        Err(msg) => {
            d.invalid(
                &p.key("split"),
                msg,
                "use a smaller slice, or a percentage (`train[:10%]`)",
            );
            return None;
        }
    };
    let rows: Vec<Row> = rows.drain(range).collect();
    let source = DataSource::Hub {
        repo: req.repo,
        config: req.config,
        split,
        files,
    };
    Some((source, rows))
}
