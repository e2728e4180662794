//! What a Hugging Face model directory says besides its weights: its JSON files (read with
//! errors naming the file and line), the chat template as transformers finds it, and the eos and
//! pad token ids in transformers' order of precedence; plus the writes that save one.
use crate::model::decoder::config::ModelConfig;
use crate::model::error::{Error, Result};
use crate::model::tokenizer::Tokenizer;
use std::path::Path;

pub(crate) fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| Error::serialize(path.display().to_string(), e))?;
    std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| Error::io(from, e))
}

pub(crate) fn read_json(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Error::file(
            path,
            format!(
                "not valid JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ),
        )
    })
}

/// The directory's chat template as transformers reads it: `chat_template.jinja` first (it
/// takes priority there), else tokenizer_config.json's `chat_template` (a string, or the
/// template named `default` of a list).
pub(crate) fn dir_chat_template(dir: &Path) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|e| Error::io(&jinja, e));
    }
    let tc = read_json(&dir.join("tokenizer_config.json"))?;
    Ok(match tc.as_ref().and_then(|c| c.get("chat_template")) {
        Some(serde_json::Value::String(t)) => Some(t.clone()),
        // Several named templates: transformers uses the one named `default`.
        Some(serde_json::Value::Array(list)) => list.iter().find_map(|t| {
            (t.get("name")?.as_str()? == "default")
                .then(|| t.get("template")?.as_str().map(str::to_string))?
        }),
        _ => None,
    })
}

/// Token ids given as one number or a list (config files use both). An id beyond u32 becomes
/// u32::MAX, which the vocabulary check then refuses, rather than wrapping to a real token.
pub(crate) fn ids_of(v: Option<&serde_json::Value>) -> Vec<u32> {
    let id = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    match v {
        Some(serde_json::Value::Number(n)) => n.as_u64().map(|x| vec![id(x)]).unwrap_or_default(),
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).map(id).collect(),
        _ => vec![],
    }
}

/// eos ids and the pad id: generation_config.json, then config.json, then tokenizer_config.json's
/// token strings (transformers' order of precedence for `generate`).
pub(crate) fn special_ids(
    dir: &Path,
    cfg: &ModelConfig,
    tok: &Tokenizer,
) -> Result<(Vec<u32>, u32)> {
    let gen = read_json(&dir.join("generation_config.json"))?;
    let tcfg = read_json(&dir.join("tokenizer_config.json"))?;
    let tok_str = |key: &str| -> Option<u32> {
        let v = tcfg.as_ref()?.get(key)?;
        let s = v
            .as_str()
            .or_else(|| v.get("content").and_then(|c| c.as_str()))?;
        tok.token_id(s)
    };
    let mut eos = ids_of(gen.as_ref().and_then(|g| g.get("eos_token_id")));
    if eos.is_empty() {
        eos = ids_of(cfg.eos_token_id.as_ref());
    }
    if eos.is_empty() {
        eos = tok_str("eos_token").into_iter().collect();
    }
    if eos.is_empty() {
        return Err(Error::file(
            dir,
            "no eos token id in generation_config.json, config.json or tokenizer_config.json; add `eos_token_id` to generation_config.json",
        ));
    }
    let pad = ids_of(gen.as_ref().and_then(|g| g.get("pad_token_id")))
        .first()
        .copied()
        .or_else(|| ids_of(cfg.pad_token_id.as_ref()).first().copied())
        .or_else(|| tok_str("pad_token"))
        .unwrap_or(eos[0]);
    Ok((eos, pad))
}
