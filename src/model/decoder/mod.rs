//! The decoder itself: its config and architectures, the layers, the causal LM.
pub mod arch;
pub mod attention;
pub mod batch;
pub mod causal_lm;
pub mod config;
pub mod flops;
pub mod forward;
pub mod layer;
pub mod linear;
pub mod mlp;
pub mod norm;
pub mod rope;
pub mod rope_scaling;
pub mod tensors;
pub mod trace;
