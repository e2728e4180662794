//! The policy model: a differentiable Qwen2 on candle, its loading, sampling, scoring and saving.
pub mod accumulate;
pub mod attention;
pub mod batch;
pub mod config;
pub mod fused_logprob;
pub mod kv_cache;
pub mod linear;
pub mod logprob;
pub mod mlp;
pub mod mode;
pub mod norm;
pub mod policy;
pub mod qwen2;
pub mod recompute;
pub mod rope;
pub mod sample;
pub mod source;
pub mod tokenizer;
pub mod weights;

pub use config::Qwen2Config;
pub use logprob::{completion_logprobs, ScoreLayout};
pub use mode::Mode;
pub use policy::{parse_dtype, LoadOptions, Policy};
pub use qwen2::Qwen2;
pub use sample::{generate, SamplingParams};
pub use source::ModelSource;
pub use tokenizer::Tokenizer;
