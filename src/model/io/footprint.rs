//! What a model will hold in memory, known before any weight is read: its shape from
//! `config.json`, a GGUF header or a preset (validated, so every size is capped), and what the
//! loaded weights, sampling copies, KV cache and tokenizer take. Sizing a run's agents from this
//! lets the trainer refuse one that cannot fit instead of loading agents until memory runs out.
use crate::model::decoder::config::ModelConfig;
use crate::model::error::{Error, Result};
use crate::model::tokenizer::BYTE_VOCAB_SIZE;
use std::path::Path;

/// Bytes a loaded tokenizer takes per byte of its `tokenizer.json`: its vocabulary and merges
/// in hash maps, several times the file (Qwen2.5's tokenizer set the factor).
pub const TOKENIZER_BYTES_PER_FILE_BYTE: u64 = 8;
/// Bytes a loaded byte-level BPE tokenizer takes per vocabulary entry, where there is no file
/// to size it by (GGUF metadata): the same tokenizer's size over its entries.
pub const TOKENIZER_BYTES_PER_TOKEN: u64 = 600;

/// A model's shape and its tokenizer's size, read without its weights.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// The validated config.
    pub config: ModelConfig,
    /// Estimated bytes of the loaded tokenizer.
    pub tokenizer_bytes: u64,
}

impl ModelInfo {
    /// A built-in preset (byte-level tokenizer).
    pub fn builtin(name: &str) -> Result<Self> {
        let config = ModelConfig::preset(name)
            .ok_or_else(|| Error::Invalid(format!("unknown built-in model `{name}`")))?;
        Ok(Self {
            config,
            tokenizer_bytes: BYTE_VOCAB_SIZE as u64 * TOKENIZER_BYTES_PER_TOKEN,
        })
    }

    /// A model directory in HF layout: its `config.json` (validated) and the size of its
    /// `tokenizer.json`.
    pub fn dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        if !path.is_file() {
            return Err(Error::file(
                dir,
                "no config.json: not a model directory in Hugging Face layout",
            ));
        }
        let config = ModelConfig::from_file(&path)?;
        let tokenizer_bytes = match std::fs::metadata(dir.join("tokenizer.json")) {
            Ok(m) => m.len().saturating_mul(TOKENIZER_BYTES_PER_FILE_BYTE),
            Err(_) => (config.vocab_size as u64).saturating_mul(TOKENIZER_BYTES_PER_TOKEN),
        };
        Ok(Self {
            config,
            tokenizer_bytes,
        })
    }

    /// A GGUF file: its header only (metadata and tensor table, checked), never its tensors.
    pub fn gguf(path: &Path) -> Result<Self> {
        let (content, mut f) = super::gguf::read::read_header(path)?;
        let g = super::gguf::read::describe(path, &content, &mut f)?;
        let config = super::gguf::read::model_config(path, &g.config)?;
        Ok(Self {
            tokenizer_bytes: (config.vocab_size as u64).saturating_mul(TOKENIZER_BYTES_PER_TOKEN),
            config,
        })
    }

    /// Parameters (tied embeddings counted once).
    pub fn parameters(&self) -> u64 {
        self.config.num_parameters() as u64
    }

    /// Bytes of the weights in f32 (the dtype agents train in).
    pub fn weight_bytes(&self) -> u64 {
        self.parameters().saturating_mul(4)
    }

    /// Parameters of the layers' seven projections' weights (biases not included): what
    /// `agents.base_dtype` holds in another dtype.
    pub fn projection_parameters(&self) -> u64 {
        let c = &self.config;
        let (h, i) = (c.hidden_size as u64, c.intermediate_size as u64);
        let q = c.num_attention_heads as u64 * c.head_dim() as u64;
        let kv = c.kv_heads() as u64 * c.head_dim() as u64;
        let per_layer = h
            .saturating_mul(q)
            .saturating_mul(2)
            .saturating_add(h.saturating_mul(kv).saturating_mul(2))
            .saturating_add(h.saturating_mul(i).saturating_mul(3));
        (c.num_hidden_layers as u64).saturating_mul(per_layer)
    }

    /// Bytes of `params` weights held as GGUF Q8_0 blocks: 34 per 32 (an f16 scale and 32
    /// int8 values), the whole blocks a row of a multiple of 32 takes.
    pub fn q8_0_bytes(params: u64) -> u64 {
        params.div_ceil(32).saturating_mul(34)
    }

    /// Bytes of the LM head's weight in f32 (vocabulary × hidden, tied or not).
    pub fn head_bytes(&self) -> u64 {
        let c = &self.config;
        (c.vocab_size as u64)
            .saturating_mul(c.hidden_size as u64)
            .saturating_mul(4)
    }

    /// Bytes of the MLP's weights (gate, up and down of every layer) in f32: what the f32
    /// sampling panels copy.
    pub fn mlp_bytes(&self) -> u64 {
        let c = &self.config;
        (c.num_hidden_layers as u64)
            .saturating_mul(3)
            .saturating_mul(c.hidden_size as u64)
            .saturating_mul(c.intermediate_size as u64)
            .saturating_mul(4)
    }

    /// Bytes of f32 keys and values one sequence row caches per position, over all layers.
    pub fn kv_bytes_per_position(&self) -> u64 {
        let c = &self.config;
        (2 * 4 * c.num_hidden_layers as u64)
            .saturating_mul(c.kv_heads() as u64)
            .saturating_mul(c.head_dim() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen_shapes_give_their_known_sizes() {
        let q = ModelInfo::builtin("qwen2.5-0.5b").unwrap();
        assert_eq!(q.parameters(), 494_032_768);
        // 24 layers × 3 × 896 × 4864 f32.
        assert_eq!(q.mlp_bytes(), 24 * 3 * 896 * 4864 * 4);
        // 24 layers × (k, v) × 2 heads × 64 × 4 bytes.
        assert_eq!(q.kv_bytes_per_position(), 24 * 2 * 2 * 64 * 4);
        // Qwen2.5-1.5B's published count.
        let q15 = ModelInfo::builtin("qwen2.5-1.5b").unwrap();
        assert_eq!(q15.parameters(), 1_543_714_304);
    }
}
