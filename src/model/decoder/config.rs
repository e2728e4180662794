//! Decoder model configuration: `config.json` as transformers writes it (v4 and v5 spellings)
//! for every supported architecture (see `arch`), validated, plus the built-in presets.
use super::arch::{Architecture, Features};
use super::rope_scaling::RopeSpec;
use crate::model::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The subset of `config.json` the model needs. Unknown keys are kept in `extra` so a saved
/// model round-trips the original file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `null` (as `PretrainedConfig.to_dict()` writes for a config built without it) reads as
    /// empty: the architecture then comes from `model_type`.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub architectures: Vec<String>,
    /// transformers `model_type` (`qwen2`, `llama`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); `None` = one per query head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<usize>,
    /// Width of one head; `None` = `hidden_size / num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Longest sequence the RoPE tables cover.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    /// v4 spelling; v5 writes `rope_parameters.rope_theta` (both are read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// v5 spelling of the RoPE settings (`rope_theta`, scaling fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<serde_json::Value>,
    /// v4 spelling of the RoPE scaling (`rope_type`/`type`, `factor`, …); v5 puts the same
    /// fields into `rope_parameters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<serde_json::Value>,
    /// Llama / Qwen3: biases on q/k/v/o_proj (Qwen2 always has q/k/v biases and reads no key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    /// Llama: biases on the MLP projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_bias: Option<bool>,
    /// ε of every RMSNorm.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// transformers' Qwen2Config default is `false`; Qwen2.5-0.5B sets `true`.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// MLP activation (`silu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Beginning-of-sequence token id(s), as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<serde_json::Value>,
    /// End-of-sequence token id(s), as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<serde_json::Value>,
    /// Padding token id, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<serde_json::Value>,
    /// Sliding-window attention switch, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_sliding_window: Option<bool>,
    /// Everything else in the file, written back unchanged on save.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Most positions a model may declare (`max_position_embeddings`, GGUF `context_length`):
/// RoPE angles are computed in f32 as transformers does, and f32 holds every integer position
/// exactly only up to 2^24. The RoPE tables themselves are built for the positions a run uses.
pub const MAX_POSITIONS: usize = 1 << 24;
/// Most decoder layers a config may declare (the largest open models have ~130).
pub const MAX_LAYERS: usize = 1 << 10;
/// Widest residual stream a config may declare (the largest open models: 16384–18432).
pub const MAX_HIDDEN: usize = 1 << 17;
/// Widest MLP a config may declare (the largest open dense models: ~53k).
pub const MAX_INTERMEDIATE: usize = 1 << 20;
/// Most attention (query or key/value) heads a config may declare (the largest: 128).
pub const MAX_HEADS: usize = 1 << 10;
/// Widest attention head a config may declare (the largest: 256).
pub const MAX_HEAD_DIM: usize = 1 << 12;
/// Largest vocabulary a config may declare (the largest open models: ~262k).
pub const MAX_VOCAB: usize = 1 << 21;

/// The cap on a size field of `config.json` (see the `MAX_*` constants), by field name.
pub fn cap_of(field: &str) -> Option<usize> {
    Some(match field {
        "max_position_embeddings" => MAX_POSITIONS,
        "num_hidden_layers" => MAX_LAYERS,
        "hidden_size" => MAX_HIDDEN,
        "intermediate_size" => MAX_INTERMEDIATE,
        "num_attention_heads" | "num_key_value_heads" => MAX_HEADS,
        "head_dim" => MAX_HEAD_DIM,
        "vocab_size" => MAX_VOCAB,
        _ => return None,
    })
}

/// Why a field is capped, for the error message.
pub fn cap_reason(field: &str) -> &'static str {
    match field {
        "max_position_embeddings" => {
            "RoPE angles are computed in f32, which counts positions exactly only up to 2^24"
        }
        _ => "several times the largest open models",
    }
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

fn default_max_pos() -> usize {
    32768
}
fn default_eps() -> f64 {
    1e-6
}
fn default_act() -> String {
    "silu".into()
}

