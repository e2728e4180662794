//! Reading and writing models: safetensors, HF model directories, the hub cache, GGUF.
pub mod footprint;
pub mod gguf;
pub(crate) mod model_dir;
pub mod safetensors;
pub(crate) mod shard;
pub mod source;
