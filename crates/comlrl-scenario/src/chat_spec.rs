//! `agents.chat_template` (`none` | `auto` | a `.jinja` file) and `agents.system_prompt`: the
//! file is read and compiled at load, and rendered once with the first training prompt so that a
//! template that cannot render it fails here, not in the middle of a run.
use crate::chat::ChatTemplate;
use crate::collect::Diags;
use crate::error::ErrorKind;
use crate::paths;
use crate::plan::{ChatTemplateSpec, DatasetPlan, ModelSource};
use crate::positions::KeyPath;
use std::path::Path;

pub(crate) fn resolve(
    d: &mut Diags,
    p: &KeyPath,
    setting: Option<&str>,
    system_prompt: Option<&str>,
    model: &ModelSource,
    base: &Path,
    dataset: Option<&DatasetPlan>,
) -> ChatTemplateSpec {
    let key = p.key("chat_template");
    let spec = match setting.map(str::trim) {
        None | Some("none") => ChatTemplateSpec::None,
        Some("auto") => {
            if let ModelSource::Builtin(name) = model {
                d.invalid(
                    &key,
                    format!("`builtin:{name}` has no chat template (its byte tokenizer has none)"),
                    "use `chat_template: none`, or a `.jinja` file",
                );
            }
            ChatTemplateSpec::Auto
        }
        Some("") => {
            d.invalid(
                &key,
                "chat_template is empty",
                "use `none`, `auto` or the path of a `.jinja` file",
            );
            ChatTemplateSpec::None
        }
        Some(file) => {
            let path = paths::resolve(base, Path::new(file));
            let source = match crate::chat::read_template(&path) {
                Ok(s) => s,
                Err(e) => {
                    let why = match &e {
                        crate::ChatTemplateError::Read { source, .. } => source.to_string(),
                        other => other.to_string(),
                    };
                    d.error(
                        ErrorKind::MissingFile,
                        &key,
                        format!("cannot read chat template {}: {why}", path.display()),
                        Some(format!(
                            "use `none`, `auto` or the path of a `.jinja` file (relative to {})",
                            base.display()
                        )),
                    );
                    return ChatTemplateSpec::None;
                }
            };
            check_renders(d, &key, &path, &source, system_prompt, dataset);
            ChatTemplateSpec::File { path, source }
        }
    };
    if system_prompt.is_some() && spec == ChatTemplateSpec::None {
        d.warn(
            &p.key("system_prompt"),
            "has no effect with `chat_template: none` (only a chat template places a system message)",
        );
    }
    spec
}

fn check_renders(
    d: &mut Diags,
    key: &KeyPath,
    path: &Path,
    source: &str,
    system_prompt: Option<&str>,
    dataset: Option<&DatasetPlan>,
) {
    let rendered =
        ChatTemplate::new(path.display().to_string(), source).and_then(|t| {
            match dataset.and_then(|ds| ds.train.rows.first()) {
                Some(row) => t.render(system_prompt, &row.prompt).map(|_| ()),
                None => Ok(()),
            }
        });
    if let Err(e) = rendered {
        d.error(
            ErrorKind::Template,
            key,
            e.to_string(),
            Some("fix the template; it is rendered with `messages` ([system?, user]), `add_generation_prompt` and the special tokens (`bos_token`, ...)".into()),
        );
    }
}
