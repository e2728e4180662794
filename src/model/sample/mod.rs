//! Sampling: the KV cache, the weight copies decoding multiplies by, batched generation.
pub mod copies;
pub mod generate;
pub mod kv_cache;
