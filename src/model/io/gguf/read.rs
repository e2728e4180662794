//! Reading a GGUF checkpoint: metadata → HF-style config, tokenizer.json value and chat template;
//! tensors dequantized (any type candle knows) to the training dtype under their HF names, with
//! llama.cpp's Llama q/k row permutation undone.
use super::meta::{opt_str, opt_strings, Meta};
use super::{config, names, rope_freqs, tokenizer};
use crate::model::decoder::config::ModelConfig;
use crate::model::decoder::tensors;
use crate::model::error::{Error, Result};
use crate::model::kernels::q8_weight;
use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::io::{Seek, SeekFrom};
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
    // candle's reader panics or allocates without bound on some headers: check them first.
    super::header::check(&mut f)
        .map_err(|e| Error::file(path, format!("not a readable GGUF file: {e}")))?;
    f.seek(SeekFrom::Start(0)).map_err(|e| Error::io(path, e))?;
    let content = Content::read(&mut f)
        .map_err(|e| Error::file(path, format!("not a readable GGUF file: {e}")))?;
    Ok((content, f))
}

/// Config, tokenizer and chat template of a GGUF header (`f` is read only for the small
/// `rope_freqs.weight` tensor of Llama 3 scaling).
pub fn describe(path: &Path, content: &Content, f: &mut std::fs::File) -> Result<GgufModel> {
    let m: &Meta = &content.metadata;
    let bad = |msg: String| Error::file(path, msg);
    let tokens = opt_strings(m, "tokenizer.ggml.tokens")
        .map_err(&bad)?
        .ok_or_else(|| {
            bad("metadata `tokenizer.ggml.tokens` is missing: the file has no tokenizer".into())
        })?;
    let has_output = content.tensor_infos.contains_key("output.weight");
    let mut cfg = config::hf_config(m, has_output, tokens.len()).map_err(&bad)?;
    if let Some(info) = content.tensor_infos.get("rope_freqs.weight") {
        // One factor per rotary frequency: a few dozen, never more than half the widest head.
        let n = info.shape.elem_count();
        if n > crate::model::decoder::config::MAX_HEAD_DIM / 2 {
            return Err(bad(format!(
                "tensor `rope_freqs.weight` has {n} elements; a head has at most {} frequencies",
                crate::model::decoder::config::MAX_HEAD_DIM / 2
            )));
        }
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

/// The model config of a GGUF's HF-style config value ([`GgufModel::config`]), validated.
pub fn model_config(path: &Path, cfg: &serde_json::Value) -> Result<ModelConfig> {
    let c: ModelConfig = serde_json::from_value(cfg.clone())
        .map_err(|e| Error::file(path, format!("config built from the GGUF metadata: {e}")))?;
    c.validate()
        .map_err(|m| Error::file(path, format!("config built from the GGUF metadata: {m}")))?;
    Ok(c)
}

/// Reads a whole GGUF checkpoint: header, then every decoder tensor dequantized to `dtype`,
/// the projections' weights held as `base` says where set (`tensors::held_dtype`): a Q8_0
/// base takes a Q8_0 tensor's blocks as they are (no requantization) and quantizes any other
/// type, one tensor at a time. The config and every tensor's name and shape are checked
/// against the file's tensor table before any tensor is read.
pub fn load(path: &Path, dtype: DType, base: Option<DType>, dev: &Device) -> Result<GgufModel> {
    let (content, mut f) = read_header(path)?;
    let mut model = describe(path, &content, &mut f)?;
    let cfg = model_config(path, &model.config)?;
    let arch = config::gguf_arch(&model.config).map_err(|e| Error::file(path, e))?;
    let (heads, kv_heads) = (cfg.num_attention_heads, cfg.kv_heads());
    for (g, hf) in planned_tensors(path, &cfg, arch, &content)? {
        let q = content
            .tensor(&mut f, &g, &Device::Cpu)
            .map_err(|e| Error::file(path, format!("tensor `{g}`: {e}")))?;
        let held = tensors::held_dtype(&hf, dtype, base);
        let mut t = match (held == q8_weight::HELD, q.dtype()) {
            (true, GgmlDType::Q8_0) => {
                let (out, k) = q.shape().dims2()?;
                let bytes = q.data()?.into_owned();
                q8_weight::from_blocks(bytes, out, k, &Device::Cpu)
                    .map_err(|e| Error::file(path, format!("tensor `{g}`: {e}")))?
            }
            _ => q.dequantize(&Device::Cpu).map_err(|e| {
                Error::file(
                    path,
                    format!("tensor `{g}` ({:?}): cannot dequantize: {e}", q.dtype()),
                )
            })?,
        };
        if arch == "llama" {
            if let Some(n) = names::permuted_heads(&hf, heads, kv_heads) {
                t = names::unpermute(&t, n)
                    .map_err(|e| Error::file(path, format!("tensor `{g}`: {e}")))?;
            }
        }
        let t =
            tensors::hold(&t, held).map_err(|e| Error::file(path, format!("tensor `{g}`: {e}")))?;
        model.tensors.insert(hf, t.to_device(dev)?);
    }
    Ok(model)
}

/// (GGUF name, HF name) of every tensor the model reads, each checked to be in the file with
/// the shape `cfg` implies; the layer count is checked against the layers the file holds first.
/// Tensors the decoder does not read are named in a warning and left unread.
fn planned_tensors(
    path: &Path,
    cfg: &ModelConfig,
    arch: &str,
    content: &Content,
) -> Result<Vec<(String, String)>> {
    let held: std::collections::BTreeSet<usize> = content
        .tensor_infos
        .keys()
        .filter_map(|g| g.strip_prefix("blk.")?.split_once('.')?.0.parse().ok())
        .collect();
    if cfg.num_hidden_layers > held.len() {
        return Err(Error::file(
            path,
            format!(
                "metadata `{arch}.block_count` = {} but the file holds tensors of {} layer(s)",
                cfg.num_hidden_layers,
                held.len()
            ),
        ));
    }
    let mut plan = Vec::new();
    let mut wanted = std::collections::HashSet::new();
    for (name, shape, _) in crate::model::decoder::tensors::expected_tensors(cfg)? {
        let g = names::gguf_name(&name).unwrap_or_default();
        let info = content.tensor_infos.get(&g).ok_or_else(|| {
            Error::file(
                path,
                format!(
                    "tensor `{g}` (HF `{name}`) is missing; the file does not match its own metadata"
                ),
            )
        })?;
        if info.shape.dims() != shape.as_slice() {
            return Err(Error::file(
                path,
                format!(
                    "tensor `{g}` has shape {:?} (HF layout) but the metadata implies {:?}",
                    info.shape.dims(),
                    shape
                ),
            ));
        }
        wanted.insert(g.clone());
        plan.push((g, name));
    }
    let mut others: Vec<&String> = content
        .tensor_infos
        .keys()
        .filter(|g| !wanted.contains(*g) && *g != "rope_freqs.weight")
        .collect();
    others.sort();
    for g in others {
        match names::hf_name(g) {
            Some(_) => log::warn!("{}: tensor `{g}` is not used by the model", path.display()),
            None => log::warn!(
                "{}: ignoring tensor `{g}` (not part of the decoder)",
                path.display()
            ),
        }
    }
    Ok(plan)
}

/// The tensors `cfg` needs, taken from `found` with their shapes checked against the config
/// the file's metadata implies.
pub fn take_expected(
    cfg: &ModelConfig,
    mut found: HashMap<String, Tensor>,
    path: &Path,
) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (name, shape, _) in crate::model::decoder::tensors::expected_tensors(cfg)? {
        let t = found.remove(&name).ok_or_else(|| {
            Error::file(
                path,
                format!(
                    "tensor `{}` (HF `{name}`) is missing; the file does not match its own metadata",
                    names::gguf_name(&name).unwrap_or_default()
                ),
            )
        })?;
        // A Q8_0 matrix (a Q8_0 base) is checked by the dims its blocks hold.
        let dims = match q8_weight::is_q8_weight(&t) {
            true => q8_weight::dims(&t).map(|(o, i)| vec![o, i])?,
            false => t.dims().to_vec(),
        };
        if dims != shape {
            return Err(Error::file(
                path,
                format!(
                    "tensor `{}` has shape {:?} (HF layout) but the metadata implies {:?}",
                    names::gguf_name(&name).unwrap_or_default(),
                    dims,
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
