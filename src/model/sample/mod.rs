//! Sampling: the weight copies decoding multiplies by and the KV cache (the decoder's
//! `WeightProducts` and `KvStore` strategies), and batched generation: of one model's prompts
//! (`generate`), and of several adapted models on one base in one forward per step (`grouped`).
pub(crate) mod copies;
pub(crate) mod generate;
pub(crate) mod grouped;
pub(crate) mod kv_cache;
