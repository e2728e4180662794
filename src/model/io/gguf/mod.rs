//! GGUF checkpoints (llama.cpp / ollama): loading llama, qwen2 and qwen3 files of any
//! quantization candle can dequantize as HF-named f32 weights, an HF-style config and a
//! tokenizer rebuilt from the file's metadata; exporting a policy back to GGUF.
pub mod config;
pub mod export;
pub mod header;
pub(crate) mod meta;
pub(crate) mod names;
pub mod read;
pub(crate) mod rope_freqs;
pub mod tokenizer;

pub use export::{export, Exported, Quant};
pub use read::{load, GgufModel};

/// Whether `path` names a GGUF file (by its extension).
pub fn is_gguf_path(path: &std::path::Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}
