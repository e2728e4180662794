//! The policy model: a differentiable decoder LM on candle (Qwen2, Llama, Qwen3), its loading,
//! sampling, scoring, training gradients and saving, in rooms by role. A file imports files of
//! its own room and of the rooms below it, never above (`tests/cli/layers.rs` reads the imports):
//!
//! ```text
//! error  ←  tokenizer, kernels  ←  decoder  ←  io, sample, grad  ←  policy  (←  this mod.rs)
//! ```
//!
//! - [`kernels`]: CPU kernels (fused ops with their backward, products, in-place adds);
//! - [`decoder`]: the model's one definition: config, architectures, layers, the causal LM,
//!   and the strategies a forward is handed (weight products, KV store);
//! - [`io`]: safetensors, HF model directories, the hub cache, GGUF read and export;
//! - `sample`: the sampling copies of the weights, the KV cache, batched generation;
//! - [`grad`]: log-prob scoring, the hand-written backward, recomputation, pass planning;
//! - `policy`: a loaded model with its tokenizer, copies and special ids; `tokenizer`;
//!   `error`: the model's error type.
pub mod decoder;
pub(crate) mod error;
pub mod grad;
pub mod io;
pub mod kernels;
pub(crate) mod policy;
pub(crate) mod sample;
pub(crate) mod tokenizer;

pub use decoder::arch::{Architecture, Features};
pub use decoder::causal_lm::CausalLm;
pub use decoder::config::ModelConfig;
pub use decoder::forward::{KvStore, Mode, TrainWithDropout, WeightProducts};
pub use decoder::lora_dropout::LoraDropout;
pub use decoder::value_head::ValueHead;
pub use error::{Error, Result};
pub use grad::head_backward::chunk_bytes as head_chunk_bytes;
pub use grad::logprob::{
    completion_logprobs, completion_logprobs_entropy_scaled, completion_logprobs_scaled,
    ScoreLayout,
};
pub use io::footprint::ModelInfo;
pub use io::source::ModelSource;
pub use kernels::compute_dtype::ComputeDtype;
pub use policy::{parse_dtype, LoadOptions, Policy, RolloutCopies};
pub use sample::copies::{CopyProducts, SamplingWeights};
pub use sample::generate::{
    generate, generate_streams, generate_streams_scored, DecodeJob, Sampler, SamplingParams, Scored,
};
pub use sample::grouped::{generate_groups, GroupError};
pub use tokenizer::Tokenizer;
