//! The model, in process: parity with transformers' reference values on every architecture's
//! fixtures (logits, completion log-probs, greedy ids, gradients), config.json handling,
//! saving and loading, GGUF files, tokenizers, batched and bf16 sampling, the bf16 GEMM
//! kernels, and a critic's value head with its backward. Run one part with
//! `cargo test --release --test model gguf::`.
#[path = "../common/mod.rs"]
mod common;

mod arch_config;
mod arch_training;
mod arch_transformers;
mod gguf;
mod gguf_real;
mod gradients;
mod io;
mod kernels_bf16_gemm;
mod lora;
mod lora_bf16_base;
mod lora_dropout;
mod lora_q8_base;
mod random_base_peak;
mod reference;
mod sample_agents;
mod sample_batch;
mod sampling_bf16;
mod sampling_logprobs;
mod tokenizer_reference;
mod value_head;