impl ModelConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let cfg: ModelConfig = serde_json::from_str(&text).map_err(|e| {
            Error::file(
                path,
                format!(
                    "not a valid model config.json (line {}, column {}): {e}",
                    e.line(),
                    e.column()
                ),
            )
        })?;
        cfg.validate().map_err(|msg| Error::file(path, msg))?;
        Ok(cfg)
    }

    /// Checks the architecture, its settings and the shape relations the model relies on.
    pub fn validate(&self) -> std::result::Result<(), String> {
        self.features()?;
        if self.hidden_act != "silu" {
            return Err(format!(
                "unsupported hidden_act {:?}: only \"silu\" is implemented",
                self.hidden_act
            ));
        }
        let nums = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
        ];
        for (name, v) in nums {
            if v == 0 {
                return Err(format!("{name} must be > 0"));
            }
        }
        if self.head_dim == Some(0) {
            return Err("head_dim must be > 0".into());
        }
        let head_dim = self.head_dim.map(|d| ("head_dim", d));
        let caps = nums
            .into_iter()
            .chain(head_dim)
            .chain([("max_position_embeddings", self.max_position_embeddings)]);
        for (name, v) in caps {
            if let Some(cap) = cap_of(name) {
                if v > cap {
                    return Err(format!(
                        "{name} = {v} exceeds {cap}, the most a model may declare here ({}); \
                         the file is damaged or describes a model far beyond what this crate can run",
                        cap_reason(name)
                    ));
                }
            }
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads,
                self.kv_heads()
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!(
                "head_dim {} must be even for RoPE",
                self.head_dim()
            ));
        }
        Ok(())
    }

    /// Key/value heads (`num_key_value_heads`, else one per query head).
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one head (`head_dim`, else `hidden_size / num_attention_heads`).
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Number of parameters (tied embeddings counted once); 0 for an unsupported config.
    pub fn num_parameters(&self) -> usize {
        let Ok(f) = self.features() else { return 0 };
        let (h, i, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let (d, q, kv) = (
            self.head_dim(),
            self.num_attention_heads * self.head_dim(),
            self.kv_heads() * self.head_dim(),
        );
        let flag = |on: bool, n: usize| if on { n } else { 0 };
        let attn = h * q
            + 2 * h * kv
            + q * h
            + flag(f.qkv_bias, q + 2 * kv)
            + flag(f.o_bias, h)
            + flag(f.qk_norm, 2 * d);
        let layer = attn + 3 * h * i + flag(f.mlp_bias, 2 * i + h) + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        v * h + self.num_hidden_layers * layer + h + head
    }

    /// A Qwen2 config with the given shape and defaults for everything else.
    #[allow(clippy::too_many_arguments)]
    pub fn with_shape(
        vocab_size: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_hidden_layers: usize,
        num_attention_heads: usize,
        num_key_value_heads: usize,
        tie_word_embeddings: bool,
    ) -> Self {
        ModelConfig {
            architectures: vec!["Qwen2ForCausalLM".into()],
            model_type: Some("qwen2".into()),
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads: Some(num_key_value_heads),
            head_dim: None,
            max_position_embeddings: 2048,
            rope_theta: Some(1_000_000.0),
            rope_parameters: None,
            rope_scaling: None,
            attention_bias: None,
            mlp_bias: None,
            rms_norm_eps: 1e-6,
            tie_word_embeddings,
            hidden_act: "silu".into(),
            bos_token_id: None,
            eos_token_id: None,
            pad_token_id: None,
            use_sliding_window: Some(false),
            extra: Default::default(),
        }
    }

    /// This config as `arch` (class name and model_type; Llama configs have no sliding-window key).
    pub fn with_arch(mut self, arch: Architecture) -> Self {
        self.architectures = vec![arch.class_name().into()];
        self.model_type = Some(arch.model_type().into());
        if arch == Architecture::Llama {
            self.use_sliding_window = None;
        }
        self
    }

    /// Named shapes usable as `builtin:<name>` models and in benchmarks.
    /// `tiny`: byte-level vocab, 2 layers, ~0.1M parameters (tests, offline quick start).
    /// `small`: ~32M parameters (hidden 512, intermediate 2048, 8 layers, 8/2 heads, vocab 3000).
    /// `mid`: ~40M parameters (vocab 32000, hidden 512, 8 layers).
    /// `qwen2.5-0.5b`: Qwen2.5-0.5B's shape (494M parameters, tied embeddings).
    /// `qwen2.5-1.5b`: Qwen2.5-1.5B(-Instruct)'s shape (1.54B parameters, tied embeddings).
    /// `qwen2.5-3b`: Qwen2.5-3B's shape (3.09B parameters, tied embeddings).
    /// `qwen2.5-7b`: Qwen2.5-7B(-Instruct)'s shape as its `config.json` gives it (28 layers, hidden
    /// 3584, intermediate 18944, 28/4 heads, vocab 152064, untied head; 7.62B parameters). In
    /// f32 that is 30 GB: meant for `agents.base_dtype: q8_0` or `bf16` with adapters.
    /// `llama-small`: `small`'s shape as a Llama 3.2-style model (no biases, llama3 RoPE scaling).
    /// `qwen3-small`: `small`'s shape as a Qwen3 model (q/k norms, no biases).
    /// `smollm2-135m`: SmolLM2-135M's shape (Llama, 30 layers, 9/3 heads, vocab 49152).
    /// `qwen3-0.6b`: Qwen3-0.6B's shape (head_dim 128 with hidden 1024 / 16 heads).
    pub fn preset(name: &str) -> Option<Self> {
        let vocab_tiny = crate::model::tokenizer::BYTE_VOCAB_SIZE;
        let c = match name {
            "tiny" => Self::with_shape(vocab_tiny, 64, 128, 2, 4, 2, true),
            "small" => Self::with_shape(3000, 512, 2048, 8, 8, 2, true),
            "mid" => Self::with_shape(32000, 512, 1536, 8, 8, 2, true),
            "qwen2.5-0.5b" => {
                let mut c = Self::with_shape(151936, 896, 4864, 24, 14, 2, true);
                c.max_position_embeddings = 32768;
                c
            }
            "qwen2.5-1.5b" => {
                let mut c = Self::with_shape(151936, 1536, 8960, 28, 12, 2, true);
                c.max_position_embeddings = 32768;
                c
            }
            "qwen2.5-3b" => {
                let mut c = Self::with_shape(151936, 2048, 11008, 36, 16, 2, true);
                c.max_position_embeddings = 32768;
                c
            }
            "qwen2.5-7b" => {
                let mut c = Self::with_shape(152064, 3584, 18944, 28, 28, 4, false);
                c.max_position_embeddings = 32768;
                c
            }
            "llama-small" => {
                let mut c =
                    Self::with_shape(3000, 512, 2048, 8, 8, 2, true).with_arch(Architecture::Llama);
                c.rope_theta = Some(500_000.0);
                c.rope_scaling = Some(serde_json::json!({
                    "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192
                }));
                c.rms_norm_eps = 1e-5;
                c
            }
            "qwen3-small" => {
                let mut c =
                    Self::with_shape(3000, 512, 2048, 8, 8, 2, true).with_arch(Architecture::Qwen3);
                c.head_dim = Some(64);
                c
            }
            "smollm2-135m" => {
                let mut c = Self::with_shape(49152, 576, 1536, 30, 9, 3, true)
                    .with_arch(Architecture::Llama);
                c.rope_theta = Some(100_000.0);
                c.rms_norm_eps = 1e-5;
                c.max_position_embeddings = 8192;
                c
            }
            "qwen3-0.6b" => {
                let mut c = Self::with_shape(151936, 1024, 3072, 28, 16, 8, true)
                    .with_arch(Architecture::Qwen3);
                c.head_dim = Some(128);
                c.max_position_embeddings = 40960;
                c
            }
            _ => return None,
        };
        Some(c)
    }

    /// Names of the built-in configs.
    pub const PRESETS: &'static [&'static str] = &[
        "tiny",
        "small",
        "mid",
        "qwen2.5-0.5b",
        "qwen2.5-1.5b",
        "qwen2.5-3b",
        "qwen2.5-7b",
        "llama-small",
        "qwen3-small",
        "smollm2-135m",
        "qwen3-0.6b",
    ];
}

