//! Reading a GGUF checkpoint: metadata → HF-style config, tokenizer.json value and chat template;
//! tensors dequantized (any type candle knows) to the training dtype under their HF names, with
//! llama.cpp's Llama q/k row permutation undone.
use super::meta::{opt_str, opt_strings, Meta};
use super::{config, names, rope_freqs, tokenizer};
use crate::error::{Error, Result};
use candle_core::quantized::gguf_file::Content;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Everything a GGUF file holds, in the terms of an HF model directory.
#[derive(Debug)]
pub struct GgufModel {
    /// HF-style `config.json` value (`architectures`, shapes, rope, special ids).
    pub config: serde_json::Value,
    /// `tokenizer.json` value rebuilt from `tokenizer.ggml.*`.
    pub tokenizer: serde_json::Value,
    /// `tokenizer.chat_template`, when the file has one.
    pub chat_template: Option<String>,
    /// `tokenizer_config.json`-style token strings (`bos_token`, `eos_token`, `pad_token`).
    pub special_tokens: serde_json::Map<String, serde_json::Value>,
    /// HF-named tensors (only those the decoder uses), in the requested dtype.
    pub tensors: HashMap<String, Tensor>,
}

/// Opens `path` and reads its header (metadata and tensor table).
pub fn read_header(path: &Path) -> Result<(Content, std::fs::File)> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let content = Content::read(&mut f)
        .map_err(|e| Error::model(path, format!("not a readable GGUF file: {e}")))?;
    Ok((content, f))
}

/// Config, tokenizer and chat template of a GGUF header (`f` is read only for the small
/// `rope_freqs.weight` tensor of Llama 3 scaling).
pub fn describe(path: &Path, content: &Content, f: &mut std::fs::File) -> Result<GgufModel> {
    let m: &Meta = &content.metadata;
    let bad = |msg: String| Error::model(path, msg);
    let tokens = opt_strings(m, "tokenizer.ggml.tokens")
        .map_err(&bad)?
        .ok_or_else(|| {
            bad("metadata `tokenizer.ggml.tokens` is missing: the file has no tokenizer".into())
        })?;
    let has_output = content.tensor_infos.contains_key("output.weight");
    let mut cfg = config::hf_config(m, has_output, tokens.len()).map_err(&bad)?;
    if content.tensor_infos.contains_key("rope_freqs.weight") {
        let stored = content
            .tensor(f, "rope_freqs.weight", &Device::Cpu)
            .and_then(|q| q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>())
            .map_err(|e| bad(format!("tensor `rope_freqs.weight`: {e}")))?;
        if cfg["model_type"] != "llama" {
            return Err(bad(format!(
                "holds `rope_freqs.weight` (Llama 3 rope scaling) but is a `{}` model",
                cfg["model_type"]
            )));
        }
        let theta = cfg["rope_theta"].as_f64().unwrap_or(10_000.0);
        let dim = cfg["head_dim"].as_u64().unwrap_or(0) as usize;
        let scaling = rope_freqs::recover(theta, dim, &stored).map_err(&bad)?;
        let mut rp = scaling.clone();
        rp["rope_theta"] = theta.into();
        cfg["rope_scaling"] = scaling;
        cfg["rope_parameters"] = rp;
    }
    let tok = tokenizer::tokenizer_json(m).map_err(&bad)?;
    let mut special_tokens = serde_json::Map::new();
    for (name, key) in [
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("pad_token", "pad_token_id"),
    ] {
        if let Some(id) = cfg.get(key).and_then(|v| v.as_u64()) {
            let s = tokens
                .get(id as usize)
                .ok_or_else(|| bad(format!("{key} {id} is beyond the {} tokens", tokens.len())))?;
            special_tokens.insert(name.into(), s.to_string().into());
        }
    }
    let chat_template = opt_str(m, "tokenizer.chat_template")
        .map_err(&bad)?
        .map(String::from);
    Ok(GgufModel {
        config: cfg,
        tokenizer: tok,
        chat_template,
        special_tokens,
        tensors: HashMap::new(),
    })
}

/// Reads a whole GGUF checkpoint: header, then every decoder tensor dequantized to `dtype`.
pub fn load(path: &Path, dtype: DType, dev: &Device) -> Result<GgufModel> {
    let (content, mut f) = read_header(path)?;
    let mut model = describe(path, &content, &mut f)?;
    let arch = config::gguf_arch(&model.config).map_err(|e| Error::model(path, e))?;
    let heads = model.config["num_attention_heads"].as_u64().unwrap_or(0) as usize;
    let kv_heads = model.config["num_key_value_heads"].as_u64().unwrap_or(0) as usize;
    let mut gguf_names: Vec<&String> = content.tensor_infos.keys().collect();
    gguf_names.sort();
    for g in gguf_names {
        if g == "rope_freqs.weight" {
            continue; // read by `describe` into the config's rope scaling
        }
        let Some(hf) = names::hf_name(g) else {
            log::warn!(
                "{}: ignoring tensor `{g}` (not part of the decoder)",
                path.display()
            );
            continue;
        };
        let q = content
            .tensor(&mut f, g, &Device::Cpu)
            .map_err(|e| Error::model(path, format!("tensor `{g}`: {e}")))?;
        let mut t = q.dequantize(&Device::Cpu).map_err(|e| {
            Error::model(
                path,
                format!("tensor `{g}` ({:?}): cannot dequantize: {e}", q.dtype()),
            )
        })?;
        if arch == "llama" {
            if let Some(n) = names::permuted_heads(&hf, heads, kv_heads) {
                t = names::unpermute(&t, n)
                    .map_err(|e| Error::model(path, format!("tensor `{g}`: {e}")))?;
            }
        }
        model.tensors.insert(hf, t.to_dtype(dtype)?.to_device(dev)?);
    }
    Ok(model)
}

/// The tensors `cfg` needs, taken from `found` with their shapes checked against the config
/// the file's metadata implies.
pub fn take_expected(
    cfg: &crate::model::Qwen2Config,
    mut found: HashMap<String, Tensor>,
    path: &Path,
) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (name, shape, _) in crate::model::weights::expected_tensors(cfg)? {
        let t = found.remove(&name).ok_or_else(|| {
            Error::model(
                path,
                format!(
                    "tensor `{}` (HF `{name}`) is missing; the file does not match its own metadata",
                    names::gguf_name(&name).unwrap_or_default()
                ),
            )
        })?;
        if t.dims() != shape.as_slice() {
            return Err(Error::model(
                path,
                format!(
                    "tensor `{}` has shape {:?} (HF layout) but the metadata implies {:?}",
                    names::gguf_name(&name).unwrap_or_default(),
                    t.dims(),
                    shape
                ),
            ));
        }
        out.insert(name, t);
    }
    for extra in found.keys() {
        log::warn!(
            "{}: tensor `{extra}` is not used by the model",
            path.display()
        );
    }
    Ok(out)
}
