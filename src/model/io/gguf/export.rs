//! Writing a model as a llama.cpp GGUF: `<arch>.*` and `tokenizer.ggml.*` metadata, tensors
//! under llama.cpp names (Llama q/k rows re-permuted), matrices as f32, f16 or q8_0 and
//! vectors (norms, biases) as f32, as convert_hf_to_gguf.py writes them.
use super::{config, names, rope_freqs, tokenizer};
use crate::model::decoder::config::ModelConfig;
use crate::model::error::{Error, Result};
use crate::model::tokenizer::Tokenizer;
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Var};
use std::path::Path;

/// What an export writes: a model's weights and the files that would be saved beside them.
pub struct Exported<'a> {
    /// The model, as its source describes it (in errors, and `general.name` from its last part).
    pub model: String,
    /// Its config.
    pub config: &'a ModelConfig,
    /// The `config.json` it is saved with (`Policy::saved_config`).
    pub saved_config: serde_json::Value,
    /// Its weights under their checkpoint names.
    pub vars: Vec<(String, Var)>,
    /// Its tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// The token generation stops at.
    pub eos_id: u32,
    /// The padding token.
    pub pad_id: u32,
    /// Its chat template, if any.
    pub chat_template: Option<&'a str>,
}

/// The storage type of exported matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quant {
    /// 32-bit float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// llama.cpp's 8-bit blocks of 32 with one f16 scale.
    Q8_0,
}

impl Quant {
    /// `f32`, `f16` or `q8_0`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Quant::F32),
            "f16" => Ok(Quant::F16),
            "q8_0" => Ok(Quant::Q8_0),
            other => Err(Error::Invalid(format!(
                "unknown GGUF quantization `{other}`: use f16 (default), q8_0 or f32"
            ))),
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_ALL_F32`, `MOSTLY_F16`, `MOSTLY_Q8_0`).
    fn file_type(self) -> u32 {
        match self {
            Quant::F32 => 0,
            Quant::F16 => 1,
            Quant::Q8_0 => 7,
        }
    }

    /// The type a tensor of this shape is stored as: vectors stay f32; a matrix whose rows do
    /// not split into q8_0 blocks of 32 falls back to f16 (as llama.cpp's quantizer does).
    fn ggml_type(self, dims: &[usize]) -> GgmlDType {
        if dims.len() < 2 {
            return GgmlDType::F32;
        }
        match self {
            Quant::F32 => GgmlDType::F32,
            Quant::F16 => GgmlDType::F16,
            Quant::Q8_0 if dims[dims.len() - 1].is_multiple_of(32) => GgmlDType::Q8_0,
            Quant::Q8_0 => GgmlDType::F16,
        }
    }
}

/// Writes `model` to `out` (via a temporary sibling file renamed into place).
pub fn export(model: &Exported, quant: Quant, out: &Path) -> Result<()> {
    let cfg = &model.saved_config;
    let bad_cfg = |e: String| Error::Export {
        model: model.model.clone(),
        msg: e,
        source: None,
    };
    let arch = config::gguf_arch(cfg).map_err(bad_cfg)?;
    let mut meta: Vec<(String, Value)> = config::gguf_metadata(cfg).map_err(bad_cfg)?;
    meta.push(("general.name".into(), Value::String(name_of(&model.model))));
    meta.push(("general.file_type".into(), Value::U32(quant.file_type())));
    meta.push(("general.quantization_version".into(), Value::U32(2)));
    let tok = model.tokenizer.to_json()?;
    let tok_meta = tokenizer::tokenizer_metadata(&tok, model.config.vocab_size)
        .map_err(|e| Error::Tokenizer(format!("{}: {e}", model.model)))?;
    meta.extend(tok_meta);
    if let Some(bos) = cfg.get("bos_token_id").and_then(|v| v.as_u64()) {
        meta.push(("tokenizer.ggml.bos_token_id".into(), Value::U32(bos as u32)));
    }
    meta.push((
        "tokenizer.ggml.eos_token_id".into(),
        Value::U32(model.eos_id),
    ));
    meta.push((
        "tokenizer.ggml.padding_token_id".into(),
        Value::U32(model.pad_id),
    ));
    meta.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)));
    if let Some(t) = model.chat_template {
        meta.push((
            "tokenizer.chat_template".into(),
            Value::String(t.to_string()),
        ));
    }

    let heads = model.config.num_attention_heads;
    let kv_heads = model.config.kv_heads();
    let mut tensors = Vec::new();
    for (hf, var) in &model.vars {
        let g = names::gguf_name(hf).ok_or_else(|| Error::Export {
            model: model.model.clone(),
            msg: format!("tensor `{hf}` has no llama.cpp name"),
            source: None,
        })?;
        let mut t = var
            .as_tensor()
            .detach()
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F32)?;
        if arch == "llama" {
            if let Some(n) = names::permuted_heads(hf, heads, kv_heads) {
                t = names::permute(&t, n)?;
            }
        }
        let q = QTensor::quantize(&t.contiguous()?, quant.ggml_type(t.dims())).map_err(|e| {
            Error::Export {
                model: model.model.clone(),
                msg: format!("tensor `{hf}`: cannot quantize"),
                source: Some(e.into()),
            }
        })?;
        tensors.push((g, q));
    }

    if let Some(p) = rope_freqs::llama3_params(cfg) {
        // llama.cpp keeps Llama 3 scaling as per-frequency factors, not metadata.
        let f = rope_freqs::factors(config::rope_theta(cfg), model.config.head_dim(), p);
        let n = f.len();
        let t = candle_core::Tensor::from_vec(f, n, &Device::Cpu)?;
        tensors.push((
            "rope_freqs.weight".into(),
            QTensor::quantize(&t, GgmlDType::F32)?,
        ));
    }

    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let tmp = parent.join(format!(
        ".{}.tmp-{}",
        out.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        std::process::id()
    ));
    let write = || -> Result<()> {
        let f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut w = std::io::BufWriter::new(f);
        let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        gguf_file::write(&mut w, &meta_refs, &t_refs)
            .map_err(|e| Error::file(out, format!("cannot write GGUF: {e}")))?;
        use std::io::Write;
        w.flush().map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, out).map_err(|e| Error::io(out, e))
    };
    let r = write();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

fn name_of(model: &str) -> String {
    let d = model.to_string();
    Path::new(&d)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or(d)
}
