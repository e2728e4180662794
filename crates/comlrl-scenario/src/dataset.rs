//! The `dataset` section: inline `prompts` or a `path` (with `format` and `prompt_field`),
//! an optional `eval` set of the same shape; rows are loaded here and must not be empty.
use crate::collect::Diags;
use crate::data::{self, DataFormat, DataSource, Dataset};
use crate::defaults as def;
use crate::deser::section;
use crate::error::ErrorKind;
use crate::paths;
use crate::plan::DatasetPlan;
use crate::positions::KeyPath;
use crate::raw::{RawDataSource, RawDataset};
use serde_json::Value as Json;
use std::path::Path;

pub(crate) fn resolve(d: &mut Diags, value: Option<Json>, base: &Path) -> Option<DatasetPlan> {
    let p = KeyPath::root().key("dataset");
    let Some(value) = value else {
        d.error(
            ErrorKind::MissingKey,
            &p,
            "the scenario has no `dataset` section",
            Some(
                "add `dataset: {prompts: [\"...\", \"...\"]}` or `dataset: {path: data.jsonl}`"
                    .into(),
            ),
        );
        return None;
    };
    let raw: RawDataset = section(d, &p, value)?;
    let (train, eval) = raw.split();
    let train = source(d, &p, train, base);
    let eval = match eval {
        Some(e) => Some(source(d, &p.key("eval"), e, base)?),
        None => None,
    };
    Some(DatasetPlan {
        train: train?,
        eval,
    })
}

fn source(d: &mut Diags, p: &KeyPath, raw: RawDataSource, base: &Path) -> Option<Dataset> {
    let prompt_field = raw
        .prompt_field
        .clone()
        .unwrap_or_else(|| def::PROMPT_FIELD.to_string());
    let (source, rows) =
        match (raw.prompts, raw.path) {
            (Some(_), Some(_)) => {
                d.invalid(
                    &p.key("path"),
                    "both `prompts` and `path` are set",
                    "keep one: inline `prompts:` or a data file `path:`",
                );
                return None;
            }
            (None, None) => {
                d.error(
                    ErrorKind::MissingKey,
                    p,
                    "no rows: set `prompts` or `path`",
                    Some("e.g. `prompts: [\"Tell a joke:\"]` or `path: data/train.jsonl`".into()),
                );
                return None;
            }
            (Some(prompts), None) => {
                for key in ["format", "prompt_field"] {
                    let set = if key == "format" {
                        raw.format.is_some()
                    } else {
                        raw.prompt_field.is_some()
                    };
                    if set {
                        d.warn(
                            &p.key(key),
                            "only applies to a data file (`path`), not to inline prompts",
                        );
                    }
                }
                (DataSource::Inline, data::inline_rows(&prompts))
            }
            (None, Some(path)) => {
                let abs = paths::resolve(base, &path);
                let format =
                    match raw.format.or_else(|| DataFormat::from_extension(&abs)) {
                        Some(f) => f,
                        None => {
                            d.invalid(
                        &p.key("path"),
                        format!("cannot tell the format of {} from its extension", abs.display()),
                        "name it .jsonl, .json or .csv, or add `format: jsonl | json | csv`",
                    );
                            return None;
                        }
                    };
                if !abs.is_file() {
                    d.error(
                        ErrorKind::MissingFile,
                        &p.key("path"),
                        paths::not_a_file("data file", &abs),
                        Some(format!(
                            "paths are relative to the scenario file's directory ({})",
                            base.display()
                        )),
                    );
                    return None;
                }
                match data::load_file(&abs, format, &prompt_field) {
                    Ok(rows) => (DataSource::File { path: abs, format }, rows),
                    Err(msg) => {
                        d.error(
                            ErrorKind::Dataset,
                            &p.key("path"),
                            msg,
                            Some(
                                "fix the data file, or point `prompt_field` at the prompt column"
                                    .into(),
                            ),
                        );
                        return None;
                    }
                }
            }
        };
    if rows.is_empty() {
        let key = match source {
            DataSource::Inline => p.key("prompts"),
            DataSource::File { .. } => p.key("path"),
        };
        d.error(
            ErrorKind::Dataset,
            &key,
            "the dataset is empty",
            Some("add at least one prompt (row)".into()),
        );
        return None;
    }
    Some(Dataset {
        source,
        prompt_field,
        rows,
    })
}
