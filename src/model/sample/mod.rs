//! Sampling: the weight copies decoding multiplies by and the KV cache (the decoder's
//! `WeightProducts` and `KvStore` strategies), and batched generation.
pub(crate) mod copies;
pub(crate) mod generate;
pub(crate) mod kv_cache;