impl ModelConfig {
    /// The architecture and its switches, or why this config cannot be loaded (naming the key).
    pub fn features(&self) -> Result<Features, String> {
        let arch = Architecture::from_names(&self.architectures, self.model_type.as_deref())?;
        let rope = RopeSpec::from_config(
            self.rope_theta,
            self.rope_scaling.as_ref(),
            self.rope_parameters.as_ref(),
        )?;
        let f = arch.features(self.attention_bias, self.mlp_bias, rope);
        self.refuse_unsupported()?;
        Ok(f)
    }

    /// Settings of a supported architecture that this decoder does not implement.
    fn refuse_unsupported(&self) -> Result<(), String> {
        if self.use_sliding_window == Some(true) {
            return Err(
                "use_sliding_window = true is not supported (full attention only); set it to false"
                    .into(),
            );
        }
        if let Some(types) = self.extra.get("layer_types").and_then(|v| v.as_array()) {
            if let Some(t) = types.iter().find(|t| t.as_str() != Some("full_attention")) {
                return Err(format!(
                    "layer_types contains {t}: only \"full_attention\" layers are supported"
                ));
            }
        }
        for key in ["num_experts", "num_local_experts", "n_routed_experts"] {
            if let Some(n) = self.extra.get(key).and_then(|v| v.as_u64()) {
                if n > 1 {
                    return Err(format!(
                        "{key} = {n}: mixture-of-experts models are not supported (dense models only)"
                    ));
                }
            }
        }
        Ok(())
    }
}
