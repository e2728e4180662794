//! Reading and writing models: safetensors files and shards, Hugging Face model directories,
//! the hub cache, GGUF files (read and export), and what a model will take in memory before
//! any weight is read; LoRA adapter directories as PEFT writes them.
pub mod footprint;
pub mod gguf;
pub(crate) mod model_dir;
pub mod peft;
pub mod safetensors;
pub(crate) mod shard;
pub mod source;
