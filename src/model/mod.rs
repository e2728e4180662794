//! The policy model: a differentiable decoder LM on candle (Qwen2, Llama, Qwen3), its loading,
//! sampling, scoring and saving.
pub(crate) mod accumulate;
pub(crate) mod arch;
pub(crate) mod attention;
mod attn_grad;
pub mod batch;
pub(crate) mod causal_lm;
pub mod compute;
pub(crate) mod config;
pub(crate) mod flops;
pub mod footprint;
pub(crate) mod fused_logprob;
pub(crate) mod gemm_acc;
pub(crate) mod gemm_new;
pub mod gguf;
mod head_grad;
pub mod kernels;
pub(crate) mod kv_cache;
mod layer_grad;
mod layer_ops;
pub(crate) mod linear;
pub(crate) mod logprob;
pub(crate) mod mlp;
pub(crate) mod mode;
mod model_dir;
pub(crate) mod norm;
pub mod packed_weights;
pub mod pass_order;
pub(crate) mod policy;
pub mod recompute;
pub(crate) mod rope;
pub(crate) mod rope_scaling;
pub(crate) mod sample;
pub(crate) mod sampling_weights;
mod shard;
mod shared_prompt;
pub mod source;
pub(crate) mod storage;
pub(crate) mod tokenizer;
pub mod weights;

pub use arch::{Architecture, Features};
pub use causal_lm::CausalLm;
/// The model's former name (it was Qwen2-only), kept for existing callers.
pub use causal_lm::CausalLm as Qwen2;
pub use compute::ComputeDtype;
pub use config::{ModelConfig, Qwen2Config};
pub use footprint::ModelInfo;
pub use head_grad::chunk_bytes as head_chunk_bytes;
pub use logprob::{completion_logprobs, ScoreLayout};
pub use mode::Mode;
pub use policy::{parse_dtype, LoadOptions, Policy, RolloutCopies};
pub use sample::{generate, generate_streams, SamplingParams};
pub use sampling_weights::SamplingWeights;
pub use source::ModelSource;
pub use tokenizer::Tokenizer;

/// The former module of [`CausalLm`], kept so `model::qwen2::Qwen2` paths still resolve.
pub mod qwen2 {
    pub use super::causal_lm::CausalLm as Qwen2;
}
