//! The policy model: a differentiable decoder LM on candle (Qwen2, Llama, Qwen3), its loading,
//! sampling, scoring and saving.
pub mod decoder;
pub mod error;
pub mod grad;
pub mod io;
pub mod kernels;
pub(crate) mod policy;
pub mod sample;
pub(crate) mod tokenizer;

pub use decoder::arch::{Architecture, Features};
pub use decoder::causal_lm::CausalLm;
pub use decoder::config::ModelConfig;
pub use decoder::forward::Mode;
pub use error::{Error, Result};
pub use grad::head_backward::chunk_bytes as head_chunk_bytes;
pub use grad::logprob::{completion_logprobs, ScoreLayout};
pub use io::footprint::ModelInfo;
pub use io::source::ModelSource;
pub use kernels::compute_dtype::ComputeDtype;
pub use policy::{parse_dtype, LoadOptions, Policy, RolloutCopies};
pub use sample::copies::SamplingWeights;
pub use sample::generate::{generate, generate_streams, SamplingParams};
pub use tokenizer::Tokenizer;
